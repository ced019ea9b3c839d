"""Group-relative advantages and the PPO-clip policy loss (pure torch, no I/O).

Why these choices:
- ``mean`` (r - group mean) is the seed's baseline. ``std`` also divides by the group's std, as slime's
  default GRPO does; that std is torch's *unbiased* one (``Tensor.std``, divisor n - 1), so results match
  slime's ``_post_process_rewards``. ``loo`` uses the mean of the *other* samples as the baseline, which
  is unbiased for the policy gradient: ``r_i - mean_{j!=i} r_j == n / (n - 1) * (r_i - mean)``.
- Groups whose rewards are all equal have zero advantage everywhere and only dilute the batch;
  ``zero_variance_mask`` finds them so the trainer can drop them and count them.
- The importance ratio is taken against the *rollout* log-probs recorded at sampling time, so a stale
  or numerically different inference engine shows up as clipping and KL instead of silently biasing the
  update.
- Normalisation must be global across micro-batches and ranks, so ``policy_loss`` accepts the global
  denominator (``loss_denominator`` over the whole batch) and returns a loss that sums correctly.
- The KL penalty to a reference policy (slime's ``--use-kl-loss``) is an estimate on the sampled tokens, with
  slime's estimators and their exact formulas (``kl_to_reference``), normalised like the policy term.
- The inference server and the trainer compute log-probs of the same tokens with different kernels, dtypes and,
  with MAX_STALENESS >= 1, different weights; ``logprob_mismatch`` measures that gap before the update, so a drift
  is seen as a number per step rather than guessed from clipping.
- Truncated importance sampling (slime's ``--use-tis``, ``vanilla_tis_function``) corrects for that gap instead:
  the PPO ratio is taken against the trainer's own log-probs, and each token's loss is weighted by the trainer's
  over the rollout's probability of it, capped (``is_weights``), so a token the server over-sampled counts less.
"""

from __future__ import annotations

import torch
from torch import Tensor

from qwen_swe.train.settings import ADVANTAGE_MODES, KL_TYPES, LOSS_NORMS


def group_advantages(rewards: Tensor, mode: str = "mean", eps: float = 1e-6) -> Tensor:
    """Advantages of ``rewards`` shaped ``[groups, n]`` (every row one group), same shape, float32.

    A group of one sample has no baseline and gets advantage 0 in every mode.
    """
    if mode not in ADVANTAGE_MODES:
        raise ValueError(f"advantage mode {mode!r} is not one of {', '.join(ADVANTAGE_MODES)}")
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [groups, n], got shape {tuple(rewards.shape)}")
    r = rewards.to(torch.float32)
    n = r.shape[1]
    if n < 2:
        return torch.zeros_like(r)
    mean = r.mean(dim=1, keepdim=True)
    if mode == "mean":
        return r - mean
    if mode == "std":
        return (r - mean) / (r.std(dim=1, keepdim=True, unbiased=True) + eps)
    others = (r.sum(dim=1, keepdim=True) - r) / (n - 1)
    return r - others


