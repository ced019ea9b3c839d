"""A session's Unix-socket endpoint (``traffic/endpoint.py``) on the real recording proxy: it serves its own session's
routes only, follows a restarted session, answers 410 once the session is closed, and leaves nothing on disk; stopped
with a call in flight (a cancelled rollout), it cancels the call at once. The folders a killed process left are
swept; a live endpoint's never."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import time

import aiohttp
import pytest
from aiohttp import web

from qwen_swe.errors import ProxyError
from qwen_swe.traffic.endpoint import (
    BIND_GRACE,
    FOLDER_PREFIX,
    MAX_SOCKET_PATH,
    SOCKET_NAME,
    STALE_AFTER,
    SessionEndpoint,
    sweep_stale,
)
from qwen_swe.traffic.proxy import RecordingProxy


async def _status(socket_path: str, path: str) -> int:
    async with (
        aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=socket_path)) as client,
        client.get(f"http://session{path}", timeout=aiohttp.ClientTimeout(total=30)) as resp,
    ):
        return resp.status


async def _post(socket_path: str, path: str) -> int:
    async with (
        aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=socket_path)) as client,
        client.post(f"http://session{path}", json={}, timeout=aiohttp.ClientTimeout(total=30)) as resp,
    ):
        return resp.status


def test_the_socket_serves_one_session_and_follows_its_restart(tmp_path):
    async def scenario() -> list[int]:
        # the upstream is a closed port: a route that reaches the session's handler answers 502
        async with RecordingProxy("http://127.0.0.1:9", model="m", request_timeout=5) as proxy:
            first, other = proxy.open_session(), proxy.open_session()
            async with proxy.endpoint(first.id, parent="/tmp") as ep:
                sock = str(ep.socket_path)
                seen = [
                    await _status(sock, "/v1/models"),
                    await _status(sock, f"/s/{other.id}/v1/models"),
                    await _status(sock, "/health"),
                ]
                again = proxy.restart_session(first.id)
                seen.append(await _status(sock, "/v1/models"))  # now the new session's
                proxy.close_session(again.id)
                seen.append(await _status(sock, "/v1/models"))
                folder = ep.folder
            assert not folder.exists()
            return seen

    assert asyncio.run(scenario()) == [502, 404, 404, 502, 410]


def test_an_endpoint_needs_an_open_session_and_a_short_path(tmp_path):
    async def scenario() -> None:
        async with RecordingProxy("http://127.0.0.1:9", model="m") as proxy:
            with pytest.raises(ProxyError, match="not open"):
                proxy.endpoint("nope")
            deep = tmp_path / ("d" * MAX_SOCKET_PATH)
            deep.mkdir()
            with pytest.raises(ProxyError, match="TMPDIR"):
                async with proxy.endpoint(proxy.open_session().id, parent=str(deep)):
                    pass

    asyncio.run(scenario())


def test_stopping_an_endpoint_cancels_a_call_still_in_flight():
    """A rollout cancelled mid-call (a written-off pool group) stops its endpoint: the call's handler is cancelled,
    its upstream request with it, instead of being waited for (aiohttp's default, 60 s) while the slot stays held."""

    async def scenario() -> BaseException | None:
        entered, cancelled = asyncio.Event(), asyncio.Event()

        async def chat(request: web.Request) -> web.StreamResponse:
            entered.set()
            try:
                await asyncio.Event().wait()  # the model's answer never comes
            except asyncio.CancelledError:
                cancelled.set()
                raise
            raise AssertionError("unreachable")

        async def models(request: web.Request) -> web.StreamResponse:
            return web.json_response({})

        ep = await SessionEndpoint(chat, models, "sid", parent="/tmp").start()
        call = asyncio.ensure_future(_post(str(ep.socket_path), "/v1/chat/completions"))
        await entered.wait()
        await asyncio.wait_for(ep.stop(), 10)  # not a race: it fails only if stop waits out aiohttp's 60 s
        assert cancelled.is_set()
        (outcome,) = await asyncio.gather(call, return_exceptions=True)
        return outcome

    assert isinstance(asyncio.run(scenario()), aiohttp.ClientError)  # the agent sees its connection end


def test_a_sweep_removes_the_folders_of_dead_endpoints_and_keeps_the_live_one():
    """What a trainer rank killed mid-rollout leaves: a socket nobody listens on. A folder whose socket was never
    bound goes only once it is older than any start could take; a live endpoint and other folders stay."""
    parent = tempfile.mkdtemp(prefix="sweep-", dir="/tmp")  # short: a socket path holds 108 bytes

    def folder(name: str, *, dead_socket: bool = False, age: float = 0.0) -> str:
        path = os.path.join(parent, name)
        os.mkdir(path)
        if dead_socket:  # bound and listening once, then its process died: the file stays, connect is refused
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.bind(os.path.join(path, SOCKET_NAME))
                sock.listen(1)
        then = time.time() - age
        os.utime(path, (then, then))
        return path

    async def scenario() -> tuple[int, int, bool]:
        async with (
            RecordingProxy("http://127.0.0.1:9", model="m") as proxy,
            proxy.endpoint(proxy.open_session().id, parent=parent) as ep,
        ):
            later = time.time() + max(BIND_GRACE, STALE_AFTER) + 1
            fresh = sweep_stale(parent)  # the dead socket, younger than BIND_GRACE, still refuses when asked again
            swept = sweep_stale(parent, now=later)
            return fresh, swept, ep.socket_path.is_socket()

    dead = folder(f"{FOLDER_PREFIX}dead", dead_socket=True)
    unbound_young = folder(f"{FOLDER_PREFIX}young")
    other = folder("not-an-endpoint", age=3600)
    try:
        fresh, swept, live_kept = asyncio.run(scenario())
        assert (fresh, swept, live_kept) == (1, 1, True)
        assert not os.path.exists(dead) and not os.path.exists(unbound_young) and os.path.isdir(other)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
