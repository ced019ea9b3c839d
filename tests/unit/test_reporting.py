"""REPORT_TO: the same per-step scalars in TensorBoard and wandb, with wandb's table of sampled trajectories and the
curves, read back from the files each writes in the run folder. wandb runs offline (WANDB_MODE=offline) and its
service address points at a closed loopback port: the test never reaches the network."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from qwen_swe.config.settings import Settings
from qwen_swe.errors import ConfigError
from qwen_swe.train.metrics import MetricsLog
from qwen_swe.train.reporting import parse_report_to
from tests.offline_wandb import offline_wandb

BLOCK = 32768  # the .wandb file's record blocks (LevelDB's log format, with wandb's own header)


def wandb_records(path: Path) -> Iterator[object]:
    """The protobuf records of an offline run's ``run-ID.wandb`` file, parsed with wandb's own message type."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a record header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            break
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def history(run_dir: Path) -> list[dict[str, object]]:
    """Every ``run.log`` row of every offline run in ``run_dir/wandb``, oldest run first, values decoded."""
    rows = []
    for path in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb")):
        for record in wandb_records(path):
            if record.WhichOneof("record_type") == "history":
                rows.append(
                    {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                )
    return rows


@pytest.fixture(name="offline_wandb")
def offline_wandb_env(monkeypatch, tmp_path):
    offline_wandb(monkeypatch, tmp_path)
    monkeypatch.setenv("WANDB_PROJECT", "qwen-swe-test")


def _steps(run: Path, log: MetricsLog, steps: range) -> None:
    for step in steps:
        (run / "rollouts").mkdir(exist_ok=True)
        (run / "rollouts" / f"step_{step:06d}.jsonl").write_text(
            "".join(
                json.dumps(
                    {
                        "instance_id": f"repo__task-{i}",
                        "group_index": i // 2,
                        "index": i,
                        "status": "completed",
                        "reward": float(i % 2),
                        "resolved": bool(i % 2),
                        "turns": 3,
                        "patch": "diff --git a/x b/x\n",
                    }
                )
                + "\n"
                for i in range(4)
            )
        )
        metrics = {
            "step": step,
            "weight_version": step + 1,
            "reward_mean": 0.25 * step,
            "resolve_rate": 0.5,
            "loss": -0.1,
            "skipped_update": False,
        }
        if step % 2 == 0:
            metrics["eval/resolve_rate"] = 0.1 * (step + 1)
        log.write(metrics, total_steps=4)


def test_wandb_offline_gets_the_scalars_tensorboard_gets_and_a_table_of_trajectories(offline_wandb, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    log = MetricsLog(run, report_to=("tensorboard", "wandb"), config={"train": {"lr": 1e-6}})
    try:
        _steps(run, log, range(3))
    finally:
        log.close()
    rows = history(run)
    assert [r["_step"] for r in rows] == [0, 1, 2]
    assert [r["reward_mean"] for r in rows] == [0.0, 0.25, 0.5]
    assert [r.get("eval/resolve_rate") for r in rows] == [0.1, None, pytest.approx(0.3)]
    assert all(r["resolve_rate"] == 0.5 and r["weight_version"] == r["_step"] + 1 for r in rows)
    assert rows[-1]["curves/_type"] == "image-file"  # rewards.png, the reward and evaluation curves
    offline = next(run.glob("wandb/offline-run-*"))
    table = json.loads((offline / "files" / rows[0]["trajectories/path"]).read_text())
    assert table["columns"][:3] == ["step", "instance_id", "group"] and len(table["data"]) == 4
    assert table["data"][1][1] == "repo__task-1" and table["data"][1][6] is True

    events = EventAccumulator(str(run / "tb"))
    events.Reload()
    for key in ("reward_mean", "resolve_rate", "eval/resolve_rate", "loss"):
        tb = {e.step: e.value for e in events.Scalars(key)}
        wb = {r["_step"]: r[key] for r in rows if key in r}
        assert tb == pytest.approx(wb), key


def test_a_resumed_run_continues_the_same_wandb_run(offline_wandb, tmp_path):
    run = tmp_path / "run"
    first = MetricsLog(run, report_to=("wandb",))
    try:
        _steps(run, first, range(2))
    finally:
        first.close()
    run_id = (run / "wandb" / "run_id").read_text().strip()
    time.sleep(1.1)  # wandb names an offline run's folder by its start second and id: a resume is never that quick
    resumed = MetricsLog(run, resume_step=2, report_to=("wandb",))
    try:
        _steps(run, resumed, range(2, 4))
    finally:
        resumed.close()
    assert {p.name.rsplit("-", 1)[-1] for p in run.glob("wandb/offline-run-*")} == {run_id}
    assert [r["_step"] for r in history(run)] == [0, 1, 2, 3]
    assert not (run / "tb").exists()  # REPORT_TO without tensorboard writes none


def test_report_to_is_a_setting_checked_at_start():
    assert Settings.build().train.reporters == ("tensorboard",)
    assert Settings.build(report_to="wandb, tensorboard").train.reporters == ("wandb", "tensorboard")
    assert Settings.build(report_to="").train.reporters == ()
    with pytest.raises(ConfigError, match=r"REPORT_TO='tensorbord': tensorbord is not one of tensorboard, wandb"):
        Settings.build(report_to="tensorbord")
    assert parse_report_to("wandb,wandb") == ("wandb",)
