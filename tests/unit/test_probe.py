"""The update probe: trajectories saved by SAVE_ROLLOUT_DATA scored under two sets of weights, and the changes
GRPO pushes on (successes vs failures of a group, the token where they part, groups it does not train on)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from qwen_swe.data.sample import Sample
from qwen_swe.rollout.record import dump_rollout_data
from qwen_swe.train import probe
from tests.tiny_model import build_tiny_qwen3, tiny_model_dir

PROMPT = [11, 12, 13]


def _t(
    group: int, reward: float, response: list[int], mask: list[int], before: list[float], after: list[float]
) -> probe.Trajectory:
    t = probe.Trajectory(("step_000000.jsonl.gz", group, "a"), reward, PROMPT + response, len(response), mask)
    t.logp = {"before": before, "after": after}
    return t


def test_a_mixed_group_reports_its_margin_and_the_token_where_a_failure_leaves_a_success():
    win = _t(0, 1.0, [5, 6, 7], [1, 1, 1], [-0.1, -1.0, -0.2], [-0.1, -0.5, -0.2])
    lose = _t(0, -1.0, [5, 9, 7], [1, 1, 1], [-0.1, -0.8, -0.3], [-0.1, -1.5, -0.3])
    flat = [_t(1, -1.0, [5, 6], [1, 1], [-0.2, -0.2], [-0.3, -0.2]) for _ in range(2)]
    s = probe.summarise(probe.groups_of([win, lose, *flat]))
    assert (s["mixed_groups"], s["equal_groups"], s["forks"]) == (1, 1, 1)
    assert s["success_delta"] == pytest.approx(0.5) and s["failure_delta"] == pytest.approx(-0.7)
    assert s["margin_delta"] == pytest.approx(1.2) and s["margins_up"] == 1
    # the fork is response position 1, where the success took token 6: p exp(-1.0) -> exp(-0.5)
    assert s["fork_p_before"] == pytest.approx(0.3679, abs=1e-4)
    assert s["fork_p_after"] == pytest.approx(0.6065, abs=1e-4)
    assert s["equal_delta"] == pytest.approx(-0.1)
    assert "1 of 1 groups moved toward their successes" in probe.report(s)


def test_a_fork_in_tool_output_or_after_another_prompt_is_not_the_policys_choice():
    win = _t(0, 1.0, [5, 6, 7], [1, 0, 1], [0.0] * 3, [0.0] * 3)
    assert probe.fork(win, _t(0, -1.0, [5, 8, 7], [1, 0, 1], [0.0] * 3, [0.0] * 3)) is None
    other = _t(0, -1.0, [5, 6, 8], [1, 0, 1], [0.0] * 3, [0.0] * 3)
    assert probe.fork(win, other) == 2
    other.tokens = [99] + other.tokens[1:]
    assert probe.fork(win, other) is None


def test_the_probe_scores_saved_rollouts_at_the_sampling_temperature_and_compares_two_weights(tmp_path):
    first = tiny_model_dir()
    second = build_tiny_qwen3(tmp_path / "other", seed=1)
    samples = []
    for i, (reward, resp) in enumerate([(1.0, [300, 301, 302]), (-1.0, [300, 305, 306])]):
        x = Sample(
            prompt="",
            tokens=[200, 201, 202] + resp,
            response_length=3,
            loss_mask=[1, 1, 1],
            reward=reward,
            group_index=0,
            index=i,
        )
        x.metadata["instance_id"] = "a"
        samples.append(x)
    data = tmp_path / "rollout_data" / "step_000000.jsonl.gz"
    dump_rollout_data(data, [samples])
    trajectories = probe.load(data.parent)
    probe.score(trajectories, str(first), "before", 0.7)
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(str(first), dtype=torch.float32)
    with torch.no_grad():
        logits = lm(input_ids=torch.tensor([samples[1].tokens])).logits[0, 2:5]
    expected = torch.log_softmax(logits / 0.7, -1).gather(-1, torch.tensor([[300], [305], [306]])).squeeze(-1)
    torch.testing.assert_close(torch.tensor(trajectories[1].logp["before"]), expected, rtol=1e-5, atol=1e-5)

    out = tmp_path / "probe.json"
    assert (
        probe.main(
            [
                "--data",
                str(data.parent),
                "--before",
                str(first),
                "--after",
                str(second),
                "--temperature",
                "0.7",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    s = json.loads(out.read_text())
    assert s["mixed_groups"] == 1 and s["forks"] == 1 and s["success_delta"] != 0.0
    assert (
        probe.main(
            [
                "--data",
                str(data),
                "--before",
                str(first),
                "--after",
                str(first),
                "--bf16",
                "--skip-equal",
                "--out",
                str(out),
            ]
        )
        == 0
    )  # one file; the same weights move nothing
    s = json.loads(out.read_text())
    assert s["mixed_groups"] == 1 and s["equal_groups"] == 0 and s["margin_delta"] == 0.0
    assert (
        probe.main(
            [
                "--data",
                str(data),
                "--before",
                str(first),
                "--after",
                str(first),
                "--exclude",
                str(data),
                "--out",
                str(out),
            ]
        )
        == 0
    )  # the trained tasks left out: nothing to measure here
    assert json.loads(out.read_text())["mixed_groups"] == 0


def test_the_probe_names_what_is_missing():
    with pytest.raises(Exception, match="SAVE_ROLLOUT_DATA"):
        probe.load(Path("/nonexistent-rollout-data"))
    with pytest.raises(SystemExit, match="--before .*config.json"):
        probe.main(["--data", ".", "--before", "/nonexistent", "--after", "/nonexistent"])
