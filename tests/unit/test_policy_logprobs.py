"""The policy's log-probs are those of the distribution the rollouts were sampled from (logits / temperature), on
the chunked path and the full-logits path alike, with gradients; the entropy metric stays the model's own."""

from __future__ import annotations

import pytest
import torch

from qwen_swe.config import settings as config
from qwen_swe.errors import TrainerError
from qwen_swe.train.policy import PolicyModel
from tests.tiny_model import tiny_model_dir


@pytest.fixture(scope="module")
def lm():
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir()), dtype=torch.float32)


def _batch():
    ids = torch.randint(100, 5000, (2, 12), generator=torch.Generator().manual_seed(1))
    positions = torch.tensor([3, 4, 5, 6, 7, 8, 9, 10, 15, 16, 17, 18, 19, 20, 21, 22])
    return ids, positions, ids.reshape(-1)[positions + 1]


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.3])
@pytest.mark.parametrize("chunk", [0, 5])
def test_logprobs_are_the_sampled_distributions(lm, temperature: float, chunk: int):
    ids, positions, targets = _batch()
    with torch.no_grad():
        logits = lm(input_ids=ids).logits.reshape(-1, lm.config.vocab_size)[positions].float()
        expected = torch.log_softmax(logits / temperature, -1).gather(-1, targets[:, None]).squeeze(-1)
        model_logp = torch.log_softmax(logits, -1)
        model_entropy = -(model_logp.exp() * model_logp).sum(-1)
        logp, entropy = PolicyModel(lm, chunk_size=chunk, temperature=temperature)(ids, None, positions, targets)
    torch.testing.assert_close(logp, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy, model_entropy, rtol=1e-5, atol=1e-5)
    if temperature != 1.0:  # the test could fail: the temperature changes every log-prob here
        assert (logp - model_logp.gather(-1, targets[:, None]).squeeze(-1)).abs().min() > 1e-4


def test_chunked_gradient_at_a_temperature_is_the_full_paths(lm):
    ids, positions, targets = _batch()
    grads = []
    for chunk in (0, 5):
        lm.zero_grad()
        logp, _ = PolicyModel(lm, chunk_size=chunk, temperature=0.7)(ids, None, positions, targets)
        logp.sum().backward()
        grads.append(lm.get_output_embeddings().weight.grad.clone())
    lm.zero_grad()
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-3, atol=1e-4)  # summation order


def test_a_temperature_that_is_not_positive_is_refused(lm):
    with pytest.raises(TrainerError, match="temperature must be > 0"):
        PolicyModel(lm, temperature=0.0)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"TEMPERATURE": "0.7"}, 0.7),  # GRPO: the agent's sampling temperature
        ({"TEMPERATURE": "0"}, 1.0),  # greedy: no distribution to match
        (
            {"TEMPERATURE": "0.7", "TRAIN_MODE": "sft", "SFT_DATA": "d.jsonl"},
            1.0,
        ),  # SFT: the demonstrations' likelihood
    ],
)
def test_the_trainer_takes_the_rollouts_temperature(env: dict, expected: float):
    assert config.load_settings([], env=env).logprob_temperature == expected
