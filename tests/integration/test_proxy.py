"""The real recording proxy over loopback, in front of the scripted server (and, marked vllm, the real vLLM CPU server).

The scripted server stands in only for the model's choices; the proxy, HTTP, SSE and tokenizers are real.
"""

from __future__ import annotations

import asyncio
import json
import re

import aiohttp
import pytest

from qwen_swe import paths
from qwen_swe.traffic.completion_stream import STREAM_OPTIONS
from qwen_swe.traffic.proxy import ProxyError, RecordingProxy
from qwen_swe.traffic.sessions import derive_seed
from qwen_swe.traffic.trajectory import build_sample
from qwen_swe.traffic.upstream import Upstream, served_figures
from tests.scripted_server import APIError, Context, Reply, ScriptedServer, chat, fake_logprob, smollm2_tokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_shell_command",
            "description": "Executes a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Reads a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
]
CALL_LS = '<tool_call>\n{"name": "run_shell_command", "arguments": {"command" : "ls  -la"}}\n</tool_call>'
CALL_READ = '<tool_call>\n{"name": "read_file", "arguments": {"path": "calc.py"}}\n</tool_call>'
FINAL = "The bug is in add(): it subtracts. Fixed."


@pytest.fixture(scope="module")
def tok():
    return smollm2_tokenizer()


def run(coro):
    return asyncio.run(coro)


def agent_copy(message: dict) -> dict:
    """How qwen-code resends an assistant reply: compact JSON arguments, reasoning dropped."""
    out = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": json.dumps(json.loads(c["function"]["arguments"]), separators=(",", ":")),
                },
            }
            for c in message["tool_calls"]
        ]
    return out


async def agent_loop(
    http: aiohttp.ClientSession,
    base_url: str,
    task: str,
    *,
    turns: int,
    stream: bool = True,
    tool_choice: str | None = "required",
) -> tuple[list[dict], list[dict]]:
    """A qwen-code-shaped conversation: streamed requests with usage, text parts, tool results fed back."""
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": [{"type": "text", "text": task}]},
    ]
    replies = []
    for _ in range(turns):
        body = {
            "model": "agent-model",
            "messages": messages,
            "tools": TOOLS,
            "temperature": 1.0,
            "top_p": 1.0,
            "max_tokens": 256,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        if tool_choice:
            body["tool_choice"] = tool_choice
        reply = await chat(http, base_url, body)
        replies.append(reply)
        messages = messages + [agent_copy(reply["message"])]
        for call in reply["message"].get("tool_calls") or ():
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": [{"type": "text", "text": f"output of {call['function']['name']}"}],
                }
            )
        if not reply["message"].get("tool_calls"):
            break
    return messages, replies


def check_chain(turns) -> None:
    for prev, cur in zip(turns, turns[1:]):
        held = prev.prompt_ids + prev.sampled_ids
        assert cur.prompt_ids[: len(held)] == held


def test_a_call_in_flight_when_a_sync_begins_records_both_versions(tok):
    """PARTIAL_ROLLOUTS: the second call is in flight when a sync to version 8 begins, so its later tokens may be
    version 8's; the call after it starts at 8. The trajectory lists every version its tokens may come from."""

    async def main():
        synced = asyncio.Event()
        script = [CALL_LS, Reply(text=CALL_READ, after=synced), FINAL]  # the second call ends after the sync
        async with (
            ScriptedServer(script, tokenizer=tok) as server,
            RecordingProxy(server.url, model="scripted", tokenizer=tok, request_timeout=30) as proxy,
            aiohttp.ClientSession() as http,
        ):
            proxy.weight_version = 7
            session = proxy.open_session({"instance_id": "demo"})

            async def sync() -> None:
                while len(server.requests) < 2:  # the second call has reached the server
                    await asyncio.sleep(0.05)
                proxy.next_weight_version = 8  # what RolloutEngine.begin_sync does
                await asyncio.sleep(0.5)
                proxy.weight_version = 8  # the sync is done
                synced.set()

            await asyncio.gather(agent_loop(http, session.base_url, "Fix calc.py", turns=5), sync())
            return proxy.close_session(session.id)

    turns = run(main())
    assert [(t.weight_version, t.weight_version_end) for t in turns] == [(7, None), (7, 8), (8, None)]
    traj = build_sample(turns, max_response_len=100_000, mask_truncated=False)
    assert traj.metadata["weight_versions"] == ["7", "8"]


