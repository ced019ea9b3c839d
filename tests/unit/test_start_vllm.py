"""The launcher's command: what a Qwen3-Coder user runs, the family -> parser mapping, LoRA and the CPU profile."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from qwen_swe import paths
from qwen_swe.config import settings as config
from qwen_swe.config.hardware import served_dtype
from qwen_swe.inference.client import InferenceClient, InferenceError
from qwen_swe.inference.embedded_server import (
    EMBEDDED_GPU_MEMORY,
    EMBEDDED_SERVED_NAME,
    TEMPLATE,
    embedded_serve_config,
)
from qwen_swe.inference.launcher import build_arg_parser, ready_exports, serve_config_from_args
from qwen_swe.inference.serve_config import ServeConfig
from qwen_swe.inference.server import VLLMServer, free_port
from qwen_swe.inference.settings import DEFAULT_MODEL
from qwen_swe.inference.vllm_build import vllm_build
from qwen_swe.traffic.toolcalls import tool_call_parser_for
from tests.gpu_stand_in import nvidia_smi_path, vllm_env

CLEAN_ENV = {
    k: v
    for k, v in os.environ.items()
    if k
    not in {
        "MODEL",
        "VLLM_URL",
        "TP",
        "SERVED_MODEL_NAME",
        "MAX_MODEL_LEN",
        "LORA_RANK",
        "VLLM_PYTHON",
        "INFERENCE_GPUS",
        "CUDA_VISIBLE_DEVICES",
    }
}


def dry_run(*args: str, **env: str) -> tuple[dict[str, str], list[str]]:
    """Run the launcher as the seed does (a script path) and parse its printed env and argv."""
    script = paths.REPO_ROOT / "examples" / "qwen_swe" / "start_vllm.py"
    out = subprocess.run(
        [sys.executable, str(script), "--dry-run", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**CLEAN_ENV, **env},
        cwd="/",
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    exports = dict(line.removeprefix("export ").split("=", 1) for line in lines if line.startswith("export "))
    return exports, shlex.split(lines[-1])


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_dry_run_tp8_qwen3_coder_is_the_seed_command():
    env, argv = dry_run("--port", "8000", "--tp", "8", MODEL="Qwen/Qwen3-Coder-30B-A3B-Instruct")
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert flag(argv, "--model") == "Qwen/Qwen3-Coder-30B-A3B-Instruct"
    assert flag(argv, "--tensor-parallel-size") == "8"
    assert flag(argv, "--tool-call-parser") == "qwen3_coder"
    assert "--enable-auto-tool-choice" in argv and "--enable-prefix-caching" in argv
    assert "--enable-prompt-tokens-details" in argv and "--enable-per-request-metrics" in argv  # the timeline's
    assert flag(argv, "--logprobs-mode") == "processed_logprobs"  # the sampled distribution's, as the trainer's
    assert flag(argv, "--port") == "8000"
    assert flag(argv, "--max-model-len") == "65536"  # not the embedded profile's 8192
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in env and "--enable-lora" not in argv


def test_dry_run_defaults_to_qwen3_coder_and_runs_as_module():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "qwen_swe.inference.launcher",
            "--dry-run",
            "--tp",
            "2",
            "--dp",
            "4",
            "--served-model-name",
            "qwen3-coder",
            "--",
            "--max-num-seqs",
            "64",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=CLEAN_ENV,
        cwd=paths.REPO_ROOT,
    )
    assert out.returncode == 0, out.stderr
    argv = shlex.split(out.stdout.strip().splitlines()[-1])
    assert flag(argv, "--model") == DEFAULT_MODEL
    assert flag(argv, "--data-parallel-size") == "4" and flag(argv, "--tensor-parallel-size") == "2"
    assert flag(argv, "--served-model-name") == "qwen3-coder"
    assert argv[-2:] == ["--max-num-seqs", "64"]


def test_unknown_family_fails_with_the_fix():
    script = paths.REPO_ROOT / "examples" / "qwen_swe" / "start_vllm.py"
    out = subprocess.run(
        [sys.executable, str(script), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**CLEAN_ENV, "MODEL": "meta-llama/Llama-3.1-8B-Instruct"},
    )
    assert out.returncode == 2 and out.stdout == ""
    assert "--tool-call-parser" in out.stderr and "Llama-3.1-8B" in out.stderr
    with pytest.raises(config.ConfigError, match="--tool-call-parser"):
        tool_call_parser_for("/ckpt/step_3")


@pytest.mark.parametrize(
    "model, parser",
    [
        ("Qwen/Qwen3-Coder-480B-A35B-Instruct", "qwen3_coder"),
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8", "qwen3_coder"),
        ("Qwen/Qwen2.5-Coder-7B-Instruct", "hermes"),
        ("Qwen/Qwen3-8B", "hermes"),
        ("/root/.cache/qwen_swe/models/smollm2-135m-instruct", "hermes"),
        ("embedded", "hermes"),
    ],
)
def test_family_mapping(model, parser):
    assert tool_call_parser_for(model) == parser


def test_explicit_parser_overrides_mapping():
    env, argv = dry_run("--tool-call-parser", "llama3_json", MODEL="meta-llama/Llama-3.1-8B-Instruct")
    assert flag(argv, "--tool-call-parser") == "llama3_json"


def test_lora_turns_on_runtime_updating_with_a_valid_rank():
    env, argv = dry_run("--lora-rank", "24", MODEL="Qwen/Qwen3-Coder-30B-A3B-Instruct")
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert "--enable-lora" in argv and flag(argv, "--max-lora-rank") == "32"
    with pytest.raises(config.ConfigError, match="LORA_RANK"):
        ServeConfig(model="Qwen/Qwen3-8B", lora_rank=1024).argv()


def test_embedded_profile_is_the_measured_cpu_setup(tmp_path: Path):
    serve = embedded_serve_config(config.load_settings([], env={}), port=8123, model_dir=tmp_path)
    argv, env = serve.argv(), serve.env()
    assert argv[0] == str(paths.vllm_python())
    assert flag(argv, "--tool-call-parser") == "hermes" and flag(argv, "--dtype") == served_dtype()  # the CPU's
    assert flag(argv, "--max-model-len") == "8192" and flag(argv, "--host") == "127.0.0.1"
    assert Path(flag(argv, "--chat-template")).is_file()
    assert "--gpu-memory-utilization" not in argv
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    assert env["VLLM_USE_AOT_COMPILE"] == "0"  # the CPU build's AOT artifact does not load back: compiled every start
    assert "--enforce-eager" in argv  # ENFORCE_EAGER: a start without the compile and its warm-up pass
    compiled = embedded_serve_config(config.load_settings([], env={"ENFORCE_EAGER": "false"}), model_dir=tmp_path)
    assert "--enforce-eager" not in compiled.argv()
    names = argv[argv.index("--served-model-name") + 1 : argv.index("--tensor-parallel-size")]
    assert names[0] == EMBEDDED_SERVED_NAME and str(tmp_path) in names
    assert serve.base_url == "http://127.0.0.1:8123/v1"


def test_a_folder_kept_warm_is_served_with_the_embedded_profile(tmp_path: Path):
    """``--model embedded:FOLDER`` (a warm start, a run's weights/vN): the embedded CPU server of that folder, and
    the exports that point a run at it tell it to take the embedded profile (PROFILE=embedded)."""
    (tmp_path / "config.json").write_text("{}")
    _, argv = dry_run("--model", f"embedded:{tmp_path}")
    assert flag(argv, "--model") == str(tmp_path) and flag(argv, "--chat-template") == str(TEMPLATE)
    assert flag(argv, "--tool-call-parser") == "hermes" and "--enforce-eager" in argv
    names = argv[argv.index("--served-model-name") + 1 : argv.index("--tensor-parallel-size")]
    assert names == [EMBEDDED_SERVED_NAME, str(tmp_path)]  # never the shipped SmolLM2's path: not its weights
    args = build_arg_parser().parse_args(["--model", f"embedded:{tmp_path}"])
    serve, embedded = serve_config_from_args(args, env=CLEAN_ENV)
    exports = ready_exports(serve, "http://127.0.0.1:8011/v1", embedded)
    assert embedded and "export PROFILE=embedded" in exports and f"export MODEL={tmp_path}" in exports
    gpu, embedded = serve_config_from_args(build_arg_parser().parse_args(["--model", DEFAULT_MODEL]), env=CLEAN_ENV)
    assert not embedded and "export PROFILE=embedded" not in ready_exports(gpu, "http://h:8000/v1", embedded)


def test_an_embedded_folder_without_a_model_is_refused_with_the_fix(tmp_path: Path):
    script = paths.REPO_ROOT / "examples" / "qwen_swe" / "start_vllm.py"
    cmd = [sys.executable, str(script), "--dry-run", "--model", f"embedded:{tmp_path}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=CLEAN_ENV, cwd="/")
    assert out.returncode == 2 and f"{tmp_path} has no config.json; give a model folder" in out.stderr


def test_server_that_exits_early_reports_its_log(tmp_path: Path):
    # The project's interpreter has no vLLM, so the process exits at once: start must say so, with the log tail.
    serve = ServeConfig(model="Qwen/Qwen3-8B", python=sys.executable, port=free_port())
    server = VLLMServer(serve, tmp_path / "srv.log")
    with pytest.raises(InferenceError, match="(?s)exited with code 1.*No module named"), server:
        server.start(timeout=60)
    assert server.process is None


def test_client_accepts_both_url_forms_and_names_the_server():
    for url in ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/", "http://127.0.0.1:9"):
        client = InferenceClient(url, timeout=2)
        assert client.root == "http://127.0.0.1:9" and client.openai_url == "http://127.0.0.1:9/v1"
    client = InferenceClient("http://127.0.0.1:9/v1", timeout=2)
    assert client.health() is False
    with pytest.raises(InferenceError, match=r"127\.0\.0\.1:9.*/pause"):
        client.reload_weights("/tmp")
    assert client.weight_version.version == 0
    with pytest.raises(InferenceError, match="http"):
        InferenceClient("localhost:8000")


def test_vllm_builds_are_told_apart_by_their_distribution(tmp_path: Path):
    assert vllm_build(str(vllm_env(tmp_path / "cuda", "vllm"))) == "cuda"
    assert vllm_build(str(vllm_env(tmp_path / "cpu", "vllm-cpu"))) == "cpu"
    assert vllm_build(str(tmp_path / "nothing" / "bin" / "python")) is None
    real = paths.REPO_ROOT / ".venv-vllm" / "bin" / "python"
    if real.exists():  # what scripts/setup/30_vllm.sh installs on a machine without a GPU
        assert vllm_build(str(real)) == "cpu"


def test_with_a_gpu_the_launcher_starts_the_cuda_server_on_its_gpus(tmp_path: Path):
    gpu_path = nvidia_smi_path(tmp_path / "bin", gpus=8)
    cuda = vllm_env(tmp_path / "venv-cuda", "vllm")
    env, argv = dry_run("--tp", "4", PATH=gpu_path, VLLM_PYTHON=str(cuda), MODEL=DEFAULT_MODEL)
    assert argv[0] == str(cuda) and flag(argv, "--tensor-parallel-size") == "4"
    assert flag(argv, "--gpu-memory-utilization") == "0.85"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # nvidia-smi's numbers
    assert "VLLM_CPU_KVCACHE_SPACE" not in env
    env, _ = dry_run(PATH=gpu_path, VLLM_PYTHON=str(cuda), INFERENCE_GPUS="4-7", TP="4")
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    env, argv = dry_run("--tp", "2", VLLM_PYTHON=str(cuda))  # no nvidia-smi: today's command, nothing narrowed
    assert argv[0] == str(cuda) and "CUDA_VISIBLE_DEVICES" not in env


def test_with_a_gpu_the_cpu_build_is_refused_with_the_fix(tmp_path: Path):
    gpu_path = nvidia_smi_path(tmp_path / "bin", gpus=8)
    cpu = vllm_env(tmp_path / "venv-cpu", "vllm-cpu")
    out = subprocess.run(
        [sys.executable, "-m", "qwen_swe.inference.launcher", "--dry-run", "--tp", "8"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=paths.REPO_ROOT,
        env={**CLEAN_ENV, "PATH": gpu_path, "VLLM_PYTHON": str(cpu)},
    )
    assert out.returncode == 2
    assert (
        "holds vLLM's CPU build (vllm-cpu), but this machine has NVIDIA GPUs: run `bash scripts/setup.sh "
        "--gpu`" in out.stderr
    ), out.stderr


def test_the_embedded_server_runs_on_a_gpu_with_the_cuda_build(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PATH", nvidia_smi_path(tmp_path / "bin", gpus=2))
    monkeypatch.setenv("VLLM_PYTHON", str(vllm_env(tmp_path / "venv-cuda", "vllm")))
    serve = embedded_serve_config(config.Settings.build(), port=8011, model_dir=tmp_path)
    assert not serve.cpu and serve.devices == (0,) and serve.python.endswith("venv-cuda/bin/python")
    argv, env = serve.argv(), serve.env()
    assert flag(argv, "--gpu-memory-utilization") == str(EMBEDDED_GPU_MEMORY)
    assert "--enforce-eager" not in argv  # CUDA graphs on a GPU, whatever ENFORCE_EAGER says
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and "VLLM_CPU_KVCACHE_SPACE" not in env
    monkeypatch.setenv("PATH", str(tmp_path / "no-gpu"))  # the same environment without a GPU: the CPU profile
    assert embedded_serve_config(config.Settings.build(), port=8011, model_dir=tmp_path).cpu
