"""scripts/gpu_check.sh as far as it runs without a GPU: its arguments, its refusal here, and (with a stand-in
nvidia-smi) the stages it would run and how it places them; its training stage's refusal without CUDA and its
verdict on the server's log-probs."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from qwen_swe.paths import REPO_ROOT
from qwen_swe.supervise import torchrun
from tests.gpu_stand_in import no_gpu_path, nvidia_smi_path


def _step_module():
    spec = importlib.util.spec_from_file_location("gpu_check_step", REPO_ROOT / "scripts" / "gpu_check_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_check(*args: str, path: str | None = None, tmpdir: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path or no_gpu_path(), **({"TMPDIR": str(tmpdir)} if tmpdir else {})}
    return subprocess.run(
        ["bash", "scripts/gpu_check.sh", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, env=env
    )


def test_without_a_gpu_it_refuses_with_a_clear_message():
    out = gpu_check()
    assert out.returncode == 3
    assert "no NVIDIA GPU here (nvidia-smi lists none): this check needs at least one CUDA GPU" in out.stderr
    assert out.stdout == ""


def test_bad_arguments_are_named_and_help_lists_the_stages(tmp_path):
    for args, message in (
        (["--bogus"], "unknown argument --bogus"),
        (["--port", "x"], "--port needs a port number"),
        (["--wheels", str(tmp_path / "missing")], "--wheels needs a folder of wheels"),
    ):
        out = gpu_check(*args)
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr)
    out = gpu_check("--help")
    assert out.returncode == 0
    assert all(f"  {name} " in out.stdout for name in ("setup", "cuda", "serve", "step", "grpo")), out.stdout


def test_with_two_gpus_every_stage_is_planned_over_nccl(tmp_path):
    out = gpu_check("--dry-run", "--out", str(tmp_path / "out"), path=nvidia_smi_path(tmp_path / "bin", gpus=2))
    assert out.returncode == 0, out.stderr
    assert "2 GPU(s): server on GPU 0, trainer on GPU 1, broadcast over nccl, the GRPO step split" in out.stdout
    assert not (tmp_path / "out").exists()  # a dry run starts nothing and leaves nothing behind
    assert [line.split()[-1] for line in out.stdout.splitlines() if line.startswith("would run")] == [
        "setup",
        "cuda",
        "serve",
        "step",
        "grpo",
    ]


def test_with_one_gpu_the_push_goes_over_gloo_and_the_grpo_step_is_colocated(tmp_path):
    (tmp_path / "tmp").mkdir()
    out = gpu_check(
        "--dry-run", "--skip-setup", path=nvidia_smi_path(tmp_path / "bin", gpus=1), tmpdir=tmp_path / "tmp"
    )
    assert out.returncode == 0, out.stderr
    assert not any((tmp_path / "tmp").iterdir())  # no gpu_check.* folder made for the logs of a run that never was
    assert "1 GPU(s): server on GPU 0, trainer on GPU 0, broadcast over gloo, the GRPO step colocated" in out.stdout
    assert [line.split()[-1] for line in out.stdout.splitlines() if line.startswith("would run")] == [
        "cuda",
        "serve",
        "step",
        "grpo",
    ]


def test_the_training_stage_refuses_cuda_without_a_gpu(tmp_path):
    out = subprocess.run(
        [sys.executable, "scripts/gpu_check_step.py", "--url", "http://127.0.0.1:9/v1", "--out", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "CUDA_VISIBLE_DEVICES": ""},
    )
    assert out.returncode == 2
    assert "--device cuda but torch sees no CUDA GPU" in out.stderr and "bash scripts/setup.sh --gpu" in out.stderr


def test_the_log_probs_count_as_moved_only_beyond_bf16_noise():
    moved = _step_module().moved
    before = {"token_ids": [1, 2], "logprobs": [-0.5, -1.0]}
    assert not moved(before, {"token_ids": [1, 2], "logprobs": [-0.5004, -1.0]})
    assert moved(before, {"token_ids": [1, 2], "logprobs": [-0.6, -1.0]})
    assert moved(before, {"token_ids": [1, 3], "logprobs": [-0.5, -1.0]})


def test_the_training_stage_on_cpu_steps_fsdp2_on_gloo_and_its_log_probs_rise(tmp_path):
    """The stage's CPU fallback: two gloo ranks, the tiny Qwen3, no server; the step must raise the target's
    log-probs (the same code that runs on NCCL before the broadcast)."""
    from tests.tiny_model import tiny_model_dir

    model = tiny_model_dir()  # built here once: two ranks building it at the same time race on the rename
    step = ["scripts/gpu_check_step.py", "--device", "cpu", "--model", str(model), "--out", str(tmp_path)]
    cmd = torchrun(2, tmp_path / "torchrun", step)
    out = subprocess.run(
        cmd,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert out.returncode == 0, out.stderr[-4000:]
    report = json.loads((tmp_path / "step.json").read_text())
    assert report["backend"] == "gloo" and report["ok"] is True
    assert report["logprob_after"] > report["logprob_before"], report
    assert "fsdp step on gloo" in out.stdout