# --- token mode ------------------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [True, False])
def test_token_mode_multi_turn_session(tok, stream):
    async def main():
        async with (
            ScriptedServer([CALL_LS, CALL_READ, FINAL], tokenizer=tok) as server,
            RecordingProxy(server.url, model="scripted", tokenizer=tok, request_timeout=30) as proxy,
            aiohttp.ClientSession() as http,
        ):
            proxy.weight_version = 7
            session = proxy.open_session({"instance_id": "demo"})
            assert session.base_url == f"{proxy.root}/s/{session.id}/v1"
            messages, replies = await agent_loop(http, session.base_url, "Fix calc.py", turns=5, stream=stream)
            return proxy.close_session(session.id), replies, server.requests

    turns, replies, upstream = run(main())
    assert [r["finish_reason"] for r in replies] == ["tool_calls", "tool_calls", "stop"]
    first = replies[0]["message"]["tool_calls"][0]
    assert first["id"].startswith("call_") and first["function"]["name"] == "run_shell_command"
    assert json.loads(first["function"]["arguments"]) == {"command": "ls  -la"}
    assert json.loads(replies[1]["message"]["tool_calls"][0]["function"]["arguments"]) == {"path": "calc.py"}
    assert replies[2]["message"]["content"] == FINAL
    if stream:  # include_usage: the usage chunk comes last, counted in tokens
        assert replies[0]["usage"]["completion_tokens"] == len(turns[0].sampled_ids)
        assert replies[0]["usage"]["prompt_tokens"] == len(turns[0].prompt_ids)
    assert len(turns) == 3 and all(t.ok and t.mode == "tokens" and t.weight_version == 7 for t in turns)
    assert [t.prompt_source for t in turns] == ["render", "splice", "splice"]
    check_chain(turns)
    # upstream saw exactly the recorded prompt ids, through the completions API, constrained to a tool call
    assert [kind for kind, _ in upstream] == ["completions"] * 3
    for (_, body), turn in zip(upstream, turns):
        assert body["prompt"] == turn.prompt_ids and body["return_token_ids"] is True and body["logprobs"] == 1
        tag = json.loads(body["structured_outputs"]["structural_tag"])
        assert [t["begin"].split('"')[3] for t in tag["format"]["tags"]] == ["run_shell_command", "read_file"]
        assert body["max_tokens"] == 256 and body["temperature"] == 1.0
    assert turns[0].sampled_ids == tok.encode(CALL_LS, add_special_tokens=False) + [2]
    assert turns[0].logprobs == [fake_logprob(t, i) for i, t in enumerate(turns[0].sampled_ids)]
    traj = build_sample(turns, max_response_len=100_000, mask_truncated=False)
    assert traj.metadata["retained_fraction"] == 1.0 and traj.metadata["drift_count"] == 0
    assert traj.tokens == turns[-1].prompt_ids + turns[-1].sampled_ids


def test_token_mode_without_tool_choice_sends_no_constraint(tok):
    async def main():
        async with (
            ScriptedServer(["Just text."], tokenizer=tok) as server,
            RecordingProxy(server.url, tokenizer=tok, request_timeout=30) as proxy,
            aiohttp.ClientSession() as http,
        ):
            session = proxy.open_session()
            _, replies = await agent_loop(http, session.base_url, "hi", turns=1, tool_choice=None)
            return replies, server.requests, proxy.close_session(session.id)

    replies, upstream, turns = run(main())
    assert replies[0]["message"]["content"] == "Just text." and replies[0]["finish_reason"] == "stop"
    assert "structured_outputs" not in upstream[0][1]
    assert upstream[0][1]["model"] == "agent-model"  # no served name given: the agent's passes through
    assert turns[0].completion_text == "Just text."


