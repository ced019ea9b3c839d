"""The ``qwen-swe`` command: every subcommand's ``--help`` lists its flags with their defaults and, where it reads
the run settings, every setting with its env var, default and choices; each hands its arguments to its ``python -m``
entry point unchanged; the seed's scripts still read the environment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from qwen_swe.cli import commands
from qwen_swe.cli.main import main
from qwen_swe.config.fields import env_name
from qwen_swe.config.settings import all_fields
from qwen_swe.paths import REPO_ROOT

ISSUE_COMMANDS = ["train", "eval", "view", "plan", "generate", "warmstart", "serve", "check"]


def help_of(capsys, *argv: str) -> str:
    assert main([*argv, "--help"]) == 0
    return capsys.readouterr().out


def test_the_commands_are_the_issues():
    assert list(commands.COMMANDS) == ISSUE_COMMANDS


def test_the_overview_lists_every_command(capsys):
    text = help_of(capsys)
    assert all(f"  {name}" in text for name in ISSUE_COMMANDS)
    assert main([]) == 2 and main(["bogus"]) == 2


@pytest.mark.parametrize("argv", [["train"], ["eval"], ["plan"], ["warmstart", "collect"]], ids=" ".join)
def test_commands_that_read_the_run_settings_list_every_one(capsys, argv):
    text = help_of(capsys, *argv)
    flat = " ".join(text.split())  # argparse wraps the help lines
    for f in all_fields():
        assert f"--{f.name.replace('_', '-')} VALUE" in text and f"(env {env_name(f.name)}; default: " in flat, f.name
    assert "(env N_SAMPLES; default: 2; embedded default: 4)" in flat
    assert "(env BACKEND; default: fsdp; one of: fsdp, slime)" in flat
    assert "--config FILE" in text and "wins over the --config file" in flat


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["train"], ["--print-config", "--eval"]),
        (["eval"], ["--predictions", "--agent", "(default: 2)"]),  # --concurrency's default
        (["plan"], ["--gpu-memory-gb", "(default: 80.0)", "--run-config FILE"]),
        (["warmstart", "build"], ["--steps", "(default:"]),
        (["warmstart"], ["collect", "build"]),
        (["view"], ["FOLDER"]),
        (["generate"], ["--seed", "--localized", "--reuse", "(default: 1000)"]),
        (["serve"], ["--tp", "(default: 8000)", "(default: 1800.0)", "MODEL"]),
        (["check"], ["instance_ids"]),
    ],
)
def test_each_command_shows_its_own_flags(capsys, argv, expected):
    text = help_of(capsys, *argv)
    assert text.startswith(f"usage: qwen-swe {argv[0]}")
    for part in expected:
        assert part in text, part
    if argv in (["view"], ["generate"], ["serve"], ["check"], ["warmstart", "build"]):
        assert "--num-rollouts" not in text  # these read no run settings


def test_help_after_double_dash_is_vllms(monkeypatch):
    seen = []
    monkeypatch.setitem(
        commands.COMMANDS,
        "serve",
        commands.Command(
            "serve", "", "m", lambda argv: seen.append(argv) or 0, commands.COMMANDS["serve"].own_help, settings=False
        ),
    )
    assert main(["serve", "--port", "8001", "--", "--help"]) == 0
    assert seen == [["--port", "8001", "--", "--help"]]


def test_eval_is_the_agent_mode_unless_grading_predictions(monkeypatch):
    import qwen_swe.evaluate.__main__ as evaluate

    calls = []
    monkeypatch.setattr(evaluate, "main", lambda argv: calls.append(argv) or 0)
    assert main(["eval", "--out", "x"]) == 0 and main(["eval", "--predictions", "p.jsonl"]) == 0
    assert calls == [["--agent", "--out", "x"], ["--predictions", "p.jsonl"]]


def test_run_grpo_sh_still_reads_the_environment_and_takes_a_config(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("rollout_batch_size: 6\nn_samples: 5\n")
    env = {**os.environ, "N_SAMPLES": "3", "LR": "2e-5", "OUTPUT_DIR": str(tmp_path / "run")}
    out = subprocess.run(
        ["bash", "examples/qwen_swe/run_grpo.sh", "--config", str(cfg), "--print-config"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "n_samples: 3  # env" in out.stdout and "lr: 2.0e-05  # env" in out.stdout
    assert f"rollout_batch_size: 6  # file {cfg}" in out.stdout
    bad = subprocess.run(
        ["bash", "examples/qwen_swe/run_grpo.sh", "--print-config"],
        cwd=REPO_ROOT,
        env={**env, "ROLLOUT_BATCHSIZE": "8"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "did you mean ROLLOUT_BATCH_SIZE?" in bad.stderr


def test_python_m_qwen_swe_cli_is_the_command():
    out = subprocess.run(
        [sys.executable, "-m", "qwen_swe.cli", "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "qwen-swe" in out.stdout


def test_train_logs_the_precedence_at_start(monkeypatch, caplog, tmp_path):
    import qwen_swe.run as run_module

    started = []
    monkeypatch.setattr(run_module, "install_supervisor", lambda: None)
    monkeypatch.setattr(run_module, "run", lambda settings: started.append(settings) or 0)
    monkeypatch.setenv("OUTPUT_DIR", str(tmp_path / "run"))
    cfg = tmp_path / "run.toml"
    cfg.write_text("n_samples = 3\n")
    with caplog.at_level("INFO", logger="qwen_swe"):
        assert main(["train", "--config", str(cfg)]) == 0
    assert started[0].n_samples == 3
    assert f"settings: flags > env vars > file {cfg} > embedded profile > defaults" in caplog.text
