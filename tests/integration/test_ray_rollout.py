"""ROLLOUT_BACKEND=ray on a local multi-node Ray cluster (``ray.cluster_utils.Cluster``: a head without CPUs and two
one-CPU nodes, so each node gets one rollout worker): real Docker sandboxes, the real proxy on each worker's node,
real qwen-code and the real grader, against the scripted model.

Checked: groups spread over the nodes; a sample is the same (patch, reward, token ids, mask, logprobs) whichever
backend ran it; a node killed mid-rollout costs only its samples, dropped as ``worker_lost``, while the batch
returns the others; no container of the run and no socket folder of its sessions is left afterwards. One cluster
serves the module (Ray start-up is slow on 2 cores); the node-killing test runs last.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import ray
from ray.cluster_utils import Cluster

from qwen_swe.config.settings import Settings
from qwen_swe.data.prompts import build_prompt
from qwen_swe.data.sample import Sample, Status, run_of
from qwen_swe.paths import embedded_model_dir
from qwen_swe.rollout.engine import RolloutEngine
from qwen_swe.rollout.progress import BatchStats
from qwen_swe.rollout.ray_pool import RayRolloutPool
from qwen_swe.sandbox.docker_host import containers_of
from qwen_swe.traffic.endpoint import FOLDER_PREFIX
from tests.scripted_server import ServerThread
from tests.task_pack import gold_edit, replayable_task
from tests.toolcall_text import hermes_call

pytestmark = [pytest.mark.docker, pytest.mark.agent]

WORKER_NODES = 2
# Notice a dead node within seconds instead of the default ~30 s (a test of losing one, not of Ray's defaults).
FAST_FAILURE = {"health_check_period_ms": 500, "health_check_failure_threshold": 4}


@pytest.fixture(scope="module")
def node_tmp() -> Iterator[Path]:
    """The worker nodes' temp folder, where their sessions' socket folders go: the module's own, so that what they
    leave is seen (and not mistaken for another test's)."""
    tmp = Path(tempfile.mkdtemp(prefix="ray-nodes-", dir="/tmp"))
    yield tmp
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(node_tmp: Path) -> Iterator[Cluster]:
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "_system_config": FAST_FAILURE})
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("TMPDIR", str(node_tmp))  # a node's processes, and the workers they start, inherit it
            for _ in range(WORKER_NODES):
                c.add_node(num_cpus=1)
        c.wait_for_nodes()
        ray.init(address=c.address)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def task() -> dict[str, Any]:
    return replayable_task()


@pytest.fixture
def run_id() -> Iterator[str]:
    rid = f"test-ray-{uuid.uuid4().hex[:8]}"
    yield rid
    client = docker.from_env(timeout=60)
    try:  # what `docker ps -a --filter label=qwen-swe.run=<rid>` shows
        left = containers_of(client, rid)
        for c in left:
            c.remove(force=True)
    finally:
        client.close()
    assert left == [], f"containers of the run left behind: {[c.name for c in left]}"


def _settings(url: str, tmp_path: Any, run_id: str) -> Settings:
    return Settings.build(
        vllm_url=url,
        model=str(embedded_model_dir()),
        served_model_name="scripted",
        rollout_backend="ray",
        max_turns=6,
        agent_timeout=300.0,
        rollout_concurrency=2,
        output_dir=tmp_path / "run",
        run_id=run_id,
    )


def _groups(task: dict, n_groups: int) -> list[list[Sample]]:
    return [[Sample(group_index=g, index=g, prompt=build_prompt(task), metadata=dict(task))] for g in range(n_groups)]


def _worker_nodes(cluster: Cluster) -> set[str]:
    return {n.node_id for n in cluster.list_all_nodes() if n is not cluster.head_node}


async def _with(engine: Any, work: Any) -> Any:
    await engine.start()
    try:
        return await work(engine)
    finally:
        await engine.stop()


