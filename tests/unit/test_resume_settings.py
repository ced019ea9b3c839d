"""A re-run into a folder with a checkpoint keeps the run's saved settings (changes refused unless free by nature or
overridden); environment variables that look like settings but are not one fail at start."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from qwen_swe.config.profile import EMBEDDED_PROFILE
from qwen_swe.config.settings import ConfigError, Settings, all_fields, load_settings
from qwen_swe.run import load_run_settings

SERVER = "http://gpu-box:8000/v1"


def started(out: Path, env: dict[str, str], checkpoint: bool = True) -> Settings:
    """A run as the entry point left it: settings.json written (with the server the run filled in), and a complete
    checkpoint unless ``checkpoint`` is false."""
    settings = load_settings([], {"OUTPUT_DIR": str(out), **env})
    settings.replace(served_url="http://127.0.0.1:41234/v1").write(out)
    if checkpoint:
        (out / "checkpoints" / "step_000002").mkdir(parents=True)
        (out / "checkpoints" / "step_000002" / "complete").write_text("ok\n")
    return settings


def resume(out: Path, **env: str) -> Settings:
    return load_run_settings([], {"OUTPUT_DIR": str(out), **env})


# --- resuming ------------------------------------------------------------------------------------------------------


def test_a_resume_with_no_settings_keeps_the_saved_ones_and_says_so(tmp_path, caplog):
    saved = started(tmp_path, {"VLLM_URL": SERVER, "LR": "3e-6", "REWARD_MODE": "fractional"})
    with caplog.at_level(logging.INFO, logger="qwen_swe"):
        s = resume(tmp_path)
    assert s == saved  # not the embedded profile's server, learning rate and reward; not the filled-in server URL
    assert (s.inference.vllm_url, s.train.lr, s.reward.reward_mode, s.inference.served_url) == (
        SERVER,
        3e-6,
        "fractional",
        None,
    )
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resuming")]
    assert f"VLLM_URL={SERVER}" in line and "LR=3e-06" in line and "REWARD_MODE=fractional" in line


def test_an_embedded_run_resumes_as_it_was_saved(tmp_path, caplog):
    saved = started(tmp_path, {"MAX_TURNS": "6"})
    with caplog.at_level(logging.INFO, logger="qwen_swe"):
        assert resume(tmp_path) == saved
    profile_lr = str(EMBEDDED_PROFILE["lr"])
    assert resume(tmp_path, VLLM_URL="", LR=profile_lr, MAX_TURNS="6") == saved  # given as saved: no difference
    assert any("kept: MAX_TURNS=6" in r.getMessage() for r in caplog.records)


def test_a_setting_given_differently_is_refused_with_every_difference(tmp_path):
    started(tmp_path, {"LR": "3e-6"})
    with pytest.raises(ConfigError) as caught:
        resume(tmp_path, VLLM_URL=SERVER, LR="1e-4", MAX_TURNS=str(EMBEDDED_PROFILE["max_turns"]))  # as saved
    message = str(caught.value)
    assert f"VLLM_URL: saved unset, given {SERVER}" in message and "LR: saved 3e-06, given 0.0001" in message
    assert "MAX_TURNS" not in message and "RESUME_OVERRIDE=VLLM_URL,LR" in message
    assert str(tmp_path / "settings.json") in message


def test_resume_override_allows_the_named_changes_only(tmp_path):
    started(tmp_path, {"VLLM_URL": SERVER, "LR": "3e-6"})
    s = resume(tmp_path, LR="1e-4", VLLM_URL="http://other:8000/v1", RESUME_OVERRIDE="lr, VLLM_URL")
    assert (s.train.lr, s.inference.vllm_url, s.reward.reward_mode) == (1e-4, "http://other:8000/v1", "binary")
    with pytest.raises(ConfigError, match="  TEMPERATURE: saved 1.0, given 0.5"):
        resume(tmp_path, LR="1e-4", TEMPERATURE="0.5", RESUME_OVERRIDE="LR")
    with pytest.raises(ConfigError, match="RESUME_OVERRIDE names LRR: not a setting"):
        resume(tmp_path, LR="1e-4", RESUME_OVERRIDE="LRR")
    assert resume(tmp_path).resume_override is None  # an override is this invocation's, never carried over


def test_raising_num_rollouts_extends_the_run_without_an_override(tmp_path):
    started(tmp_path, {"VLLM_URL": SERVER, "NUM_ROLLOUTS": "5"})
    s = resume(tmp_path, NUM_ROLLOUTS="9")
    assert (s.num_rollouts, s.inference.vllm_url) == (9, SERVER)


def test_output_only_settings_change_freely(tmp_path):
    started(tmp_path, {"VLLM_URL": SERVER})
    s = resume(
        tmp_path, SAVE_ROLLOUT_DATA="0", KEEP_CHECKPOINTS="5", SAVE_INTERVAL="2", EVAL_INTERVAL="3", STOP_TIMEOUT="60"
    )
    assert (
        s.rollout.save_rollout_data,
        s.train.keep_checkpoints,
        s.train.save_interval,
        s.eval_interval,
        s.stop_timeout,
    ) == (False, 5, 2, 3, 60.0)


def test_the_free_settings_are_marked_on_their_fields():
    marks = {f.name: f.metadata["resume"] for f in all_fields() if f.metadata["resume"] != "keep"}
    assert marks == {
        "num_rollouts": "free",
        "eval_interval": "free",
        "stop_timeout": "free",
        "save_rollout_data": "free",
        "save_interval": "free",
        "keep_checkpoints": "free",
        "trainer_restarts": "free",
        "report_to": "free",
        "vllm_api_key": "free",
        "enforce_eager": "free",
        "output_dir": "new",
        "resume_override": "new",
        "served_url": "new",
        "served_api_key": "new",
    }


@pytest.mark.parametrize("checkpoint", ["none", "half-written"])
def test_without_a_complete_checkpoint_the_environment_wins_as_before(tmp_path, checkpoint):
    started(tmp_path, {"VLLM_URL": SERVER, "LR": "3e-6"}, checkpoint=False)
    if checkpoint == "half-written":
        (tmp_path / "checkpoints" / "step_000001.tmp").mkdir(parents=True)
    assert resume(tmp_path, LR="1e-4") == load_settings([], {"OUTPUT_DIR": str(tmp_path), "LR": "1e-4"})
    assert resume(tmp_path).embedded


def test_slimes_checkpoint_tracker_also_means_resume(tmp_path):
    started(tmp_path, {"VLLM_URL": SERVER}, checkpoint=False)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")
    assert resume(tmp_path).inference.vllm_url == SERVER


# --- variables that look like settings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "nearest"),
    [
        ("ROLLOUT_BATCHSIZE", "ROLLOUT_BATCH_SIZE"),
        ("NUM_ROLLOUT", "NUM_ROLLOUTS"),
        ("OUTPUT_DIRR", "OUTPUT_DIR"),
        ("MAX_MODEL_LENGTH", "MAX_MODEL_LEN"),
        ("QWEN_SWE_LR", "LR"),
        ("QWEN_SWE_NUM_ROLLOUTS", "NUM_ROLLOUTS"),
    ],
)
def test_a_misspelt_setting_names_the_nearest(name, nearest):
    with pytest.raises(ConfigError, match=f"{name} is not a setting.*did you mean {nearest}\\?"):
        load_settings([], {name: "8"})


def test_every_stray_is_named_at_once_and_the_prefix_is_reserved():
    with pytest.raises(ConfigError) as caught:
        load_settings([], {"ROLLOUT_BATCHSIZE": "8", "QWEN_SWE_WHATEVER": "1", "LR": "1e-5"})
    assert "ROLLOUT_BATCHSIZE is not a setting" in str(caught.value)
    assert "QWEN_SWE_WHATEVER is not a setting (settings have no prefix); unset it" in str(caught.value)


def test_an_ordinary_environment_is_not_a_misspelt_setting(monkeypatch, tmp_path):
    ordinary = [
        "PATH",
        "HOME",
        "CI",
        "USER",
        "SHELL",
        "TERM",
        "LANG",
        "TMPDIR",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_HOME",
        "NCCL_DEBUG",
        "HF_HOME",
        "HF_TOKEN",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_CACHE",
        "TORCH_HOME",
        "TORCHINDUCTOR_CACHE_DIR",
        "VLLM_USE_AOT_COMPILE",
        "VLLM_SERVER_DEV_MODE",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
        "VLLM_PYTHON",
        "VLLM_PORT",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "RANK",
        "RAY_ADDRESS_FILE",
        "MODAL_GPU",
        "MODAL_TOKEN_ID",
        "DOCKER_HOST",
        "DOCKER_STORAGE_DRIVER",
        "GITHUB_ACTIONS",
        "SLURM_JOB_ID",
        "WANDB_PROJECT",
        "SERVER_URL",
        "MODEL_NAME",
        "BATCH_SIZE",
        "LEARNING_RATE",
        "SEED",
        "DEBIAN_MIRROR",
        "SLIME_PATH",
        "EMBEDDED_VLLM_URL",
        "QWEN_SWE_HOME",
        "QWEN_SWE_AGENT_RUN",
        "QWEN_SWE_TEST_MARKER",
        "QWEN_SWE_FAULT_DIR",
        "http_proxy",
        "lr",
        "PS1",
        "TZ",
        "UNRELATED",
    ]
    load_settings([], dict.fromkeys(ordinary, "1"))
    monkeypatch.setenv("OUTPUT_DIR", str(tmp_path))
    load_settings([])  # this process's own environment
