"""The built-in GRPO trainer: FSDP2 ranks under torchrun, rank 0 driving the rollouts.

One step: rank 0 asks the driver for a batch sampled with the current weights, turns rewards into
group-relative advantages and shares the batch; every rank trains on its share; one optimizer step; the
new weights go out as an HF folder and into the inference server *before* the next rollout (MAX_STALENESS=0).
With MAX_STALENESS=N >= 1 the rollouts of the next N steps run in the background while a step trains, new weights
reach the server while they are in flight, and a sample more than N versions behind the trainer is dropped; the
rest are trained with the PPO ratio against their rollout log-probs (``Prefetch``, ``drop_stale``). Every
``SAVE_INTERVAL`` steps a checkpoint; re-running with the same OUTPUT_DIR resumes from the newest one and
first puts the resumed weights into the server. With COLOCATE the trainer and the server take turns on the same GPUs:
the server sleeps for each step and its checkpoint, the trainer's state waits in host memory during rollouts
(``colocate.py``).

    python -m torch.distributed.run --standalone --nproc_per_node N -m qwen_swe.train.trainer \\
        --settings OUTPUT_DIR/settings.json

Backend: NCCL on GPUs, gloo on CPU. Errors on rank 0 (rollout, export, sync) are broadcast so that no
rank is left waiting in a collective (``on_rank0``). The step's maths is in ``update.py``, the weights' way to the
server in ``publish.py``, the rollout side's contract in ``qwen_swe/rollout/contract.py``.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from qwen_swe.config.settings import Settings
from qwen_swe.errors import DropReason, TrainerError
from qwen_swe.inference.client import InferenceClient
from qwen_swe.inference.sleep import ServerSleep
from qwen_swe.rollout.contract import RolloutSource
from qwen_swe.rollout.driver import make_driver
from qwen_swe.rollout.timeline import Clock
from qwen_swe.supervise import die_with_parent, run_rank
from qwen_swe.train import checkpoint as ckpt
from qwen_swe.train.colocate import Colocation
from qwen_swe.train.metrics import MetricsLog
from qwen_swe.train.offload import TrainerOffload
from qwen_swe.train.offpolicy import Prefetch, drop_stale
from qwen_swe.train.policy import PolicyModel, Reference, build_policy, parameter_bytes
from qwen_swe.train.publish import WeightExporter, on_rank0, publish, rank0_only
from qwen_swe.train.update import clip_and_step, prepare_batch, train_on_batch, warmup_lr

log = logging.getLogger("qwen_swe.trainer")

SourceFactory = Callable[[Settings], RolloutSource]


class PhaseTimer:
    """Seconds per phase of a step as ``time/<phase>`` metrics (0 for a phase that did not run), ``time/step`` the
    whole step; and the phases as a timeline (``phases``: the record format of ``qwen_swe/rollout/timeline.py``), which
    the viewer draws below the step's rollouts."""

    PHASES = ("rollout", "swap", "train", "save", "sync")  # swap: COLOCATE's turn change before the step

    def __init__(self) -> None:
        self.clock = Clock()
        self.seconds = dict.fromkeys(self.PHASES, 0.0)

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            t1 = time.monotonic()
            self.seconds[phase] += t1 - t0
            self.clock.add(phase, t0, t1)

    def metrics(self) -> dict[str, float]:
        return {**{f"time/{k}": v for k, v in self.seconds.items()}, "time/step": self.clock.record()["seconds"]}

    def phases(self) -> dict[str, Any]:
        return self.clock.record()


@dataclass
class Learner:
    """What every rank trains: the policy, its optimizer, the frozen reference (KL_LOSS_COEF > 0) and the export."""

    policy: PolicyModel
    optimizer: torch.optim.Optimizer
    reference: Reference | None
    exporter: WeightExporter
    checkpoint_bytes: int

    @classmethod
    def build(cls, settings: Settings, model_path: str, device: torch.device) -> Learner:
        tr = settings.train
        policy = build_policy(
            model_path,
            device=device,
            lora_rank=tr.lora_rank,
            lora_alpha=tr.lora_alpha,
            activation_checkpointing=tr.activation_checkpointing,
            mixed_precision=tr.mixed_precision,
            weight_loading=tr.weight_loading,
            temperature=settings.logprob_temperature,
        )
        optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=tr.lr, weight_decay=0.0)
        reference = None
        if tr.kl_loss_coef > 0:
            reference = Reference.build(
                policy,
                model_path,
                device=device,
                lora=tr.lora_rank > 0,
                mixed_precision=tr.mixed_precision,
                weight_loading=tr.weight_loading,
            )
        return cls(
            policy,
            optimizer,
            reference,
            WeightExporter(Path(settings.output_dir), model_path, policy),
            ckpt.expected_bytes(*parameter_bytes(policy)),
        )


# --- the loop ---------------------------------------------------------------------------------------------


