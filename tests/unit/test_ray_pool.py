"""The Ray pool's driver-side rules without a cluster: which worker gets a group, what a lost worker costs, and
that a filled sample survives the pickling Ray does. The real cluster, Docker and qwen-code are in
tests/integration/test_ray_rollout.py."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

import pytest
import ray.exceptions

from qwen_swe.config.settings import ConfigError, Settings, load_settings
from qwen_swe.data.sample import Sample, Status
from qwen_swe.rollout.driver import make_engine
from qwen_swe.rollout.engine import RolloutEngine
from qwen_swe.rollout.progress import BatchStats
from qwen_swe.rollout.ray_pool import RayRolloutPool, WorkerSlot, pick_worker


def test_settings_default_to_local_and_parse_ray():
    assert load_settings([], {}).rollout.rollout_backend == "local"
    s = load_settings([], {"ROLLOUT_BACKEND": "ray", "RAY_ADDRESS": "10.0.0.1:6379", "RAY_WORKERS_PER_NODE": "2"})
    assert (s.rollout.rollout_backend, s.rollout.ray_address, s.rollout.ray_workers_per_node) == (
        "ray",
        "10.0.0.1:6379",
        2,
    )
    assert load_settings([], {"RAY_ADDRESS": ""}).rollout.ray_address is None  # empty: a local cluster
    with pytest.raises(ConfigError, match=r"^ROLLOUT_BACKEND='k8s' is not one of local, ray$"):
        load_settings([], {"ROLLOUT_BACKEND": "k8s"})
    with pytest.raises(ConfigError, match=r"^RAY_WORKERS_PER_NODE=0 is too small"):
        load_settings([], {"RAY_WORKERS_PER_NODE": "0"})


def test_the_driver_picks_the_backend_by_the_setting():
    local = make_engine(Settings.build(), upstream="http://127.0.0.1:9/v1", model="m")
    pool = make_engine(
        Settings.build(rollout_backend="ray"), upstream="http://10.0.0.1:8000/v1", model="m", served_model="served"
    )
    assert type(local) is RolloutEngine
    assert isinstance(pool, RayRolloutPool) and pool.served_model == "served" and pool.slots == []


def test_least_loaded_first_and_an_instance_stays_where_its_image_is():
    a, b, c = (WorkerSlot(handle=None, node_id=n) for n in "abc")
    assert pick_worker([a, b, c], "x", 2) is a  # all idle: the first
    a.load, b.load = 2, 1
    assert pick_worker([a, b, c], "x", 2) is c
    b.instances.add("x")
    assert pick_worker([a, b, c], "x", 2) is b  # one sample busier than the least loaded, but holds the image
    b.load = 2
    assert pick_worker([a, b, c], "x", 2) is c  # a whole group busier: the image is not worth the wait
    c.alive = False
    assert pick_worker([a, b, c], "y", 2) is a
    a.alive = b.alive = False
    assert pick_worker([a, b, c], "y", 2) is None


class FakeActor:
    """A worker handle: ``run_sample.remote`` fills the sample, or fails as a dead actor does."""

    def __init__(self, dies: bool) -> None:
        self.dies, self.ran = dies, []
        self.run_sample = self

    def remote(self, sample: Sample, version: int) -> Any:
        async def call() -> Sample:
            await asyncio.sleep(0.01)
            if self.dies:
                raise ray.exceptions.ActorDiedError()
            copy = pickle.loads(pickle.dumps(sample))  # what crossing Ray does to it
            self.ran.append(copy.metadata["instance_id"])
            copy.status, copy.reward, copy.tokens = Status.COMPLETED, 1.0, [1, 2]
            copy.metadata.update(weight_version=version, rollout_node="n")
            return copy

        return call()


def _pool(policy: str) -> tuple[RayRolloutPool, FakeActor, FakeActor]:
    pool = RayRolloutPool(Settings.build(rollout_backend="ray", dropped_policy=policy), upstream="u", model="m")
    dying, healthy = FakeActor(dies=True), FakeActor(dies=False)
    pool.slots = [WorkerSlot(handle=dying, node_id="dying"), WorkerSlot(handle=healthy, node_id="healthy")]

    async def no_new_workers(strict: bool) -> None:
        return None

    pool._add_workers = no_new_workers  # type: ignore[method-assign]
    return pool, dying, healthy


def _groups() -> list[list[Sample]]:
    return [[Sample(group_index=0, index=i, metadata={"instance_id": "a"}) for i in range(2)]]


@pytest.mark.parametrize("policy", ["drop_group", "replace"])
def test_a_lost_worker_costs_its_samples_as_worker_lost_never_a_reward(policy):
    pool, dying, healthy = _pool(policy)
    pool.set_weight_version(3)
    groups, stats = _groups(), BatchStats()
    kept = asyncio.run(pool.run_groups(groups, stats))
    assert all(
        x.status == Status.ABORTED and x.metadata["drop_reason"] == "worker_lost" and x.reward == 0.0 for x in groups[0]
    )  # the first attempt ran on the dying worker
    assert stats.reasons == {"worker_lost": 2} and stats.running == 0
    assert not pool.slots[0].alive and pool.slots[1].alive
    if policy == "drop_group":
        assert kept == [] and healthy.ran == []
    else:  # refilled on the live worker
        assert len(kept) == 1 and [x.reward for x in kept[0]] == [1.0, 1.0] and healthy.ran == ["a", "a"]
        assert all(x.metadata["weight_version"] == 3 and x.metadata["rollout_node"] == "n" for x in kept[0])
    assert pool.slots[0].load == pool.slots[1].load == 0


def test_no_live_worker_drops_instead_of_crashing():
    pool, *_ = _pool("replace")
    for slot in pool.slots:
        slot.alive = False
    groups, stats = _groups(), BatchStats()
    assert asyncio.run(pool.run_groups(groups, stats)) == []
    assert stats.reasons == {"worker_lost": 6}  # the attempt and two refills of both samples


def test_a_filled_sample_survives_pickling():
    x = Sample(
        group_index=1,
        index=3,
        prompt="fix it",
        tokens=[5, 6, 7, 8],
        response_length=2,
        loss_mask=[1, 0],
        rollout_log_probs=[-0.5, -0.25],
        reward=-1.0,
        status=Status.TRUNCATED,
        weight_versions=["4"],
        metadata={"instance_id": "a", "patch": "diff --git", "conversation": [{"role": "user"}]},
    )
    y = pickle.loads(pickle.dumps(x))
    assert y == x and y.status is Status.TRUNCATED
