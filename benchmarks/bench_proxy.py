"""Proxy overhead per model call, 64 concurrent sessions, against calling the same scripted server directly.

Three processes, as in a run: the scripted server (stands in for vLLM), the proxy, and the clients (the
agents). Every session plays the same 4-turn tool-call conversation, streamed with usage, ``rounds`` times.

* forward mode: proxy -> the scripted server's chat endpoint; reference = the clients calling that endpoint
  directly. Overhead = proxy latency - direct latency, at p50 and p99.
* token mode: proxy (render, splice, tokenise, parse) -> the completions endpoint; reference = the clients
  calling the completions endpoint directly with the same token ids the proxy sent, streamed as the proxy asks.

Also printed: the time each call spent inside the proxy (its latency minus the upstream call, as recorded
on the turns) and the proxy process's CPU time per call. ``--upstream-delay`` gives the scripted model a
latency, so the machine is not saturated by the closed loop (with 0, every process fights for the same
cores and the overhead measured is mostly CPU contention).

Run: ``.venv/bin/python -m benchmarks.bench_proxy [--sessions 64] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any

import aiohttp

REPLIES = [
    '<tool_call>\n{"name": "run_shell_command", "arguments": {"command": "ls -la"}}\n</tool_call>',
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "src/calc.py"}}\n</tool_call>',
    '<tool_call>\n{"name": "run_shell_command", "arguments": {"command": "python -m pytest -q tests"}}\n</tool_call>',
    "The bug is in add(): it subtracts. I changed it to return a + b and the tests pass.",
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": n,
            "description": f"{n} tool.",
            "parameters": {"type": "object", "properties": {k: {"type": "string"}}, "required": [k]},
        },
    }
    for n, k in (("run_shell_command", "command"), ("read_file", "path"))
]
TOOL_OUTPUT = "calc.py\ntest_calc.py\n" + "def add(a, b):\n    return a - b\n" * 8


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


async def conversation(http: aiohttp.ClientSession, url: str, n: int, latencies: list[float], think: float) -> None:
    from tests.scripted_server import chat

    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": [{"type": "text", "text": f"Fix task {n}."}]},
    ]
    for _ in range(len(REPLIES)):
        body = {
            "model": "m",
            "messages": messages,
            "tools": TOOLS,
            "tool_choice": "required",
            "max_tokens": 256,
            "temperature": 1.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        t0 = time.perf_counter()
        reply = await chat(http, url, body)
        latencies.append(time.perf_counter() - t0)
        msg = reply["message"]
        if think:  # the agent runs its tools: sessions fall out of lockstep, as real rollouts do
            await asyncio.sleep(random.Random(n * 1000 + len(latencies)).uniform(0, think))
        messages = messages + [{k: v for k, v in msg.items() if k != "reasoning_content"}]
        for call in msg.get("tool_calls") or ():
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": [{"type": "text", "text": TOOL_OUTPUT}]}
            )


async def direct_completions(
    http: aiohttp.ClientSession, url: str, prompts: list[list[int]], latencies: list[float]
) -> None:
    for prompt in prompts:
        body = {
            "model": "m",
            "prompt": prompt,
            "max_tokens": 256,
            "temperature": 1.0,
            "return_token_ids": True,
            "logprobs": 1,
            "skip_special_tokens": False,
            "stream": True,  # as the proxy asks for it: the same bytes on the wire, read to the end
            "stream_options": {"include_usage": True},
        }
        t0 = time.perf_counter()
        async with http.post(f"{url}/v1/completions", json=body) as resp:
            await resp.read()
        latencies.append(time.perf_counter() - t0)


async def drive(
    urls: list[str], rounds: int, *, completions: list[list[list[int]]] | None = None, think: float = 0.0
) -> list[float]:
    latencies: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def one(i: int) -> None:
            for _ in range(rounds):
                if completions is not None:
                    await direct_completions(http, urls[i], completions[i], latencies)
                else:
                    await conversation(http, urls[i], i, latencies, think)

        await asyncio.gather(*(one(i) for i in range(len(urls))))
    return latencies


# --- the proxy in its own process --------------------------------------------------------------------
async def _serve_proxy(upstream: str, mode: str, sessions: int) -> None:
    from qwen_swe.traffic.proxy import RecordingProxy
    from tests.scripted_server import smollm2_tokenizer

    tok = smollm2_tokenizer() if mode == "tokens" else None
    async with RecordingProxy(upstream, model="m", tokenizer=tok, mode=mode, request_timeout=120) as proxy:
        opened = [proxy.open_session() for _ in range(sessions)]
        print(json.dumps({"urls": [s.base_url for s in opened], "cpu": time.process_time()}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        turns = [proxy.close_session(s.id) for s in opened]
        print(
            json.dumps(
                {
                    "prompts": [[t.prompt_ids for t in ts] for ts in turns],
                    "cpu": time.process_time(),
                    "inside": [t.latency - t.upstream_latency for ts in turns for t in ts],
                }
            ),
            flush=True,
        )


class Child:
    """A helper process that prints a line when ready and exits when its stdin closes."""

    def __init__(self, args: list[str]) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
        self.proc = subprocess.Popen(
            [sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.line = self.proc.stdout.readline().strip()
        if not self.line:
            raise RuntimeError(f"{args} did not start (exit {self.proc.poll()})")

    def finish(self) -> str:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        out = self.proc.stdout.readline()
        self.close()
        return out

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def summary(name: str, lat: list[float]) -> dict[str, float]:
    s = {"p50": percentile(lat, 50) * 1000, "p99": percentile(lat, 99) * 1000, "mean": statistics.mean(lat) * 1000}
    print(f"  {name:<34} calls={len(lat):5d}  p50={s['p50']:7.2f} ms  p99={s['p99']:7.2f} ms  mean={s['mean']:7.2f} ms")
    return s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--think", type=float, default=0.0, help="max seconds of tool time between an agent's calls")
    parser.add_argument(
        "--upstream-delay",
        type=float,
        default=0.0,
        help="seconds the scripted model takes per reply; 0 = saturate the CPU",
    )
    parser.add_argument("--serve-proxy", nargs=3, metavar=("UPSTREAM", "MODE", "SESSIONS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_proxy:
        upstream, mode, n = args.serve_proxy
        asyncio.run(_serve_proxy(upstream, mode, int(n)))
        return
    print(f"command: {' '.join([os.path.relpath(sys.executable), '-m', 'benchmarks.bench_proxy', *sys.argv[1:]])}")
    print(
        f"{args.sessions} concurrent sessions x {args.rounds} rounds x {len(REPLIES)} turns, streamed, "
        f"upstream delay {args.upstream_delay:g} s, tool time U(0, {args.think:g}) s; "
        f"cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f}"
    )
    server = Child(
        [
            "-m",
            "tests.scripted_server",
            "--tokenizer",
            "smollm2",
            "--replies",
            json.dumps(REPLIES),
            "--delay",
            str(args.upstream_delay),
        ]
    )
    results, inside, cpu = {}, {}, {}
    try:
        url = server.line
        asyncio.run(drive([f"{url}/v1"] * args.sessions, 1))  # warm-up
        print("forward mode (chat endpoint upstream):")
        direct = summary(
            "direct to scripted server",
            asyncio.run(drive([f"{url}/v1"] * args.sessions, args.rounds, think=args.think)),
        )
        proxy = Child(["-m", "benchmarks.bench_proxy", "--serve-proxy", url, "forward", str(args.sessions)])
        try:
            via = summary(
                "through proxy (forward)",
                asyncio.run(drive(json.loads(proxy.line)["urls"], args.rounds, think=args.think)),
            )
            done = json.loads(proxy.finish())
            inside["forward"] = summary("inside proxy (latency - upstream)", done["inside"])
            cpu["forward"] = (done["cpu"] - json.loads(proxy.line)["cpu"]) / len(done["inside"]) * 1000
        finally:
            proxy.close()
        results["forward"] = (direct, via)
        print("token mode (completions endpoint upstream):")
        proxy = Child(["-m", "benchmarks.bench_proxy", "--serve-proxy", url, "tokens", str(args.sessions)])
        try:
            via = summary(
                "through proxy (tokens)",
                asyncio.run(drive(json.loads(proxy.line)["urls"], args.rounds, think=args.think)),
            )
            done = json.loads(proxy.finish())
            prompts = done["prompts"]
            inside["tokens"] = summary("inside proxy (latency - upstream)", done["inside"])
            cpu["tokens"] = (done["cpu"] - json.loads(proxy.line)["cpu"]) / len(done["inside"]) * 1000
        finally:
            proxy.close()
        direct = summary(
            "direct completions, same ids", asyncio.run(drive([url] * args.sessions, 1, completions=prompts))
        )
        results["tokens"] = (direct, via)
    finally:
        server.close()
    print("overhead of the proxy per call (proxy - direct), targets +2 ms p50 / +10 ms p99:")
    for mode, (d, v) in results.items():
        print(
            f"  {mode:<8} p50 {v['p50'] - d['p50']:+7.2f} ms (x{v['p50'] / d['p50']:.2f})   "
            f"p99 {v['p99'] - d['p99']:+7.2f} ms (x{v['p99'] / d['p99']:.2f})   "
            f"inside the proxy p50 {inside[mode]['p50']:.2f} ms p99 {inside[mode]['p99']:.2f} ms; "
            f"proxy CPU {cpu[mode]:.2f} ms per call"
        )


if __name__ == "__main__":
    main()
