"""PARTIAL_ROLLOUTS' streaming pool through the real driver and the real data source over the task pack, with a
stand-in engine whose groups end only when the test releases them: a step takes the first complete groups (oldest
first) and the others carry over a sync, a group too old is written off, cancelled and dropped as stale, a lost group
is replaced, a step without an update does not starve the pool, OVER_SAMPLING lets the last step take the first
groups to complete, and a checkpoint serves again exactly the groups not trained on. And the real engine's batch
runner, cancelled, removes its samples' machines without dropping or scoring them."""

from __future__ import annotations

import asyncio
import copy
import json
import time
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from qwen_swe.agent.qwen import AgentResult
from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import Sample, Status, drop, stamp
from qwen_swe.data.source import SWEBenchDataSource
from qwen_swe.errors import DataError, DropReason
from qwen_swe.paths import TASK_PACK
from qwen_swe.rollout.contract import WeightUpdate
from qwen_swe.rollout.driver import RolloutDriver
from qwen_swe.rollout.engine import RolloutEngine, run_batch
from qwen_swe.rollout.progress import BatchStats
from qwen_swe.sandbox.base import ExecResult, Sandbox, SandboxRequest
from qwen_swe.traffic.sessions import Session
from qwen_swe.train.offpolicy import drop_stale
from qwen_swe.train.trainer import Rollouts
from tests.driver_stand_in import driver_around


class GatedEngine:
    """Each group ends when the test releases its group index (``lose`` ends it with a dropped sample); a sample
    records the version it started on and every version synced while it ran."""

    def __init__(self) -> None:
        self.weight_version = 0
        self.gates: dict[int, asyncio.Event] = {}
        self.lose: set[int] = set()
        self.refill: set[int] = set()  # groups whose first sample is dropped and refilled (DROPPED_POLICY=replace)
        self.running: dict[int, set[int]] = {}  # group index -> versions seen while running
        self.ended: set[int] = set()
        self.cancelled: set[int] = set()

    def set_weight_version(self, version: int) -> None:
        self.weight_version = version

    def begin_sync(self, version: int) -> None:
        for seen in self.running.values():
            seen.add(version)

    def gate(self, group_index: int) -> asyncio.Event:
        return self.gates.setdefault(group_index, asyncio.Event())

    async def run_groups(self, groups, stats):
        (group,) = groups
        gi = group[0].group_index
        seen = self.running.setdefault(gi, {self.weight_version})
        for x in group:
            stamp(x, weight_version=self.weight_version)
        try:
            await self.gate(gi).wait()
        except asyncio.CancelledError:
            self.cancelled.add(gi)
            raise
        del self.running[gi]
        self.ended.add(gi)
        if gi in self.lose:
            drop(group[0], DropReason.AGENT_ERROR, "scripted loss")
            return []
        if gi in self.refill:  # as run_batch does: the group it returns holds a fresh copy of the dropped sample
            group = [copy.deepcopy(group[0]), *group[1:]]
            drop(groups[0][0], DropReason.AGENT_ERROR, "scripted loss, refilled")
        for x in group:
            x.status, x.reward = Status.COMPLETED, float(x.index % 2) * 2 - 1
            x.tokens, x.response_length, x.loss_mask, x.rollout_log_probs = [1, 2, 3, 4], 2, [1, 1], [-0.5, -0.5]
            x.weight_versions = [str(v) for v in sorted(seen)]
        return [group]

    async def stop(self) -> None:
        pass


class NoSync:
    def push(self, payload, version: int) -> dict:
        return {}


def _settings(tmp_path: Path, steps: int = 4, **extra) -> Settings:
    return Settings.build(
        vllm_url="http://127.0.0.1:9",
        dataset=str(TASK_PACK),
        output_dir=tmp_path,
        rollout_batch_size=2,
        n_samples=2,
        max_staleness=1,
        partial_rollouts=True,
        num_rollouts=steps,
        **extra,
    )


def make_driver(settings: Settings) -> RolloutDriver:
    """The real driver, in pool mode, around the gated stand-in engine."""
    driver = driver_around(settings, GatedEngine)
    driver.weight_sync = NoSync()  # type: ignore[assignment]
    driver.start_pool()
    return driver


