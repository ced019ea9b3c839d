"""What slime asserts or silently assumes of the batch our rollout function returns, checked before slime sees it;
and the one fix-up slime v0.2.2's FSDP packing needs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qwen_swe.errors import SlimeBackendError


def trim_trailing_pad(sample: Any) -> bool:
    """slime v0.2.2's FSDP ``unpack_sequences`` takes trailing token id 0 for padding and shifts every log-prob
    slice of the pack; drop such tokens from the end of the response (mask and log-probs with them)."""
    changed = False
    while sample.tokens and sample.tokens[-1] == 0 and sample.response_length > 1:
        sample.tokens = sample.tokens[:-1]
        sample.response_length -= 1
        if sample.loss_mask is not None:
            sample.loss_mask = sample.loss_mask[:-1]
        if sample.rollout_log_probs is not None:
            sample.rollout_log_probs = sample.rollout_log_probs[:-1]
        changed = True
    return changed


def batch_problems(groups: Sequence[Sequence[Any]], *, n_samples_per_prompt: int, rollout_batch_size: int) -> list[str]:
    """Every way ``groups`` breaks what slime v0.2.2 asserts or silently assumes of a training batch."""
    problems = []
    if len(groups) != rollout_batch_size:
        problems.append(
            f"{len(groups)} groups, slime needs exactly rollout_batch_size={rollout_batch_size} (else "
            "its GRPO normalisation treats the whole batch as one group)"
        )
    with_logprobs = {x.rollout_log_probs is not None for g in groups for x in g}
    if len(with_logprobs) > 1:
        problems.append("rollout_log_probs are set on some samples only; slime takes them from samples[0] for all")
    for gi, group in enumerate(groups):
        if len(group) != n_samples_per_prompt:
            problems.append(f"group {gi} has {len(group)} samples, not n_samples_per_prompt={n_samples_per_prompt}")
        if len({x.group_index for x in group}) > 1:
            problems.append(f"group {gi} mixes group_index values {sorted({x.group_index for x in group})}")
        for x in group:
            where = f"group {gi} sample index={x.index}"
            status_type = type(x).Status
            if not isinstance(x.status, status_type):
                problems.append(f"{where}: status {x.status!r} is not a {status_type.__module__}.Sample.Status")
            if isinstance(x.reward, bool) or not isinstance(x.reward, (int, float)):
                problems.append(f"{where}: reward {x.reward!r} is not a number")
            n = x.response_length
            if not isinstance(n, int) or n < 1 or n > len(x.tokens):
                problems.append(f"{where}: response_length {n!r} outside 1..len(tokens)={len(x.tokens)}")
            if x.loss_mask is None or len(x.loss_mask) != n:
                problems.append(
                    f"{where}: loss_mask length {None if x.loss_mask is None else len(x.loss_mask)} "
                    f"!= response_length {n}"
                )
            if x.rollout_log_probs is not None and len(x.rollout_log_probs) != n:
                problems.append(f"{where}: rollout_log_probs length {len(x.rollout_log_probs)} != response_length {n}")
            if x.tokens and x.tokens[-1] == 0:
                problems.append(
                    f"{where}: the last token is id 0, which slime's FSDP unpacking takes for padding "
                    "(trim_trailing_pad fixes it)"
                )
            aborted = x.status == status_type.ABORTED
            if aborted and not x.remove_sample:
                problems.append(f"{where}: ABORTED without remove_sample=True; slime would train on it")
            if not x.remove_sample and x.loss_mask is not None and not any(x.loss_mask):
                problems.append(f"{where}: no trained token and remove_sample is False")
    return problems


def validate_rollout_batch(
    groups: Sequence[Sequence[Any]], *, n_samples_per_prompt: int, rollout_batch_size: int
) -> None:
    """Raise SlimeBackendError listing every broken invariant (call it before returning a batch to slime)."""
    problems = batch_problems(groups, n_samples_per_prompt=n_samples_per_prompt, rollout_batch_size=rollout_batch_size)
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise SlimeBackendError(f"the rollout batch breaks slime's contract: {shown}")


def remove_zero_variance(groups: Sequence[Sequence[Any]]) -> int:
    """DROP_ZERO_VARIANCE under slime: a group whose rewards are all equal has no advantage to learn from; its
    samples get ``remove_sample``, which slime turns into an all-zero loss mask. Returns the groups marked."""
    marked = 0
    for group in groups:
        if len({float(x.reward) for x in group}) == 1:
            for x in group:
                x.remove_sample = True
            marked += 1
    return marked