def _init_distributed(settings: Settings) -> tuple[bool, torch.device]:
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if dist.is_initialized():
        return False, device
    # rank 0 may spend a whole rollout (ROLLOUT_TIMEOUT) in generate while the others wait in a broadcast
    timeout = timedelta(seconds=max(1800.0, 1.5 * settings.rollout.rollout_timeout + 600.0))
    backend = "nccl" if cuda else "gloo"
    if "RANK" in os.environ:
        dist.init_process_group(backend, timeout=timeout)
    else:  # plain single process: a world of one
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    return True, device


def _seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train(settings: Settings, source: RolloutSource | None, *, model_path: str) -> dict:
    """Run steps up to ``settings.num_rollouts`` (resuming from OUTPUT_DIR); return the last step's metrics.

    Collective: call on every rank; ``source`` is used on rank 0 only (``None`` elsewhere).
    """
    owns_pg, device = _init_distributed(settings)
    try:
        return _train(settings, source, model_path, device)
    finally:
        if owns_pg:
            dist.destroy_process_group()


def _train(settings: Settings, source: RolloutSource | None, model_path: str, device: torch.device) -> dict:
    if dist.get_rank() == 0 and source is None:
        raise TrainerError("rank 0 needs a rollout source (qwen_swe.rollout.driver.make_driver builds the run's)")
    _seed(settings.seed)
    turns = _colocation(settings)
    turns.start()  # COLOCATE: the server sleeps before the trainer allocates
    learner = Learner.build(settings, model_path, device)
    turns.attach(
        TrainerOffload(learner.optimizer, learner.policy, learner.reference.copy if learner.reference else None)
    )
    step, version = _resume(settings, source, learner, turns)
    rollouts = on_rank0(lambda: Rollouts(settings, rank0_only(source), step), "the rollout pipeline", share=False)
    metrics_log = (
        MetricsLog(settings.output_dir, resume_step=step, report_to=settings.train.reporters, config=settings.to_dict())
        if dist.get_rank() == 0
        else None
    )
    last: dict = {}
    try:
        while step < settings.num_rollouts:
            timer = PhaseTimer()
            with timer("rollout"):
                items, metrics = on_rank0(lambda: rollouts.batch(step, version), f"rollout of step {step}")  # noqa: B023 - called at once
            metrics.update(
                step=step,
                weight_version=version,
                skipped_update=True,
                grad_norm=0.0,
                loss=0.0,
                dropped_samples=_dropped(metrics),
            )
            trained = _trainable(items)
            save = (step + 1) % settings.train.save_interval == 0 or step + 1 == settings.num_rollouts
            if trained or save:
                with timer("swap"):
                    turns.to_trainer()  # COLOCATE: the server sleeps, the trainer's state comes back
            if trained:
                with timer("train"):
                    metrics.update(_update(settings, learner, items, version, device))
                version += 1
                metrics.update(skipped_update=False, weight_version=version)
            else:
                log.warning(
                    "step %d: no trainable samples (%d zero-variance groups); optimizer step skipped",
                    step,
                    metrics["zero_variance_groups"],
                )
            step += 1
            if save:  # before the push: under COLOCATE the optimizer state leaves the GPUs with it
                with timer("save"):
                    _save(settings, source, learner, step, version)
            if trained or save:
                with timer("sync"):  # SFT: nothing serves between steps, so only the saved step's weights go out
                    push = (save and version > 0) if settings.train.train_mode == "sft" else trained
                    turns.to_rollouts(_push(settings, source, learner, version) if push else None)
            last = {**metrics, **turns.metrics(), **timer.metrics(), "phases": timer.phases()}
            if "timeline/model_seconds" in last and last["time/step"] > 0 and not settings.train.max_staleness:
                # the server's busy share of the whole step (a step's rollouts run within it only at MAX_STALENESS=0)
                last["timeline/model_busy_step"] = last["timeline/model_seconds"] / last["time/step"]
            if metrics_log is not None:
                metrics_log.write(last, settings.num_rollouts)
    finally:
        if metrics_log is not None:
            metrics_log.close()
    box = [last]
    dist.broadcast_object_list(box, src=0)
    return box[0]


# --- the loop's stages ------------------------------------------------------------------------------------


def _colocation(settings: Settings) -> Colocation:
    """COLOCATE's turns (nothing to do without it); rank 0 talks to the server's sleep routes."""
    server = None
    if settings.placement.colocate and dist.get_rank() == 0:
        inf = settings.inference
        assert inf.url is not None  # the run started or was given its server
        server = ServerSleep(
            InferenceClient(inf.url, timeout=inf.request_timeout, api_key=inf.api_key), timeout=inf.request_timeout
        )
    return Colocation(settings.placement.colocate, server)


def _push(settings: Settings, source: RolloutSource | None, learner: Learner, version: int) -> Callable[[], None]:
    return lambda: publish(settings, source, learner.policy, learner.exporter, version)


