"""The proxy's reads of a server's event stream over real loopback HTTP, against a stand-in server that sends what a
server can send. Token mode's ``/v1/completions`` read (``Upstream.read_stream``): a whole answer cut into vLLM's
chunks (with a first line longer than aiohttp's line limit), an error event mid-stream, a stream cut before
``[DONE]``, a chunk that is not JSON, a stall. Forward mode's chat stream: the same long first line, passed on
unchanged. The real vLLM server's streams are checked against its whole answers in ``test_proxy.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from qwen_swe.errors import UpstreamFailure
from qwen_swe.traffic.completion_stream import STREAM_OPTIONS, respond
from qwen_swe.traffic.proxy import RecordingProxy
from qwen_swe.traffic.upstream import Upstream
from tests.scripted_server import chat

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def answer(prompt_len: int = 5, *, ids: bool = True) -> dict:
    return {
        "id": "cmpl-1",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "text": "x = 1\n",
                "token_ids": [87, 284, 220, 16, 198] if ids else None,
                "prompt_token_ids": list(range(prompt_len)),
                "logprobs": {
                    "tokens": ["x", " =", " ", "1", "\n"],
                    "token_logprobs": [-0.5, -1.25, -0.0, -2.0, -0.125],
                    "top_logprobs": None,
                    "text_offset": [],
                },
                "finish_reason": "length",
                "stop_reason": None,
            }
        ],
        "usage": {"prompt_tokens": prompt_len, "completion_tokens": 5, "total_tokens": prompt_len + 5},
    }


async def read(handler: Handler, timeout: float = 30) -> dict:
    """``handler`` serves ``/v1/completions``; the answer as token mode reads it, or the UpstreamFailure raised."""
    app = web.Application()
    app.router.add_post("/v1/completions", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    upstream = Upstream(f"http://127.0.0.1:{port}/v1", model="m", request_timeout=timeout)
    await upstream.start()
    try:
        resp = await upstream.post_upstream("/completions", {"prompt": [1], "stream": True, "stream_options": {}})
        return await upstream.read_stream(resp, "/completions")
    finally:
        await upstream.close()
        await runner.cleanup()


def streaming(*lines: bytes, cut: bool = False, stall: float = 0.0) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for line in lines:
            await out.write(line)
        if stall:
            await asyncio.sleep(stall)
        if cut:  # the server dies mid-answer: the connection closes without [DONE]
            assert request.transport is not None
            request.transport.close()
            return out
        await out.write_eof()
        return out

    return handler


def chunk(payload: dict) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


FIRST = chunk({"choices": [{"index": 0, "text": "x", "token_ids": [87], "logprobs": {"token_logprobs": [-0.5]}}]})


def test_a_streamed_answer_comes_back_whole_even_with_a_first_line_past_aiohttps_limit():
    whole = answer(prompt_len=120_000)  # the first chunk carries the prompt ids: about 830 KB on one line
    whole["usage"]["prompt_tokens_details"] = {"cached_tokens": 119_984}
    whole["metrics"] = {"queue_time_ms": 0.5, "time_to_first_token_ms": 12.0, "generation_time_ms": 30.0}

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        return await respond(request, {**body, "stream_options": STREAM_OPTIONS}, whole)

    got = asyncio.run(read(handler))
    want = whole["choices"][0]
    choice = got["choices"][0]
    assert choice["token_ids"] == want["token_ids"] and choice["text"] == want["text"]
    assert choice["logprobs"]["token_logprobs"] == want["logprobs"]["token_logprobs"]
    assert choice["prompt_token_ids"] == want["prompt_token_ids"]
    assert (choice["finish_reason"], got["usage"], got["metrics"]) == ("length", whole["usage"], whole["metrics"])


def test_a_server_without_token_ids_gives_none_not_a_partial_list():
    async def handler(request: web.Request) -> web.StreamResponse:
        return await respond(request, {"stream": True}, answer(ids=False))

    assert asyncio.run(read(handler))["choices"][0]["token_ids"] is None


def test_an_error_event_mid_stream_raises_with_the_servers_status_and_message():
    error = {"error": {"message": "engine died", "type": "InternalServerError", "code": 500}}
    with pytest.raises(UpstreamFailure) as failure:
        asyncio.run(read(streaming(FIRST, chunk(error), b"data: [DONE]\n\n")))
    assert failure.value.status == 500 and failure.value.body == error
    assert "engine died" in failure.value.message


@pytest.mark.parametrize(
    "handler,status,needle",
    [
        (streaming(FIRST, cut=True), 502, "stream"),  # cut: aiohttp's payload error, or no [DONE]
        (streaming(FIRST, b"data: {not json\n\n", b"data: [DONE]\n\n"), 502, "stream broke"),
        (streaming(FIRST), 502, "ended before [DONE]"),  # closed cleanly, but the answer never finished
    ],
    ids=["cut", "not-json", "no-done"],
)
def test_a_broken_stream_is_a_502_naming_what_broke(handler, status, needle):
    with pytest.raises(UpstreamFailure) as failure:
        asyncio.run(read(handler))
    assert failure.value.status == status
    assert needle in failure.value.body["error"]["message"]


def test_a_stream_that_stalls_past_the_request_timeout_is_a_504():
    with pytest.raises(UpstreamFailure) as failure:
        asyncio.run(read(streaming(FIRST, stall=5.0), timeout=1.0))
    assert failure.value.status == 504 and failure.value.body["error"]["type"] == "timeout"


def test_forward_mode_passes_on_and_records_a_chat_stream_whose_first_line_passes_aiohttps_limit():
    prompt_ids = list(range(120_000))  # vLLM's first chat chunk carries them: about 830 KB on one line
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    handler = streaming(
        chunk({**head, "prompt_token_ids": prompt_ids, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
        chunk({**head, "choices": [{"index": 0, "delta": {"content": "x = 1"}, "token_ids": [87, 284, 16]}]}),
        chunk({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        b"data: [DONE]\n\n",
    )

    async def main():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        try:
            async with RecordingProxy(url, mode="forward", request_timeout=30) as proxy:
                session = proxy.open_session()
                async with aiohttp.ClientSession() as http:
                    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
                    reply = await chat(http, session.base_url, body)
                return reply, proxy.close_session(session.id)
        finally:
            await runner.cleanup()

    reply, turns = asyncio.run(main())
    assert reply["message"]["content"] == "x = 1" and reply["finish_reason"] == "stop"
    assert len(turns) == 1 and turns[0].ok, turns[0].error
    assert turns[0].prompt_ids == prompt_ids and turns[0].sampled_ids == [87, 284, 16]
