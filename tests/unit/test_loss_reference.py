"""The loss is the field's loss: ``qwen_swe.train.grpo`` against slime's own code, loss and gradient, on one batch.

slime's functions run from its unmodified source, the releases vendored in ``shared/vendor/`` beside the repository
(``SLIME_PATH``, when set, names one slime checkout to use instead). Only two files are loaded, each from its path
and under a private module name, never through slime's packages (whose ``__init__`` chains need ray, sglang and
megatron):

- ``slime/utils/ppo_utils.py``: ``compute_policy_loss`` (PPO clip with ``eps_clip`` / ``eps_clip_high`` and the
  clip-fraction per token) and ``compute_approx_kl`` (k1, k2, k3, low_var_kl). It imports only torch. Both are
  ``torch.compile``d; the test calls them under ``torch.compiler.set_stance("force_eager")``, so the same Python
  code runs without building a compiled kernel.
- ``slime/backends/megatron_utils/cp_utils.py``: ``get_sum_of_sample_mean``, slime's per-sample-mean / per-token
  sum reducer (the one its Megatron loss uses). Its module imports ``from megatron.core import mpu``, which is not
  installed here; the test puts three stub modules into ``sys.modules`` while the file loads (``megatron``,
  ``megatron.core`` and ``megatron.core.mpu``; whatever was there before is put back after) whose only function is
  ``mpu.get_context_parallel_world_size() -> 1``: the reducer asks it once, and 1 (no context parallelism, the
  trainer's case) selects its plain branch; nothing else of megatron is reached.

What slime adds around those functions is stated here, from its ``loss_function``: the token-level loss is divided
by ``num_tokens = sum(max(mask_i.sum(), 1))``, the sample-level loss by the number of samples in the batch.

- ``slime/backends/megatron_utils/loss.py``: ``vanilla_tis_function`` (``--use-tis``), whose text alone is compiled
  from the file (the module's imports need megatron); it uses only ``torch`` and ``typing.Any``.

The vendored releases are the test's input: a missing ``shared/vendor`` fails the test (CI copies ``shared/``
beside the clone), it does not skip.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import sys
import types
import typing
from pathlib import Path

import pytest
import torch

from qwen_swe.train.grpo import kl_to_reference, loss_denominator, policy_loss, tis_weights

VENDOR = Path(__file__).resolve().parents[2].parent / "shared" / "vendor"
RELEASES = ("slime-v0.2.2", "slime-v0.3.1")
EPS_LOW, EPS_HIGH = 0.2, 0.28
KL_COEF = 0.3

# One batch of four responses, lengths 6, 3, 5 and 4, with loss-mask zeros inside two of them. ``DELTA`` is
# current - rollout log-prob per token; the comments say where the ratio exp(DELTA) falls for that sample's sign.
RESPONSE_LENGTHS = [6, 3, 5, 4]
MASKS = [[1, 1, 0, 1, 1, 1], [1, 1, 1], [1, 0, 0, 1, 1], [1, 1, 1, 1]]
ADVANTAGES = [1.0, -0.7, 0.5, -1.3]
DELTA = [
    [0.0, 0.4, 1.0, -0.5, 0.1, -0.05],  # A > 0: 1.49 clipped above; 0.61 below 1 - eps but unclipped; 2.7 masked
    [-0.5, 0.3, 0.02],  # A < 0: 0.61 clipped below; 1.35 above 1 + eps but unclipped
    [0.3, 2.0, -3.0, -0.3, 0.2],  # A > 0: 1.35 clipped above; 7.4 and 0.05 masked
    [-0.3, 0.05, -1.0, 0.15],  # A < 0: 0.74 and 0.37 clipped below
]
# current - reference log-prob: both signs, and -3.0 where k3 = e^3 - 4 > 10, so low_var_kl's clamp acts
REF_GAP = [[0.1, -0.2, 0.5, -3.0, 0.3, 0.0], [0.4, -0.1, 0.05], [-0.6, 1.0, 0.2, 0.7, -0.25], [0.2, -0.4, 1.5, -0.05]]


def _checkouts() -> list[Path]:
    if os.environ.get("SLIME_PATH"):
        return [Path(os.environ["SLIME_PATH"]).expanduser().resolve()]
    return [VENDOR / release for release in RELEASES]


def _load(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_cp_utils(path: Path, name: str) -> types.ModuleType:
    mpu = types.ModuleType("megatron.core.mpu")
    mpu.get_context_parallel_world_size = lambda: 1
    core = types.ModuleType("megatron.core")
    core.mpu = mpu
    megatron = types.ModuleType("megatron")
    megatron.core = core
    stubs = {"megatron": megatron, "megatron.core": core, "megatron.core.mpu": mpu}
    saved = {key: sys.modules[key] for key in stubs if key in sys.modules}
    sys.modules.update(stubs)
    try:
        return _load(path, name)
    finally:
        for key in stubs:
            sys.modules.pop(key, None)
        sys.modules.update(saved)


@pytest.fixture(scope="module", params=_checkouts(), ids=lambda p: p.name)
def slime(request: pytest.FixtureRequest) -> types.SimpleNamespace:
    root: Path = request.param
    ppo_path = root / "slime" / "utils" / "ppo_utils.py"
    cp_path = root / "slime" / "backends" / "megatron_utils" / "cp_utils.py"
    if not (ppo_path.is_file() and cp_path.is_file()):
        where = "SLIME_PATH" if os.environ.get("SLIME_PATH") else "the vendored release"
        pytest.fail(
            f"{where} {root} has no slime/utils/ppo_utils.py and slime/backends/megatron_utils/cp_utils.py: "
            f"put a copy of shared/ beside the repository ({VENDOR} holds slime-v0.2.2 and slime-v0.3.1) "
            "or point SLIME_PATH at a slime checkout"
        )
    tag = root.name.replace("-", "_").replace(".", "_")
    ppo = _load(ppo_path, f"_reference_{tag}_ppo_utils")
    cp = _load_cp_utils(cp_path, f"_reference_{tag}_cp_utils")
    return types.SimpleNamespace(
        compute_policy_loss=ppo.compute_policy_loss,
        compute_approx_kl=ppo.compute_approx_kl,
        get_sum_of_sample_mean=cp.get_sum_of_sample_mean,
        vanilla_tis_function=_vanilla_tis_function(root),
    )


def _rollout() -> torch.Tensor:
    gen = torch.Generator().manual_seed(36)
    return -(torch.rand(sum(RESPONSE_LENGTHS), generator=gen, dtype=torch.float64) * 2.0 + 3.05)


def _flat(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor([v for row in rows for v in row], dtype=torch.float64)


def _padded(flat: torch.Tensor) -> torch.Tensor:
    """``[samples, T]`` right-padded with zeros, as the trainer's micro-batch has them; differentiable."""
    return torch.nn.utils.rnn.pad_sequence(list(flat.split(RESPONSE_LENGTHS)), batch_first=True)


