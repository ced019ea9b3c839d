"""GRPO advantages and the PPO-clip loss against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from qwen_swe.train.grpo import (
    group_advantages,
    kl_to_reference,
    logprob_mismatch,
    loss_denominator,
    policy_loss,
    zero_variance_mask,
)


def test_mean_mode_subtracts_group_mean():
    adv = group_advantages(torch.tensor([[1.0, -1.0, -1.0, -1.0], [2.0, 0.0, 1.0, 1.0]]), "mean")
    assert torch.allclose(adv, torch.tensor([[1.5, -0.5, -0.5, -0.5], [1.0, -1.0, 0.0, 0.0]]))


def test_std_mode_divides_by_unbiased_std():
    # group [1, -1, -1, -1]: mean -0.5, unbiased var = (2.25 + 3 * 0.25) / 3 = 1.0 -> std 1.0
    adv = group_advantages(torch.tensor([[1.0, -1.0, -1.0, -1.0]]), "std", eps=0.0)
    assert torch.allclose(adv, torch.tensor([[1.5, -0.5, -0.5, -0.5]]))
    # group [3, 1]: mean 2, unbiased std sqrt(2)
    adv = group_advantages(torch.tensor([[3.0, 1.0]]), "std", eps=1e-6)
    expected = 1.0 / (math.sqrt(2.0) + 1e-6)
    assert torch.allclose(adv, torch.tensor([[expected, -expected]]))


def test_loo_mode_uses_mean_of_the_others():
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0], [3.0, 1.0, 2.0]]), "loo")
    # row 0: 1 - 0 = 1, 0 - 0.5 = -0.5 (twice); row 1: 3 - 1.5, 1 - 2.5, 2 - 2
    assert torch.allclose(adv, torch.tensor([[1.0, -0.5, -0.5], [1.5, -1.5, 0.0]]))
    mean = group_advantages(torch.tensor([[3.0, 1.0, 2.0]]), "mean")
    assert torch.allclose(adv[1:], mean * 3 / 2)


@pytest.mark.parametrize("mode", ["mean", "std", "loo"])
def test_zero_variance_group_gets_zero_advantage(mode):
    rewards = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0], [1.0, -1.0, -1.0]])
    adv = group_advantages(rewards, mode)
    assert torch.equal(adv[:2], torch.zeros(2, 3))
    assert adv[2].abs().sum() > 0
    assert zero_variance_mask(rewards).tolist() == [True, True, False]


def test_single_sample_group_and_bad_input():
    assert torch.equal(group_advantages(torch.tensor([[5.0]]), "std"), torch.zeros(1, 1))
    with pytest.raises(ValueError, match="advantage mode"):
        group_advantages(torch.zeros(1, 2), "median")
    with pytest.raises(ValueError, match=r"\[groups, n\]"):
        group_advantages(torch.zeros(4), "mean")


def _leaf(values):
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


def test_positive_advantage_increases_logprob_of_sampled_tokens():
    logp = _leaf([[-1.0, -2.0], [-1.5, -0.5]])
    old = logp.detach().clone()
    loss, _ = policy_loss(logp, old, torch.tensor([1.0, -1.0]), torch.ones(2, 2))
    loss.backward()
    # gradient descent moves logp against the gradient: up for A > 0, down for A < 0
    assert (logp.grad[0] < 0).all() and (logp.grad[1] > 0).all()
    assert torch.allclose(logp.grad, torch.tensor([[-0.25, -0.25], [0.25, 0.25]]))


def test_masked_tokens_get_zero_gradient():
    logp = _leaf([[-1.0, -2.0, -3.0]])
    old = torch.tensor([[-1.0, -9.0, -3.0]])  # a huge ratio on the masked token must not leak
    loss, metrics = policy_loss(logp, old, torch.tensor([2.0]), torch.tensor([[1.0, 0.0, 1.0]]))
    loss.backward()
    assert logp.grad[0, 1] == 0.0 and logp.grad[0, 0] != 0.0 and logp.grad[0, 2] != 0.0
    assert metrics["tokens"] == 2.0 and metrics["clip_fraction"] == 0.0
    assert math.isfinite(loss.item())


def test_clipping_boundaries():
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0, 1.0])
    mask = torch.ones(5, 1)
    # ratios: 1.3 (A>0, above 1+eps: clipped), 1.1 (inside), 0.7 (A<0, below 1-eps: clipped),
    # 1.3 (A<0, above: unclipped, keeps pushing down), 0.7 (A>0, below: unclipped)
    ratios = torch.tensor([[1.3], [1.1], [0.7], [1.3], [0.7]])
    old = torch.zeros(5, 1)
    logp = ratios.log().requires_grad_(True)
    loss, metrics = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, norm="token")
    loss.backward()
    grad = logp.grad[:, 0]
    assert grad[0] == 0.0 and grad[2] == 0.0  # clipped branch is constant
    assert torch.allclose(grad[1], torch.tensor(-1.1 / 5)) and torch.allclose(grad[3], torch.tensor(1.3 / 5))
    assert torch.allclose(grad[4], torch.tensor(-0.7 / 5))
    assert metrics["clip_fraction"] == pytest.approx(2 / 5)
    expected = (-1.2 - 1.1 + 0.8 + 1.3 - 0.7) / 5
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_asymmetric_upper_clip():
    logp = torch.tensor([[math.log(1.25)]], requires_grad=True)
    loss, metrics = policy_loss(
        logp, torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1), clip_low=0.2, clip_high=0.28
    )
    loss.backward()
    assert metrics["clip_fraction"] == 0.0 and logp.grad[0, 0] != 0.0
    loss2, metrics2 = policy_loss(
        logp, torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1), clip_low=0.2, clip_high=0.2
    )
    assert metrics2["clip_fraction"] == 1.0 and loss2.item() == pytest.approx(-1.2)


def test_token_and_sample_normalisation_differ():
    # sample 0 has 3 tokens, sample 1 has 1; ratio 1 so the per-token loss is -A
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    token, _ = policy_loss(logp, logp, adv, mask, norm="token")
    sample, _ = policy_loss(logp, logp, adv, mask, norm="sample")
    assert token.item() == pytest.approx((-3 + 1) / 4)  # long sample dominates
    assert sample.item() == pytest.approx((-1 + 1) / 2)  # each sample weighs the same
    assert loss_denominator(mask, "token") == 4.0 and loss_denominator(mask, "sample") == 2.0


def test_global_denominator_makes_micro_batches_sum_to_the_full_batch():
    torch.manual_seed(0)
    logp = torch.randn(4, 5, requires_grad=True)
    old = logp.detach() + 0.05 * torch.randn(4, 5)
    mask = (torch.rand(4, 5) > 0.3).float()
    adv = torch.tensor([1.0, -0.5, 0.3, -0.8])
    for norm in ("token", "sample"):
        full, _ = policy_loss(logp, old, adv, mask, norm=norm)
        denom = loss_denominator(mask, norm)
        parts = sum(
            policy_loss(logp[i : i + 2], old[i : i + 2], adv[i : i + 2], mask[i : i + 2], norm=norm, denominator=denom)[
                0
            ]
            for i in (0, 2)
        )
        assert parts.item() == pytest.approx(full.item(), rel=1e-6)


def test_kl_and_ratio_metrics():
    logp = torch.tensor([[math.log(2.0), 0.0]])
    _, metrics = policy_loss(
        logp, torch.zeros(1, 2), torch.tensor([0.0]), torch.tensor([[1.0, 0.0]]), entropy=torch.tensor([[0.5, 9.0]])
    )
    assert metrics["ratio_mean"] == pytest.approx(2.0)
    assert metrics["approx_kl"] == pytest.approx(2.0 - 1.0 - math.log(2.0))
    assert metrics["entropy"] == pytest.approx(0.5)
    _, same = policy_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2))
    assert same["approx_kl"] == 0.0 and same["ratio_mean"] == 1.0


def test_kl_estimators_match_their_formulas():
    logp, ref = torch.tensor([0.0, -1.0, -3.0, -25.0]), torch.tensor([0.0, -2.0, -1.0, -3.0])
    d = logp - ref
    assert torch.allclose(kl_to_reference(logp, ref, "k1"), d)
    assert torch.allclose(kl_to_reference(logp, ref, "k2"), d * d / 2)
    k3 = kl_to_reference(logp, ref, "k3")
    assert torch.allclose(k3, torch.exp(-d) - 1 + d) and k3[0] == 0.0 and (k3 >= 0).all()
    low = kl_to_reference(logp, ref, "low_var_kl")  # k3 clamped: a token the policy dropped costs at most 10
    assert torch.allclose(low[:3], k3[:3]) and low[3] == 10.0 and k3[3] > 1e9
    with pytest.raises(ValueError, match="k4"):
        kl_to_reference(logp, ref, "k4")


def test_kl_penalty_pulls_the_policy_back_to_the_reference():
    ref = torch.tensor([[-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    logp = torch.tensor([[-0.5, -2.0, -0.1]], requires_grad=True)
    zero = torch.zeros(1)
    plain, _ = policy_loss(logp, logp.detach(), zero, mask)
    loss, metrics = policy_loss(logp, logp.detach(), zero, mask, ref_logprobs=ref, kl_coef=0.1)
    k3 = kl_to_reference(logp.detach(), ref, "k3")
    assert plain.item() == 0.0 and loss.item() == pytest.approx(0.1 * (k3[0, 0] + k3[0, 1]).item() / 2)
    assert metrics["kl_ref"] == pytest.approx((k3[0, 0] + k3[0, 1]).item() / 2)
    loss.backward()
    # above the reference: descent lowers it; below: raises it; a masked token: no gradient
    assert logp.grad[0, 0] > 0 and logp.grad[0, 1] < 0 and logp.grad[0, 2] == 0
    _, no_coef = policy_loss(logp, logp.detach(), zero, mask, ref_logprobs=ref, kl_coef=0.0)
    assert no_coef["kl_ref"] == pytest.approx(metrics["kl_ref"])  # measured even when not penalised


def test_logprob_mismatch_on_hand_computed_values():
    trainer = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -3.0, -1.0]])
    server = torch.tensor([[-1.5, -2.0, -math.inf], [-0.5, -2.0, -7.0]])  # -inf: padding; -7.0: a masked token
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    got = logprob_mismatch(trainer, server, mask)
    # d = trainer - server on the four masked tokens: 0.5, 0, 0, -1; k3 = exp(d) - 1 - d
    assert got["tokens"] == 4.0
    assert got["logprob_diff_abs"] == pytest.approx(1.5 / 4)
    assert got["logprob_kl_k3"] == pytest.approx(((math.exp(0.5) - 1.5) + math.exp(-1.0)) / 4)
    same = logprob_mismatch(trainer, trainer, mask)
    assert same["logprob_diff_abs"] == 0.0 and same["logprob_kl_k3"] == 0.0
    assert logprob_mismatch(trainer, server, torch.zeros(2, 3))["tokens"] == 0.0


def test_warmup_rises_linearly_then_holds_and_slime_gets_the_same_schedule(tmp_path):
    from qwen_swe.backends.slime import launcher as sb
    from qwen_swe.config.settings import Settings
    from qwen_swe.train.update import warmup_lr

    assert [warmup_lr(1.0, 0, k) for k in range(3)] == [1.0, 1.0, 1.0]
    assert [warmup_lr(1.0, 4, k) for k in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    base = dict(backend="slime", slime_dir=tmp_path, vllm_url="http://127.0.0.1:1/v1", lr=3e-4)
    assert "--lr-warmup-iters" not in sb.train_args(Settings.build(**base, lr_warmup_steps=1), gpus=1, model="/m")
    for steps in (2, 3, 5):
        argv = sb.train_args(Settings.build(**base, lr_warmup_steps=steps), gpus=1, model="/m")
        iters, init = int(argv[argv.index("--lr-warmup-iters") + 1]), float(argv[argv.index("--lr-warmup-init") + 1])
        for k in range(1, steps + 3):  # slime's FSDPLRScheduler at last_epoch = k - 1, constant after the warm-up
            slime = init + (3e-4 - init) * (k - 1) / iters if k - 1 <= iters else 3e-4
            assert slime == pytest.approx(warmup_lr(3e-4, steps, k - 1), rel=1e-12)