def release(driver: RolloutDriver, *group_indices: int, wait: bool = True) -> None:
    for gi in group_indices:
        driver._loop.call_soon_threadsafe(lambda gi=gi: driver.engine.gate(gi).set())
    deadline = time.monotonic() + 10
    while wait and not driver._on_loop(lambda: set(group_indices) <= driver.engine.ended):
        assert time.monotonic() < deadline, f"groups {group_indices} did not end"
        time.sleep(0.01)


def sync(driver: RolloutDriver, version: int, tmp_path: Path) -> None:
    driver.sync_weights(WeightUpdate(version, folder=tmp_path))


def groups_of(samples) -> list[int]:
    return sorted({x.group_index for x in samples})


def reference_groups(settings: Settings, n: int) -> list[tuple[int, str]]:
    ds = SWEBenchDataSource.from_settings(settings)
    return [(g[0].group_index, g[0].metadata["instance_id"]) for g in ds.get_samples(n)]


@pytest.fixture
def driver(tmp_path):
    d = make_driver(_settings(tmp_path))
    yield d
    d.close()


def in_pool(driver: RolloutDriver) -> list[int]:
    return driver._on_loop(lambda: [g[0].group_index for g in driver._pool.untrained()])


def test_a_step_takes_the_first_complete_groups_and_a_straggler_carries_over_the_sync(driver, tmp_path):
    driver.submit(0, 0)
    assert in_pool(driver) == [0, 1, 2, 3]  # (1 + MAX_STALENESS) x ROLLOUT_BATCH_SIZE groups
    release(driver, 2, 1)
    samples, m = driver.collect(0)
    assert groups_of(samples) == [1, 2] and m["async/carried_groups"] == 0
    assert in_pool(driver) == [0, 3]  # still generating; no new group before the sync (no credit)
    driver.submit(1, 0)
    sync(driver, 1, tmp_path)
    assert in_pool(driver) == [0, 3, 4, 5]  # a step's worth started on the new weights
    release(driver, 4)
    release(driver, 0)  # the straggler ends after a group drawn later: still taken first, it is older
    samples, m = driver.collect(1)
    assert groups_of(samples) == [0, 4]
    assert m["async/carried_groups"] == 1 and m["async/spanning_samples"] == 2
    straggler = [x for x in samples if x.group_index == 0]
    assert all(x.metadata["weight_version"] == 0 and x.weight_versions == ["0", "1"] for x in straggler)
    kept, lag = drop_stale(samples, version=1, max_staleness=1)
    assert len(kept) == 4 and lag["async/staleness_1"] == 2  # the carried group is trained, one version behind
    rows = (tmp_path / "rollouts" / "step_000001.jsonl").read_text()
    assert rows.count('"weight_versions": ["0", "1"]') == 2


def test_a_group_too_old_to_train_is_written_off_replaced_and_dropped_as_stale(driver, tmp_path):
    driver.submit(0, 0)
    release(driver, 1, 2)
    driver.collect(0)
    driver.submit(1, 0)
    sync(driver, 1, tmp_path)
    release(driver, 0, 4)
    driver.collect(1)  # 3 (version 0) is still running
    driver.submit(2, 1)
    sync(driver, 2, tmp_path)
    assert in_pool(driver) == [3, 5, 6, 7]
    release(driver, 3)  # ends now, 2 versions behind: it cannot be trained
    release(driver, 5, 6)
    samples, m = driver.collect(2)
    assert groups_of(samples) == [3, 5, 6] and m["async/stale_groups"] == 1
    kept, lag = drop_stale(samples, version=2, max_staleness=1)
    assert groups_of(kept) == [5, 6] and lag["dropped/stale"] == 2
    assert all(x.metadata["drop_reason"] == DropReason.STALE.value for x in samples if x.group_index == 3)


def written_off_ended(driver: RolloutDriver) -> None:
    """Wait until every written-off group's cancelled task has ended (the engine's clean-up on the way out)."""
    deadline = time.monotonic() + 10
    while not driver._on_loop(lambda: all(e.done is not None for e in driver._pool.groups if e.written_off)):
        assert time.monotonic() < deadline, "a written-off group's task did not end"
        time.sleep(0.01)


