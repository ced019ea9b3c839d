"""PARTIAL_ROLLOUTS=true MAX_STALENESS=1 end to end: the real trainer (FSDP2 on CPU), driver, proxy, Docker sandbox,
qwen-code and grader on the embedded default's tasks, 2 steps of 2 groups of 2, the scripted model choosing the
actions (``tests/partial_run.py``). The trainer updates the tiny model of SmolLM2's architecture and tokenizer
(``tests/tiny_model.py``): a step of seconds, where SmolLM2 in fp32 on 2 cores takes minutes to train what the test
needs of no particular weights.

The first group drawn is a straggler: its second model call is generated only once the server serves version 1.
Step 0 must train on two other groups without waiting for it, the sync must freeze its call instead of draining it,
and step 1 must train it: carried over the sync, each of its samples recording both versions its tokens came from.
"""

from __future__ import annotations

import docker
import pytest

from qwen_swe.data.source import SWEBenchDataSource
from qwen_swe.sandbox.docker_host import containers_of
from tests.partial_run import PlanScript, fixable_rows, jsonl, run_settings, run_trainer
from tests.scripted_vllm import VLLMThread
from tests.tiny_model import tiny_smollm2_dir

# the run's own limit (run_trainer: 30 min) bounds it, not the default 15 min
pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.agent, pytest.mark.timeout(2100)]
RUN_ID = "qwen-swe-e2e-partial"


def test_a_straggler_group_is_carried_over_a_sync_and_trained_a_step_later(tmp_path):
    first: dict[str, str] = {}
    script = PlanScript(
        fixable_rows(),
        seed=0,
        seconds=lambda rng, iid, version: 2.0,
        hold=lambda iid, version: 1 if iid == first["straggler"] and version == 0 else 0,
    )
    with VLLMThread(script) as vllm:
        script.version = lambda: vllm.server.version
        settings = run_settings(
            tmp_path / "run",
            vllm.url,
            run_id=RUN_ID,
            model=str(tiny_smollm2_dir()),
            num_rollouts=2,
            rollout_batch_size=2,
            n_samples=2,
            max_staleness=1,
            partial_rollouts=True,
            rollout_concurrency=8,
            agent_timeout=900.0,  # the straggler waits for step 0's training and sync
            save_interval=2,
        )
        first["straggler"] = SWEBenchDataSource.from_settings(settings).get_samples(1)[0][0].metadata["instance_id"]
        proc = run_trainer(settings, timeout=1800)
        syncs = list(vllm.server.syncs)
    out = settings.output_dir
    assert proc.returncode == 0, proc.stdout[-8000:]

    metrics = jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1]
    assert not metrics[0]["skipped_update"], "step 0 made no update, so nothing was synced"
    assert syncs[0]["mode"] == "keep" and syncs[0]["in_flight"] >= 1, syncs  # frozen, not drained
    step0 = {r["instance_id"] for r in jsonl(out / "rollouts" / "step_000000.jsonl")}
    assert first["straggler"] not in step0  # step 0 did not wait for it
    straggler = [r for r in jsonl(out / "rollouts" / "step_000001.jsonl") if r["instance_id"] == first["straggler"]]
    assert len(straggler) == 2, "the straggler was not trained in step 1"
    for r in straggler:
        assert r["status"] in ("completed", "truncated") and r["weight_version"] == 0, r
        assert r["weight_versions"] == ["0", "1"], r  # its held call spanned the sync
    assert metrics[1]["async/carried_groups"] >= 1 and metrics[1]["async/spanning_samples"] >= 2
    assert metrics[1]["async/staleness_max"] == 1 and metrics[1].get("dropped/stale", 0) == 0
    assert {r["reward"] for r in straggler} == {1.0, -1.0}, straggler  # one fixed it, one did not: it trained
    left = containers_of(docker.from_env(), RUN_ID)
    assert left == []
