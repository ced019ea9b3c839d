"""The scripted model (``tests/scripted_server.py``) with the vLLM routes a weight sync uses, so the real trainer can
sync against it: ``/health``, ``/pause?mode=wait|keep``, ``/resume``, ``/collective_rpc`` (a reload: the served
version goes up by one), ``/reset_prefix_cache``.

A reply's ``delay`` is generation time, and pausing treats it as vLLM treats generation: ``mode=wait`` answers once
the requests in flight have finished, ``mode=keep`` answers at once and freezes them (their clocks stop) until
``/resume``; either way a request that arrives while paused waits for ``/resume``. A ``Held`` reply is generated only
once the served version reaches ``until_version`` (a straggler a test keeps in flight across a sync). Each pause is
recorded in ``syncs``: its mode, the requests in flight when it came, and how long it took to answer.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.scripted_server import Context, Reply, Script, ScriptedServer, ServerThread

STEP = 0.05  # seconds of generation between looks at the pause state


@dataclass
class Held(Reply):
    until_version: int = 0


class ScriptedVLLM(ScriptedServer):
    def __init__(self, script: Script, **kwargs: Any) -> None:
        super().__init__(script, **kwargs)
        self.version = 0
        self.in_flight = 0
        self.mode: str | None = None  # the pause in force
        self.syncs: list[dict[str, Any]] = []

    async def start(self) -> str:
        self._resumed, self._idle = asyncio.Event(), asyncio.Event()
        self._resumed.set()
        self._idle.set()
        return await super().start()

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_get("/health", self._ok)
        app.router.add_post("/pause", self._pause)
        app.router.add_post("/resume", self._resume)
        app.router.add_post("/collective_rpc", self._reload)
        app.router.add_post("/reset_prefix_cache", self._ok)

    # --- generation ---------------------------------------------------------------------------------
    async def _reply(self, ctx: Context) -> Reply:
        await self._resumed.wait()  # a paused server starts nothing new
        self.in_flight += 1
        self._idle.clear()
        try:
            reply = self.script(ctx)
            reply = Reply(text=reply) if isinstance(reply, str) else reply
            if reply.hang:
                await self._stopping.wait()
            while isinstance(reply, Held) and self.version < reply.until_version:
                await self._generate(STEP)
            await self._generate(reply.delay)
            return reply
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self._idle.set()

    async def _generate(self, seconds: float) -> None:
        """``seconds`` of generation; the clock stops while a ``mode=keep`` pause freezes the request."""
        left = seconds
        while left > 0:
            if self.mode == "keep":
                await self._resumed.wait()
                continue
            step = min(left, STEP)
            await asyncio.sleep(step)
            left -= step

    # --- the weight sync's routes -------------------------------------------------------------------
    async def _ok(self, request: web.Request) -> web.Response:
        return web.json_response({"success": True})

    async def _pause(self, request: web.Request) -> web.Response:
        mode = request.query.get("mode", "wait")
        t0, in_flight = time.monotonic(), self.in_flight
        self.mode = mode
        self._resumed.clear()
        if mode == "wait":
            await self._idle.wait()
        self.syncs.append(
            {"mode": mode, "in_flight": in_flight, "pause_seconds": time.monotonic() - t0, "version": self.version}
        )
        return web.json_response({})

    async def _resume(self, request: web.Request) -> web.Response:
        self.mode = None
        self._resumed.set()
        return web.json_response({})

    async def _reload(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("method") == "reload_weights":
            self.version += 1
        return web.json_response({"results": [None]})


class VLLMThread(ServerThread):
    """The scripted vLLM on its own event loop, for a test or benchmark that runs the trainer as a subprocess."""

    server_class = ScriptedVLLM
    server: ScriptedVLLM

    def __enter__(self) -> VLLMThread:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
