"""The built-in GRPO trainer: FSDP2 ranks under torchrun, rank 0 driving the rollouts.

One step: rank 0 asks the driver for a batch sampled with the current weights, turns rewards into
group-relative advantages and shares the batch; every rank trains on its share; one optimizer step; the
new weights go out as an HF folder and into the inference server *before* the next rollout (MAX_STALENESS=0).
With MAX_STALENESS=N >= 1 the rollouts of the next N steps run in the background while a step trains, new weights
reach the server while they are in flight, and a sample more than N versions behind the trainer is dropped; the
rest are trained with the PPO ratio against their rollout log-probs (``Prefetch``, ``drop_stale``). Every
``SAVE_INTERVAL`` steps a checkpoint; re-running with the same OUTPUT_DIR resumes from the newest one and
first puts the resumed weights into the server.

    python -m torch.distributed.run --standalone --nproc_per_node N -m qwen_swe.train.trainer \\
        --settings OUTPUT_DIR/settings.json

Backend: NCCL on GPUs, gloo on CPU. Errors on rank 0 (rollout, export, sync) are broadcast so that no
rank is left waiting in a collective.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import math
import os
import random
import shutil
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np
import torch
import torch.distributed as dist

from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import Sample
from qwen_swe.errors import DropReason, TrainerError
from qwen_swe.rollout.driver import make_driver
from qwen_swe.supervise import die_with_parent, run_rank
from qwen_swe.train import checkpoint as ckpt
from qwen_swe.train.grpo import (
    group_advantages,
    logprob_mismatch,
    loss_denominator,
    policy_loss,
    zero_variance_mask,
)
from qwen_swe.train.metrics import MetricsLog
from qwen_swe.train.offpolicy import Prefetch, drop_stale
from qwen_swe.train.policy import (
    PolicyModel,
    Reference,
    build_policy,
    full_state_dict,
    make_micro_batch,
    parameter_bytes,
    save_hf_folder,
)
from qwen_swe.train.streaming import weight_buckets

log = logging.getLogger("qwen_swe.trainer")

KEEP_WEIGHT_VERSIONS = 2


class RolloutDriver(Protocol):
    """Rank 0's rollout side (``qwen_swe.rollout.driver.RolloutDriver`` implements it)."""

    def generate(self, step: int, weight_version: int) -> tuple[list[Sample], dict]: ...
    def sync_weights(self, hf_dir: Path, version: int) -> None: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


# --- batch: samples -> advantages -> per-rank micro-batches ---------------------------------------------

def prepare_batch(samples: Sequence[Sample], settings: Settings, version: int) -> tuple[list[dict], dict]:
    """Validate samples, compute advantages per group, drop zero-variance groups; plain dicts + metrics."""
    groups: dict[int, list[Sample]] = {}
    for s in samples:
        _validate(s, version, settings.train.max_staleness)
        groups.setdefault(int(s.group_index), []).append(s)
    items: list[dict] = []
    zero_var = 0
    sft = settings.train.train_mode == "sft"
    for members in groups.values():
        if sft:  # advantage 1 at ratio 1 (no rollout log-probs): the negative log-likelihood's gradient
            items.extend({"tokens": list(s.tokens), "response_length": int(s.response_length),
                          "loss_mask": list(s.loss_mask), "advantage": 1.0, "rollout_log_probs": None}
                         for s in members)
            continue
        rewards = torch.tensor([[float(s.reward) for s in members]])
        flat = bool(zero_variance_mask(rewards)[0])
        zero_var += flat
        if flat and settings.train.drop_zero_variance:
            continue
        for s, adv in zip(members, group_advantages(rewards, settings.train.advantage_mode)[0].tolist()):
            items.append({"tokens": list(s.tokens), "response_length": int(s.response_length),
                          "loss_mask": list(s.loss_mask), "advantage": adv,
                          "rollout_log_probs": list(s.rollout_log_probs) if s.rollout_log_probs is not None else None})
    n = max(len(samples), 1)
    metrics = {
        "samples": len(samples), "groups": len(groups), "zero_variance_groups": zero_var,
        "trainable_samples": len(items),
        "reward_mean": sum(float(s.reward) for s in samples) / n,
        "resolve_rate": sum(bool(s.metadata.get("resolved")) for s in samples) / n,
        "response_length_mean": sum(s.response_length for s in samples) / n,
    }
    return items, metrics