def test_token_mode_bounds_max_tokens_by_the_context(tok):
    async def main():
        async with (
            ScriptedServer(["ok"], tokenizer=tok, max_model_len=600) as server,
            RecordingProxy(server.url, tokenizer=tok, request_timeout=30) as proxy,
            aiohttp.ClientSession() as http,
        ):
            session = proxy.open_session()
            msgs = [{"role": "user", "content": "short"}]
            await chat(http, session.base_url, {"messages": msgs})  # no max_tokens: all the room left
            await chat(http, session.base_url, {"messages": msgs, "max_tokens": 100_000})
            with pytest.raises(APIError) as err:
                await chat(http, session.base_url, {"messages": [{"role": "user", "content": "word " * 700}]})
            return server.requests, err.value, proxy.close_session(session.id)

    upstream, err, turns = run(main())
    room = 600 - len(turns[0].prompt_ids)
    assert [body["max_tokens"] for _, body in upstream] == [room, room]
    assert err.status == 400 and "context" in err.body["error"]["message"]
    assert [t.status for t in turns] == [200, 200, 400]


def test_token_mode_works_while_the_default_executor_is_busy(tok):
    """Sandboxes park docker exec calls on the default executor for a whole agent run; the proxy must not need it."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        release = threading.Event()
        parked = loop.run_in_executor(None, release.wait, 60)
        try:
            async with (
                ScriptedServer([CALL_LS, FINAL], tokenizer=tok, max_model_len=100_000) as server,
                RecordingProxy(server.url, tokenizer=tok, request_timeout=30) as proxy,
                aiohttp.ClientSession() as http,
            ):
                session = proxy.open_session()
                big = "Fix it. " + "context line\n" * 4000  # > INLINE_RENDER_BYTES: rendered on the proxy's threads
                _, replies = await asyncio.wait_for(agent_loop(http, session.base_url, big, turns=2), 30)
                return replies, proxy.close_session(session.id)
        finally:
            release.set()
            await parked

    replies, turns = run(main())
    assert [r["finish_reason"] for r in replies] == ["tool_calls", "stop"]
    assert [t.prompt_source for t in turns] == ["render", "splice"]


# --- forward mode ----------------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [True, False])
def test_forward_mode_records_ids_and_streams_unchanged(tok, stream):
    async def main():
        async with (
            ScriptedServer([CALL_LS, CALL_READ, FINAL], tokenizer=tok) as server,
            RecordingProxy(server.url, model="served", mode="forward", request_timeout=30) as proxy,
            aiohttp.ClientSession() as http,
        ):
            session = proxy.open_session()
            _, replies = await agent_loop(http, session.base_url, "Fix calc.py", turns=5, stream=stream)
            return proxy.close_session(session.id), replies, server.requests

    turns, replies, upstream = run(main())
    assert len(turns) == 3 and all(t.ok and t.mode == "forward" for t in turns)
    for (kind, body), turn, reply in zip(upstream, turns, replies):
        assert kind == "chat" and body["return_token_ids"] is True and body["logprobs"] is True
        assert body["model"] == "served" and "top_logprobs" not in body
        assert turn.message.get("tool_calls") == reply["message"].get("tool_calls")
        assert turn.finish_reason == reply["finish_reason"]
        assert len(turn.sampled_ids) == len(turn.logprobs) == turn.usage["completion_tokens"]
        assert len(turn.prompt_ids) == turn.usage["prompt_tokens"]
        assert turn.logprobs == [fake_logprob(t, i) for i, t in enumerate(turn.sampled_ids)]
    assert turns[0].sampled_ids == tok.encode(CALL_LS, add_special_tokens=False) + [2]
    # the server re-rendered the non-canonical call text: forward mode drifts where token mode did not
    traj = build_sample(turns, max_response_len=100_000, mask_truncated=False)
    assert traj.metadata["drift_count"] >= 1 and traj.metadata["retained_fraction"] < 1.0


@pytest.mark.parametrize("mode", ["tokens", "forward"])
def test_a_seeded_session_sends_each_turn_its_own_derived_seed(tok, mode):
    async def main():
        async with (
            ScriptedServer([CALL_LS, FINAL, CALL_LS, FINAL, "Done."], tokenizer=tok) as server,
            RecordingProxy(server.url, tokenizer=tok, mode=mode, request_timeout=30) as proxy,
            aiohttp.ClientSession() as http,
        ):
            seeded, plain = proxy.open_session(seed=7), proxy.open_session()
            await agent_loop(http, seeded.base_url, "Fix calc.py", turns=5, tool_choice=None)
            await agent_loop(http, plain.base_url, "Fix calc.py", turns=5, tool_choice=None)
            own = proxy.open_session(seed=7)  # an agent's own seed wins
            await chat(
                http,
                own.base_url,
                {"model": "m", "messages": [{"role": "user", "content": "hi"}], "seed": 99, "max_tokens": 8},
            )
            return [body.get("seed") for _, body in server.requests]

    seeds = run(main())
    assert seeds == [derive_seed(7, 0), derive_seed(7, 1), None, None, 99]
    assert len(set(seeds[:2])) == 2 and all(0 <= s < 2**31 for s in seeds[:2])


# --- many sessions at once -------------------------------------------------------------------------
def test_64_concurrent_sessions_keep_their_own_turns(tok):
    def script(ctx: Context) -> str:
        n = re.search(r"task number (\d+)", ctx.prompt_text).group(1)
        if ctx.assistant_turns == 0:
            return f'<tool_call>\n{{"name": "run_shell_command", "arguments": {{"command": "echo {n}"}}}}\n</tool_call>'
        return f"finished task {n}"

    async def one(http, proxy, n):
        session = proxy.open_session({"n": n})
        _, replies = await agent_loop(http, session.base_url, f"task number {n}", turns=3)
        return n, replies, proxy.close_session(session.id)

    async def main():
        async with (
            ScriptedServer(script, tokenizer=tok) as server,
            RecordingProxy(server.url, tokenizer=tok, request_timeout=60) as proxy,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http,
        ):
            return await asyncio.gather(*(one(http, proxy, n) for n in range(64)))

    results = run(main())
    assert len(results) == 64
    for n, replies, turns in results:
        assert json.loads(replies[0]["message"]["tool_calls"][0]["function"]["arguments"]) == {"command": f"echo {n}"}
        assert replies[1]["message"]["content"] == f"finished task {n}"
        assert len(turns) == 2 and [t.prompt_source for t in turns] == ["render", "splice"]
        check_chain(turns)
        text = tok.decode(build_sample(turns, max_response_len=10_000, mask_truncated=False).tokens)
        assert f"task number {n}<" in text and f"finished task {n}" in text
        assert len(set(re.findall(r"task number (\d+)", text))) == 1


# --- failures --------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["tokens", "forward"])
def test_upstream_500_is_passed_on_and_recorded(tok, mode):
    def script(ctx: Context):
        return Reply(status=500) if "please fail" in ctx.prompt_text else "fine"

    async def main():
        async with (
            ScriptedServer(script, tokenizer=tok) as server,
            RecordingProxy(
                server.url, tokenizer=tok if mode == "tokens" else None, mode=mode, request_timeout=30
            ) as proxy,
            aiohttp.ClientSession() as http,
        ):
            session = proxy.open_session()
            with pytest.raises(APIError) as err:
                await agent_loop(http, session.base_url, "please fail", turns=1)
            ok = await agent_loop(http, session.base_url, "all good", turns=1, tool_choice=None)
            return err.value, ok, proxy.close_session(session.id)

    err, ok, turns = run(main())
    assert err.status == 500 and "scripted failure" in json.dumps(err.body)
    assert ok[1][0]["message"]["content"] == "fine"
    assert [t.status for t in turns] == [500, 200]
    assert turns[0].error and not turns[0].ok and turns[0].sampled_ids is None
    traj = build_sample(turns, max_response_len=1000, mask_truncated=False)
    assert traj.metadata["error_turns"] == 1 and traj.metadata["model_turns"] == 1


@pytest.mark.parametrize("mode", ["tokens", "forward"])
def test_upstream_hang_becomes_504_after_the_request_timeout(tok, mode):
    def script(ctx: Context):
        return Reply(hang=True) if "hang now" in ctx.prompt_text else "fine"

    async def main():
        async with (
            ScriptedServer(script, tokenizer=tok) as server,
            RecordingProxy(
                server.url, tokenizer=tok if mode == "tokens" else None, mode=mode, request_timeout=1.0
            ) as proxy,
            aiohttp.ClientSession() as http,
        ):
            session = proxy.open_session()
            with pytest.raises(APIError) as err:
                await agent_loop(http, session.base_url, "hang now", turns=1)
            ok = await agent_loop(http, session.base_url, "no hang", turns=1, tool_choice=None)
            return err.value, ok, proxy.close_session(session.id)

    err, ok, turns = run(main())
    assert err.status == 504 and err.body["error"]["type"] == "timeout"
    assert ok[1][0]["message"]["content"] == "fine"
    assert [t.status for t in turns] == [504, 200] and turns[0].error == "timeout"
    assert turns[0].latency >= 1.0


def test_closed_and_unknown_sessions_are_refused_and_models_forwarded(tok):
    async def main():
        async with (
            ScriptedServer(["x"], tokenizer=tok) as server,
            RecordingProxy(server.url, tokenizer=tok, request_timeout=30) as proxy,
            aiohttp.ClientSession() as http,
        ):
            session = proxy.open_session()
            async with http.get(f"{session.base_url}/models") as resp:
                models = (resp.status, await resp.json())
            assert proxy.close_session(session.id) == []
            with pytest.raises(ProxyError):
                proxy.close_session(session.id)
            statuses = []
            for url in (session.base_url, f"{proxy.root}/s/nope/v1"):
                async with http.post(f"{url}/chat/completions", json={"messages": []}) as resp:
                    statuses.append(resp.status)
            return models, statuses

    models, statuses = run(main())
    assert models[0] == 200 and models[1]["data"][0]["id"] == "scripted"
    assert statuses == [410, 404]


def test_token_mode_needs_a_tokenizer():
    with pytest.raises(ProxyError, match="tokenizer"):
        RecordingProxy("http://127.0.0.1:1", mode="tokens")


# --- the real vLLM CPU server ----------------------------------------------------------------------
def vllm_proxy(url: str) -> RecordingProxy:
    """A token-mode proxy in front of the embedded vLLM server, rendering with the embedded model's tokenizer."""
    model_dir = str(paths.embedded_model_dir())
    return RecordingProxy(url, model=model_dir, tokenizer_path=model_dir, mode="tokens", request_timeout=300)


