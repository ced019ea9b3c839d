"""What streaming its upstream call costs the proxy (token mode): a completion read as vLLM streams it, one chunk per
token, and rebuilt whole (``Upstream.read_stream``), against the same answer read unstreamed (``read_json``), in the
same run.

A loopback server in its own process answers every call with the same completion of ``--tokens`` tokens and a
prompt of ``--prompt`` ids (an agent turn's sizes), either way, from bytes encoded once: what is measured is the
client's side, its wall time and CPU time per call.

Run: ``.venv/bin/python -m benchmarks.bench_completion_stream [--tokens 512] [--prompt 16000] [--calls 200]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

from aiohttp import web

from benchmarks.bench_proxy import Child, summary
from qwen_swe.traffic.completion_stream import events
from qwen_swe.traffic.upstream import Upstream


def completion(tokens: int, prompt: int) -> dict:
    ids = [(7 * i) % 49000 + 17 for i in range(tokens)]
    return {
        "id": "cmpl-bench",
        "object": "text_completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "text": "".join(f"t{i} " for i in ids),
                "token_ids": ids,
                "prompt_token_ids": list(range(prompt)),
                "logprobs": {
                    "tokens": [f"t{i} " for i in ids],
                    "token_logprobs": [-((i % 97) / 13.0) for i in range(tokens)],
                    "top_logprobs": None,
                    "text_offset": [],
                },
                "finish_reason": "length",
                "stop_reason": None,
            }
        ],
        "usage": {"prompt_tokens": prompt, "completion_tokens": tokens, "total_tokens": prompt + tokens},
    }


async def _serve(tokens: int, prompt: int) -> None:
    answer = completion(tokens, prompt)
    whole = json.dumps(answer).encode()
    streamed = list(events(answer, parts=tokens, include_usage=True))  # one chunk per token, as vLLM sends them

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.Response(body=whole, content_type="application/json")
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for event in streamed:
            await out.write(event)
        await out.write_eof()
        return out

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/completions", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    print(json.dumps({"url": f"http://127.0.0.1:{runner.addresses[0][1]}/v1", "chunks": len(streamed)}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # until the parent is done
    await runner.cleanup()


async def measure(url: str, calls: int, stream: bool) -> tuple[list[float], float, dict]:
    """(wall seconds per call, CPU seconds per call, the last answer) for ``calls`` sequential calls."""
    upstream = Upstream(url, model="m", request_timeout=60)
    await upstream.start()
    payload = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 512, "return_token_ids": True, "logprobs": 1}
    if stream:
        payload |= {"stream": True, "stream_options": {"include_usage": True}}
    read = upstream.read_stream if stream else upstream.read_json
    walls, data = [], {}
    try:
        for _ in range(3):  # warm the connection and the code paths
            data = await read(await upstream.post_upstream("/completions", payload), "/completions")
        cpu0 = time.process_time()
        for _ in range(calls):
            t0 = time.perf_counter()
            data = await read(await upstream.post_upstream("/completions", payload), "/completions")
            walls.append(time.perf_counter() - t0)
        cpu = (time.process_time() - cpu0) / calls
    finally:
        await upstream.close()
    return walls, cpu, data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--prompt", type=int, default=16000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--serve", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(*args.serve))
        return
    print("command: .venv/bin/python -m benchmarks.bench_completion_stream " + " ".join(sys.argv[1:]))
    server = Child(["-m", "benchmarks.bench_completion_stream", "--serve", str(args.tokens), str(args.prompt)])
    try:
        ready = json.loads(server.line)
        print(
            f"{args.calls} sequential calls, {args.tokens} sampled tokens, a prompt of {args.prompt} ids; "
            f"streamed as {ready['chunks']} events"
        )
        whole_wall, whole_cpu, whole = asyncio.run(measure(ready["url"], args.calls, stream=False))
        stream_wall, stream_cpu, streamed = asyncio.run(measure(ready["url"], args.calls, stream=True))
    finally:
        server.close()
    w, s = whole["choices"][0], streamed["choices"][0]
    same = (s["token_ids"], s["logprobs"]["token_logprobs"]) == (w["token_ids"], w["logprobs"]["token_logprobs"])
    print(f"the streamed answer rebuilt equals the whole one: {same}")
    a = summary("whole (read_json)", whole_wall)
    b = summary("streamed (read_stream)", stream_wall)
    print(
        f"  CPU per call: whole {whole_cpu * 1000:.2f} ms, streamed {stream_cpu * 1000:.2f} ms "
        f"({(stream_cpu - whole_cpu) / args.tokens * 1e6:+.1f} us per token)"
    )
    print(
        f"ratio streamed/whole: wall p50 {b['p50'] / a['p50']:.2f}x, mean "
        f"{statistics.mean(stream_wall) / statistics.mean(whole_wall):.2f}x; CPU {stream_cpu / whole_cpu:.2f}x"
    )


if __name__ == "__main__":
    main()