def _validate(s: Sample, version: int, max_staleness: int = 0) -> None:
    who = f"sample {s.metadata.get('instance_id', '?')} (group {s.group_index}, index {s.index})"
    got = s.metadata.get("weight_version")
    if got is None or not 0 <= version - int(got) <= max_staleness:
        raise TrainerError(f"{who} was sampled with weight version {got}, the trainer is at {version} "
                           f"(MAX_STALENESS={max_staleness}): the driver must stamp metadata['weight_version'] "
                           "and serve the synced weights")
    if s.group_index is None or s.reward is None or isinstance(s.reward, dict):
        raise TrainerError(f"{who} needs group_index and a float reward, got {s.group_index!r}, {s.reward!r}")
    r = s.response_length
    if not 1 <= r < len(s.tokens):
        raise TrainerError(f"{who}: response_length {r} must be in [1, len(tokens)={len(s.tokens)})")
    if s.loss_mask is None or len(s.loss_mask) != r:
        raise TrainerError(f"{who}: loss_mask must have response_length={r} entries")
    if s.rollout_log_probs is not None and len(s.rollout_log_probs) != r:
        raise TrainerError(f"{who}: rollout_log_probs has {len(s.rollout_log_probs)} entries, expected {r}")


def shard_batch(items: Sequence[dict], rank: int, world: int, micro: int) -> list[list[dict]]:
    """This rank's micro-batches. Every rank gets the *same number* (FSDP collectives must match); a rank
    with nothing left runs a copy of a sample with an all-zero loss mask, which adds no gradient."""
    order = sorted(range(len(items)), key=lambda i: -len(items[i]["tokens"]))
    mine = [items[i] for i in order[rank::world]]
    count = math.ceil(math.ceil(len(items) / world) / micro)
    dummy = {**items[order[0]], "loss_mask": [0] * items[order[0]]["response_length"], "advantage": 0.0}
    return [mine[k * micro:(k + 1) * micro] or [dummy] for k in range(count)]


def train_on_batch(policy: PolicyModel, items: Sequence[dict], settings: Settings, device: torch.device,
                   pad_id: int = 0, reference: Reference | None = None) -> dict[str, float]:
    """Forward/backward of this rank's share with the global normaliser; returns globally reduced metrics.

    With a ``reference`` (KL_LOSS_COEF > 0) each micro-batch first gets its reference log-probs, without grad."""
    world = dist.get_world_size()
    masks = [torch.tensor(x["loss_mask"], dtype=torch.float32) for x in items]
    full_mask = torch.nn.utils.rnn.pad_sequence(masks, batch_first=True)
    denom = loss_denominator(full_mask, settings.train.loss_norm)
    tr = settings.train
    # loss, tokens, clip, kl, ratio, entropy, nll, kl_ref, |logp - rollout|, its k3, tokens with rollout log-probs
    sums = torch.zeros(11, dtype=torch.float64)  # token-weighted, so the all-reduce gives global means
    for mb_items in shard_batch(items, dist.get_rank(), world, tr.micro_batch_size):
        mb = make_micro_batch(mb_items, device, pad_id)
        ref = reference.logprobs(mb) if reference is not None else None
        packed_lp, packed_ent = policy(mb.input_ids, mb.attention_mask, mb.positions, mb.targets)
        logp, ent = mb.unpack(packed_lp), mb.unpack(packed_ent)
        mask = mb.pad([x["loss_mask"] for x in mb_items])
        known = torch.tensor([x["rollout_log_probs"] is not None for x in mb_items], device=device)
        rollout = mb.pad([x["rollout_log_probs"] or [] for x in mb_items])
        old = torch.where(known.unsqueeze(1), rollout, logp.detach())  # unknown: on-policy, ratio 1
        adv = torch.tensor([x["advantage"] for x in mb_items], dtype=torch.float32, device=device)
        loss, m = policy_loss(logp, old, adv, mask, tr.clip_eps, tr.upper_clip, tr.loss_norm, denominator=denom,
                              entropy=ent, ref_logprobs=ref, kl_coef=tr.kl_loss_coef, kl_type=tr.kl_loss_type)
        (loss * world).backward()  # FSDP averages gradients over ranks; the loss is already a global mean
        t = m["tokens"]
        nll = float(-(logp.detach() * mask).sum())  # the supervised loss of the trained tokens, for both modes
        gap = logprob_mismatch(logp, rollout, mask * known.unsqueeze(1))  # logp: this step's weights, not yet updated
        g = gap["tokens"]
        sums += torch.tensor([loss.item(), t, m["clip_fraction"] * t, m["approx_kl"] * t, m["ratio_mean"] * t,
                              m["entropy"] * t, nll, m.get("kl_ref", 0.0) * t, gap["logprob_diff_abs"] * g,
                              gap["logprob_kl_k3"] * g, g], dtype=torch.float64)
    sums = sums.to(device)  # NCCL reduces device tensors only
    dist.all_reduce(sums)
    sums = sums.cpu()
    tokens = max(float(sums[1]), 1.0)
    out = {"loss": float(sums[0]), "loss_tokens": float(sums[1]), "clip_fraction": float(sums[2]) / tokens,
           "approx_kl": float(sums[3]) / tokens, "ratio_mean": float(sums[4]) / tokens,
           "entropy": float(sums[5]) / tokens, "nll": float(sums[6]) / tokens}
    if reference is not None:
        out["kl_ref"] = float(sums[7]) / tokens  # before this step's update: how far the policy has moved so far
    if sums[10] > 0:  # absent, not 0, when no sample carries rollout log-probs (SFT)
        out["logprob_diff_abs"] = float(sums[8]) / float(sums[10])
        out["logprob_kl_k3"] = float(sums[9]) / float(sums[10])
    return out


