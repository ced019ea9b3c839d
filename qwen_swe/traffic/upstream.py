"""The recording proxy's side of the inference server: one HTTP client, its errors turned into the statuses the agent
gets (``UpstreamFailure``: the server's own status >= 400 passed on, a timeout 504, no connection 502), and the
served context length, asked once per proxy."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator
from typing import Any

import aiohttp

from qwen_swe.errors import UpstreamFailure
from qwen_swe.traffic.completion_stream import Assembler


def error_body(message: str, kind: str = "proxy_error", code: int | None = None) -> dict[str, Any]:
    """An error in the OpenAI API's shape, which the agent's client parses."""
    return {"error": {"message": message, "type": kind, "code": code}}


# vLLM's per-request figures (``metrics`` of a response, with --enable-per-request-metrics) -> the names we record
SERVER_TIMING = {"queue_time_ms": "queue_ms", "time_to_first_token_ms": "prefill_ms", "generation_time_ms": "decode_ms"}


def served_figures(data: dict[str, Any]) -> tuple[int | None, dict[str, float] | None]:
    """What the server says about one call beyond its tokens: the prompt tokens it found in its prefix cache (vLLM:
    ``usage.prompt_tokens_details.cached_tokens``, with --enable-prompt-tokens-details) and its timing; ``None`` for
    what it does not report."""
    details = (data.get("usage") or {}).get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    reported = data.get("metrics") or {}
    timing = {
        ours: float(reported[theirs]) for theirs, ours in SERVER_TIMING.items() if reported.get(theirs) is not None
    }
    return (int(cached) if cached is not None else None), (timing or None)


async def sse_lines(resp: aiohttp.ClientResponse) -> AsyncGenerator[bytes, None]:
    """The lines of a server-sent-event answer, each with its newline. Split here, not by aiohttp's line reader:
    vLLM's first chunk carries the prompt's ids (``return_token_ids``), past that reader's 512 KiB limit from about
    75k tokens."""
    pending = bytearray()
    async for block in resp.content.iter_any():
        pending += block
        *lines, rest = pending.split(b"\n")
        pending = bytearray(rest)
        for line in lines:
            yield bytes(line) + b"\n"
    if pending:
        yield bytes(pending)


class Upstream:
    """``start()`` before the first call, ``close()`` at the end; ``url`` is the server's OpenAI root (``.../v1``)."""

    def __init__(self, url: str, *, model: str | None, request_timeout: float, api_key: str | None = None) -> None:
        self.url, self.model, self.request_timeout = url, model, request_timeout
        self._api_key = api_key  # the server's key, sent upstream
        self._client: aiohttp.ClientSession | None = None
        self._card_lock = asyncio.Lock()
        self._max_model_len: int | None = None  # from the server's /models card, to bound max_tokens

    async def start(self) -> None:
        auth = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else None
        self._client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=512, force_close=False),
            timeout=aiohttp.ClientTimeout(total=self.request_timeout),
            headers=auth,
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _session(self) -> aiohttp.ClientSession:
        assert self._client is not None, "start() first"
        return self._client

    async def models(self) -> tuple[int, bytes]:
        """The server's ``/models`` answer as it is (status, body); a failure to reach it raises."""
        async with self._session().get(f"{self.url}/models") as resp:
            return resp.status, await resp.read()

    async def post_upstream(self, path: str, payload: dict[str, Any]) -> aiohttp.ClientResponse:
        try:
            resp = await self._session().post(f"{self.url}{path}", json=payload)
        except TimeoutError:
            raise UpstreamFailure(
                504, error_body(f"upstream {path} timed out after {self.request_timeout}s", "timeout", 504), "timeout"
            ) from None
        except aiohttp.ClientError as exc:
            raise UpstreamFailure(
                502,
                error_body(f"upstream {path} unreachable: {exc!r}", "upstream_error", 502),
                f"unreachable: {exc!r}",
            ) from None
        if resp.status >= 400:
            raw = await resp.read()
            resp.release()
            try:
                err = json.loads(raw)
            except json.JSONDecodeError:
                err = error_body(raw.decode(errors="replace")[:2000], "upstream_error", resp.status)
            raise UpstreamFailure(resp.status, err, f"upstream {resp.status}: {raw[:500].decode(errors='replace')}")
        return resp

    async def read_json(self, resp: aiohttp.ClientResponse, path: str) -> dict[str, Any]:
        try:
            return await resp.json(content_type=None)
        except TimeoutError:
            raise UpstreamFailure(
                504, error_body(f"upstream {path} timed out after {self.request_timeout}s", "timeout", 504), "timeout"
            ) from None
        finally:
            resp.release()

    async def read_stream(self, resp: aiohttp.ClientResponse, path: str) -> dict[str, Any]:
        """A streamed ``/v1/completions`` answer read to its end and rebuilt whole (``completion_stream``); the
        server's error event, or a stream cut before ``[DONE]``, raises as an upstream failure."""
        assembler = Assembler()
        try:
            async with contextlib.aclosing(sse_lines(resp)) as lines:
                async for line in lines:
                    assembler.add_line(line.decode())
                    if assembler.done:
                        break
        except TimeoutError:
            raise UpstreamFailure(
                504, error_body(f"upstream {path} timed out after {self.request_timeout}s", "timeout", 504), "timeout"
            ) from None
        except (aiohttp.ClientError, ValueError) as exc:  # a connection cut mid-stream, a chunk that is not JSON
            raise UpstreamFailure(
                502, error_body(f"upstream {path} stream broke: {exc!r}", "upstream_error", 502), f"stream: {exc!r}"
            ) from None
        finally:
            resp.release()
        if assembler.error is not None:
            code = assembler.error.get("code")
            status = code if isinstance(code, int) and code >= 400 else 502
            message = str(assembler.error.get("message", assembler.error))
            raise UpstreamFailure(status, {"error": assembler.error}, f"upstream {status} mid-stream: {message[:500]}")
        if not assembler.done:
            raise UpstreamFailure(
                502, error_body(f"upstream {path} stream ended before [DONE]", "upstream_error", 502), "stream cut"
            )
        return assembler.answer()

    async def max_model_len(self) -> int:
        """The served context length (0 when the card does not say); one ``/models`` call for all sessions, not one
        per concurrent first request."""
        async with self._card_lock:
            if self._max_model_len is None:
                try:
                    _, body = await self.models()
                    cards = json.loads(body).get("data") or []
                    self._max_model_len = next((int(c["max_model_len"]) for c in cards if c.get("max_model_len")), 0)
                except (TimeoutError, aiohttp.ClientError, ValueError, AttributeError):
                    self._max_model_len = 0
        return self._max_model_len