@pytest.mark.vllm
def test_token_mode_against_real_vllm_keeps_every_sampled_token(embedded_vllm):
    """SmolLM2 on vLLM CPU, forced to call tools: >= 99% of sampled ids kept with their logprobs, prompts chained."""

    async def main():
        async with vllm_proxy(embedded_vllm) as proxy, aiohttp.ClientSession() as http:
            session = proxy.open_session()
            messages = [
                {"role": "system", "content": "You are a coding agent. Call a tool on every turn."},
                {"role": "user", "content": [{"type": "text", "text": "List the files, then read calc.py."}]},
            ]
            replies = []
            for k in range(4):
                body = {
                    "model": "smollm2-135m",
                    "messages": messages,
                    "tools": TOOLS,
                    "tool_choice": "required",
                    "temperature": 1.0,
                    "top_p": 1.0,
                    "max_tokens": 128,  # a whole call: cut short, the forced JSON does not parse as one
                    "seed": k,  # the same draws every run (unseeded, 1 of 4 parsed once in CI)
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
                reply = await chat(http, session.base_url, body)
                replies.append(reply)
                messages = messages + [agent_copy(reply["message"])]
                for call in reply["message"].get("tool_calls") or ():
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": call["id"],
                            "content": [{"type": "text", "text": "calc.py\ntest_calc.py"}],
                        }
                    )
                if not reply["message"].get("tool_calls"):
                    messages.append({"role": "user", "content": "Call a tool."})
            return replies, proxy.close_session(session.id)

    replies, turns = run(main())
    assert len(turns) == 4 and all(t.ok for t in turns)
    assert sum(bool(r["message"].get("tool_calls")) for r in replies) >= 3
    for turn in turns:
        assert len(turn.sampled_ids) == len(turn.logprobs) == turn.usage["completion_tokens"] > 0
        assert all(lp <= 0.0 for lp in turn.logprobs)
    check_chain(turns)
    traj = build_sample(turns, max_response_len=100_000, mask_truncated=False)
    meta = traj.metadata
    assert meta["retained_fraction"] >= 0.99, meta
    response = traj.tokens[traj.prompt_length :]
    kept_ids = [response[i] for i, m in enumerate(traj.loss_mask) if m]
    kept_lps = [traj.rollout_log_probs[i] for i, m in enumerate(traj.loss_mask) if m]
    assert kept_ids == [i for t in turns for i in t.sampled_ids]
    assert kept_lps == [lp for t in turns for lp in t.logprobs]