def test_a_straggler_still_running_past_the_bound_is_cancelled_and_gives_its_place_to_a_fresh_group(driver, tmp_path):
    driver.submit(0, 0)
    release(driver, 1, 2)
    driver.collect(0)
    driver.submit(1, 0)
    sync(driver, 1, tmp_path)
    release(driver, 3, 4)
    driver.collect(1)
    driver.submit(2, 1)
    sync(driver, 2, tmp_path)
    assert in_pool(driver) == [0, 5, 6, 7]  # 0 began on version 0: too old at 2, still running
    release(driver, 5, 7)
    samples, m = driver.collect(2)
    assert groups_of(samples) == [5, 7] and m["async/pool_written_off"] == 1  # its cancel is still under way
    assert in_pool(driver) == [6, 8]  # its credit went to group 8; it is no longer among the untrained
    assert [p["group_index"] for p in driver.state_dict()["pending"]] == [6, 8]  # a resumed run does not draw it
    written_off_ended(driver)
    assert driver._on_loop(lambda: (driver.engine.cancelled, driver.engine.ended)) == ({0}, {1, 2, 3, 4, 5, 7})

    driver.submit(3, 2)
    sync(driver, 3, tmp_path)
    release(driver, 6, 8)
    samples, m = driver.collect(3)  # the cancelled group comes back with this step's samples, dropped as stale
    assert groups_of(samples) == [0, 6, 8]
    assert m["async/stale_groups"] == 1 and m["async/written_off_groups"] == 1 and m["async/pool_written_off"] == 0
    assert m["rollout/dropped_samples"] == 0  # not the infrastructure's drop: drop_stale counts it
    straggler = [x for x in samples if x.group_index == 0]
    assert all(x.status == Status.ABORTED and x.reward == 0.0 for x in straggler)
    assert all("written off at weight version 2" in x.metadata["drop_detail"] for x in straggler)
    rows = [json.loads(r) for r in (tmp_path / "rollouts" / "step_000003.jsonl").read_text().splitlines()]
    assert sorted(r["drop_reason"] for r in rows if r["group_index"] == 0) == ["stale", "stale"]
    kept, lag = drop_stale(samples, version=3, max_staleness=1)
    assert groups_of(kept) == [6, 8] and lag["dropped/stale"] == 2


def test_a_lost_group_is_replaced_and_reported(driver):
    driver.submit(0, 0)
    driver._on_loop(lambda: driver.engine.lose.add(1))
    release(driver, 1, 2)
    release(driver, 4, wait=False)  # the replacement, drawn once the loss is seen
    samples, m = driver.collect(0)
    assert groups_of(samples) == [2, 4] and m["dropped/agent_error"] == 1
    assert in_pool(driver) == [0, 3]


def test_a_refilled_group_is_trained_with_its_refill_not_the_dropped_sample(driver):
    driver.submit(0, 0)
    driver._on_loop(lambda: driver.engine.refill.add(1))
    release(driver, 1, 2)
    samples, _ = driver.collect(0)
    assert groups_of(samples) == [1, 2] and len(samples) == 4
    assert all(x.status == Status.COMPLETED for x in samples)


def test_a_step_without_an_update_lets_the_next_step_start_fresh_groups(driver):
    driver.submit(0, 0)
    release(driver, 1, 2)
    driver.collect(0)
    driver.submit(1, 0)  # no sync: the step skipped its update
    release(driver, 4, 5, wait=False)
    samples, _ = driver.collect(1)
    assert groups_of(samples) == [4, 5] and in_pool(driver) == [0, 3]


def test_the_pool_draws_no_more_than_the_steps_left_can_train(tmp_path):
    d = make_driver(_settings(tmp_path, steps=1))
    try:
        d.submit(0, 0)
        assert in_pool(d) == [0, 1]
    finally:
        d.close()


def test_over_sampling_lets_the_last_step_take_the_first_groups_to_complete(tmp_path):
    d = make_driver(_settings(tmp_path, steps=1, over_sampling=1))
    try:
        d.submit(0, 0)
        assert in_pool(d) == [0, 1, 2]  # one group beyond the last step's two
        release(d, 0, 2)
        samples, _ = d.collect(0)  # 1 is the straggler: not waited for
        assert groups_of(samples) == [0, 2] and in_pool(d) == [1]  # none drawn after the last step; close cancels 1
    finally:
        d.close()
    assert d.engine.cancelled == {1}


