"""The built-in trainer's rollout side: rank 0 holds a long-lived event loop with the engine and the proxy,
asks the data source for groups, runs them, dumps them, and serves new weights before the next batch.

Synchronous (``generate``): draw, run, return. Off-policy (``submit`` then ``collect``, MAX_STALENESS >= 1): the
batch runs in the background on the event loop while the trainer trains on the previous one, and new weights are
served while it is in flight. The checkpointed data-source position is the one from before the oldest batch still in
flight was drawn, so a resumed run serves those groups again: exactly the ones not trained on.

With PARTIAL_ROLLOUTS the batches give way to a streaming pool (``pool.py``): ``collect`` returns as soon as a step's
groups are complete, and the groups still generating carry over. The checkpoint then records the data-source position
after every draw and the groups drawn but not trained on (``pending``), which a resumed run serves first, with their
original indices.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import Sample, run_of
from qwen_swe.data.source import SWEBenchDataSource, load_instances
from qwen_swe.errors import ConfigError, TrainerError
from qwen_swe.evaluate.agent_runs import run_attempts
from qwen_swe.evaluate.report import build_report
from qwen_swe.inference.client import InferenceClient
from qwen_swe.inference.weight_sync import ProbedSync, make_weight_sync
from qwen_swe.progress import step_label
from qwen_swe.rollout import server_counters
from qwen_swe.rollout.contract import RolloutRunner, RolloutSource, WeightUpdate
from qwen_swe.rollout.engine import RolloutEngine, batch_metrics
from qwen_swe.rollout.pool import Groups, RolloutPool, Taken, identity, regroup
from qwen_swe.rollout.progress import BatchStats, live_progress
from qwen_swe.rollout.record import dump_rollout_data, dump_rollouts, not_kept
from qwen_swe.rollout.replay import ReplayDriver
from qwen_swe.rollout.sampling import Batch, fill_batch
from qwen_swe.rollout.timeline import summarize
from qwen_swe.warmstart.demos import DemoDriver


@dataclass
class InFlight:
    """A submitted batch: its groups, the data-source position before they were drawn, its background task."""

    groups: list[list[Sample]]
    position: dict[str, Any]
    task: Any  # asyncio.Task on the driver's loop
    stats: BatchStats
    started: float


class RolloutDriver:
    """The built-in trainer's rank-0 rollout side: a long-lived event loop thread holding the engine and proxy."""

    _pool: RolloutPool | None = None  # PARTIAL_ROLLOUTS' streaming pool
    _pending: tuple[list[Sample], ...] = ()  # groups a checkpoint held untrained, served before any new one
    _version = 0  # the weight version served
    _next_step = 0  # the step the pool fills for next

    def __init__(
        self, settings: Settings, *, upstream: str, model: str, data_source: Any = None, served_model: str | None = None
    ) -> None:
        self.settings = settings
        self.data_source = data_source or SWEBenchDataSource.from_settings(settings)
        self.client = InferenceClient(
            upstream,
            timeout=settings.inference.request_timeout,
            api_key=settings.inference.api_key,
            interrupt=settings.train.partial_rollouts,
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rollout-loop", daemon=True)
        self._thread.start()
        self.engine = make_engine(settings, upstream=upstream, model=model, served_model=served_model)
        self._call(self.engine.start())
        self.weight_sync = ProbedSync(
            make_weight_sync(settings.inference, self.client, colocated=settings.placement.colocate),
            self.client,
            self.engine.served_model,
        )
        self.last_sync: dict[str, float] = {}
        self._in_flight: dict[int, InFlight] = {}  # submitted, not yet collected, oldest first
        self._evaluated: dict[int, dict[str, float]] = {}
        if settings.train.partial_rollouts:
            self.start_pool()

    def start_pool(self) -> None:
        """PARTIAL_ROLLOUTS: steps take their groups from a streaming pool instead of whole batches."""
        stats = BatchStats()
        self._pool_stats = stats
        self._pool = RolloutPool(
            lambda group: self.engine.run_groups([group], stats),
            self._draw,
            self.settings.rollout_batch_size,
            self.settings.train.max_staleness,
        )

    def _draw(self, n: int) -> Groups:
        """``n`` groups: those a checkpoint held untrained first, then the data source's."""
        again, self._pending = list(self._pending[:n]), self._pending[n:]
        return again + (self.data_source.get_samples(n - len(again)) if n > len(again) else [])

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def generate(self, step: int, weight_version: int) -> tuple[list[Sample], dict[str, Any]]:
        s = self.settings
        self.engine.set_weight_version(weight_version)
        evaluated = self.evaluate(step) if s.eval_interval and step % s.eval_interval == 0 else {}
        stats, t0, before = BatchStats(), time.monotonic(), server_counters.snapshot(self.client)
        with live_progress(stats, step_label(step, s.num_rollouts, "rollout")):
            batch = fill_batch(
                self._draw,
                lambda g: self._call(self.engine.run_groups(g, stats)),
                s.rollout_batch_size,
                dynamic=s.rollout.dynamic_sampling,
                rounds=s.rollout.sampling_rounds if s.rollout.dynamic_sampling else 1,
            )
        samples, metrics = self._finish(step, batch, stats, time.monotonic() - t0, evaluated)
        metrics.update(server_counters.step_figures(before, server_counters.snapshot(self.client)))
        return samples, metrics

    def submit(self, step: int, weight_version: int) -> None:
        """Draw ``step``'s groups now and start their rollout in the background; ``collect(step)`` returns it."""
        s = self.settings
        if step in self._in_flight or step in self._evaluated:
            raise TrainerError(f"the rollout of step {step} was submitted twice: collect it first")
        self.engine.set_weight_version(weight_version)
        self._version = weight_version
        evaluated = self.evaluate(step) if s.eval_interval and step % s.eval_interval == 0 else {}
        if self._pool is not None:
            self._evaluated[step] = evaluated
            if self._pool.steps == 0:  # the run's (or the resumed run's) first step
                self._next_step = step
            self._on_loop(lambda: self._fill_pool())
            return
        position = self._position()
        groups = self._draw(s.rollout_batch_size)
        stats = BatchStats()
        task = self._call(_spawn(self.engine.run_groups(groups, stats)))
        self._in_flight[step] = InFlight(groups, position, task, stats, time.monotonic())
        self._evaluated[step] = evaluated

    def collect(self, step: int) -> tuple[list[Sample], dict[str, Any]]:
        """Wait for the batch ``submit(step, ...)`` started; report how much of it ran behind other work."""
        if self._pool is not None:
            return self._take(step)
        job, t0 = self._in_flight[step], time.monotonic()
        with live_progress(job.stats, step_label(step, self.settings.num_rollouts, "rollout")):
            kept = self._call(_wait(job.task))
        del self._in_flight[step]
        done = time.monotonic()
        samples, metrics = self._finish(
            step, Batch(job.groups, kept, kept, 1), job.stats, done - job.started, self._evaluated.pop(step, {})
        )
        metrics.update(
            {
                "time/rollout_wait": done - t0,
                "time/overlap": max(0.0, t0 - job.started),
                "async/rollout_seconds": done - job.started,
            }
        )
        return samples, metrics

    # --- PARTIAL_ROLLOUTS: the streaming pool ---------------------------------------------------------------
    def _on_loop(self, fn: Any) -> Any:
        async def call() -> Any:
            return fn()

        return self._call(call())

    def _wanted(self) -> int:
        """Groups the steps left (from the next one to collect) can still train, plus OVER_SAMPLING while a step
        is left: the last steps, too, take the first groups to complete (none is drawn after the last step)."""
        steps = max(0, self.settings.num_rollouts - self._next_step)
        return steps * self.settings.rollout_batch_size + (self.settings.train.over_sampling if steps else 0)

    def _fill_pool(self) -> None:
        assert self._pool is not None
        self._pool.fill(self._wanted())

    def _take(self, step: int) -> tuple[list[Sample], dict[str, Any]]:
        """``step``'s groups: the first complete ones (oldest first); the rest go on generating."""
        assert self._pool is not None
        pool, t0 = self._pool, time.monotonic()
        with live_progress(self._pool_stats, step_label(step, self.settings.num_rollouts, "rollout")):
            taken: Taken = self._call(pool.take(self._version, self._wanted()))
        self._next_step = step + 1
        self._on_loop(lambda: self._fill_pool())  # the next step's groups start on the weights served now
        left = [*taken.stale, *taken.lost]
        stats = BatchStats()
        for x in (x for g in [*taken.trained, *left] for x in g):
            stats.count(x)  # not the written-off groups' samples: drop_stale counts them (dropped/stale)
        stats.groups = len(taken.trained) + len(left) + len(taken.written_off)
        # the stale groups go to the trainer with the rest: drop_stale drops them with their reason; the written-off
        # ones (cancelled, not complete) are recorded with the dropped samples, not with the complete groups
        stale = [*taken.stale, *taken.written_off]
        batch = Batch(
            [*taken.trained, *left, *taken.written_off], [*taken.trained, *taken.stale], [*taken.trained, *stale], 1
        )
        samples, metrics = self._finish(step, batch, stats, time.monotonic() - t0, self._evaluated.pop(step, {}))
        metrics.update(taken.metrics)
        return samples, metrics

    def _position(self) -> dict[str, Any]:
        """The data-source position and the groups to serve before it, as a checkpoint records them."""
        return {"data_source": self.data_source.state_dict(), "pending": [identity(g) for g in self._pending]}

    def _finish(
        self, step: int, batch: Batch, stats: BatchStats, seconds: float, evaluated: dict[str, float]
    ) -> tuple[list[Sample], dict[str, Any]]:
        s = self.settings
        left = not_kept(batch.drawn, batch.complete)
        dump_rollouts(Path(s.output_dir) / "rollouts" / f"step_{step:06d}.jsonl", batch.complete, left)
        if s.rollout.save_rollout_data:
            dump_rollout_data(Path(s.output_dir) / "rollout_data" / f"step_{step:06d}.jsonl.gz", batch.complete)
        metrics = batch_metrics(stats, batch.complete, seconds)  # every complete group, trained on or not
        if s.rollout.dynamic_sampling:
            metrics.update(batch.metrics())
        metrics.update({f"dropped/{k}": v for k, v in stats.reasons.items()})
        timeline = summarize(run_of(x).timeline for x in [*(x for g in batch.complete for x in g), *left])
        metrics.update(timeline.metrics() if timeline else {})  # every attempt's time, kept or dropped
        metrics.update(self.last_sync)  # the sync that happened before this rollout was collected, reported once
        metrics.update(evaluated)
        self.last_sync = {}
        return [x for g in batch.trained for x in g], metrics

    def evaluate(self, step: int) -> dict[str, float]:
        """EVAL_SAMPLES attempts per evaluation instance on the weights this step's rollout uses, through the same
        engine, binary verdicts; the report goes to ``OUTPUT_DIR/eval_step_N/`` and its figures into the metrics."""
        s, t0 = self.settings, time.monotonic()
        rows = load_instances(s.eval_dataset or s.dataset_source, s.eval_instance_list)
        out = Path(s.output_dir) / f"eval_step_{step:06d}"
        results = self._call(
            run_attempts(rows, s, out, engine=self.engine, label=step_label(step, s.num_rollouts, "evaluation"))
        )
        report = build_report(
            results,
            dataset_ids=[r["instance_id"] for r in rows],
            submitted_ids=[r["instance_id"] for r in rows],
            seconds=time.monotonic() - t0,
        )
        (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        return {
            "eval/resolve_rate": report["resolve_rate"],
            "eval/pass@1": report["pass_at_k"].get("1", 0.0),
            "eval/graded_attempts": report["graded_attempts"],
            "eval/errors": report["error_instances"],
            "time/eval": time.monotonic() - t0,
        }

    def sync_weights(self, update: WeightUpdate) -> None:
        """Serve ``update`` before the next rollout; its metrics go out with that rollout. Model calls in flight
        (PARTIAL_ROLLOUTS) may get tokens of ``update.version`` from the moment the push starts."""
        self.engine.begin_sync(update.version)
        self.last_sync = self.weight_sync.push(update.payload, update.version)
        self.engine.set_weight_version(update.version)
        self._version = update.version
        if self._pool is not None and self._pool.steps:  # not the resumed weights' push, before any step
            pool = self._pool
            self._on_loop(lambda: pool.synced(self._wanted()))

    def state_dict(self) -> dict[str, Any]:
        """The position as of the batches collected so far: batches in flight are not trained on yet. With the pool,
        the position after every draw and, as ``pending``, every group drawn and not trained on (draw order)."""
        if self._pool is not None:
            pool = self._pool
            untrained = self._on_loop(lambda: [*pool.untrained(), *self._pending])
            return {"data_source": self.data_source.state_dict(), "pending": [identity(g) for g in untrained]}
        if self._in_flight:
            return dict(next(iter(self._in_flight.values())).position)
        return self._position()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the position; the groups the checkpoint held untrained are served first, as they were drawn."""
        self.data_source.load_state_dict(state["data_source"])
        pending = state.get("pending") or []
        rows = {r["instance_id"]: r for r in getattr(self.data_source, "dataset", [])} if pending else {}
        self._pending = tuple(regroup(ident, rows) for ident in pending)

    def close(self) -> None:
        try:
            self._in_flight.clear()
            self._call(_cancel_all())  # every rollout still running: their containers are removed on the way out
            self._call(self.engine.stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)


async def _spawn(coro: Any) -> asyncio.Task:
    return asyncio.ensure_future(coro)


async def _wait(task: asyncio.Task) -> Any:
    return await task


async def _cancel_all() -> None:
    """Cancel every task on the loop, as ``asyncio.run`` does before it closes one: a batch's or a pool group's task
    (which cancels the group tasks it started) and any other still running, an evaluation's included."""
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def make_engine(settings: Settings, *, upstream: str, model: str, served_model: str | None = None) -> RolloutRunner:
    """Where the rollouts run: this process (ROLLOUT_BACKEND=local) or the Ray cluster's workers (ray)."""
    if settings.rollout.rollout_backend == "ray":
        from qwen_swe.rollout.ray_pool import RayRolloutPool  # late: imports ray, which only this backend needs

        return RayRolloutPool(settings, upstream=upstream, model=model, served_model=served_model)
    return RolloutEngine(settings, upstream=upstream, model=model, served_model=served_model)


def make_driver(settings: Settings) -> RolloutSource:
    """The driver the trainer builds on rank 0."""
    if settings.train.train_mode == "sft":
        return DemoDriver(settings)  # the warm start: demonstrations, no rollouts
    if settings.train.load_rollout_data:
        return ReplayDriver(settings)  # a saved run's rollouts, no server
    upstream = settings.inference.url
    if not upstream:
        raise ConfigError(
            "no inference server: set VLLM_URL, or start the run with run_grpo.sh "
            "(which starts the embedded server and records its URL in settings.json)"
        )
    return RolloutDriver(
        settings, upstream=upstream, model=settings.model_name, served_model=settings.inference.served_model_name
    )