@pytest.mark.vllm
def test_real_vllms_stream_rebuilds_exactly_its_whole_answer(embedded_vllm):
    """What token mode reads from a streamed /v1/completions equals the same seeded call answered whole: ids,
    logprobs, finish reason, token counts and the server's figures."""
    model_dir = str(paths.embedded_model_dir())
    source = "".join(f"# step {i}: add the two previous numbers\n" for i in range(20)) + "def fibonacci(n):\n    "
    prompt = smollm2_tokenizer().encode(source, add_special_tokens=False)  # whole cache blocks, so a repeat hits

    async def main():
        upstream = Upstream(embedded_vllm, model=model_dir, request_timeout=300)
        await upstream.start()
        try:
            answers = []
            for stream in (False, True, False, True):  # each twice: a prefix-cache hit changes no token
                payload = {
                    "model": model_dir,
                    "prompt": prompt,
                    "max_tokens": 48,
                    "temperature": 1.0,
                    "seed": 7,
                    "return_token_ids": True,
                    "logprobs": 1,
                    "skip_special_tokens": False,
                }
                if stream:
                    payload |= {"stream": True, "stream_options": STREAM_OPTIONS}
                resp = await upstream.post_upstream("/completions", payload)
                read = upstream.read_stream if stream else upstream.read_json
                answers.append(await read(resp, "/completions"))
            return answers
        finally:
            await upstream.close()

    whole, streamed, whole_again, streamed_again = run(main())
    w, s = whole["choices"][0], streamed["choices"][0]
    print(f"{len(w['token_ids'])} tokens, finish {w['finish_reason']}; whole usage {whole['usage']}")
    assert len(w["token_ids"]) > 8 and s["token_ids"] == w["token_ids"]
    assert s["logprobs"]["token_logprobs"] == w["logprobs"]["token_logprobs"]
    assert (s["finish_reason"], s["text"]) == (w["finish_reason"], w["text"])
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert streamed["usage"][key] == whole["usage"][key]
    # what token mode records of the server's figures: the cached prompt tokens, and the same timings named
    (cached, timing), (cached_whole, timing_whole) = served_figures(streamed_again), served_figures(whole_again)
    assert cached == cached_whole is not None and cached > 0
    assert timing and timing_whole and set(timing) == set(timing_whole)
    assert streamed_again["choices"][0]["token_ids"] == w["token_ids"]