def warmup_lr(lr: float, warmup_steps: int, updates_done: int) -> float:
    """The learning rate of the next update: ``lr * k / warmup_steps`` for update k = updates_done + 1 (from 1),
    then ``lr``. AdamW's first steps move every weight by about the learning rate whatever its gradient, so a few
    groups' noise reaches every weight unless those steps are small."""
    if warmup_steps <= 0:
        return lr
    return lr * min(1.0, (updates_done + 1) / warmup_steps)


def clip_and_step(policy: PolicyModel, optimizer: torch.optim.Optimizer, max_norm: float) -> float:
    params = [p for p in policy.parameters() if p.requires_grad]
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
    norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(norm)


# --- rank-0 work with errors shared across ranks ---------------------------------------------------------

def on_rank0(fn: Callable[[], Any], what: str) -> Any:
    """Run ``fn`` on rank 0 and broadcast its result; a failure there raises on every rank."""
    box: list[Any] = [None]
    error: BaseException | None = None
    if dist.get_rank() == 0:
        try:
            box = [("ok", fn())]
        except Exception as exc:  # noqa: BLE001 - re-raised below on every rank
            error, box = exc, [("error", f"{what} failed on rank 0: {exc!r}")]
    dist.broadcast_object_list(box, src=0)
    kind, value = box[0]
    if kind == "error":
        if error is not None:
            raise error
        raise TrainerError(value)
    return value


class WeightExporter:
    """HF folders ``OUTPUT_DIR/weights/v{version:06d}`` (newest two kept) and their push to the server."""

    def __init__(self, output_dir: Path, model_path: str, policy: PolicyModel) -> None:
        self.root, self.model_path, self.policy = Path(output_dir) / "weights", model_path, policy
        self.tokenizer = None
        if dist.get_rank() == 0:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.bytes = parameter_bytes(policy)[0]

    def export(self, version: int) -> Path:
        """Collective: gather the weights and write the folder on rank 0."""
        sd = full_state_dict(self.policy)
        folder = self.root / f"v{version:06d}"

        def write() -> Path:
            ckpt.check_disk(self.root, self.bytes + ckpt.MARGIN_BYTES)
            self.root.mkdir(parents=True, exist_ok=True)
            save_hf_folder(sd, folder, self.model_path, self.tokenizer)
            # never the folder just written: after a resume from an older checkpoint, newer folders may exist
            versions = sorted(p for p in self.root.glob("v*") if p.is_dir() and p.name[1:].isdigit() and p != folder)
            for old in versions[:max(len(versions) - (KEEP_WEIGHT_VERSIONS - 1), 0)]:
                shutil.rmtree(old, ignore_errors=True)
            return folder

        return on_rank0(write, f"weight export to {folder}")


