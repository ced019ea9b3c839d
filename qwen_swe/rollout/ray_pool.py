"""Rollouts spread over a Ray cluster (ROLLOUT_BACKEND=ray): the driver side of the rollout workers.

``RayRolloutPool`` has the surface the trainer's driver uses of a ``RolloutEngine`` (start, stop,
set_weight_version, run_groups, run_sample, served_model), so the driver picks one or the other by the setting.

- One ``RolloutWorker`` actor per node that offers CPUs to Ray (``RAY_WORKERS_PER_NODE`` of them), pinned there by
  node affinity; start the trainer's own node with ``--num-cpus 0`` to keep rollouts off it.
- A group goes whole to one worker: the least-loaded one, or one that already ran the instance (its image is on
  that node) when it is at most one group's worth busier. The group rules (refill, drop, batch time guard) are the
  local engine's own ``run_batch``.
- A worker or node that dies costs only its in-flight samples: they are dropped as ``worker_lost`` (refilled on a
  live worker under ``DROPPED_POLICY=replace``), never scored. Before each batch the pool starts workers on nodes
  that (re)joined; a new worker first reaps its node's containers of the run and its dead socket folders, which is
  how a dead worker's leftovers go. At stop every worker does the same on its node, and the driver reaps its own
  Docker engine.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import ray
import ray.exceptions
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import Sample, drop
from qwen_swe.errors import DropReason, InfraError, SetupError
from qwen_swe.rollout.engine import run_batch
from qwen_swe.rollout.progress import BatchStats
from qwen_swe.rollout.ray_worker import RolloutWorker
from qwen_swe.sandbox.docker_host import reap

log = logging.getLogger("qwen_swe.rollout.ray")

START_TIMEOUT = 600.0  # seconds a worker may take to start (tokenizer load, reap of a busy node)
STOP_TIMEOUT = 120.0  # seconds a worker may take to stop its engine and reap its node
NODES_TIMEOUT = 60.0  # seconds a cluster-state query may take
# What Ray raises when the actor running a call, or its node, is gone (ActorUnavailableError is a RayActorError).
WORKER_LOST_ERRORS: tuple[type[BaseException], ...] = (
    ray.exceptions.RayActorError,
    ray.exceptions.NodeDiedError,
    ray.exceptions.WorkerCrashedError,
    ray.exceptions.LocalRayletDiedError,
    ray.exceptions.ObjectLostError,
    ray.exceptions.OwnerDiedError,
)


@dataclass
class WorkerSlot:
    """One rollout worker as the driver sees it."""

    handle: Any
    node_id: str
    load: int = 0  # samples in flight on it
    instances: set[str] = field(default_factory=set)  # instances it ran (their images are on its node)
    alive: bool = True


def pick_worker(slots: list[WorkerSlot], instance_id: str, size: int) -> WorkerSlot | None:
    """The least-loaded live worker; one that already ran ``instance_id`` wins if it is less than ``size`` samples
    (one group) busier, since pulling an image of 1-3 GB costs more than a short wait. ``None``: no live worker."""
    live = [w for w in slots if w.alive]
    if not live:
        return None
    least = min(live, key=lambda w: w.load)
    holders = [w for w in live if instance_id in w.instances and w.load < least.load + size]
    return min(holders, key=lambda w: w.load) if holders else least


class RayRolloutPool:
    """The driver side of the rollout workers; see the module docstring."""

    def __init__(self, settings: Settings, *, upstream: str, model: str, served_model: str | None = None) -> None:
        self.settings, self.upstream, self.model = settings, upstream, model
        self.served_model = served_model or settings.inference.served_model_name or model
        self.weight_version = 0
        self.slots: list[WorkerSlot] = []
        self._own_ray = False

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        await asyncio.to_thread(self._connect)
        await self._add_workers(strict=True)

    def _connect(self) -> None:
        if ray.is_initialized():
            return
        address = self.settings.rollout.ray_address
        try:
            if address:
                ray.init(address=address)
                return
            try:
                ray.init(address="auto")  # a cluster started on this host with `ray start`
            except ConnectionError:
                ray.init()
                self._own_ray = True
        except Exception as exc:  # noqa: BLE001 - Ray raises several unrelated types for an unreachable cluster
            raise SetupError(
                f"cannot join the Ray cluster at RAY_ADDRESS={address or '(local)'}: {exc}; start it "
                "with `ray start --head` (docs/guides/ray.md) or unset ROLLOUT_BACKEND"
            ) from exc

    async def stop(self) -> None:
        """Stop every live worker (each reaps its node), then reap the driver's own Docker engine."""
        live = [s for s in self.slots if s.alive]
        results = await asyncio.gather(
            *(self._await(s.handle.stop.remote(), STOP_TIMEOUT) for s in live), return_exceptions=True
        )
        for slot, result in zip(live, results):
            if isinstance(result, BaseException):
                log.warning("rollout worker on node %s did not stop cleanly: %r", slot.node_id[:12], result)
            _kill(slot.handle)
        self.slots = []
        try:  # single host: the dead workers' containers are in this engine; a cluster: the head node's share
            await asyncio.to_thread(reap, self.settings.label)
        except InfraError as exc:
            log.warning(
                "no local Docker engine to reap (%s); dead nodes keep their containers until a worker "
                "of this run starts there again",
                exc,
            )
        if self._own_ray:
            ray.shutdown()
            self._own_ray = False

    def begin_sync(self, version: int) -> None:
        """Nothing: the workers' proxies are not told of a sync in flight, which is why PARTIAL_ROLLOUTS is refused
        with ROLLOUT_BACKEND=ray (config.settings)."""

    def set_weight_version(self, version: int) -> None:
        self.weight_version = version  # travels with each sample, so no worker can serve an older one

    async def _add_workers(self, *, strict: bool) -> None:
        """Start workers on nodes that offer CPUs and have fewer than RAY_WORKERS_PER_NODE live ones. Only called
        while no sample of the run is in flight: a new worker reaps its node's containers of the run."""
        nodes = await self._await(asyncio.to_thread(ray.nodes), NODES_TIMEOUT)
        alive = {n["NodeID"] for n in nodes if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0}
        for slot in self.slots:
            slot.alive = slot.alive and slot.node_id in alive
        self.slots = [s for s in self.slots if s.alive]
        want = self.settings.rollout.ray_workers_per_node
        new = [
            self._spawn(node)
            for node in sorted(alive)
            for _ in range(want - sum(s.node_id == node for s in self.slots))
        ]
        results = await asyncio.gather(
            *(self._await(s.handle.start.remote(), START_TIMEOUT) for s in new), return_exceptions=True
        )
        for slot, result in zip(new, results):
            if isinstance(result, BaseException):
                _kill(slot.handle)
                if strict:
                    raise SetupError(
                        f"the rollout worker on Ray node {slot.node_id} did not start: {result!r}; each "
                        "node needs Docker, the task images, the agent bundle and the model's tokenizer"
                    )
                log.warning("rollout worker on node %s did not start, skipped: %r", slot.node_id[:12], result)
                continue
            self.slots.append(slot)
            if result["reaped"] or result["swept"]:
                log.info(
                    "node %s (%s): removed %d containers and %d socket folders an earlier worker left",
                    slot.node_id[:12],
                    result["host"],
                    result["reaped"],
                    result["swept"],
                )
        if strict and not self.slots:
            raise SetupError(
                "no Ray node offers CPUs for rollout workers; add nodes with `ray start "
                "--address=HEAD:6379` (docs/guides/ray.md)"
            )

    def _spawn(self, node_id: str) -> WorkerSlot:
        actor = ray.remote(RolloutWorker).options(
            num_cpus=0,
            max_restarts=0,
            max_concurrency=10_000,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        )
        handle = actor.remote(self.settings, upstream=self.upstream, model=self.model, served_model=self.served_model)
        return WorkerSlot(handle=handle, node_id=node_id)

    @staticmethod
    async def _await(ref: Any, timeout: float) -> Any:
        future = asyncio.wrap_future(ref.future()) if isinstance(ref, ray.ObjectRef) else ref
        return await asyncio.wait_for(future, timeout)

    # --- samples --------------------------------------------------------------------------------
    async def run_groups(self, groups: list[list[Sample]], stats: BatchStats) -> list[list[Sample]]:
        """Run groups over the workers; the same group rules as the local engine (``run_batch``)."""
        if not any(s.load for s in self.slots):  # a new worker reaps its node: never beside samples in flight
            await self._add_workers(strict=False)  # (MAX_STALENESS >= 2 submits a batch while others run)

        async def run_samples(samples: list[Sample]) -> None:
            if not samples:
                return
            slot = self._reserve(str(samples[0].metadata.get("instance_id")), len(samples))
            await asyncio.gather(*(self._run_on(slot, x, stats) for x in samples))

        return await run_batch(run_samples, groups, stats, self.settings.rollout)

    async def run_sample(self, sample: Sample, stats: BatchStats) -> Sample:
        """One sample on the least-loaded worker (evaluation uses this)."""
        await self._run_on(self._reserve(str(sample.metadata.get("instance_id")), 1), sample, stats)
        return sample

    def _reserve(self, instance_id: str, size: int) -> WorkerSlot | None:
        """Pick a worker and count the samples on it at once, before any await: the groups of a batch are placed
        one after another, each seeing the load the previous ones added."""
        slot = pick_worker(self.slots, instance_id, size)
        if slot is not None:
            slot.load += size
            slot.instances.add(instance_id)
        return slot

    async def _run_on(self, slot: WorkerSlot | None, sample: Sample, stats: BatchStats) -> None:
        """Run ``sample`` on ``slot`` (reserved for it) and fill it in place from the copy that comes back."""
        if slot is None:
            stats.count(drop(sample, DropReason.WORKER_LOST, "no live rollout worker"))
            return
        stats.running += 1
        ref = slot.handle.run_sample.remote(sample, self.weight_version)
        s = self.settings
        guard = s.agent.agent_timeout + s.reward.eval_timeout + 300  # past the worker's own guard: a stuck worker
        try:
            sample.__dict__.update((await self._await(ref, guard)).__dict__)
        except asyncio.CancelledError:
            _cancel(ref)  # the worker's engine removes the sample's container on the way out
            raise
        except TimeoutError:
            _cancel(ref)
            drop(sample, DropReason.SAMPLE_TIMEOUT, f"the worker on node {slot.node_id[:12]} did not answer")
        except WORKER_LOST_ERRORS as exc:
            slot.alive = False
            drop(sample, DropReason.WORKER_LOST, f"worker on node {slot.node_id[:12]} lost: {type(exc).__name__}")
        finally:
            slot.load -= 1
            stats.running -= 1
            stats.count(sample)


def _kill(handle: Any) -> None:
    try:
        ray.kill(handle, no_restart=True)
    except Exception as exc:  # noqa: BLE001 - a worker that is already gone needs no kill
        log.debug("kill of a rollout worker: %r", exc)


def _cancel(ref: Any) -> None:
    try:
        ray.cancel(ref)
    except Exception as exc:  # noqa: BLE001 - the call's worker is gone, and the call with it
        log.debug("cancel of a rollout call: %r", exc)
