"""Recomputed activations change the time and memory of a step, never its numbers: the warm start's key leaves
ACTIVATION_CHECKPOINTING out (its SFT may run either way), and a run may turn it on to fit a longer sample."""

from __future__ import annotations

import pytest
import torch

from qwen_swe.train.policy import build_policy
from tests.tiny_model import tiny_model_dir


def _step(recompute: bool, mixed_precision: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    """Log-probs, gradients and the bytes autograd saved for the backward in one forward."""
    policy = build_policy(
        str(tiny_model_dir()),
        device=torch.device("cpu"),
        activation_checkpointing=recompute,
        mixed_precision=mixed_precision,
    )
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 5000, (2, 400), generator=gen)
    positions = torch.tensor([200, 201, 202, 203, 600, 601, 602, 603, 604])
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp, _ = policy(ids, None, positions, ids.reshape(-1)[positions + 1])
    (-logp.mean()).backward()
    grads = {
        n: (p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad).clone()
        for n, p in policy.named_parameters()
        if p.grad is not None
    }
    return logp.detach(), grads, saved[0]


@pytest.mark.parametrize("mixed_precision", [False, True])
def test_recomputed_activations_give_the_same_log_probs_and_gradients(world_of_one, mixed_precision):
    logp, grads, kept = _step(False, mixed_precision)
    logp_again, grads_again, kept_again = _step(True, mixed_precision)
    assert kept_again * 4 < kept  # the recomputation is on: the forward kept a fraction of the activations
    assert torch.equal(logp, logp_again)
    assert grads.keys() == grads_again.keys() and len(grads) > 10
    assert all(torch.equal(grads[n], grads_again[n]) for n in grads), max(
        (grads[n] - grads_again[n]).abs().max().item() for n in grads
    )