def publish(settings: Settings, driver: RolloutDriver | None, policy: PolicyModel, exporter: WeightExporter,
            version: int) -> None:
    """Collective: make the server serve weight ``version``. By default through an HF folder (path reload, Modal);
    with WEIGHT_SYNC=broadcast streamed into the server's workers bucket by bucket, nothing written (with LoRA,
    only the adapters; the workers merge them into their base weights)."""
    inf = settings.inference
    if inf.sync_mode != "broadcast":
        folder = exporter.export(version)
        on_rank0(lambda: driver.sync_weights(folder, version), f"driver.sync_weights v{version}")
        return
    stream = weight_buckets(policy, inf.broadcast_bucket_mb << 20, getattr(torch, inf.broadcast_dtype))
    if dist.get_rank() != 0:
        for _ in stream:  # this rank's part of every gather
            pass

    def push() -> None:
        try:
            driver.sync_weights(stream, version)
        finally:
            for _ in stream:  # after a failure on rank 0, finish the gathers the other ranks are in
                pass

    on_rank0(push, f"broadcast of weights v{version}")


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


def train(settings: Settings, driver: RolloutDriver | None, *, model_path: str) -> dict:
    """Run steps up to ``settings.num_rollouts`` (resuming from OUTPUT_DIR); return the last step's metrics.

    Collective: call on every rank; ``driver`` is used on rank 0 only (``None`` elsewhere).
    """
    owns_pg, device = _init_distributed(settings)
    try:
        return _train(settings, driver, model_path, device)
    finally:
        if owns_pg:
            dist.destroy_process_group()


