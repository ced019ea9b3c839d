"""What the agent step costs: assembling the runtime bundle, and one scripted 3-turn qwen-code rollout in a task
container through the recording proxy, each next to a reference measured in the same run (copying the finished
bundle; the CLI's bare start, ``node cli.js --version``, in the same container). The rollouts alternate with and
without Node's compile cache of the CLI (``qwen_swe/agent/compile_cache.py``; without: an empty folder mounted over
it), so the cache's saving is measured in the same run.

Run: .venv/bin/python -m benchmarks.bench_agent [--repeat N] [--skip-bundle]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from qwen_swe.agent import qwen as qa
from qwen_swe.agent.bundle import COMPILE_CACHE, build_bundle
from qwen_swe.agent.compile_cache import fill
from qwen_swe.config.settings import load_settings
from qwen_swe.data.prompts import build_prompt
from qwen_swe.paths import AGENT_MOUNT, TASK_PACK, agent_bundle_dir
from qwen_swe.sandbox.docker import DockerSandbox
from qwen_swe.sandbox.docker_host import reap
from qwen_swe.traffic.proxy import RecordingProxy
from tests.scripted_server import ScriptedServer, smollm2_tokenizer
from tests.task_pack import gold_edit
from tests.toolcall_text import hermes_call


def bench_bundle() -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory(dir=agent_bundle_dir().parent) as tmp:
        t0 = time.perf_counter()
        bundle = build_bundle(Path(tmp) / "agent", force=True)
        t_build = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in bundle.root.rglob("*") if p.is_file()) / 1e6
        t0 = time.perf_counter()
        shutil.copytree(bundle.root, Path(tmp) / "copy")
        t_copy = time.perf_counter() - t0
    return t_build, t_copy, size


async def one_rollout(row: dict, run_id: str, hide_cache: str | None) -> dict[str, float]:
    """One scripted rollout; ``hide_cache``: an empty folder mounted over the compile cache (every file compiled)."""
    path, old, new = gold_edit(row["patch"])
    target = f"/testbed/{path}"
    script = [
        hermes_call("read_file", file_path=target),
        hermes_call("edit", file_path=target, old_string=old, new_string=new),
        "Done.",
    ]
    settings = load_settings([], env={}).replace(max_turns=8, agent_timeout=600.0)
    tok = smollm2_tokenizer()
    out: dict[str, float] = {}
    async with (
        ScriptedServer(script, tokenizer=tok) as server,
        RecordingProxy(server.url, model="scripted", tokenizer=tok, mode="tokens") as proxy,
    ):
        session = proxy.open_session()
        mounts = {str(agent_bundle_dir()): AGENT_MOUNT}
        if hide_cache:
            mounts[hide_cache] = f"{AGENT_MOUNT}/{COMPILE_CACHE}"
        t0 = time.perf_counter()
        async with DockerSandbox(row["image"], run_id=run_id, network="host", hide_future=False, mounts=mounts) as box:
            out["boot"] = time.perf_counter() - t0
            ref = await box.exec(
                f"{AGENT_MOUNT}/node/bin/node {AGENT_MOUNT}/qwen-code/package/cli.js --version", timeout=120
            )
            out["cli_start"] = ref.seconds
            t1 = time.perf_counter()
            result = await qa.run_agent(
                box,
                base_url=session.base_url,
                model="smollm2-135m",
                prompt=build_prompt(row),
                agent=settings.agent,
                inference=settings.inference,
                profile="compact",
            )
            patch = await qa.take_diff(box)
            out["rollout"] = time.perf_counter() - t1
            out["agent_process"] = result.seconds
        turns = proxy.close_session(session.id)
    if result.outcome != "completed" or len(turns) != 3 or f"+{new}" not in patch:
        raise SystemExit(
            f"the scripted rollout did not complete as scripted: {result.outcome} {result.log_tail[-500:]}"
        )
    out["proxy_model_seconds"] = sum(t.latency for t in turns)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=2, help="rollouts, each in a fresh container")
    parser.add_argument("--skip-bundle", action="store_true", help="do not time a fresh bundle build (network)")
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in TASK_PACK.read_text().splitlines()] if TASK_PACK.is_file() else []
    row = next((r for r in rows if gold_edit(r.get("patch", ""))), None)
    if row is None:
        sys.exit(f"no usable task in {TASK_PACK}; build the task pack first")
    fill(build_bundle())  # what set-up makes (65_agent_cache.sh)

    flags = " ".join(sys.argv[1:] if argv is None else argv)
    print(f"command: .venv/bin/python -m benchmarks.bench_agent {flags}".rstrip())
    if not args.skip_bundle:
        t_build, t_copy, size = bench_bundle()
        print(
            f"bundle build (npm pack + verify + unpack + check) {t_build:6.1f} s   reference copy of the finished "
            f"bundle {t_copy:6.1f} s   ratio {t_build / t_copy:.2f}x   size {size:.0f} MB"
        )
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    try:
        with tempfile.TemporaryDirectory() as empty:
            for i in range(args.repeat):
                for cached in (True, False):
                    runs[cached].append(asyncio.run(one_rollout(row, f"bench-agent-{i}", None if cached else empty)))
    finally:
        for i in range(args.repeat):
            reap(f"bench-agent-{i}")
    best = min(runs[True], key=lambda r: r["rollout"])
    uncached = min(runs[False], key=lambda r: r["rollout"])
    print(
        f"task {row['instance_id']}, 3 scripted turns (read_file, edit, final text), compact profile, "
        f"best of {args.repeat}"
    )
    print(f"container boot                {best['boot']:6.2f} s")
    print(
        f"run_agent (settings, CLI, sweep, diff) {best['rollout']:6.2f} s   "
        f"agent process {best['agent_process']:6.2f} s"
        f"   of which model calls via proxy {best['proxy_model_seconds']:5.2f} s"
    )
    print(
        f"reference: CLI start (cli.js --version) in the container {best['cli_start']:6.2f} s   "
        f"ratio rollout/CLI start {best['rollout'] / best['cli_start']:.1f}x"
    )
    print(
        f"without the compile cache: run_agent {uncached['rollout']:6.2f} s, agent process "
        f"{uncached['agent_process']:6.2f} s   ratio with/without (agent process) "
        f"{best['agent_process'] / uncached['agent_process']:.2f}x"
    )


if __name__ == "__main__":
    main()