@pytest.mark.vllm
def test_real_vllm_repeats_an_attempt_with_the_same_session_seed(embedded_vllm):
    """Common random numbers for evaluations: the same weights and attempt seed give the same tokens at T = 1."""

    async def main():
        async with vllm_proxy(embedded_vllm) as proxy, aiohttp.ClientSession() as http:
            sampled = []
            for seed in (11, 11, 12):
                session = proxy.open_session(seed=seed)
                await chat(
                    http,
                    session.base_url,
                    {
                        "model": "smollm2-135m",
                        "temperature": 1.0,
                        "top_p": 1.0,
                        "max_tokens": 48,
                        "messages": [{"role": "user", "content": "Write a short poem about the sea."}],
                    },
                )
                sampled.append(proxy.close_session(session.id)[0].sampled_ids)
            return sampled

    first, again, other = run(main())
    print(
        f"sampled {len(first)} tokens; seed 12 shares a prefix of "
        f"{next((i for i, (a, b) in enumerate(zip(first, other)) if a != b), len(other))}"
    )
    assert len(first) > 8 and first == again
    assert other != first


def test_a_restarted_session_keeps_nothing_of_the_discarded_one(tok):
    """An agent run that is started again gets a new, empty session: same meta and seed, the old route closed."""

    async def main():
        async with (
            ScriptedServer([FINAL], tokenizer=tok) as server,
            RecordingProxy(server.url, tokenizer=tok, request_timeout=30) as proxy,
            aiohttp.ClientSession() as http,
        ):
            old = proxy.open_session({"instance_id": "demo"}, seed=7)
            body = {"messages": [{"role": "user", "content": "first try"}]}
            await chat(http, old.base_url, body)
            new = proxy.restart_session(old.id)
            with pytest.raises(APIError) as late:  # a late call of the discarded run
                await chat(http, old.base_url, body)
            await chat(http, new.base_url, {"messages": [{"role": "user", "content": "second try"}]})
            return old, new, late.value, proxy.close_session(new.id)

    old, new, late, turns = run(main())
    assert new.id != old.id and (new.meta, new.seed) == ({"instance_id": "demo"}, 7)
    assert late.status == 410
    assert [t.index for t in turns] == [0] and turns[0].request_messages[0]["content"] == "second try"