def zero_variance_mask(rewards: Tensor) -> Tensor:
    """``[groups]`` bool: True where every reward of the group is equal (no learning signal)."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [groups, n], got shape {tuple(rewards.shape)}")
    return (rewards == rewards[:, :1]).all(dim=1)


def loss_denominator(loss_mask: Tensor, norm: str) -> float:
    """The normaliser of ``policy_loss`` for a batch ``[samples, T]``: masked tokens, or samples that have any.

    Compute it once over the *whole* step's batch and pass it to every micro-batch's ``policy_loss``.
    """
    if norm == "token":
        return float(loss_mask.sum())
    if norm == "sample":
        return float((loss_mask.sum(dim=1) > 0).sum())
    raise ValueError(f"loss norm {norm!r} is not one of {', '.join(LOSS_NORMS)}")


def kl_to_reference(logprobs: Tensor, ref_logprobs: Tensor, kind: str = "low_var_kl") -> Tensor:
    """Per-token estimate of KL(current || reference) on tokens the rollout sampled (Schulman's k1, k2, k3).

    With ``d = logp - ref_logp``: k1 = ``d``; k2 = ``d^2 / 2``; k3 = ``exp(-d) - 1 + d`` (non-negative, low
    variance); ``low_var_kl`` is k3 clamped to [-10, 10], as slime clamps it.
    """
    if kind not in KL_TYPES:
        raise ValueError(f"KL type {kind!r} is not one of {', '.join(KL_TYPES)}")
    d = logprobs.float() - ref_logprobs.float()
    if kind == "k1":
        return d
    if kind == "k2":
        return d * d / 2.0
    kl = torch.exp(-d) - 1.0 + d
    return kl.clamp(-10.0, 10.0) if kind == "low_var_kl" else kl


def tis_weights(logprobs: Tensor, rollout_logprobs: Tensor, cap: float) -> tuple[Tensor, Tensor]:
    """(weights, raw ratios): the trainer's over the rollout's probability of each token, ``exp(logp - rollout)``,
    clamped to ``[0, cap]`` (slime's ``tis_clip_low`` 0, ``tis_clip`` = ``cap``); no grad."""
    with torch.no_grad():
        raw = torch.exp(logprobs.detach() - rollout_logprobs.to(logprobs.dtype))
        return torch.clamp(raw, min=0.0, max=cap), raw


def logprob_mismatch(logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor) -> dict[str, float]:
    """Trainer vs inference server on the sampled tokens, over the masked tokens: ``logprob_diff_abs`` (mean
    ``|d|``), ``logprob_kl_k3`` (mean k3) and ``tokens``, with ``d = logprobs - rollout_logprobs``.

    Pass the trainer's log-probs from *before* the update, and a mask that leaves out samples without rollout
    log-probs (their gap is unknown, not zero)."""
    with torch.no_grad():
        m = mask.float()
        d = torch.where(m > 0, logprobs.float() - rollout_logprobs.float(), 0.0)  # padding may hold anything
        # the tokens were sampled by the server, so exp(d) - 1 - d is the unbiased k3 estimate of
        # KL(server || trainer); exp(-d) - 1 + d would estimate the reverse only on tokens the trainer sampled
        k3 = (torch.exp(d) - 1.0 - d) * m
        count = float(m.sum())
        safe = max(count, 1.0)
        return {
            "logprob_diff_abs": float((d.abs() * m).sum()) / safe,
            "logprob_kl_k3": float(k3.sum()) / safe,
            "tokens": count,
        }


def _reduce(per_token: Tensor, mask: Tensor, norm: str, denominator: float) -> Tensor:
    if norm == "token":
        total = per_token.sum()
    else:
        total = (per_token.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).sum()
    return total / max(denominator, 1.0)


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    norm: str = "token",
    denominator: float | None = None,
    entropy: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    kl_coef: float = 0.0,
    kl_type: str = "low_var_kl",
    is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO-clip loss over masked response tokens, and its metrics.

    Shapes: ``logprobs``, ``old_logprobs``, ``loss_mask`` are ``[samples, T]`` (padding masked out);
    ``advantages`` is ``[samples]`` (broadcast over tokens) or ``[samples, T]``. Per token
    ``-min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)`` with ``ratio = exp(logp - old_logp)``.

    ``norm="token"``: sum over all masked tokens / ``denominator`` (default: this call's masked tokens).
    ``norm="sample"``: per-sample masked mean, summed / ``denominator`` (default: samples with tokens).

    Metrics (over this call's masked tokens): ``clip_fraction`` (tokens where the clipped term is the
    active one), ``approx_kl`` (k3 estimator of KL(rollout || current) with samples from the rollout
    policy: ``ratio - 1 - log ratio``), ``ratio_mean``, ``entropy`` when given, and ``tokens``.

    With ``ref_logprobs`` the loss adds ``kl_coef`` times the ``kl_type`` estimate of KL(current || reference),
    normalised as the policy term; the metric ``kl_ref`` is its per-token mean.

    ``is_weights`` (``[samples, T]``, no grad) multiplies each token's policy term (not the KL term), as slime's
    ``vanilla_tis_function`` multiplies its ``pg_loss``.
    """
    if norm not in LOSS_NORMS:
        raise ValueError(f"loss norm {norm!r} is not one of {', '.join(LOSS_NORMS)}")
    mask = loss_mask.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    log_ratio = (logprobs - old_logprobs.to(logprobs.dtype)) * mask  # masked entries: ratio exactly 1
    ratio = torch.exp(log_ratio)
    unclipped = -ratio * adv
    clipped = -torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    per_token = torch.maximum(unclipped, clipped) * mask
    if is_weights is not None:
        per_token = per_token * is_weights.detach().to(per_token.dtype)

    denom = loss_denominator(loss_mask, norm) if denominator is None else float(denominator)
    loss = _reduce(per_token, mask, norm, denom)
    kl = None
    if ref_logprobs is not None:
        kl = kl_to_reference(logprobs, ref_logprobs, kl_type).to(mask.dtype) * mask
        loss = loss + kl_coef * _reduce(kl, mask, norm, denom)

    with torch.no_grad():
        count = float(mask.sum())
        safe = max(count, 1.0)
        metrics = {
            "clip_fraction": float(((clipped > unclipped).to(mask.dtype) * mask).sum()) / safe,
            "approx_kl": float(((ratio - 1.0 - log_ratio) * mask).sum()) / safe,
            "ratio_mean": float((ratio * mask).sum()) / safe,
            "tokens": count,
        }
        if entropy is not None:
            metrics["entropy"] = float((entropy.to(mask.dtype) * mask).sum()) / safe
        if kl is not None:
            metrics["kl_ref"] = float(kl.sum()) / safe
    return loss, metrics
