"""PARTIAL_ROLLOUTS' streaming pool: groups stay in flight across steps, a step takes the first ROLLOUT_BATCH_SIZE
groups to complete, and the groups still generating carry over to later steps (their model calls interrupted at each
weight sync and resumed with the new weights).

A group is handed to the trainer only when every sample has ended: its advantages are relative to the whole group.
Among the complete groups a step takes the oldest first (the lowest weight version any sample started on), then the
first to complete, so a carried group is trained before it can go stale.

How many groups may start is AReaL's staleness control, counted in credits: ``(1 + MAX_STALENESS) x
ROLLOUT_BATCH_SIZE`` at the start, ``ROLLOUT_BATCH_SIZE`` more at each weight sync (or, for a step that made no
update, at the next step's start: the version did not move), one more for each group that leaves without being
trained (lost to the infrastructure, or too old). A group started on version v is then taken by
the step at version v + MAX_STALENESS at the latest unless it is one of the slowest; a group that is older anyway
(a straggler) is not waited for: it is written off (its credit goes to a fresh group) and its rollout cancelled (it
can never be trained: its slot and CPU go to the fresh group, its machines are removed on the way out). Once its task
has ended it is returned with a step's samples, every sample dropped as stale, so that ``drop_stale`` drops and counts
it as it does a complete group too old to train. A step never waits on a pool too small to fill it: when fewer than
ROLLOUT_BATCH_SIZE groups are left (steps with no update add no credit), more start.

The pool holds no more groups than the run's remaining steps can train plus OVER_SAMPLING (slime's
``--over-sampling-batch-size``), so that the last steps, too, take the first groups to complete rather than every
group in flight, stragglers included; the groups left when the run ends are cancelled untrained.

AReaL bounds the groups started by the weight version; counting a step without an update as a version keeps the
pool from starving when steps skip their update (a batch of equal rewards). Everything here runs on the driver's
event loop.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from qwen_swe.data.prompts import build_prompt
from qwen_swe.data.sample import Sample, Status, drop, run_of
from qwen_swe.errors import DataError, DropReason

Groups = list[list[Sample]]


@dataclass
class PoolGroup:
    group: list[Sample]
    drawn_at: int  # how many steps had been taken from the pool when it was drawn
    task: asyncio.Task  # the engine's run of this one group: [group] when complete, [] when it lost samples
    started: float = field(default_factory=time.monotonic)
    done: int | None = None  # completion order
    ended: float | None = None
    written_off: bool = False  # too old to train while running: its credit went to a fresh group, its task cancelled
    write_off: str = ""  # why, for its samples' record

    def complete(self) -> bool:
        return self.done is not None and not self.task.cancelled() and bool(self.task.result())

    def oldest(self) -> int | None:
        """The oldest weight version a sample of the group started on (None: no sample has started)."""
        started = [v for x in self.group if (v := run_of(x).weight_version) is not None]
        return min(started) if started else None


@dataclass
class Taken:
    """What one step takes out of the pool."""

    trained: Groups  # the step's ROLLOUT_BATCH_SIZE complete groups
    stale: Groups  # complete, but older than MAX_STALENESS allows (``drop_stale`` drops them)
    lost: Groups  # ended without every sample (the infrastructure's drops)
    written_off: Groups  # cancelled while running, too old to train: every sample dropped as stale
    metrics: dict[str, float]


class RolloutPool:
    """Groups drawn and not yet handed to the trainer, each running on its own."""

    def __init__(
        self,
        run: Callable[[list[Sample]], Awaitable[Groups]],
        draw: Callable[[int], Groups],
        batch_size: int,
        max_staleness: int,
    ) -> None:
        self._run, self._draw = run, draw
        self.batch_size, self.max_staleness = batch_size, max_staleness
        self.credit = (1 + max_staleness) * batch_size
        self.groups: list[PoolGroup] = []  # draw order
        self.steps = 0
        self._ended = 0
        self._synced = False  # a sync since the last step was taken

    # --- starting groups ------------------------------------------------------------------------------
    def fill(self, wanted: int) -> None:
        """Start groups while credit lasts, with at most ``wanted`` in the pool (what the run's remaining steps
        can still train, plus OVER_SAMPLING)."""
        live = sum(not e.written_off and not (e.done is not None and not e.complete()) for e in self.groups)
        n = min(self.credit, wanted - live)
        if n <= 0:
            return
        for group in self._draw(n):
            self.credit -= 1
            entry = PoolGroup(group, self.steps, asyncio.ensure_future(self._run(group)))
            entry.task.add_done_callback(functools.partial(self._ended_one, entry))
            self.groups.append(entry)

    def synced(self, wanted: int) -> None:
        """New weights are served: a step's worth of groups may start on them."""
        self.credit += self.batch_size
        self._synced = True
        self.fill(wanted)

    def _ended_one(self, entry: PoolGroup, _task: asyncio.Task) -> None:
        entry.done, entry.ended = self._ended, time.monotonic()
        self._ended += 1
        if entry.task.cancelled() or entry.task.exception() is not None:
            return
        if kept := entry.task.result():
            entry.group = kept[0]  # DROPPED_POLICY=replace: the refilled samples in place of the dropped ones
        elif not entry.written_off:  # a written-off group's credit went to a fresh group already
            self.credit += 1  # lost samples: a fresh group takes its place

    # --- one step -------------------------------------------------------------------------------------
    def _stale(self, entry: PoolGroup, version: int) -> bool:
        oldest = entry.oldest()
        return oldest is not None and oldest < version - self.max_staleness

    def _write_off(self, version: int) -> None:
        for e in self.groups:
            if e.done is None and not e.written_off and self._stale(e, version):
                e.written_off = True
                e.write_off = (
                    f"written off at weight version {version}: started on {e.oldest()}, more than MAX_STALENESS="
                    f"{self.max_staleness} versions behind; its rollout was cancelled"
                )
                self.credit += 1
                e.task.cancel()  # never to be trained: its slot goes to a fresh group now, not when it ends

    def _ready(self, version: int) -> list[PoolGroup]:
        fresh = [e for e in self.groups if e.complete() and not self._stale(e, version)]
        return sorted(fresh, key=lambda e: (e.oldest(), e.done))

    async def take(self, version: int, wanted: int) -> Taken:
        """Wait until ROLLOUT_BATCH_SIZE groups are complete and trainable at ``version``; take them, and every
        group that ended unusable. ``wanted``: groups the run's remaining steps, this one included, can train."""
        t0 = time.monotonic()
        if self.steps and not self._synced:  # the last step made no update: its version counts as a new one
            self.credit += self.batch_size
        self._synced = False
        while True:
            self._write_off(version)
            self.fill(wanted)  # the credit of groups lost or written off since the last look
            ready = self._ready(version)
            if len(ready) >= self.batch_size:
                break
            usable = [e for e in self.groups if e.done is None and not e.written_off]
            short = self.batch_size - len(ready) - len(usable)
            if short > 0:  # too few left to fill the step, whatever the credit says
                self.credit = max(self.credit, short)
                self.fill(wanted + short)
            running = [e.task for e in self.groups if e.done is None]
            if not running:
                break  # the data ran out: the step gets what there is
            await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        taken = ready[: self.batch_size]
        ended = [e for e in self.groups if e.done is not None]
        for e in ended:
            if not e.task.cancelled():
                e.task.result()  # a bug in a rollout propagates here
        stale = [e for e in ended if e.complete() and self._stale(e, version)]
        off = [e for e in ended if e.task.cancelled()]
        lost = [e for e in ended if not e.complete() and not e.task.cancelled()]
        for e in off:
            for x in e.group:
                drop(x, DropReason.STALE, e.write_off)
        out = {id(e) for e in [*taken, *stale, *off, *lost]}
        self.groups = [e for e in self.groups if id(e) not in out]
        metrics = self._metrics(taken, stale, off, time.monotonic() - t0)
        self.steps += 1
        return Taken(
            [e.group for e in taken], [e.group for e in stale], [e.group for e in lost], [e.group for e in off], metrics
        )

    def _metrics(
        self, taken: list[PoolGroup], stale: list[PoolGroup], off: list[PoolGroup], wait: float
    ) -> dict[str, float]:
        ages = [(e.ended or e.started) - e.started for e in taken]
        return {
            "time/rollout_wait": wait,
            "async/carried_groups": sum(e.drawn_at < self.steps for e in taken),
            "async/stale_groups": len(stale) + len(off),  # too old to train: complete, or written off and cancelled
            "async/written_off_groups": len(off),
            "async/spanning_samples": sum(len(set(x.weight_versions)) > 1 for e in taken for x in e.group),
            "async/group_seconds_mean": sum(ages) / len(ages) if ages else 0.0,
            "async/group_seconds_max": max(ages, default=0.0),
            "async/pool_groups": len(self.groups),
            "async/pool_in_flight": sum(e.done is None for e in self.groups),
            "async/pool_written_off": sum(e.written_off and e.done is None for e in self.groups),
        }

    # --- stopping, resuming ---------------------------------------------------------------------------
    def untrained(self) -> Groups:
        """Every group drawn and not handed out (running, or complete and waiting), in draw order. A written-off
        group is not among them: it was dropped when it was cancelled, so a resumed run does not draw it again, as
        the run that wrote it off never trains it."""
        return [e.group for e in self.groups if not e.written_off]


def identity(group: list[Sample]) -> dict[str, Any]:
    """What a checkpoint keeps of a group not yet trained on: enough to draw it again as it was drawn."""
    first = group[0]
    return {
        "instance_id": first.metadata.get("instance_id"),
        "group_index": first.group_index,
        "index": first.index,
        "size": len(group),
    }


def regroup(ident: dict[str, Any], rows: dict[str, dict[str, Any]]) -> list[Sample]:
    """The group ``identity`` describes, fresh (no attempt made), with its original group and sample indices, built
    from the instance's row as ``SWEBenchDataSource`` builds a group."""
    iid = ident["instance_id"]
    row = rows.get(iid)
    if row is None:
        raise DataError(
            f"the checkpoint holds a group of instance {iid} that is not in the run's instances; resume with the "
            "same DATASET and INSTANCE_LIST"
        )
    prompt = build_prompt(row)
    return [
        Sample(
            group_index=ident["group_index"],
            index=int(ident["index"]) + i,
            prompt=prompt,
            label=iid,
            metadata={**copy.deepcopy(row), "instance_id": iid},
            status=Status.PENDING,
        )
        for i in range(int(ident["size"]))
    ]