def test_over_sampling_stays_within_the_staleness_credit(tmp_path):
    d = make_driver(_settings(tmp_path, steps=2, over_sampling=10))
    try:
        d.submit(0, 0)
        assert in_pool(d) == [0, 1, 2, 3]  # (1 + MAX_STALENESS) x ROLLOUT_BATCH_SIZE, not 2 x 2 + 10
    finally:
        d.close()


def test_a_checkpoint_serves_again_exactly_the_groups_not_trained_on(driver, tmp_path):
    settings = driver.settings
    order = reference_groups(settings, 8)
    driver.submit(0, 0)
    release(driver, 1, 2)
    trained, _ = driver.collect(0)
    release(driver, 3)  # complete, waiting for a step: not trained either
    state = driver.state_dict()
    assert [p["group_index"] for p in state["pending"]] == [0, 3]

    resumed = make_driver(settings)
    try:
        resumed.load_state_dict(state)
        sync(resumed, 1, tmp_path)  # the resumed weights go to the server first: no step's credit
        resumed.submit(1, 1)
        assert in_pool(resumed) == [0, 3, 4, 5]  # the untrained groups first, as drawn, then new ones
        again = resumed._on_loop(resumed._pool.untrained)
        assert [(g[0].group_index, g[0].metadata["instance_id"]) for g in again] == [order[i] for i in (0, 3, 4, 5)]
        assert [x.index for x in again[0]] == [0, 1] and all(x.status == Status.PENDING for x in again[0])
        served = {x.group_index for x in trained} | {g[0].group_index for g in again}
        assert sorted(served) == list(range(6))  # every group once: none lost, none trained twice
        state2 = resumed.state_dict()  # a second checkpoint before anything ends keeps the same promise
        assert [p["group_index"] for p in state2["pending"]] == [0, 3, 4, 5]
    finally:
        resumed.close()


def test_a_checkpoint_before_the_groups_are_drawn_again_keeps_them(tmp_path):
    settings = _settings(tmp_path)
    first = make_driver(settings)
    try:
        first.submit(0, 0)
        state = first.state_dict()
    finally:
        first.close()
    second = make_driver(settings)
    try:
        second.load_state_dict(state)
        assert second.state_dict() == state  # loaded, not yet drawn: a checkpoint now says the same
    finally:
        second.close()


def test_the_trainers_pipeline_trains_the_straggler_a_step_later(tmp_path):
    """What the trainer's rank 0 runs (``Rollouts``: ``Prefetch``, ``drop_stale``, ``prepare_batch``) over the pool."""
    settings = _settings(tmp_path, steps=3)
    d = make_driver(settings)
    try:
        release(d, *range(1, 12), wait=False)  # every group but the first ends as soon as it starts
        rollouts = Rollouts(settings, d, first_step=0)
        items, m0 = rollouts.batch(0, 0)
        assert len(items) == 4 and m0["async/staleness_max"] == 0
        sync(d, 1, tmp_path)
        release(d, 0)
        items, m1 = rollouts.batch(1, 1)
        assert len(items) == 4 and m1["async/carried_groups"] == 2 and m1["async/staleness_1"] == 4
        assert m1["async/spanning_samples"] == 2  # the straggler's, which ran across the sync
        sync(d, 2, tmp_path)
        items, m2 = rollouts.batch(2, 2)
        assert len(items) == 4 and m2["async/staleness_max"] == 1 and m2["dropped/stale"] == 0
        assert sorted(d._on_loop(lambda: d.engine.ended)) == list(range(6))  # nothing drawn past the last step
    finally:
        d.close()