def test_groups_spread_over_the_nodes_and_match_the_local_backend(cluster, task, run_id, tmp_path):
    path, old, new = gold_edit(task["patch"])
    server = ServerThread(
        [
            hermes_call("read_file", file_path=f"/testbed/{path}"),
            hermes_call("edit", file_path=f"/testbed/{path}", old_string=old, new_string=new),
            "Fixed the bug.",
        ]
    )
    try:
        settings = _settings(server.url, tmp_path, run_id)
        common = dict(upstream=server.url, model=settings.model_name, served_model="scripted")
        local = _groups(task, 1)
        stats = BatchStats()
        asyncio.run(_with(RolloutEngine(settings, **common), lambda e: e.run_groups(local, stats)))
        groups = _groups(task, 2)
        kept = asyncio.run(_with(RayRolloutPool(settings, **common), lambda p: p.run_groups(groups, BatchStats())))
    finally:
        server.stop()
    reference = local[0][0]
    assert reference.status == Status.COMPLETED and reference.reward == 1.0, reference.metadata.get("drop_detail")
    assert len(kept) == 2, [x.metadata.get("drop_detail") for g in groups for x in g]
    assert {run_of(g[0]).rollout_node for g in kept} == _worker_nodes(cluster)  # one group on each node
    for x in (g[0] for g in kept):
        assert (x.status, x.reward, x.metadata["resolved"]) == (Status.COMPLETED, 1.0, True)
        assert x.metadata["patch"] == reference.metadata["patch"] and f"+{new}" in x.metadata["patch"]
        assert (x.tokens, x.loss_mask, x.rollout_log_probs, x.response_length) == (
            reference.tokens,
            reference.loss_mask,
            reference.rollout_log_probs,
            reference.response_length,
        )
        assert sum(x.loss_mask) > 0 and x.metadata["turns"] == 3


def test_a_node_killed_mid_rollout_costs_only_its_samples(cluster, node_tmp, task, run_id, tmp_path):
    server = ServerThread([hermes_call("run_shell_command", command="sleep 20"), "Done."])
    left_by_the_dead: list[str] = []
    sockets_left: list[str] = []
    try:
        settings = _settings(server.url, tmp_path, run_id)
        pool = RayRolloutPool(settings, upstream=server.url, model=settings.model_name, served_model="scripted")
        groups, stats = _groups(task, 2), BatchStats()

        async def kill_one_node_when_both_agents_run() -> str:
            while len(server.server.requests) < 2 or any(s.load == 0 for s in pool.slots):
                await asyncio.sleep(0.2)
            victim = pool.slots[1].node_id
            node = next(n for n in cluster.list_all_nodes() if n.node_id == victim)
            await asyncio.to_thread(cluster.remove_node, node, allow_graceful=False)
            return victim

        async def work(p: RayRolloutPool) -> tuple[list[list[Sample]], str, float]:
            t0 = time.monotonic()
            kept, victim = await asyncio.gather(p.run_groups(groups, stats), kill_one_node_when_both_agents_run())
            client = docker.from_env(timeout=60)
            try:  # before stop: the dead worker's container, still there for the reap to find
                left_by_the_dead.extend(c.name for c in containers_of(client, run_id))
            finally:
                client.close()
            sockets_left.extend(p.name for p in node_tmp.glob(f"{FOLDER_PREFIX}*"))  # the dead worker's session
            return kept, victim, time.monotonic() - t0

        kept, victim, seconds = asyncio.run(_with(pool, work))
    finally:
        server.stop()
    survivor = (_worker_nodes(cluster) | {victim}) - {victim}
    lost = [x for g in groups for x in g if x.status == Status.ABORTED]
    assert [x.metadata["drop_reason"] for x in lost] == ["worker_lost"], [x.metadata for x in lost]
    assert victim[:12] in lost[0].metadata["drop_detail"]
    assert lost[0].reward == 0.0 and lost[0].remove_sample
    assert len(kept) == 1 and kept[0][0].status == Status.COMPLETED and kept[0][0].reward == -1.0
    assert {run_of(kept[0][0]).rollout_node} == survivor
    assert stats.reasons == {"worker_lost": 1} and stats.graded == 1 and stats.running == 0
    assert sockets_left, "the killed worker's session socket folder, before the pool stops"
    assert not list(node_tmp.glob(f"{FOLDER_PREFIX}*")), "the survivor's stop sweeps its node's dead socket folders"
    print(
        f"batch with a node killed: {seconds:.1f} s; containers the dead worker left before the reap: "
        f"{left_by_the_dead}; socket folders: {sockets_left}"
    )
