"""A Docker volume plugin that holds container creates in flight until the test lets them go.

The engine asks a volume's driver for the volume in the middle of a create: after it has reserved the container's
name, before the container exists. So a create whose container mounts a new volume of this driver stops there, and
the test decides when it goes on; no sleep races the engine. The plugin speaks Docker's plugin protocol (v1) on a
socket in ``/run/docker/plugins``, where the engine finds plugins by name (root only).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from socketserver import ThreadingMixIn, UnixStreamServer
from typing import Any

import docker

PLUGIN_DIR = Path("/run/docker/plugins")
HOLD_LIMIT = 300.0  # seconds a create is held at most, should the test never release it


class HeldCreates:
    """``reached``: a create is held; ``release()``: let every create go on."""

    def __init__(self, driver: str) -> None:
        self.driver = driver
        self.reached, self._released = threading.Event(), threading.Event()
        self._volumes: set[str] = set()

    def release(self) -> None:
        self._released.set()

    def answer(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("Name", "")
        if route == "Plugin.Activate":
            return {"Implements": ["VolumeDriver"]}
        if route == "VolumeDriver.Capabilities":
            return {"Capabilities": {"Scope": "local"}}
        if route == "VolumeDriver.Create":
            self.reached.set()
            self._released.wait(HOLD_LIMIT)
            self._volumes.add(name)
        elif route == "VolumeDriver.Remove":
            self._volumes.discard(name)
        elif route == "VolumeDriver.Get":
            if name not in self._volumes:
                return {"Err": f"no such volume {name}"}
            return {"Volume": {"Name": name, "Mountpoint": ""}, "Err": ""}
        elif route == "VolumeDriver.List":
            return {"Volumes": [{"Name": n, "Mountpoint": ""} for n in sorted(self._volumes)], "Err": ""}
        return {"Err": ""}


class _Server(ThreadingMixIn, UnixStreamServer):
    daemon_threads = True
    plugin: HeldCreates


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 - the http.server hook's name
        size = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(size) or b"{}")
        reply = json.dumps(self.server.plugin.answer(self.path.lstrip("/"), body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.docker.plugins.v1+json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: Any) -> None:
        pass

    def address_string(self) -> str:  # a Unix socket's peer has no host
        return "engine"


@contextmanager
def held_creates(client: docker.DockerClient) -> Iterator[HeldCreates]:
    """The plugin, serving until the block ends; then its volumes are removed (the engine asks it to), with any
    container still mounting one."""
    plugin = HeldCreates(f"qwen-swe-hold-{uuid.uuid4().hex[:8]}")
    PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
    sock = PLUGIN_DIR / f"{plugin.driver}.sock"
    server = _Server(str(sock), _Handler)
    server.plugin = plugin
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield plugin
    finally:
        plugin.release()
        for volume in client.volumes.list(filters={"driver": plugin.driver}):
            for user in client.containers.list(
                all=True, filters={"volume": volume.name}, ignore_removed=True
            ):  # a test failed half-way
                user.remove(force=True)
            volume.remove(force=True)
        server.shutdown()
        server.server_close()
        sock.unlink(missing_ok=True)
