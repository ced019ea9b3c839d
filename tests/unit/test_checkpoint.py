"""Checkpoints in a single-process gloo world: discovery, atomicity, keep-last, disk check, exact round trip."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest
import torch

from qwen_swe.train import checkpoint as ckpt
from qwen_swe.train.checkpoint import CheckpointError
from qwen_swe.train.policy import build_policy
from tests.tiny_model import tiny_model_dir


@pytest.fixture(scope="module")
def model_dir():
    return str(tiny_model_dir())


def _trained(model_dir: str, seed: int = 0):
    torch.manual_seed(seed)
    policy = build_policy(model_dir, device=torch.device("cpu"))
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-3, weight_decay=0.0)
    ids = torch.randint(100, 5000, (2, 12))
    positions = torch.tensor([5, 6, 7, 8, 17, 18, 19, 20, 21, 22])
    targets = ids.reshape(-1)[positions + 1]
    logp, _ = policy(ids, None, positions, targets)
    (-logp.mean()).backward()
    opt.step()
    opt.zero_grad()
    return policy, opt


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _make(root, name, marker=True):
    path = root / "checkpoints" / name
    path.mkdir(parents=True)
    if marker:
        (path / ckpt.MARKER).write_text("ok\n")
    return path


def test_discovery_ignores_half_written(tmp_path, caplog):
    _make(tmp_path, "step_000002")
    _make(tmp_path, "step_000003")
    _make(tmp_path, "step_000005", marker=False)
    _make(tmp_path, "step_000009.tmp", marker=True)
    _make(tmp_path, "notes")
    with caplog.at_level(logging.WARNING, logger="qwen_swe.checkpoint"):
        found = ckpt.complete_checkpoints(tmp_path)
    assert [s for s, _ in found] == [2, 3]
    assert ckpt.latest_checkpoint(tmp_path).name == "step_000003"
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "step_000005" in warned and "step_000009.tmp" in warned
    assert ckpt.latest_checkpoint(tmp_path / "nothing-here") is None


def test_disk_check_names_folder_and_sizes(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    ckpt.check_disk(tmp_path / "a" / "b", 1024)  # a missing folder is checked on its nearest existing parent
    with pytest.raises(CheckpointError) as err:
        ckpt.check_disk(tmp_path / "checkpoints", free + 10**15)
    msg = str(err.value)
    assert str(tmp_path / "checkpoints") in msg and str(free + 10**15) in msg and "free" in msg
    assert ckpt.expected_bytes(1000, 1000) > 3000 and ckpt.expected_bytes(1000, 0) < ckpt.expected_bytes(1000, 1000)


def test_round_trip_is_bit_identical(tmp_path, world_of_one, model_dir):
    policy, opt = _trained(model_dir)
    torch.manual_seed(77)
    path = ckpt.save_checkpoint(
        tmp_path, 1, policy, opt, state={"step": 1, "weight_version": 1, "driver": {"pos": 4}}, keep=3
    )
    expected_draw = torch.rand(4)
    assert path.name == "step_000001" and (path / ckpt.MARKER).exists()
    assert not list((tmp_path / "checkpoints").glob("*.tmp"))

    fresh, fresh_opt = build_policy(model_dir, device=torch.device("cpu")), None
    fresh_opt = torch.optim.AdamW([p for p in fresh.parameters() if p.requires_grad], lr=1e-3, weight_decay=0.0)
    torch.manual_seed(12345)
    state = ckpt.load_checkpoint(path, fresh, fresh_opt)
    assert state == {"step": 1, "weight_version": 1, "driver": {"pos": 4}}
    assert torch.equal(torch.rand(4), expected_draw)  # RNG restored to its state at save time

    pairs = list(zip(policy.named_parameters(), fresh.named_parameters()))
    assert pairs and all(n1 == n2 and torch.equal(_local(p1), _local(p2)) for (n1, p1), (n2, p2) in pairs)
    for (_, p1), (_, p2) in pairs:
        s1, s2 = opt.state[p1], fresh_opt.state[p2]
        assert set(s1) == set(s2) == {"step", "exp_avg", "exp_avg_sq"}
        assert all(torch.equal(_local(s1[k]), _local(s2[k])) for k in s1)


def test_keep_last_and_failed_saves(tmp_path, world_of_one, model_dir, monkeypatch):
    policy, opt = _trained(model_dir)
    for step in (1, 2, 3):
        ckpt.save_checkpoint(tmp_path, step, policy, opt, state={"step": step, "weight_version": step}, keep=2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000002", "step_000003"]

    with pytest.raises(CheckpointError, match="not enough disk"):
        ckpt.save_checkpoint(tmp_path, 4, policy, opt, state={"step": 4}, keep=2, needed_bytes=10**18)
    assert not (tmp_path / "checkpoints" / "step_000004.tmp").exists()

    import torch.distributed.checkpoint as dcp

    def crash(*args, **kwargs):
        raise OSError("simulated crash while writing shards")

    monkeypatch.setattr(dcp, "save", crash)
    with pytest.raises(OSError, match="simulated crash"):
        ckpt.save_checkpoint(tmp_path, 5, policy, opt, state={"step": 5}, keep=2)
    assert (tmp_path / "checkpoints" / "step_000005.tmp").is_dir()  # left behind, but never picked up
    assert ckpt.latest_checkpoint(tmp_path).name == "step_000003"


def test_the_reward_plot_shows_evaluation_where_it_ran(tmp_path):
    from PIL import Image

    from qwen_swe.train.metrics import plot_rewards

    rows = [
        {"step": 0, "reward_mean": -1.0, "resolve_rate": 0.0, "eval/resolve_rate": 0.25},
        {"step": 1, "reward_mean": 0.0, "resolve_rate": 0.5},
        {"step": 2, "reward_mean": 1.0, "resolve_rate": 1.0, "eval/resolve_rate": 0.75},
    ]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    png = plot_rewards(metrics, tmp_path / "rewards.png")
    rgb = np.asarray(Image.open(png).convert("RGB")).astype(int)  # not getdata: deprecated in Pillow 13
    red = int(((rgb[..., 0] > 180) & (rgb[..., 1] < 80) & (rgb[..., 2] < 80)).sum())
    assert red > 50, "the evaluation curve (red) is missing"