def _train(settings: Settings, driver: RolloutDriver | None, model_path: str, device: torch.device) -> dict:
    rank, out = dist.get_rank(), Path(settings.output_dir)
    if rank == 0 and driver is None:
        raise TrainerError("rank 0 needs a rollout driver (--driver module:function)")
    _seed(settings.seed)
    policy = build_policy(model_path, device=device, lora_rank=settings.train.lora_rank,
                          lora_alpha=settings.train.lora_alpha,
                          activation_checkpointing=settings.train.activation_checkpointing,
                          mixed_precision=settings.train.mixed_precision,
                          weight_loading=settings.train.weight_loading, temperature=settings.logprob_temperature)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=settings.train.lr,
                                  weight_decay=0.0)
    reference = None
    if settings.train.kl_loss_coef > 0:
        reference = Reference.build(policy, model_path, device=device, lora=settings.train.lora_rank > 0,
                                    mixed_precision=settings.train.mixed_precision,
                                    weight_loading=settings.train.weight_loading)
    exporter = WeightExporter(out, model_path, policy)
    ckpt_bytes = ckpt.expected_bytes(*parameter_bytes(policy))

    step, version = 0, 0
    latest = on_rank0(lambda: ckpt.latest_checkpoint(out), "checkpoint discovery")
    if latest is not None:
        state = ckpt.load_checkpoint(latest, policy, optimizer)
        step, version = int(state["step"]), int(state["weight_version"])
        log.info("resuming from %s: step %d, weight version %d", latest, step, version)
        if state.get("driver") is not None:
            on_rank0(lambda: driver.load_state_dict(state["driver"]), "driver.load_state_dict")
        publish(settings, driver, policy, exporter, version)
    if rank == 0:
        settings.write(out)

    metrics_log = MetricsLog(out, resume_step=step) if rank == 0 else None
    pipeline: list[Prefetch] = []  # rank 0's, with MAX_STALENESS >= 1
    if settings.train.max_staleness:
        depth, last_step = settings.train.max_staleness, settings.num_rollouts - 1
        on_rank0(lambda: pipeline.append(Prefetch(driver, depth, step, last_step)), "the rollout pipeline")
    prefetch = pipeline[0] if pipeline else None
    last: dict = {}
    try:
        while step < settings.num_rollouts:
            last = _one_step(settings, driver, policy, optimizer, exporter, step, version, device, prefetch,
                             reference)
            version = int(last["weight_version"])
            step += 1
            if step % settings.train.save_interval == 0 or step == settings.num_rollouts:
                t0 = time.monotonic()
                state = {"step": step, "weight_version": version, "settings": settings.to_dict(),
                         "driver": driver.state_dict() if driver is not None else None}
                ckpt.save_checkpoint(out, step, policy, optimizer, state=state, keep=settings.train.keep_checkpoints,
                                     needed_bytes=ckpt_bytes)
                last["time/save"] = time.monotonic() - t0
                last["time/step"] += last["time/save"]
            if metrics_log is not None:
                metrics_log.write(last, settings.num_rollouts)
    finally:
        if metrics_log is not None:
            metrics_log.close()
    box = [last]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _one_step(settings: Settings, driver: RolloutDriver | None, policy: PolicyModel,
              optimizer: torch.optim.Optimizer, exporter: WeightExporter, step: int, version: int,
              device: torch.device, prefetch: Prefetch | None = None, reference: Reference | None = None) -> dict:
    t0 = time.monotonic()

    def rollout() -> tuple[list[dict], dict]:
        if prefetch is None:
            samples, driver_metrics = driver.generate(step, version)
            lag: dict = {}
        else:  # the next batches start before this one trains; this one may be older than the weights
            samples, driver_metrics = prefetch.batch(step, version)
            samples, lag = drop_stale(samples, version, settings.train.max_staleness)
        items, metrics = prepare_batch(samples, settings, version)
        numeric = {k: float(v) for k, v in {**(driver_metrics or {}), **lag}.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if settings.rollout.dynamic_sampling:  # the policy's rates: every complete group, also those not trained on
            metrics.update({k: numeric.get(f"rollout/{k}", metrics[k]) for k in ("reward_mean", "resolve_rate")})
        return items, {**numeric, **metrics}

    items, metrics = on_rank0(rollout, f"rollout of step {step}")
    t1 = time.monotonic()
    metrics.update(step=step, weight_version=version, skipped_update=True, grad_norm=0.0, loss=0.0,
                   dropped_samples=metrics.get("rollout/dropped_samples", metrics.get("dropped", 0))
                   + metrics.get(f"dropped/{DropReason.STALE.value}", 0))
    trainable = bool(items) and any(x["advantage"] != 0.0 and any(x["loss_mask"]) for x in items)
    t2 = t3 = t1
    if trainable:
        metrics.update(train_on_batch(policy, items, settings, device, reference=reference))
        lr = warmup_lr(settings.train.lr, settings.train.lr_warmup_steps, version)  # version = updates so far
        for group in optimizer.param_groups:
            group["lr"] = lr
        metrics["lr"] = lr
        metrics["grad_norm"] = clip_and_step(policy, optimizer, settings.train.grad_clip)
        version += 1
        t2 = time.monotonic()
        publish(settings, driver, policy, exporter, version)
        t3 = time.monotonic()
        metrics.update(skipped_update=False, weight_version=version)
    else:
        log.warning("step %d: no trainable samples (%d zero-variance groups); optimizer step skipped",
                    step, metrics["zero_variance_groups"])
    metrics.update({"time/rollout": t1 - t0, "time/train": t2 - t1, "time/sync": t3 - t2, "time/save": 0.0,
                    "time/step": time.monotonic() - t0})
    return metrics


def _load_test_driver(spec: str) -> Callable[[Settings], RolloutDriver]:
    """A test double's factory (``--driver tests.module:function``); the run itself uses ``make_driver``."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise TrainerError(f"--driver {spec!r} must look like 'package.module:function'")
    return getattr(importlib.import_module(module), name)  # late: a test double named on the command line


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: every rank reads the run's settings.json (written by the run's entry point, the only place
    that parses the environment); rank 0 builds the rollout driver."""
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--settings", required=True, type=Path, help="the run's settings.json")
    parser.add_argument("--driver", help="tests only: factory(settings) -> RolloutDriver, as 'module:function'")
    own = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    die_with_parent()  # a rank whose torchrun is gone has nobody to report to
    rank = int(os.environ.get("RANK", 0))
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING,
                        format=f"%(asctime)s [rank {rank}] %(name)s %(levelname)s %(message)s")
    settings = Settings.from_json(own.settings)
    factory = _load_test_driver(own.driver) if own.driver else make_driver
    owns_pg, _ = _init_distributed(settings)
    holder: list[RolloutDriver] = []
    driver = None
    try:
        on_rank0(lambda: holder.append(factory(settings)), "the rollout driver")
        driver = holder[0] if holder else None
        train(settings, driver, model_path=settings.model_name)
        return 0
    finally:
        close = getattr(driver, "close", None)
        if callable(close):
            close()
        if owns_pg and dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    run_rank(main)
