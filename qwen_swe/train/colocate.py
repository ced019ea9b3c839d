"""COLOCATE: the trainer and the vLLM server take turns on the same GPUs, in the order the peers use (slime's
``--colocate``: offload the rollout engines, train, offload the trainer, onload the weights, update them, onload the
KV cache).

    rollouts       server awake; the trainer's parameters and optimizer state in host memory
    to_trainer()   server: POST /sleep?level=1  ->  trainer: parameters and optimizer state back on the GPUs
    (train, save)
    to_rollouts()  trainer: optimizer state out  ->  server: /wake_up?tags=weights  ->  the new weights pushed
                   ->  trainer: parameters out  ->  server: /wake_up?tags=kv_cache (serving again)

The optimizer state (two fp32 moments per trainable weight) leaves before the server's weights come back; the
trainer's parameters stay for the push that reads them, so at no time do both the KV cache and the trainer's state
hold memory. Without COLOCATE every call here does nothing but run the push.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from qwen_swe.errors import TrainerError
from qwen_swe.inference.sleep import KV_CACHE, WEIGHTS
from qwen_swe.train.offload import TrainerOffload
from qwen_swe.train.publish import on_rank0, rank0_only

log = logging.getLogger("qwen_swe.colocate")
T = TypeVar("T")


class SleepingServer(Protocol):
    """What the turns need of the server (``inference.sleep.ServerSleep``; tests record the calls instead)."""

    def sleep(self) -> float: ...
    def wake_up(self, tags: tuple[str, ...] = ()) -> float: ...


class Colocation:
    """The turns of one run; exactly one side holds the GPUs at a time. ``server`` lives on rank 0 (``None``
    elsewhere); ``enabled`` is COLOCATE."""

    def __init__(self, enabled: bool, server: SleepingServer | None) -> None:
        self.enabled, self.server = enabled, server
        self.offload: TrainerOffload | None = None
        self.trainer_resident = False  # until start(): the server holds the GPUs
        self.seconds: dict[str, float] = {}

    def start(self) -> None:
        """Collective, before the trainer allocates anything: the server (started awake) goes to sleep."""
        if self.enabled:
            self._timed("colocate/sleep_seconds", self._sleep)
        self.trainer_resident = True

    def attach(self, offload: TrainerOffload) -> None:
        """The trainer's state, once built: what ``to_rollouts`` parks and ``to_trainer`` brings back."""
        self.offload = offload

    def to_trainer(self) -> None:
        """Collective: the server sleeps, then the trainer's state returns. Idempotent."""
        if not self.enabled or self.trainer_resident:
            return
        self._timed("colocate/sleep_seconds", self._sleep)
        assert self.offload is not None, "attach() first"
        restored = self._timed("colocate/reload_seconds", self.offload.reload)
        self.trainer_resident = True
        log.info("COLOCATE: the server sleeps, the trainer's %.2f GiB are back on its device", restored / 2**30)

    def to_rollouts(self, push: Callable[[], None] | None) -> None:
        """Collective: hand the GPUs to the server, pushing the new weights (``push``, collective) once its weights
        are back; ``push=None`` when the served weights are current. Without COLOCATE: only the push."""
        if not self.enabled:
            if push is not None:
                push()
            return
        if not self.trainer_resident:
            raise TrainerError("to_rollouts() while the trainer is offloaded: call to_trainer() first")
        assert self.offload is not None, "attach() first"
        parked = self._timed("colocate/offload_seconds", self.offload.offload_optimizer)
        self._timed(
            "colocate/wake_seconds",
            lambda: on_rank0(lambda: rank0_only(self.server).wake_up((WEIGHTS,)), "POST /wake_up?tags=weights"),
        )
        if push is not None:
            push()
        parked += self._timed("colocate/offload_seconds", self.offload.offload_parameters)
        self._timed(
            "colocate/wake_seconds",
            lambda: on_rank0(lambda: rank0_only(self.server).wake_up((KV_CACHE,)), "POST /wake_up?tags=kv_cache"),
        )
        self.trainer_resident = False
        log.info("COLOCATE: the trainer's %.2f GiB wait in host memory, the server serves", parked / 2**30)

    def metrics(self) -> dict[str, float]:
        """The seconds of the turns since the last call, as metrics (nothing without COLOCATE)."""
        out, self.seconds = self.seconds, {}
        return out

    def _sleep(self) -> None:
        on_rank0(lambda: rank0_only(self.server).sleep(), "POST /sleep")  # the server exists on rank 0 only

    def _timed(self, key: str, fn: Callable[[], T]) -> T:
        t0 = time.monotonic()
        try:
            return fn()
        finally:
            self.seconds[key] = self.seconds.get(key, 0.0) + time.monotonic() - t0