class BatchEngine(GatedEngine):
    """Groups run through the engine's own batch runner, each sample a rollout that never ends."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.rollout, self.cancelled = settings.rollout, 0

    async def run_groups(self, groups, stats):
        return await run_batch(self._samples, groups, stats, self.rollout)

    async def _samples(self, samples) -> None:
        try:
            await asyncio.Event().wait()  # a rollout that never ends
        except asyncio.CancelledError:
            self.cancelled += len(samples)
            raise


def test_closing_cancels_every_rollout_still_running(tmp_path):
    settings = _settings(tmp_path)
    d = make_driver(settings)
    d.engine = d._on_loop(lambda: BatchEngine(settings))
    d.submit(0, 0)
    time.sleep(0.2)
    d.close()
    assert d.engine.cancelled == 8  # the pool's 4 groups of 2: their containers would be removed on the way out


def test_a_checkpoints_group_of_an_instance_no_longer_in_the_data_is_refused(tmp_path):
    settings = _settings(tmp_path)
    d = make_driver(settings)
    try:
        d.submit(0, 0)
        state = d.state_dict()
    finally:
        d.close()
    state["pending"][0]["instance_id"] = "gone__repo-1"
    other = make_driver(settings)
    try:
        with pytest.raises(DataError, match="gone__repo-1 that is not in the run's instances"):
            other.load_state_dict(state)
    finally:
        other.close()


class Machines:
    """A sandbox factory whose machines only record that they were started and removed."""

    def __init__(self) -> None:
        self.live: set[str] = set()
        self.made = 0

    def __call__(self, request: SandboxRequest) -> Sandbox:
        self.made += 1
        return Machine(self, f"machine-{self.made}")


class Machine(Sandbox):
    def __init__(self, machines: Machines, name: str) -> None:
        self.machines, self.name = machines, name

    async def start(self) -> None:
        self.machines.live.add(self.name)

    async def stop(self) -> None:
        self.machines.live.discard(self.name)

    async def exec(self, cmd, timeout, *, workdir=None, env=None) -> ExecResult:
        return ExecResult(0, "", False, False, 0.0)

    async def read_file(self, path: str) -> bytes:
        return b""

    async def write_file(self, path: str, data, mode: int = 0o644) -> None:
        pass


class NoCallsProxy:
    """The recording proxy's session side, with no model call ever made."""

    def open_session(self, meta, seed=None) -> Session:
        return Session(id=uuid.uuid4().hex, base_url="", meta=meta, seed=seed)

    def close_session(self, sid: str) -> list:
        return []

    @asynccontextmanager
    async def endpoint(self, sid: str):
        yield SimpleNamespace(folder="/nonexistent", socket_in_container="/sock/model.sock")


class HangingAgentEngine(RolloutEngine):
    """The real engine, its agent a run that never ends; ``all_running`` is set once every sample's agent runs."""

    def __init__(self, settings: Settings, machines: Machines, samples: int) -> None:
        super().__init__(settings, upstream="http://127.0.0.1:9/v1", model="m", sandboxes=machines)
        self.proxy, self.agents, self.samples = NoCallsProxy(), 0, samples
        self.all_running = asyncio.Event()

    async def _run_agent(self, sandbox, model_socket, prompt, fresh_session) -> AgentResult:
        self.agents += 1
        if self.agents == self.samples:
            self.all_running.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def test_cancelling_a_groups_run_removes_its_machines_and_neither_drops_nor_scores_its_samples(tmp_path):
    """What a written-off group's cancel reaches: the engine's run of the group, through ``run_batch``'s group task
    (which ``asyncio.wait`` alone would leave running) down to each sample's machine."""
    settings = Settings.build(output_dir=tmp_path, rollout_concurrency=2)
    group = [Sample(index=i, group_index=0, prompt="fix it", metadata={"instance_id": "a__b-1"}) for i in range(2)]
    stats = BatchStats()

    async def cancel_mid_run() -> None:
        machines = Machines()
        engine = HangingAgentEngine(settings, machines, samples=len(group))
        task = asyncio.ensure_future(engine.run_groups([group], stats))
        await engine.all_running.wait()
        assert len(machines.live) == 2 and stats.running == 2
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert machines.made == 2 and machines.live == set()  # removed by the time the cancel has propagated
        assert engine._samples._value == 2  # both rollout slots are free for a fresh group

    asyncio.run(cancel_mid_run())
    assert all(x.status == Status.PENDING and x.reward is None for x in group)  # neither dropped nor scored
    assert (stats.dropped, stats.reasons, stats.graded, stats.running) == (0, {}, 0, 0)
    assert all(x.metadata.get("timeline") is not None for x in group)  # the spans it reached are kept
