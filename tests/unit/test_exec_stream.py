"""The exec stream keeps the frames the engine sent along with its response headers (qwen_swe/sandbox/exec_stream.py).

The engine's side here is a socket that answers an exec start exactly as the Docker engine does (a 101 upgrade, then
the multiplexed frames) but in one write, as a loaded client sees it when the command printed before it read the
headers: deterministic, where the real engine only sometimes does it (tests/integration/test_sandbox.py has that)."""

from __future__ import annotations

import io
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from qwen_swe.sandbox import exec_stream

UPGRADE = (
    b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
    b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
)


def frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(payload)) + payload


FRAMES = frame(1, b"+ : '>>>>> Start Test Output'\n") + frame(2, b"err line\n") + frame(1, b"x" * 70000)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[docker.APIClient]:
    """An API client on a socket whose every request is answered with the headers and all frames in one write."""
    path = tmp_path / "engine.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(4096)
                head, body = request.split(b"\r\n\r\n", 1)
                length = next(
                    int(v)
                    for k, v in (h.split(b": ", 1) for h in head.split(b"\r\n")[1:])
                    if k.lower() == b"content-length"
                )
                while len(body) < length:
                    body += conn.recv(4096)
                conn.sendall(UPGRADE + FRAMES)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    api = docker.APIClient(base_url=f"unix://{path}", version="1.41", timeout=10)
    try:
        yield api
    finally:
        api.close()
        server.close()


def test_frames_sent_with_the_headers_are_kept(engine):
    assert list(exec_stream.start(engine, "abc")) == [b"+ : '>>>>> Start Test Output'\n", b"err line\n", b"x" * 70000]


def test_docker_py_loses_them_which_is_why_the_module_exists(engine):
    """If this fails, docker-py reads through the buffer now (docker/docker-py#3332) and exec_stream can go."""
    got = b"".join(engine.exec_start("abc", stream=True))
    assert b"Start Test Output" not in got and b"err line" not in got  # the buffered head is gone


def test_a_cut_off_frame_ends_the_stream_with_what_arrived():
    data = frame(1, b"whole\n") + struct.pack(">BxxxL", 1, 100) + b"partial"
    assert list(exec_stream.frames(io.BufferedReader(io.BytesIO(data)))) == [b"whole\n", b"partial"]
    assert list(exec_stream.frames(io.BufferedReader(io.BytesIO(data[:5])))) == []