def _ours(
    current: torch.Tensor, norm: str, kl_type: str | None, old: torch.Tensor | None = None, is_weights=None
) -> tuple[torch.Tensor, dict[str, float]]:
    """Our loss for the batch; the ratio against ``old`` (default: the rollout's log-probs)."""
    mask = _padded(_flat(MASKS))
    ref = _padded((current - _flat(REF_GAP)).detach()) if kl_type else None
    return policy_loss(
        _padded(current),
        _padded(_rollout() if old is None else old),
        torch.tensor(ADVANTAGES, dtype=torch.float64),
        mask,
        clip_low=EPS_LOW,
        clip_high=EPS_HIGH,
        norm=norm,
        denominator=loss_denominator(mask, norm),
        ref_logprobs=ref,
        kl_coef=KL_COEF if kl_type else 0.0,
        kl_type=kl_type or "low_var_kl",
        is_weights=is_weights,
    )


def _slimes(
    slime: types.SimpleNamespace,
    current: torch.Tensor,
    norm: str,
    kl_type: str | None,
    masks: list[list[float]] = MASKS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """slime's loss for the batch, as its Megatron ``policy_loss_function`` then ``loss_function`` compose it with
    ``--calculate-per-token-loss`` (token) or without (sample); and its clip fraction per trained token."""
    loss_masks = [torch.tensor(m, dtype=torch.float64) for m in masks]
    reducer = slime.get_sum_of_sample_mean(
        [r + 7 for r in RESPONSE_LENGTHS], RESPONSE_LENGTHS, loss_masks, calculate_per_token_loss=norm == "token"
    )
    per_token = slime.get_sum_of_sample_mean(
        [r + 7 for r in RESPONSE_LENGTHS], RESPONSE_LENGTHS, loss_masks, calculate_per_token_loss=True
    )
    advantages = torch.cat([torch.full((n,), a, dtype=torch.float64) for n, a in zip(RESPONSE_LENGTHS, ADVANTAGES)])
    num_tokens = sum(torch.clamp_min(m.sum(), 1) for m in loss_masks)
    with torch.compiler.set_stance("force_eager"):
        # eps_clip_c (dual clip) stays unset: slime's policy_loss_function never passes it, and ours has none
        pg_loss, clipfrac = slime.compute_policy_loss(_rollout() - current, advantages, EPS_LOW, EPS_HIGH)
        loss = reducer(pg_loss)
        if kl_type:
            # importance_ratio stays unset (slime's --use-unbiased-kl off): ours has no such weighting
            kl = slime.compute_approx_kl(current, (current - _flat(REF_GAP)).detach(), kl_loss_type=kl_type)
            loss = loss + KL_COEF * reducer(kl)
    # slime's entropy term (- entropy_coef * entropy) is left out: its default coefficient is 0, ours has none
    loss = loss / (num_tokens if norm == "token" else len(RESPONSE_LENGTHS))
    return loss, per_token(clipfrac) / num_tokens


def _leaf() -> torch.Tensor:
    return (_rollout() + _flat(DELTA)).requires_grad_(True)


@pytest.mark.parametrize("kl_type", [None, "k1", "k2", "k3", "low_var_kl"])
@pytest.mark.parametrize("norm", ["token", "sample"])
def test_loss_and_gradient_match_slimes(slime, norm, kl_type):
    ours_logp, slime_logp = _leaf(), _leaf()
    ours, metrics = _ours(ours_logp, norm, kl_type)
    ref_loss, ref_clipfrac = _slimes(slime, slime_logp, norm, kl_type)
    ours.backward()
    ref_loss.backward()
    assert ours.item() == pytest.approx(ref_loss.item(), abs=1e-6, rel=0)
    assert torch.allclose(ours_logp.grad, slime_logp.grad, atol=1e-6, rtol=0), (ours_logp.grad, slime_logp.grad)
    # slime reports the clip fraction per sample under sample-level loss, ours always per trained token: the
    # per-token one is compared in both modes
    assert metrics["clip_fraction"] == pytest.approx(float(ref_clipfrac), abs=1e-6, rel=0)


def test_the_batch_clips_on_both_sides_and_masks_inside_responses():
    """The batch exercises what it is meant to: both clip bounds active, and masked tokens with large ratios."""
    ratio, mask = _flat(DELTA).exp(), _flat(MASKS).bool()
    advantages = torch.cat([torch.full((n,), a, dtype=torch.float64) for n, a in zip(RESPONSE_LENGTHS, ADVANTAGES)])
    above = mask & (ratio > 1 + EPS_HIGH) & (advantages > 0)
    below = mask & (ratio < 1 - EPS_LOW) & (advantages < 0)
    assert int(above.sum()) >= 2 and int(below.sum()) >= 3
    assert ((ratio > 1 + EPS_HIGH) & ~mask).any() and ((ratio < 1 - EPS_LOW) & ~mask).any()
    assert (_flat(REF_GAP) < -math.log(1 + 10)).any()  # low_var_kl's clamp at 10 is reached


def test_approx_kl_metric_is_slimes_k3_of_kl_rollout_to_current(slime):
    """Our ``approx_kl`` metric (ratio - 1 - log ratio) is slime's k3 estimator with the rollout as the new
    distribution, averaged per trained token. slime's own ``ppo_kl`` metric is a different number (the mean of
    rollout - current, and in its FSDP backend the mean of its absolute value), so it is not compared."""
    current = _rollout() + _flat(DELTA)
    _, metrics = _ours(current, "token", None)
    with torch.compiler.set_stance("force_eager"):
        k3 = slime.compute_approx_kl(_rollout(), current, kl_loss_type="k3")
    mask = _flat(MASKS)
    assert metrics["approx_kl"] == pytest.approx(float((k3 * mask).sum() / mask.sum()), abs=1e-6, rel=0)


@pytest.mark.parametrize("kl_type", ["k1", "k2", "k3", "low_var_kl"])
def test_kl_estimators_are_slimes_per_token(slime, kl_type):
    current, ref = _rollout() + _flat(DELTA), _rollout() + _flat(DELTA) - _flat(REF_GAP)
    with torch.compiler.set_stance("force_eager"):
        theirs = slime.compute_approx_kl(current, ref, kl_loss_type=kl_type)
    assert torch.allclose(kl_to_reference(current, ref, kl_type).double(), theirs.double(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("norm", ["token", "sample"])
def test_a_sample_without_trained_tokens_is_where_the_denominators_differ(slime, norm):
    """A sample whose loss mask is all zeros: slime still counts it (as one token in ``num_tokens``, as one sample
    of the batch), ours leaves it out of the denominator. The numerators, and so the gradient's direction, agree."""
    masks = [*MASKS[:3], [0, 0, 0, 0]]
    ours_logp, slime_logp = _leaf(), _leaf()
    mask = _padded(_flat(masks))
    denominator = loss_denominator(mask, norm)
    ours, _ = policy_loss(
        _padded(ours_logp),
        _padded(_rollout()),
        torch.tensor(ADVANTAGES, dtype=torch.float64),
        mask,
        clip_low=EPS_LOW,
        clip_high=EPS_HIGH,
        norm=norm,
        denominator=denominator,
    )
    theirs, _ = _slimes(slime, slime_logp, norm, None, masks)
    slime_denominator = sum(max(sum(m), 1) for m in masks) if norm == "token" else len(masks)
    assert slime_denominator == denominator + 1
    (ours * denominator).backward()
    (theirs * slime_denominator).backward()
    assert ours.item() * denominator == pytest.approx(theirs.item() * slime_denominator, abs=1e-6, rel=0)
    assert torch.allclose(ours_logp.grad, slime_logp.grad, atol=1e-6, rtol=0)


# --- truncated importance sampling (TIS_CAP; slime's --use-tis) ----------------------------------------------------
TIS_CAP = 1.3  # below exp(DELTA) on several trained tokens (1.49, 1.35, 1.35), above the rest


def _vanilla_tis_function(root: Path):
    """slime's ``vanilla_tis_function``, compiled from its own source: the function's text is taken out of
    ``megatron_utils/loss.py`` (whose imports need megatron) and run with the two names it uses."""
    path = root / "slime" / "backends" / "megatron_utils" / "loss.py"
    source = path.read_text()
    node = next(n for n in ast.parse(source).body if getattr(n, "name", None) == "vanilla_tis_function")
    space: dict = {"torch": torch, "Any": typing.Any}
    exec(compile(ast.Module([node], []), str(path), "exec"), space)
    return space["vanilla_tis_function"]


@pytest.mark.parametrize("norm", ["token", "sample"])
def test_truncated_importance_sampling_matches_slimes(slime, norm):
    """slime with --use-tis, one step per rollout: its PPO ratio is against the trainer's own log-probs (equal to
    the current ones in value), and each token's term is weighted by exp(trainer - rollout), clamped to [0, cap]."""
    ours_logp, slime_logp = _leaf(), _leaf()
    mask = _padded(_flat(MASKS))
    weights, raw = tis_weights(_padded(ours_logp), _padded(_rollout()), TIS_CAP)
    ours, metrics = _ours(ours_logp, norm, None, old=ours_logp.detach(), is_weights=weights)
    loss_masks = [torch.tensor(m, dtype=torch.float64) for m in MASKS]
    reducer = slime.get_sum_of_sample_mean(
        [r + 7 for r in RESPONSE_LENGTHS], RESPONSE_LENGTHS, loss_masks, calculate_per_token_loss=norm == "token"
    )
    advantages = torch.cat([torch.full((n,), a, dtype=torch.float64) for n, a in zip(RESPONSE_LENGTHS, ADVANTAGES)])
    old = slime_logp.detach()
    with torch.compiler.set_stance("force_eager"):
        pg_loss, _ = slime.compute_policy_loss(old - slime_logp, advantages, EPS_LOW, EPS_HIGH)
    args = types.SimpleNamespace(tis_clip=TIS_CAP, tis_clip_low=0.0)
    pg_loss, _, tis_metrics = slime.vanilla_tis_function(
        args,
        pg_loss=pg_loss,
        train_log_probs=list(old.split(RESPONSE_LENGTHS)),
        rollout_log_probs=list(_rollout().split(RESPONSE_LENGTHS)),
        loss_masks=loss_masks,
    )
    num_tokens = sum(torch.clamp_min(m.sum(), 1) for m in loss_masks)
    reference = reducer(pg_loss) / (num_tokens if norm == "token" else len(RESPONSE_LENGTHS))
    ours.backward()
    reference.backward()
    assert ours.item() == pytest.approx(reference.item(), abs=1e-6, rel=0)
    assert torch.allclose(ours_logp.grad, slime_logp.grad, atol=1e-6, rtol=0), (ours_logp.grad, slime_logp.grad)
    trained = mask.bool()
    assert torch.allclose(raw[trained], _padded(tis_metrics["tis"])[trained], atol=1e-12, rtol=0)
    assert 0 < int((raw[trained] > TIS_CAP).sum()) < int(trained.sum())  # the cap acts on some trained tokens only
    assert metrics["clip_fraction"] == 0.0  # the ratio against the trainer's own log-probs is 1: no clipping
