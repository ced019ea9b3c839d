"""The warm start as a cached stage: what its key digests, how it builds, reuses and rebuilds, and that it never
trains on a held-out task. The phases are a fake here that writes what the real commands write; the real ones run
in the learning benchmark."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from qwen_swe.config.hardware import native_bf16
from qwen_swe.errors import ConfigError, DataError, SetupError
from qwen_swe.inference.embedded_model import STAMP_NAME
from qwen_swe.warmstart import __main__ as cli
from qwen_swe.warmstart import phases, stage
from qwen_swe.warmstart.stage import COMPLETE, MANIFEST, WarmStartSpec, ensure_warm_start, key

PATCH = (
    "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n"
    "@@ -3,3 +3,3 @@ def f(x):\n     a = 1\n-    return x - a\n+    return x + a\n \n"
)


def _row(i: int, site: str | None = None, repo: str = "gen/calc") -> dict:
    return {
        "instance_id": f"calc__{i}",
        "repo": repo,
        "bug_site": site or f"pkg/mod.py::f{i}",
        "problem_statement": f"f{i} returns the wrong value",
        "patch": PATCH,
    }


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    folder = tmp_path / "generated"
    folder.mkdir()
    _write(folder / "heldout.jsonl", [_row(i) for i in range(100, 104)])
    return _write(folder / "train.jsonl", [_row(i) for i in range(6)])


@pytest.fixture
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "base"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}\n')
    (folder / "model.safetensors").write_bytes(b"\x00" * 64)
    (folder / "tokenizer.json").write_text("{}\n")
    return folder


class FakePhases:
    """Writes what ``collect`` and ``run_grpo.sh`` with TRAIN_MODE=sft write, and records what it was asked."""

    def __init__(self, fail: str | None = None, resume: bool = False) -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []
        self.fail, self.resume = fail, resume

    def __call__(self, cmd: list[str], env: dict[str, str], log: Path) -> None:
        self.calls.append((cmd, env))
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("fake\n")
        if "collect" in cmd:
            if self.fail == "collect":
                raise SetupError("collect exited 1")
            out = Path(cmd[cmd.index("--out") + 1])
            out.mkdir(parents=True)
            rows = Path(env["DATASET"]).read_text().splitlines()
            (out / "demos.jsonl").write_text(
                "".join(json.dumps({"instance_id": json.loads(r)["instance_id"]}) + "\n" for r in rows)
            )
            (out / "demos_report.json").write_text(
                json.dumps({"tasks": len(rows), "demonstrations": len(rows), "dropped": 0, "drops": []})
            )
        else:
            if self.fail == "sft":
                raise SetupError("run_grpo.sh exited 1")
            run = Path(env["OUTPUT_DIR"])
            assert (run / "checkpoints").is_dir() == self.resume
            weights = run / "weights" / f"v{int(env['NUM_ROLLOUTS']):06d}"
            weights.mkdir(parents=True)
            (weights / "config.json").write_text('{"model_type": "llama"}\n')
            (run / "checkpoints").mkdir(exist_ok=True)
            (run / "metrics.jsonl").write_text("".join(f'{{"step": {s}}}\n' for s in range(int(env["NUM_ROLLOUTS"]))))


def _spec(model: Path, tasks: Path, **changes) -> WarmStartSpec:
    return WarmStartSpec(**{"model": model, "tasks": tasks, "demos": 4, **changes})


def test_the_key_changes_with_every_input(model: Path, tasks: Path, tmp_path: Path, monkeypatch):
    digests = tmp_path / "digests.json"
    base = key(_spec(model, tasks), digests)
    changed = {
        f"{name}={value}": key(_spec(model, tasks, **{name: value}), digests)
        for name, value in (
            ("demos", 5),
            ("demos", 0),
            ("recover", 0.5),
            ("steps", 9),
            ("batch", 4),
            ("lr", 2e-4),
            ("seed", 1),
            ("mixed_precision", not native_bf16()),  # the other precision than the default here
        )
    }
    monkeypatch.setattr(stage, "EXPERT_VERSION", stage.EXPERT_VERSION + 1)
    changed["expert"] = key(_spec(model, tasks), digests)
    monkeypatch.undo()
    monkeypatch.setattr(stage, "STAGE_VERSION", stage.STAGE_VERSION + 1)
    changed["stage"] = key(_spec(model, tasks), digests)
    monkeypatch.undo()
    monkeypatch.setattr(stage, "QWEN_CODE_VERSION", "0.0.1")
    changed["qwen-code"] = key(_spec(model, tasks), digests)
    monkeypatch.undo()
    (model / "model.safetensors").write_bytes(b"\x01" + b"\x00" * 63)  # the same size: the content counts
    changed["weights"] = key(_spec(model, tasks), digests)
    (model / "model.safetensors").write_bytes(b"\x00" * 64)
    assert key(_spec(model, tasks), digests) == base
    with tasks.open("a") as f:
        f.write(json.dumps(_row(7)) + "\n")
    changed["tasks"] = key(_spec(model, tasks), digests)
    assert base not in changed.values() and len(set(changed.values())) == len(changed), changed


def test_the_key_ignores_mtimes_paths_and_argument_order(model: Path, tasks: Path, tmp_path: Path):
    digests = tmp_path / "digests.json"
    base = key(WarmStartSpec(model=model, tasks=tasks, steps=8, lr=1e-4), digests)
    assert key(WarmStartSpec(lr=0.0001, steps=8, tasks=str(tasks), model=str(model)), digests) == base
    for path in (tasks, model / "model.safetensors"):
        os.utime(path, (1_000_000, 1_000_000))
    assert key(WarmStartSpec(model=model, tasks=tasks, steps=8), digests) == base
    copy = shutil.copytree(model, tmp_path / "elsewhere")
    (copy / ".lock").write_text("")  # hidden files are no part of a model
    assert key(WarmStartSpec(model=copy, tasks=tasks, steps=8), digests) == base


def test_a_model_file_is_hashed_once_until_it_changes(model: Path, tasks: Path, tmp_path: Path, monkeypatch):
    digests, read = tmp_path / "digests.json", []
    real = stage.file_sha256
    monkeypatch.setattr(stage, "file_sha256", lambda path: read.append(path.name) or real(path))
    key(_spec(model, tasks), digests)
    assert sorted(read) == ["config.json", "model.safetensors", "tokenizer.json", "train.jsonl"]
    read.clear()
    key(_spec(model, tasks), digests)
    assert read == ["train.jsonl"]  # the tasks file is small and always read: its content is the input
    (model / "config.json").write_text('{"model_type": "llama", "x": 1}\n')
    read.clear()
    key(_spec(model, tasks), digests)
    assert sorted(read) == ["config.json", "train.jsonl"]


def test_the_embedded_folder_is_keyed_by_its_conversion_stamp(model: Path, tasks: Path, tmp_path: Path):
    digests = tmp_path / "digests.json"
    stamp = {"gguf": "x.gguf", "gguf_sha256": "a" * 64, "converter": 1, "dtype": "float32", "template_sha256": "b"}
    (model / STAMP_NAME).write_text(json.dumps(stamp))
    base = key(_spec(model, tasks), digests)
    assert not digests.exists()  # the weights are not read
    (model / STAMP_NAME).write_text(json.dumps({**stamp, "template_sha256": "c"}))
    assert key(_spec(model, tasks), digests) != base


def test_bad_settings_and_folders_are_refused(model: Path, tasks: Path, tmp_path: Path):
    for bad in ({"steps": 0}, {"batch": 0}, {"lr": 0.0}, {"demos": -1}, {"recover": 1.5}):
        with pytest.raises(ConfigError):
            _spec(model, tasks, **bad)
    with pytest.raises(DataError, match="no config.json"):
        key(_spec(tmp_path, tasks), tmp_path / "d.json")
    with pytest.raises(DataError, match="no such tasks file"):
        key(_spec(model, tmp_path / "missing.jsonl"), tmp_path / "d.json")


def test_builds_once_then_reuses(model: Path, tasks: Path, tmp_path: Path, capsys):
    home, fake = tmp_path / "home", FakePhases()
    spec = _spec(model, tasks, demos=3, steps=8, batch=2)
    out = ensure_warm_start(spec, home, run=fake)
    name = key(spec, home / "warmstart" / stage.DIGESTS)
    assert out == home / "warmstart" / name / "model"
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()  # the base's tokenizer beside it
    assert (out.parent / COMPLETE).is_file() and not (out.parent / "sft").exists()  # no optimizer state kept
    assert [p.name for p in (home / "warmstart").iterdir() if p.name.startswith(f".{name}.build")] == []
    collect, sft = fake.calls
    assert collect[0][1:4] == ["-m", "qwen_swe.warmstart", "collect"] and collect[1]["MODEL"] == str(model)
    assert Path(collect[1]["DATASET"]).name == "demo_tasks.jsonl"
    assert len((out.parent / "demo_tasks.jsonl").read_text().splitlines()) == 3  # kept beside the model
    assert sft[1]["TRAIN_MODE"] == "sft" and sft[1]["NUM_ROLLOUTS"] == "8" and sft[1]["ROLLOUT_BATCH_SIZE"] == "2"
    assert sft[1]["LR"] == "0.0001" and sft[1]["SAVE_INTERVAL"] == "3" and sft[1]["SFT_DATA"].endswith("demos.jsonl")
    manifest = json.loads((out.parent / MANIFEST).read_text())
    assert manifest["key"] == name and manifest["spec"]["steps"] == 8 and manifest["spec"]["model"] == str(model)
    assert manifest["demos"]["demonstrations"] == 3 and len(manifest["demo_tasks"]) == 3
    assert manifest["heldout_check"]["heldout_tasks"] == 4 and manifest["heldout_check"]["shared_tasks"] == 0
    assert set(manifest["seconds"]) == {"collect", "sft", "total"} and manifest["resumed"] is False
    printed = capsys.readouterr().out
    assert "demonstrations of 3 train tasks" in printed and "SFT, 8 steps of 2" in printed

    def never(*args: object) -> None:
        raise AssertionError("a cached warm start ran a phase")

    assert ensure_warm_start(spec, home, run=never) == out
    assert "reusing" in capsys.readouterr().out


def test_the_same_inputs_choose_the_same_tasks(model: Path, tasks: Path, tmp_path: Path):
    chosen = []
    for home in (tmp_path / "a", tmp_path / "b"):
        ensure_warm_start(_spec(model, tasks, demos=3), home, run=FakePhases())
        chosen.append(json.loads(next((home / "warmstart").glob("*/warmstart.json")).read_text())["demo_tasks"])
    assert chosen[0] == chosen[1] and len(set(chosen[0])) == 3


def test_a_half_built_folder_is_removed_and_rebuilt(model: Path, tasks: Path, tmp_path: Path):
    home, spec = tmp_path / "home", _spec(model, tasks)
    name = key(spec, home / "warmstart" / stage.DIGESTS)
    killed = home / "warmstart" / f".{name}.build-killed"
    (killed / "sft").mkdir(parents=True)
    unmarked = home / "warmstart" / name / "model"  # in place, but without the marker a finished build writes
    unmarked.mkdir(parents=True)
    (unmarked / "config.json").write_text("{}")
    fake = FakePhases()
    out = ensure_warm_start(spec, home, run=fake)
    assert len(fake.calls) == 2 and not killed.exists() and (out.parent / COMPLETE).is_file()


def test_a_stopped_build_resumes_where_it_stopped(model: Path, tasks: Path, tmp_path: Path, capsys):
    home, spec = tmp_path / "home", _spec(model, tasks)
    name = key(spec, home / "warmstart" / stage.DIGESTS)
    build = home / "warmstart" / f".{name}.build"
    with pytest.raises(SetupError):  # a collection that fails keeps nothing of itself
        ensure_warm_start(spec, home, run=FakePhases(fail="collect"))
    assert not (build / "demos").exists()
    with pytest.raises(SetupError):  # stopped in SFT: the demonstrations stay, and the SFT run folder
        ensure_warm_start(spec, home, run=FakePhases(fail="sft"))
    assert (build / "demos" / "demos_report.json").is_file() and "resumes from" in capsys.readouterr().out
    (build / "sft" / "checkpoints" / "step_2").mkdir(parents=True)  # what a stopped SFT run leaves
    resumed = FakePhases(resume=True)
    out = ensure_warm_start(spec, home, run=resumed)
    [(cmd, env)] = resumed.calls  # SFT only, into the same run folder, where the trainer resumes
    assert env["TRAIN_MODE"] == "sft" and env["OUTPUT_DIR"] == str(build / "sft")
    assert "resuming the unfinished build" in capsys.readouterr().out
    manifest = json.loads((out.parent / MANIFEST).read_text())
    assert manifest["resumed"] is True and manifest["demos"]["demonstrations"] == 4 and not build.exists()
    assert (out / "config.json").is_file() and not (out.parent / "sft").exists()


def test_a_build_stopped_after_sft_keeps_its_model(model: Path, tasks: Path, tmp_path: Path, monkeypatch):
    home, spec = tmp_path / "home", _spec(model, tasks)
    name = key(spec, home / "warmstart" / stage.DIGESTS)

    copy = stage.shutil.copy2

    def lost_power(source: Path, dest: Path) -> None:
        if dest.parent.name == "model":  # the tokenizer's copy, after the model's rename
            raise KeyboardInterrupt
        copy(source, dest)

    monkeypatch.setattr(stage.shutil, "copy2", lost_power)
    with pytest.raises(KeyboardInterrupt):
        ensure_warm_start(spec, home, run=FakePhases())
    monkeypatch.undo()
    assert (home / "warmstart" / f".{name}.build" / "model" / "config.json").is_file()
    fake = FakePhases()
    out = ensure_warm_start(spec, home, run=fake)
    assert fake.calls == [] and (out.parent / COMPLETE).is_file() and (out / "tokenizer.json").is_file()


def test_held_out_tasks_are_refused_by_name(model: Path, tasks: Path, tmp_path: Path):
    fake = FakePhases()
    heldout = tasks.with_name("heldout.jsonl")
    same_site = {**_row(50, site="pkg/mod.py::f101"), "problem_statement": "another"}
    _write(tasks, [_row(0), _row(102), same_site])
    with pytest.raises(DataError) as refused:
        ensure_warm_start(_spec(model, tasks), tmp_path / "home", run=fake)
    assert str(tasks) in str(refused.value) and "calc__102" in str(refused.value) and "calc__50" in str(refused.value)
    assert "calc__0" not in str(refused.value).split(":", 2)[-1]
    _write(tasks, [_row(0), {**same_site, "repo": "gen/other"}])  # the same path::function in another repository
    ensure_warm_start(_spec(model, tasks), tmp_path / "home", run=fake)
    with pytest.raises(DataError, match="is a held-out split"):
        ensure_warm_start(_spec(model, heldout), tmp_path / "home", run=fake)
    heldout.unlink()
    with pytest.raises(DataError, match="no held-out split beside it"):
        ensure_warm_start(_spec(model, tasks), tmp_path / "home", run=fake)
    assert len(fake.calls) == 2  # only the clean tasks were built


def test_a_phase_runs_with_its_own_settings_a_log_and_a_timeout(tmp_path: Path, monkeypatch):
    env = phases.child_env({"LR": "1"}, {"PATH": "/bin", "LORA_RANK": "8", "SANDBOX_CPUS": "2", "LR": "3"})
    assert env == {"PATH": "/bin", "SANDBOX_CPUS": "2", "LR": "1"}
    monkeypatch.setenv("LORA_RANK", "8")
    log = tmp_path / "logs" / "phase.log"
    phases.run_logged(
        [sys.executable, "-c", "import os; print(os.environ.get('LORA_RANK'), os.environ['X'])"], {"X": "given"}, log
    )
    assert log.read_text().split() == ["None", "given"]
    with pytest.raises(SetupError, match="exited 3") as failed:
        phases.run_logged([sys.executable, "-c", "print('why'); raise SystemExit(3)"], {}, log)
    assert "why" in str(failed.value)
    with pytest.raises(SetupError, match="did not finish"):
        phases.run_logged([sys.executable, "-c", "import time; time.sleep(60)"], {}, log, timeout=0.5)


def test_the_command_prints_the_key_or_the_folder_last(model: Path, tasks: Path, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("QWEN_SWE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(cli, "install", lambda: None)
    fake = FakePhases()
    monkeypatch.setattr(cli, "ensure_warm_start", lambda spec, home: ensure_warm_start(spec, home, run=fake))
    flags = ["--model", str(model), "--tasks", str(tasks), "--demos", "2", "--steps", "3"]
    assert cli.main(["build", *flags, "--print-key"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [key(_spec(model, tasks, demos=2, steps=3), tmp_path / "home" / "warmstart" / "d.json")]
    assert not fake.calls
    assert cli.main(["build", *flags]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == str(tmp_path / "home" / "warmstart" / printed[0] / "model") and Path(last).is_dir()
    with pytest.raises(SystemExit):
        cli.main(["build", "--max-turns", "3"])  # a run setting is no input of the stage


def test_progress_counts_the_sft_steps_for_its_eta(tmp_path: Path):
    metrics = tmp_path / "metrics.jsonl"
    progress = phases.Progress("SFT", 3600, metrics, steps=8)
    assert progress.line().startswith("warm start: SFT: 0/8 steps, ") and "ETA" not in progress.line()
    metrics.write_text('{"step": 0}\n{"step": 1}\n')
    assert "2/8 steps, " in progress.line() and ", ETA " in progress.line()


def test_sft_keeps_activations_unless_the_user_says_otherwise(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("ACTIVATION_CHECKPOINTING", raising=False)
    args = (tmp_path / "demos.jsonl", tmp_path / "sft", "model", 2, 8, 1e-4, 0, True, "run")
    assert phases.sft_command(*args)[1]["ACTIVATION_CHECKPOINTING"] == "false"
    monkeypatch.setenv("ACTIVATION_CHECKPOINTING", "true")  # a resource setting: the user's value passes through
    assert phases.sft_command(*args)[1]["ACTIVATION_CHECKPOINTING"] == "true"