def _resume(settings: Settings, source: RolloutSource | None, learner: Learner, turns: Colocation) -> tuple[int, int]:
    """(step, weight version) to start from: the newest checkpoint's, whose weights the server gets first; then the
    GPUs go to the rollouts (COLOCATE)."""
    out = Path(settings.output_dir)
    step, version = 0, 0
    latest = on_rank0(lambda: ckpt.latest_checkpoint(out), "checkpoint discovery")
    if latest is not None:
        state = ckpt.load_checkpoint(latest, learner.policy, learner.optimizer)
        step, version = int(state["step"]), int(state["weight_version"])
        log.info("resuming from %s: step %d, weight version %d", latest, step, version)
        if state.get("driver") is not None:
            on_rank0(lambda: rank0_only(source).load_state_dict(state["driver"]), "driver.load_state_dict")
    turns.to_rollouts(_push(settings, source, learner, version) if latest is not None else None)
    if dist.get_rank() == 0:
        settings.write(out)
    return step, version


class Rollouts:
    """Rank 0: a step's batch, sampled now (MAX_STALENESS=0) or taken from the pipeline, made trainable."""

    def __init__(self, settings: Settings, source: RolloutSource, first_step: int) -> None:
        self.settings, self.source, self.prefetch = settings, source, None
        if settings.train.max_staleness:
            self.prefetch = Prefetch(source, settings.train.max_staleness, first_step, settings.num_rollouts - 1)

    def batch(self, step: int, version: int) -> tuple[list[dict], dict]:
        s = self.settings
        lag: dict[str, float] = {}
        if self.prefetch is None:
            samples, rollout_metrics = self.source.generate(step, version)
        else:  # the next batches start before this one trains; this one may be older than the weights
            samples, rollout_metrics = self.prefetch.batch(step, version)
            samples, lag = drop_stale(samples, version, s.train.max_staleness)
        items, metrics = prepare_batch(samples, s, version)
        numeric = {
            k: float(v)
            for k, v in {**(rollout_metrics or {}), **lag}.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        if s.rollout.dynamic_sampling:  # the policy's rates: every complete group, also those not trained on
            metrics.update({k: numeric.get(f"rollout/{k}", metrics[k]) for k in ("reward_mean", "resolve_rate")})
        return items, {**numeric, **metrics}


def _dropped(metrics: dict) -> float:
    return metrics.get("rollout/dropped_samples", metrics.get("dropped", 0)) + metrics.get(
        f"dropped/{DropReason.STALE.value}", 0
    )


def _trainable(items: list[dict]) -> bool:
    return bool(items) and any(x["advantage"] != 0.0 and any(x["loss_mask"]) for x in items)


def _update(settings: Settings, learner: Learner, items: list[dict], version: int, device: torch.device) -> dict:
    """Collective: gradients of this rank's share, then one optimizer step at the warm-up's learning rate."""
    metrics = train_on_batch(learner.policy, items, settings, device, reference=learner.reference)
    lr = warmup_lr(settings.train.lr, settings.train.lr_warmup_steps, version)  # version = updates so far
    for group in learner.optimizer.param_groups:
        group["lr"] = lr
    metrics["lr"] = lr
    metrics["grad_norm"] = clip_and_step(learner.policy, learner.optimizer, settings.train.grad_clip)
    return metrics


def _save(settings: Settings, source: RolloutSource | None, learner: Learner, step: int, version: int) -> None:
    state = {
        "step": step,
        "weight_version": version,
        "settings": settings.to_dict(),
        "driver": source.state_dict() if source is not None else None,
    }
    ckpt.save_checkpoint(
        Path(settings.output_dir),
        step,
        learner.policy,
        learner.optimizer,
        state=state,
        keep=settings.train.keep_checkpoints,
        needed_bytes=learner.checkpoint_bytes,
    )


# --- the entry point --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None, *, factory: SourceFactory = make_driver) -> int:
    """torchrun entry: every rank reads the run's settings.json (written by the run's entry point, the only place
    that parses the environment); rank 0 builds the rollout source with ``factory``."""
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--settings", required=True, type=Path, help="the run's settings.json")
    own = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    die_with_parent()  # a rank whose torchrun is gone has nobody to report to
    rank = int(os.environ.get("RANK", 0))
    logging.basicConfig(
        level=logging.INFO if rank == 0 else logging.WARNING,
        format=f"%(asctime)s [rank {rank}] %(name)s %(levelname)s %(message)s",
    )
    settings = Settings.from_json(own.settings)
    owns_pg, _ = _init_distributed(settings)
    source: RolloutSource | None = None
    try:
        source = on_rank0(lambda: factory(settings), "the rollout source", share=False)
        train(settings, source, model_path=settings.model_name)
        return 0
    finally:
        if source is not None:
            source.close()
        if owns_pg and dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    run_rank(main)
