"""One update's maths on the trainer's side: samples -> group advantages -> per-rank micro-batches -> the
loss's gradients (globally normalised) -> one clipped optimizer step.

``prepare_batch`` runs on rank 0 and returns plain dicts (what is broadcast to the other ranks); the rest is
collective over the FSDP ranks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist

from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import Sample, run_of
from qwen_swe.errors import TrainerError
from qwen_swe.train.grpo import (
    group_advantages,
    logprob_mismatch,
    loss_denominator,
    policy_loss,
    tis_weights,
    zero_variance_mask,
)
from qwen_swe.train.policy import PolicyModel, Reference, make_micro_batch


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
            items.extend(
                {
                    "tokens": list(s.tokens),
                    "response_length": int(s.response_length),
                    "loss_mask": list(s.loss_mask),
                    "advantage": 1.0,
                    "rollout_log_probs": None,
                }
                for s in members
            )
            continue
        rewards = torch.tensor([[float(s.reward) for s in members]])
        flat = bool(zero_variance_mask(rewards)[0])
        zero_var += flat
        if flat and settings.train.drop_zero_variance:
            continue
        for s, adv in zip(members, group_advantages(rewards, settings.train.advantage_mode)[0].tolist()):
            items.append(
                {
                    "tokens": list(s.tokens),
                    "response_length": int(s.response_length),
                    "loss_mask": list(s.loss_mask),
                    "advantage": adv,
                    "rollout_log_probs": list(s.rollout_log_probs) if s.rollout_log_probs is not None else None,
                }
            )
    n = max(len(samples), 1)
    metrics = {
        "samples": len(samples),
        "groups": len(groups),
        "zero_variance_groups": zero_var,
        "trainable_samples": len(items),
        "reward_mean": sum(float(s.reward) for s in samples) / n,
        "resolve_rate": sum(bool(run_of(s).resolved) for s in samples) / n,
        "response_length_mean": sum(s.response_length for s in samples) / n,
    }
    return items, metrics


def _validate(s: Sample, version: int, max_staleness: int = 0) -> None:
    who = f"sample {s.metadata.get('instance_id', '?')} (group {s.group_index}, index {s.index})"
    got = run_of(s).weight_version
    if got is None or not 0 <= version - int(got) <= max_staleness:
        raise TrainerError(
            f"{who} was sampled with weight version {got}, the trainer is at {version} "
            f"(MAX_STALENESS={max_staleness}): the driver must stamp the sample's weight_version "
            "and serve the synced weights"
        )
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
    return [mine[k * micro : (k + 1) * micro] or [dummy] for k in range(count)]


def train_on_batch(
    policy: PolicyModel,
    items: Sequence[dict],
    settings: Settings,
    device: torch.device,
    pad_id: int = 0,
    reference: Reference | None = None,
) -> dict[str, float]:
    """Forward/backward of this rank's share with the global normaliser; returns globally reduced metrics.

    With a ``reference`` (KL_LOSS_COEF > 0) each micro-batch first gets its reference log-probs, without grad."""
    world = dist.get_world_size()
    masks = [torch.tensor(x["loss_mask"], dtype=torch.float32) for x in items]
    full_mask = torch.nn.utils.rnn.pad_sequence(masks, batch_first=True)
    denom = loss_denominator(full_mask, settings.train.loss_norm)
    tr = settings.train
    # loss, tokens, clip, kl, ratio, entropy, nll, kl_ref, |logp - rollout|, its k3, tokens with rollout log-probs,
    # the TIS ratio and the tokens it was capped on (both over those tokens)
    sums = torch.zeros(13, dtype=torch.float64)  # token-weighted, so the all-reduce gives global means
    for mb_items in shard_batch(items, dist.get_rank(), world, tr.micro_batch_size):
        mb = make_micro_batch(mb_items, device, pad_id)
        ref = reference.logprobs(mb) if reference is not None else None
        packed_lp, packed_ent = policy(mb.input_ids, mb.attention_mask, mb.positions, mb.targets)
        logp, ent = mb.unpack(packed_lp), mb.unpack(packed_ent)
        mask = mb.pad([x["loss_mask"] for x in mb_items])
        known = torch.tensor([x["rollout_log_probs"] is not None for x in mb_items], device=device)
        rollout = mb.pad([x["rollout_log_probs"] or [] for x in mb_items])
        old = torch.where(known.unsqueeze(1), rollout, logp.detach())  # unknown: on-policy, ratio 1
        seen = mask * known.unsqueeze(1)  # the trained tokens whose rollout log-probs are known
        weights, tis_sum, tis_capped = None, 0.0, 0.0
        if tr.tis_cap > 0:  # slime's --use-tis: the ratio against the trainer's log-probs, the gap as a capped weight
            old = logp.detach()
            capped, raw = tis_weights(logp, rollout, tr.tis_cap)
            weights = torch.where(known.unsqueeze(1), capped, torch.ones_like(capped))
            tis_sum, tis_capped = float((raw * seen).sum()), float(((raw > tr.tis_cap).to(seen.dtype) * seen).sum())
        adv = torch.tensor([x["advantage"] for x in mb_items], dtype=torch.float32, device=device)
        loss, m = policy_loss(
            logp,
            old,
            adv,
            mask,
            tr.clip_eps,
            tr.upper_clip,
            tr.loss_norm,
            denominator=denom,
            entropy=ent,
            ref_logprobs=ref,
            kl_coef=tr.kl_loss_coef,
            kl_type=tr.kl_loss_type,
            is_weights=weights,
        )
        (loss * world).backward()  # FSDP averages gradients over ranks; the loss is already a global mean
        t = m["tokens"]
        nll = float(-(logp.detach() * mask).sum())  # the supervised loss of the trained tokens, for both modes
        gap = logprob_mismatch(logp, rollout, seen)  # logp: this step's weights, not yet updated
        g = gap["tokens"]
        sums += torch.tensor(
            [
                loss.item(),
                t,
                m["clip_fraction"] * t,
                m["approx_kl"] * t,
                m["ratio_mean"] * t,
                m["entropy"] * t,
                nll,
                m.get("kl_ref", 0.0) * t,
                gap["logprob_diff_abs"] * g,
                gap["logprob_kl_k3"] * g,
                g,
                tis_sum,
                tis_capped,
            ],
            dtype=torch.float64,
        )
    return _global_means(sums, device, reference is not None, tr.tis_cap > 0)


def _global_means(sums: torch.Tensor, device: torch.device, with_reference: bool, tis: bool) -> dict[str, float]:
    """All-reduce this rank's token-weighted sums (see ``train_on_batch``) into the batch's means."""
    sums = sums.to(device)  # NCCL reduces device tensors only
    dist.all_reduce(sums)
    sums = sums.cpu()
    tokens = max(float(sums[1]), 1.0)
    out = {
        "loss": float(sums[0]),
        "loss_tokens": float(sums[1]),
        "clip_fraction": float(sums[2]) / tokens,
        "approx_kl": float(sums[3]) / tokens,
        "ratio_mean": float(sums[4]) / tokens,
        "entropy": float(sums[5]) / tokens,
        "nll": float(sums[6]) / tokens,
    }
    if with_reference:
        out["kl_ref"] = float(sums[7]) / tokens  # before this step's update: how far the policy has moved so far
    if sums[10] > 0:  # absent, not 0, when no sample carries rollout log-probs (SFT)
        out["logprob_diff_abs"] = float(sums[8]) / float(sums[10])
        out["logprob_kl_k3"] = float(sums[9]) / float(sums[10])
        if tis:  # slime's tis and tis_clipfrac: the raw ratio, and where the cap took over
            out["tis_ratio"] = float(sums[11]) / float(sums[10])
            out["tis_clip_fraction"] = float(sums[12]) / float(sums[10])
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
