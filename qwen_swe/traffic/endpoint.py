"""One session's model endpoint on a Unix socket: the only way out of a rollout container on ``network none``.

Why a socket: a container with no network has nothing but its own loopback, so no port of the host (the proxy's,
the inference server's, the trainer's, Ray's) is within its reach. A folder holding one socket is mounted into the
container; the socket serves exactly two routes of one session (``/v1/chat/completions``, ``/v1/models``), so nothing
sent through it can name another session, and the proxy's own root (``/health``, ``/s/{id}/...``) is not on it.
Inside the container a small forwarder (``agent/forward.js``, run by the bundle's Node) listens on the container's
loopback and pipes each connection to the socket, so the agent still talks to ``http://127.0.0.1:PORT/v1``.

A restarted agent run (a fresh proxy session) keeps its socket: the endpoint is rebound to the new session's id.
Docker must run on this host: a bind mount names a path of the daemon's machine. A process that dies without stopping
its endpoints (a trainer rank ends at once on SIGTERM, anything on SIGKILL) leaves their folders behind;
``sweep_stale`` removes those, as ``reap`` removes the containers.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from qwen_swe.errors import ProxyError

SOCKET_NAME = "model.sock"
SOCKET_DIR_IN_CONTAINER = "/run/qwen-swe-model"  # where the folder is mounted in a rollout container
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux; a longer TMPDIR cannot hold a socket
STOP_GRACE = 1.0  # seconds a call still in flight may take to end once its endpoint stops
FOLDER_PREFIX = "qwen-swe-ep-"
STALE_AFTER = 60.0  # seconds a folder may exist before its socket is bound (a start in progress, however slow)
BIND_GRACE = 2.0  # seconds a new socket is kept even if it refuses (bind comes just before listen)


@dataclass
class Binding:
    """The session a socket serves; mutable, since the app is frozen once it runs and a restart changes the id."""

    sid: str


BINDING = web.AppKey("qwen_swe_binding", Binding)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class SessionEndpoint:
    """``async with SessionEndpoint(chat, models, sid) as ep``: ``ep.folder`` is the folder to mount (removed at
    exit)."""

    def __init__(
        self,
        chat: Handler,
        models: Handler,
        sid: str,
        *,
        parent: str | None = None,
        client_max_size: int = 256 * 1024 * 1024,
        on_stop: Callable[[SessionEndpoint], None] | None = None,
    ) -> None:
        self.binding = Binding(sid)
        self._chat, self._models, self._parent, self._max = chat, models, parent, client_max_size
        self._on_stop = on_stop
        self._runner: web.AppRunner | None = None
        self.folder: Path | None = None

    @property
    def socket_path(self) -> Path:
        if self.folder is None:
            raise ProxyError("the session endpoint is not started")
        return self.folder / SOCKET_NAME

    @property
    def socket_in_container(self) -> str:
        return f"{SOCKET_DIR_IN_CONTAINER}/{SOCKET_NAME}"

    async def start(self) -> SessionEndpoint:
        parent = self._parent or tempfile.gettempdir()
        self.folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=parent))
        if len(str(self.socket_path)) > MAX_SOCKET_PATH:
            path = self.socket_path
            await self.stop()
            raise ProxyError(
                f"socket path {path} is longer than {MAX_SOCKET_PATH} bytes, more than a Unix socket "
                "can hold: point TMPDIR at a shorter folder (e.g. /tmp)"
            )
        app = web.Application(client_max_size=self._max)
        app[BINDING] = self.binding
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        # a call still in flight at stop belongs to an attempt broken off (cancelled, or its agent killed at its
        # timeout): cancel it, and its upstream request, rather than hold the rollout's slot up to aiohttp's 60 s
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=STOP_GRACE)
        try:
            await self._runner.setup()
            await web.UnixSite(self._runner, str(self.socket_path)).start()
        except BaseException:
            await self.stop()
            raise
        # the container's root connects with its own uid; the folder (0700) keeps other host users out
        os.chmod(self.socket_path, 0o666)
        return self

    async def stop(self) -> None:
        try:
            if self._runner is not None:
                await self._runner.cleanup()
        finally:
            self._runner = None
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
                self.folder = None
            if self._on_stop is not None:
                self._on_stop(self)

    async def __aenter__(self) -> SessionEndpoint:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()


def bound_session(request: web.Request) -> str:
    """The session id a request names: the route's ``{sid}``, or the socket's binding."""
    sid = request.match_info.get("sid")
    if sid is not None:
        return sid
    binding = request.app.get(BINDING)
    if binding is None:
        raise ProxyError(f"route {request.path} names no session")
    return binding.sid


def sweep_stale(parent: str | None = None, *, now: float | None = None) -> int:
    """Remove the endpoint folders under ``parent`` (default: the temp folder) whose server is gone: the socket
    refuses connections (asked again after ``BIND_GRACE`` if it is younger, as when a run is stopped just as its
    rollouts' endpoints open), or was never bound within ``STALE_AFTER`` seconds. A live endpoint, this process's or
    any other run's, accepts the connection and is kept. Returns how many folders were removed."""
    now = time.time() if now is None else now
    stale: list[Path] = []
    young: list[Path] = []
    for folder in Path(parent or tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"):
        sock = folder / SOCKET_NAME
        try:
            if sock.is_socket():
                if not _listening(sock):
                    age = now - sock.stat().st_mtime
                    (stale if age > BIND_GRACE else young).append(folder)
            elif folder.is_dir() and now - folder.stat().st_mtime > STALE_AFTER:
                stale.append(folder)
        except OSError:
            continue  # removed meanwhile
    if young:  # refused, but maybe between bind and listen: asked again once that moment has surely passed
        time.sleep(BIND_GRACE)
        stale += [
            folder for folder in young if (folder / SOCKET_NAME).is_socket() and not _listening(folder / SOCKET_NAME)
        ]
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    return len(stale)


def _listening(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except ConnectionRefusedError:
            return False
        except OSError:
            return True  # busy, or not ours to judge: keep it
    return True
