"""One Ray node's rollouts (ROLLOUT_BACKEND=ray): a worker actor that owns a whole ``RolloutEngine`` on its node.

Everything a sample touches stays on the worker's node: the engine's event loop (the actor's own, Ray runs async
actors on one), the recording proxy (each container reaches only its own session, through a Unix socket of the
node mounted into it: ``traffic/endpoint.py``; the node's Docker engine must be local), the tokenizer, the
sandbox and boot bounds, and the node's Docker engine for rollout and grading containers. Only the finished
``Sample`` travels back (pickled by Ray). The proxy forwards to ``upstream``, so that URL must be routable from
every node.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import ray

from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import Sample, stamp
from qwen_swe.rollout.engine import RolloutEngine
from qwen_swe.rollout.progress import BatchStats
from qwen_swe.sandbox.docker_host import reap
from qwen_swe.traffic.endpoint import sweep_stale


class RolloutWorker:
    """The actor's body (``ray.remote(RolloutWorker)`` in the pool); plain methods, so it also runs without Ray."""

    def __init__(self, settings: Settings, *, upstream: str, model: str, served_model: str | None = None) -> None:
        self.settings = settings
        self.engine = RolloutEngine(settings, upstream=upstream, model=model, served_model=served_model)
        self.node_id = ray.get_runtime_context().get_node_id() if ray.is_initialized() else socket.gethostname()

    async def start(self) -> dict[str, Any]:
        """Remove what an earlier worker of this run left on this node (it died, or the run was killed): its
        containers and its sessions' dead socket folders; then start the engine. The pool calls this only while none
        of the run's samples are in flight."""
        reaped = await asyncio.to_thread(reap, self.settings.label)
        swept = await asyncio.to_thread(sweep_stale)  # only sockets nobody listens on: a live one is kept
        await self.engine.start()
        return {"node_id": self.node_id, "host": socket.gethostname(), "reaped": reaped, "swept": swept}

    async def run_sample(self, sample: Sample, weight_version: int) -> Sample:
        """Run one sample to the end (graded or dropped with its reason) and hand it back."""
        self.engine.set_weight_version(weight_version)
        await self.engine.run_sample(sample, BatchStats())  # the pool keeps the batch's counters
        stamp(sample, rollout_node=self.node_id)
        return sample

    async def stop(self) -> int:
        """Stop the engine and remove this node's containers of the run and its dead socket folders (a worker of
        this node that died mid-rollout left them); returns how many containers were left."""
        try:  # reap first: stopping the engine shuts down the loop's default executor, which to_thread uses
            reaped = await asyncio.to_thread(reap, self.settings.label)
            await asyncio.to_thread(sweep_stale)
            return reaped
        finally:
            await self.engine.stop()
