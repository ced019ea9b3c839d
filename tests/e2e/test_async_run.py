"""Off-policy rollouts (MAX_STALENESS=1) on the embedded default: local tasks in Docker, real qwen-code, vLLM CPU,
FSDP2 on CPU, 3 steps, stopped by SIGTERM right after step 1's checkpoint (step 2's batch is then in flight). The
policy is the tiny model of SmolLM2's architecture and tokenizer (``tests/tiny_model.py``): its random weights
resolve nothing (a run measured: 12 one-turn attempts, all -1), so every step skips its update and the weight version
stays 0. The trainer's async run (``test_trainer_fsdp.py``: the same stop with a batch in flight, then a resume) and
the partial-rollout run (``test_partial_run.py``) check versions across real updates; this test, the whole run's stop
and resume.

The rerun with the same OUTPUT_DIR must serve exactly the groups not trained on (the batch that was in flight,
then the next), every sample must record the weight version it was sampled with, and no container may be left.
"""

from __future__ import annotations

import json
import signal
import time

import docker
import pytest

from qwen_swe.config.settings import Settings
from qwen_swe.data.source import SWEBenchDataSource
from qwen_swe.sandbox.docker_host import containers_of
from tests.run_stops import run_to_end, start_run, stop
from tests.tiny_model import tiny_smollm2_dir
from tests.warm_start import small_run_env

# two runs of the whole loop (stopped, then resumed): 45 minutes, as the other whole-run tests; the default 15 ran out
# on an AVX2-only CPU (CI: killed in its resumed run)
pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.vllm, pytest.mark.agent, pytest.mark.timeout(2700)]
RUN_ID = "qwen-swe-e2e-async"
STEPS = 3


def _env(out) -> dict[str, str]:
    return small_run_env(out, RUN_ID, STEPS, MAX_STALENESS="1", STOP_TIMEOUT="20", MODEL=str(tiny_smollm2_dir()))


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _dumped(out) -> dict[str, list[dict]]:
    folder = out / "rollouts"
    return {p.name: _jsonl(p) for p in sorted(folder.iterdir())} if folder.is_dir() else {}


def _stop_after_first_checkpoint(out) -> int:
    log = (out / "run1.log").open("w")
    proc = start_run(_env(out), log)
    deadline = time.monotonic() + 1500
    try:
        while not (out / "checkpoints" / "step_000001" / "complete").exists():
            assert proc.poll() is None, f"the run ended early:\n{(out / 'run1.log').read_text()[-4000:]}"
            assert time.monotonic() < deadline, "no checkpoint within 25 minutes"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=120)
    finally:
        stop(proc)
        log.close()


def test_off_policy_run_records_versions_and_resumes_exactly_after_sigterm(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    assert _stop_after_first_checkpoint(out) == 128 + signal.SIGTERM
    assert not (out / "checkpoints" / "step_000002").exists(), "stopped too late to leave a batch in flight"
    before = {name: len(rows) for name, rows in _dumped(out).items()}

    proc = run_to_end(_env(out), out / "run2.log", timeout=2700)
    assert proc.returncode == 0, f"the resumed run failed:\n{proc.stdout[-8000:]}"
    assert "resuming from" in proc.stdout

    settings = Settings.from_json(out / "settings.json")  # what the run used: the small warm start's sizes
    ds = SWEBenchDataSource.from_settings(settings)
    expected = [
        sorted(x.metadata["instance_id"] for g in ds.get_samples(settings.rollout_batch_size) for x in g)
        for _ in range(STEPS)
    ]
    dumps = _dumped(out)
    assert sorted(r["instance_id"] for r in dumps["step_000000.jsonl"][: before["step_000000.jsonl"]]) == expected[0]
    # the resumed run: step 1's batch (in flight at the stop, never trained on) served again, then step 2's
    served = {name: sorted(r["instance_id"] for r in rows[before.get(name, 0) :]) for name, rows in dumps.items()}
    assert served == {"step_000000.jsonl": [], "step_000001.jsonl": expected[1], "step_000002.jsonl": expected[2]}

    metrics = _jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1, 2]
    for m in metrics:
        assert m["async/staleness_max"] <= 1 and m.get("dropped/stale", 0) == 0, m
    assert "time/overlap" in metrics[2]
    for rows in dumps.values():
        for r in rows:
            if r["status"] == "aborted":
                continue
            assert isinstance(r["weight_version"], int) and r["weight_versions"], r
            assert min(int(v) for v in r["weight_versions"]) == r["weight_version"]  # the oldest it was sampled with
    left = containers_of(docker.from_env(), RUN_ID)
    assert left == []
