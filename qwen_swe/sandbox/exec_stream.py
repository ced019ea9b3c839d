"""An exec's output stream from the Docker engine, every byte of it.

docker-py's ``exec_start(stream=True)`` reads the frames from the raw socket under the HTTP response, past the
buffered reader that parsed the response's headers. When the command writes before the client has read those
headers (a loaded machine, a command that prints at once), its first frames arrive in the same read as the headers,
stay in that reader's buffer, and are lost (docker/docker-py#3332, #425). A CI run on vfs lost the first 1.5 KB of
an eval log that way, its start marker with it. Here the frames are read through that buffer.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from typing import Any

from docker.types.daemon import CancellableStream

HEADER = struct.Struct(">BxxxL")  # stream (0 stdin, 1 stdout, 2 stderr), 3 bytes of padding, payload length


def start(api: Any, exec_id: str) -> CancellableStream:
    """Start exec ``exec_id`` (made with ``tty=False``) and stream its stdout and stderr payloads, in the order the
    engine sent them. ``close()`` from another thread ends the stream."""
    response = api._post_json(
        api._url("/exec/{0}/start", exec_id),
        headers={"Connection": "Upgrade", "Upgrade": "tcp"},
        data={"Tty": False, "Detach": False},
        stream=True,
    )
    api._raise_for_status(response)
    reader = response.raw._fp.fp  # the buffered reader the headers were parsed from: it may hold frames already
    sock = getattr(reader.raw, "_sock", None)
    if sock is not None:
        sock.settimeout(None)  # a quiet command is no error; the caller's own timeout closes the stream
    return CancellableStream(frames(reader), response)


def frames(reader: io.BufferedReader) -> Iterator[bytes]:
    """The payloads of the engine's multiplexed stream; ends at end of stream or at a cut-off frame. (A blocking
    buffered reader's ``read(n)`` returns fewer than ``n`` bytes only at end of stream.)"""
    while True:
        header = reader.read(HEADER.size)
        if len(header) < HEADER.size:
            return
        _, size = HEADER.unpack(header)
        payload = reader.read(size)
        if payload:
            yield payload
        if len(payload) < size:
            return
