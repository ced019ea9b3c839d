"""The rollout engine's per-sample path on a second sandbox backend (tests/local_sandbox.py: local subprocesses in a
private root), so it runs without Docker and shows the engine needs only ``qwen_swe.sandbox.base``: the rollout
machine at the base commit with its mounts, the agent's edit taken as a diff, graded in a fresh machine, the reward
and record stamped; a machine that cannot start drops the sample with its reason. The agent and the model are
stand-ins here (a scripted edit, one recorded turn); with qwen-code, the proxy and containers it runs in
tests/integration and tests/e2e."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from qwen_swe.agent.qwen import AgentResult
from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import Sample, Status, run_of
from qwen_swe.data.taskpack.repo import make_repo
from qwen_swe.errors import SandboxError
from qwen_swe.paths import AGENT_MOUNT, TESTBED
from qwen_swe.rollout.engine import RolloutEngine
from qwen_swe.rollout.progress import BatchStats
from qwen_swe.sandbox.base import Sandbox, SandboxRequest
from qwen_swe.sandbox.settings import parse_size
from qwen_swe.traffic.endpoint import SOCKET_DIR_IN_CONTAINER
from qwen_swe.traffic.sessions import Session
from qwen_swe.traffic.trajectory import Turn
from tests.local_sandbox import LocalSandboxes, namespaces_missing
from tests.task_pack import pack_task


def _testbed(instance: Mapping[str, Any], folder: Path) -> None:
    make_repo(str(instance["repo"]).split("/", 1)[1], folder)


class OneTurnProxy:
    """The recording proxy's session side: each session holds one successful model turn, as if the agent had
    called the model once; the endpoint is a plain folder."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.sessions = folder, {}

    def open_session(self, meta: dict[str, Any], seed: int | None = None) -> Session:
        sid = uuid.uuid4().hex
        turn = Turn(
            index=0,
            session_id=sid,
            request_messages=[{"role": "user", "content": "fix it"}],
            message={"role": "assistant", "content": "done"},
            prompt_ids=[1, 2, 3],
            sampled_ids=[4, 5],
            logprobs=[-0.5, -0.25],
            finish_reason="stop",
        )
        self.sessions[sid] = Session(id=sid, base_url="", meta=meta, turns=[turn], seed=seed)
        return self.sessions[sid]

    timed = False  # True: the turn is stamped as a call that ended just before the session closed

    def close_session(self, sid: str) -> list[Turn]:
        turns = self.sessions.pop(sid).turns
        if self.timed:
            turns[0].started_mono, turns[0].latency = time.monotonic() - 0.05, 0.02
        return turns

    @asynccontextmanager
    async def endpoint(self, sid: str) -> AsyncIterator[SimpleNamespace]:
        yield SimpleNamespace(folder=self.folder, socket_in_container=f"{SOCKET_DIR_IN_CONTAINER}/model.sock")


class ScriptedAgentEngine(RolloutEngine):
    """The engine with its agent run replaced by ``act`` (what the agent does in the machine)."""

    def __init__(
        self, settings: Settings, sandboxes: LocalSandboxes, act: Callable[[Sandbox], Any], folder: Path
    ) -> None:
        super().__init__(settings, upstream="http://127.0.0.1:9/v1", model="m", sandboxes=sandboxes)
        self.proxy, self.act, self.seen = OneTurnProxy(folder), act, {}

    async def _run_agent(self, sandbox: Sandbox, model_socket: str, prompt: str, fresh_session: Any) -> AgentResult:
        started = time.monotonic()
        self.seen = {"socket": model_socket, "prompt": prompt, **await self.act(sandbox)}
        return AgentResult(
            outcome="completed",
            final_message="done",
            exit_code=0,
            seconds=0.1,
            tool_calls=1,
            log_tail="",
            exec_started=started,
            exec_ended=time.monotonic(),
        )


@pytest.fixture(scope="module")
def task() -> dict:
    if (reason := namespaces_missing()) is not None:
        pytest.skip(reason)
    return pack_task()


