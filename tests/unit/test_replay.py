"""LOAD_ROLLOUT_DATA: the replay driver reads what SAVE_ROLLOUT_DATA wrote, step by step, and says what is wrong
with a folder or file it cannot use (the bit-exact replay of a live run is in tests/integration/test_trainer_fsdp)."""

from __future__ import annotations

import gzip
import json

import pytest

from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import Sample
from qwen_swe.errors import ConfigError, DataError
from qwen_swe.rollout.driver import make_driver
from qwen_swe.rollout.record import dump_rollout_data
from qwen_swe.rollout.replay import ReplayDriver


def _sample(instance: str, group: int, reward: float) -> Sample:
    x = Sample(
        group_index=group,
        index=0,
        tokens=[1, 2, 3],
        response_length=2,
        loss_mask=[1, 1],
        rollout_log_probs=[-0.5, -0.25],
        reward=reward,
    )
    x.metadata.update(instance_id=instance, resolved=reward > 0, weight_version=3)
    return x


def test_a_step_replays_its_groups_stamped_with_the_trainers_version(tmp_path):
    # two rounds of dynamic sampling can reuse a group index for another instance: groups stay apart
    groups = [[_sample("a", 0, 1.0), _sample("a", 0, -1.0)], [_sample("b", 0, -1.0), _sample("b", 0, -1.0)]]
    dump_rollout_data(tmp_path / "step_000001.jsonl.gz", groups)
    settings = Settings.build(load_rollout_data=str(tmp_path))
    assert settings.offline
    driver = make_driver(settings)
    assert isinstance(driver, ReplayDriver)
    samples, _ = driver.generate(1, 7)
    assert [(x.metadata["instance_id"], x.group_index, x.reward) for x in samples] == [
        ("a", 0, 1.0),
        ("a", 0, -1.0),
        ("b", 1, -1.0),
        ("b", 1, -1.0),
    ]
    assert all(x.metadata["weight_version"] == 7 and x.rollout_log_probs == [-0.5, -0.25] for x in samples)
    with pytest.raises(DataError, match=r"step_000002.jsonl.gz does not exist.*NUM_ROLLOUTS"):
        driver.generate(2, 7)


def test_replay_names_a_bad_folder_file_or_mode(tmp_path):
    with pytest.raises(DataError, match="LOAD_ROLLOUT_DATA=.*missing is not a folder"):
        ReplayDriver(Settings.build(load_rollout_data=str(tmp_path / "missing")))
    with gzip.open(tmp_path / "step_000000.jsonl.gz", "wt") as fh:
        fh.write(json.dumps({"group_index": 0, "reward": 1.0, "tokens": [1, 2]}) + "\n")
    with pytest.raises(DataError, match=r"step_000000.jsonl.gz:1 lacks response_length, loss_mask, rollout_log_probs"):
        ReplayDriver(Settings.build(load_rollout_data=str(tmp_path))).generate(0, 0)
    with pytest.raises(ConfigError, match="LOAD_ROLLOUT_DATA=.* replays GRPO steps, not TRAIN_MODE=sft"):
        Settings.build(load_rollout_data=str(tmp_path), train_mode="sft", sft_data="d.jsonl")


def test_pool_writes_several_steps_as_one_with_every_group_apart(tmp_path, capsys):
    from qwen_swe.rollout.replay import main

    # the same group index and instance in two steps are two groups: each step drew its own
    dump_rollout_data(tmp_path / "step_000000.jsonl.gz", [[_sample("a", 0, 1.0), _sample("a", 0, -1.0)]])
    dump_rollout_data(
        tmp_path / "step_000001.jsonl.gz",
        [[_sample("a", 0, -1.0), _sample("a", 0, -1.0)], [_sample("b", 1, 1.0), _sample("b", 1, -1.0)]],
    )
    out = tmp_path / "pooled"
    assert (
        main(
            ["pool", "--out", str(out), str(tmp_path / "step_000000.jsonl.gz"), str(tmp_path / "step_000001.jsonl.gz")]
        )
        == 0
    )
    assert "pooled 2 steps: 3 groups (2 with both outcomes" in capsys.readouterr().out
    samples, _ = ReplayDriver(Settings.build(load_rollout_data=str(out))).generate(0, 1)
    assert [(x.metadata["instance_id"], x.group_index, x.reward) for x in samples] == [
        ("a", 0, 1.0),
        ("a", 0, -1.0),
        ("a", 1, -1.0),
        ("a", 1, -1.0),
        ("b", 2, 1.0),
        ("b", 2, -1.0),
    ]
    with pytest.raises(SystemExit, match="step_000000.jsonl.gz exists: pass a new --out folder"):
        main(["pool", "--out", str(out), str(tmp_path / "step_000000.jsonl.gz")])
    with pytest.raises(SystemExit, match="step_000009.jsonl.gz: no such file; pass step_N.jsonl.gz files"):
        main(["pool", "--out", str(tmp_path / "other"), str(tmp_path / "step_000009.jsonl.gz")])