def _run(
    task: dict,
    act: Callable[[Sandbox], Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    testbed: Callable[[Mapping[str, Any], Path], None] = _testbed,
) -> tuple[Sample, ScriptedAgentEngine, list[SandboxRequest]]:
    monkeypatch.setenv("QWEN_SWE_HOME", str(tmp_path / "home"))
    bundle = tmp_path / "home" / "agent"
    bundle.mkdir(parents=True)
    (bundle / "VERSION").write_text("bundle 1\n")
    made: list[SandboxRequest] = []
    settings = Settings.build(output_dir=tmp_path / "run", eval_timeout=120.0)
    engine = ScriptedAgentEngine(settings, LocalSandboxes(testbed, made), act, tmp_path / "socket")
    (tmp_path / "socket").mkdir()
    sample = Sample(index=0, group_index=0, prompt="fix the bug", metadata=dict(task))
    return asyncio.run(engine.run_sample(sample, BatchStats())), engine, made


def test_the_gold_edit_is_taken_as_a_diff_and_graded_in_a_fresh_machine(task, tmp_path, monkeypatch):
    async def apply_gold(box: Sandbox) -> dict[str, Any]:
        await box.write_file("/tmp/gold.diff", task["patch"])
        applied = await box.exec("git apply /tmp/gold.diff", timeout=60)
        bundle = await box.exec(f"cat {AGENT_MOUNT}/VERSION; touch {AGENT_MOUNT}/x", timeout=60)
        return {"applied": applied.exit_code, "bundle": bundle.output, "pwd": (await box.exec("pwd", 60)).output}

    sample, engine, made = _run(task, apply_gold, tmp_path, monkeypatch)
    run = run_of(sample)
    assert engine.seen["applied"] == 0 and engine.seen["pwd"].strip() == TESTBED
    assert "bundle 1" in engine.seen["bundle"] and "Read-only" in engine.seen["bundle"]  # mounted, read-only
    assert (sample.status, sample.reward, run.resolved, run.outcome) == (Status.COMPLETED, 1.0, True, "completed")
    assert run.patch and run.patch.strip() == task["patch"].strip() and run.weight_version == 0
    assert (sample.tokens, sample.loss_mask, sample.rollout_log_probs) == ([1, 2, 3, 4, 5], [1, 1], [-0.5, -0.25])
    rollout, grade = made
    assert (rollout.role, rollout.base_commit, rollout.hide_future) == ("rollout", task["base_commit"], True)
    assert rollout.mounts == {
        str(tmp_path / "home" / "agent"): AGENT_MOUNT,
        str(tmp_path / "socket"): SOCKET_DIR_IN_CONTAINER,
    }
    assert rollout.disk_limit == parse_size("10g") and rollout.run_id == engine.settings.label
    assert (grade.role, grade.mounts, grade.disk_limit) == ("grade", {}, 0)
    assert json.loads(next((tmp_path / "run" / "grades").rglob("grade.json")).read_text())["reward"] == 1.0
    # where its time went: the machine's boot, the agent, the diff, the machine's removal, the grade, in that order,
    # one after another, within the attempt's wall time (the stand-in agent makes no model call: no model span)
    timeline = run.timeline
    assert timeline is not None
    spans = timeline["spans"]
    kinds = [s["kind"] for s in spans]
    assert kinds == ["boot", "agent_setup", "agent_start", "agent_exit", "agent_cleanup", "diff", "teardown", "grade"]
    assert all(a["end"] <= b["start"] + 1e-3 for a, b in zip(spans, spans[1:])), spans
    assert spans[0]["start"] >= 0.0 and spans[-1]["end"] <= timeline["seconds"] + 1e-3
    assert spans[-1]["end"] - spans[-1]["start"] > 0.0  # the grade ran commands in a fresh machine


def test_no_edit_scores_minus_one_without_a_grading_machine(task, tmp_path, monkeypatch):
    async def idle(box: Sandbox) -> dict[str, Any]:
        return {}

    sample, _, made = _run(task, idle, tmp_path, monkeypatch)
    assert (sample.status, sample.reward, run_of(sample).patch) == (Status.COMPLETED, -1.0, "")
    assert [r.role for r in made] == ["rollout"]


def test_a_machine_that_cannot_start_drops_the_sample_with_its_reason(task, tmp_path, monkeypatch):
    async def never(box: Sandbox) -> dict[str, Any]:
        raise AssertionError("the agent must not run without a machine")

    def no_image(instance: Mapping[str, Any], folder: Path) -> None:
        raise SandboxError(f"no image for {instance['instance_id']}")

    sample, _, made = _run(task, never, tmp_path, monkeypatch, testbed=no_image)
    run = run_of(sample)
    assert (sample.status, sample.reward, run.drop_reason) == (Status.ABORTED, 0.0, "sandbox")
    assert run.drop_detail == f"no image for {task['instance_id']}" and [r.role for r in made] == ["rollout"]
    assert run.timeline is not None and run.timeline["spans"] == []  # it reached no span, and says how long it took
    assert run.timeline["seconds"] > 0.0


def test_an_attempt_broken_off_in_the_agent_keeps_its_boot_and_model_call_spans(task, tmp_path, monkeypatch):
    async def dies(box: Sandbox) -> dict[str, Any]:
        await asyncio.sleep(0.2)  # the agent ran past the double's model call (stamped 0.05 s before the close)
        raise SandboxError("the machine died mid-run")

    monkeypatch.setattr(OneTurnProxy, "timed", True)
    sample, _, _ = _run(task, dies, tmp_path, monkeypatch)
    run = run_of(sample)
    assert (sample.status, run.drop_reason) == (Status.ABORTED, "sandbox")
    assert run.timeline is not None
    spans = run.timeline["spans"]
    assert [s["kind"] for s in spans] == ["boot", "model"]  # no diff, no grade: it never got there
    assert spans[1]["attrs"]["generated_tokens"] == 2 and spans[1]["start"] >= spans[0]["end"] - 1e-3
