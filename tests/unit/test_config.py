"""Settings: the seed's defaults, env parsing, flags over env, the embedded profile, every invalid-input message,
and the JSON written into the run folder."""

from __future__ import annotations

import json
import tempfile
from dataclasses import fields
from pathlib import Path

import pytest

from qwen_swe.config.profile import EMBEDDED_PROFILE
from qwen_swe.config.settings import DEFAULT_DATASET, ConfigError, Settings, load_settings
from qwen_swe.inference.embedded_server import serving
from qwen_swe.inference.settings import DEFAULT_MODEL
from qwen_swe.paths import embedded_model_dir, embedded_tasks

SERVER = {"VLLM_URL": "http://127.0.0.1:8000/v1"}


def test_seed_defaults():
    for s in (Settings.build(), load_settings([], SERVER), load_settings([], {}, profile=False)):
        assert (s.num_rollouts, s.rollout_batch_size, s.n_samples) == (10, 4, 2)
        assert (s.train.lr, s.agent.max_turns, s.agent.agent_timeout, s.rollout.max_response_len) == (
            1e-6,
            50,
            1800,
            16384,
        )
        assert s.output_dir == Path(tempfile.gettempdir()) / "qwen_swe_grpo"
        assert s.inference.model is None and s.dataset is None and s.instance_list is None


def test_with_a_server_the_defaults_are_the_seeds_model_and_verified():
    s = load_settings([], SERVER)
    assert not s.embedded
    assert s.model_name == DEFAULT_MODEL == "Qwen/Qwen3-Coder-30B-A3B-Instruct"
    assert s.dataset_source == DEFAULT_DATASET == "princeton-nlp/SWE-bench_Verified"


def test_without_a_server_the_embedded_default():
    s = load_settings([], {})
    assert s.embedded and s.inference.vllm_url is None
    assert s.model_name == str(embedded_model_dir()) != DEFAULT_MODEL
    assert s.dataset_source == str(embedded_tasks())  # the generated train split of seed 0
    for name, value in EMBEDDED_PROFILE.items():
        assert s.flat()[name] == value, name
    # the profile only fills what the user left unset
    s = load_settings(["--max-turns", "9"], {"NUM_ROLLOUTS": "7", "MODEL": "/models/mine"})
    assert (s.num_rollouts, s.agent.max_turns, s.model_name) == (7, 9, "/models/mine")
    # an empty VLLM_URL is unset
    assert load_settings([], {"VLLM_URL": ""}).embedded


def test_profile_embedded_takes_the_embedded_default_to_a_running_server(tmp_path):
    """PROFILE=embedded with VLLM_URL (a server kept warm): the embedded default's values, tasks and model, on that
    server; the run starts none of its own."""
    s = load_settings([], {**SERVER, "PROFILE": "embedded"})
    assert s.embedded and not s.inference.starts_server and s.inference.url == SERVER["VLLM_URL"]
    assert s.model_name == str(embedded_model_dir()) and s.dataset_source == str(embedded_tasks())
    for name, value in EMBEDDED_PROFILE.items():
        assert s.flat()[name] == value, name
    assert load_settings(["--max-turns", "9"], {**SERVER, "PROFILE": "embedded"}).agent.max_turns == 9
    with serving(s, log_dir=tmp_path) as served:
        assert served is s and not list(tmp_path.iterdir())  # no server started, no log
    with pytest.raises(ConfigError, match="PROFILE"):
        load_settings([], {"PROFILE": "tiny"})


def test_env_parsing_of_every_type(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    env = {
        **SERVER,
        "NUM_ROLLOUTS": "3",
        "ROLLOUT_BATCH_SIZE": " 5 ",
        "LR": "2e-5",
        "AGENT_TIMEOUT": "60.5",
        "MASK_TRUNCATED": "yes",
        "DROP_ZERO_VARIANCE": "0",
        "OUTPUT_DIR": "~/runs/a",
        "MAX_MODEL_LEN": "",
        "CLIP_EPS_HIGH": "0.28",
        "MODEL": "Qwen/Qwen3-0.6B",
        "BACKEND": "slime",
        "SLIME_DIR": str(tmp_path),
        "IMAGE_NAMESPACE": "",
        "UNRELATED": "ignored",
    }
    s = load_settings([], env)
    assert (s.num_rollouts, s.rollout_batch_size, s.train.lr, s.agent.agent_timeout) == (3, 5, 2e-5, 60.5)
    assert s.rollout.mask_truncated is True and s.train.drop_zero_variance is False
    assert s.output_dir == tmp_path / "runs" / "a"
    assert s.inference.max_model_len is None and s.train.upper_clip == 0.28 and s.sandbox.image_namespace == ""
    assert (s.model_name, s.backend, s.slime_dir) == ("Qwen/Qwen3-0.6B", "slime", tmp_path)


def test_flags_win_over_env(tmp_path):
    env = {**SERVER, "N_SAMPLES": "4", "LR": "1e-4", "OUTPUT_DIR": str(tmp_path / "env")}
    s = load_settings(["--n-samples", "6", "--output-dir", str(tmp_path / "flag")], env)
    assert s.n_samples == 6 and s.output_dir == tmp_path / "flag"
    assert s.train.lr == 1e-4  # no flag: the env value
    assert load_settings(["--vllm-url", ""], SERVER).embedded  # an empty flag unsets the env value


@pytest.mark.parametrize(
    "env, message",
    [
        ({"N_SAMPLES": "1"}, r"^N_SAMPLES=1 is too small: .*GRPO needs at least 2.*; use a value >= 2$"),
        ({"N_SAMPLES": "abc"}, r"^N_SAMPLES='abc' is not a valid int: samples per group"),
        ({"N_SAMPLES": "2.5"}, r"^N_SAMPLES='2.5' is not a valid int"),
        ({"NUM_ROLLOUTS": "0"}, r"^NUM_ROLLOUTS=0 is too small: .*use a value >= 1$"),
        ({"LR": "fast"}, r"^LR='fast' is not a valid float: AdamW learning rate"),
        ({"LR": "-1e-6"}, r"^LR=-1e-06 is too small"),
        ({"MASK_TRUNCATED": "maybe"}, r"^MASK_TRUNCATED='maybe' is not a valid bool"),
        ({"BACKEND": "tpu"}, r"^BACKEND='tpu' is not one of fsdp, slime$"),
        ({"SANDBOX_NETWORK": "bridged"}, r"^SANDBOX_NETWORK='bridged' is not one of none, host, bridge$"),
        ({"REWARD_MODE": "soft"}, r"^REWARD_MODE='soft' is not one of binary, fractional, shaped$"),
        ({"BACKEND": "slime"}, r"^BACKEND=slime needs SLIME_DIR: point it at a slime v0.2.2 checkout$"),
    ],
)
def test_invalid_values_name_the_variable(env, message):
    with pytest.raises(ConfigError, match=message):
        load_settings([], {**SERVER, **env})


def test_invalid_flag_values_name_the_variable_too():
    with pytest.raises(ConfigError, match=r"^N_SAMPLES=1 is too small"):
        load_settings(["--n-samples", "1"], SERVER)
    with pytest.raises(ConfigError, match=r"^MAX_TURNS='many' is not a valid int"):
        load_settings(["--max-turns", "many"], SERVER)


def test_instance_list_must_be_a_readable_file(tmp_path):
    missing = tmp_path / "missing.txt"
    with pytest.raises(ConfigError, match=rf"^INSTANCE_LIST={missing} cannot be read: give a file of instance ids"):
        load_settings([], {**SERVER, "INSTANCE_LIST": str(missing)})
    with pytest.raises(ConfigError, match=rf"^INSTANCE_LIST={tmp_path} cannot be read"):
        load_settings([], {**SERVER, "INSTANCE_LIST": str(tmp_path)})
    ok = tmp_path / "ids.txt"
    ok.write_text("django__django-10914\n")
    assert load_settings([], {**SERVER, "INSTANCE_LIST": str(ok)}).instance_list == ok


def test_dataset_file_must_exist(tmp_path, monkeypatch):
    missing = tmp_path / "rows.jsonl"
    with pytest.raises(ConfigError, match=rf"^DATASET={missing} does not exist: give a .json, .jsonl or .parquet"):
        load_settings([], {**SERVER, "DATASET": str(missing)})
    with pytest.raises(ConfigError, match=r"^DATASET=rows.parquet does not exist"):
        load_settings([], {**SERVER, "DATASET": "rows.parquet"})
    missing.write_text("{}\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load_settings([], {**SERVER, "DATASET": "~/rows.jsonl"}).dataset == "~/rows.jsonl"
    assert load_settings([], {**SERVER, "DATASET": str(tmp_path)}).dataset_source == str(tmp_path)  # a HF folder
    hub = load_settings([], {**SERVER, "DATASET": "princeton-nlp/SWE-bench_Lite:test"})
    assert hub.dataset_source == "princeton-nlp/SWE-bench_Lite:test"  # hub names are not checked locally


def test_write_produces_json_that_round_trips(tmp_path):
    ids = tmp_path / "ids.txt"
    ids.write_text("a\n")
    s = load_settings(
        ["--lr", "3e-7", "--mask-truncated", "true"],
        {**SERVER, "INSTANCE_LIST": str(ids), "OUTPUT_DIR": str(tmp_path / "run"), "SEED": "9"},
    )
    path = s.write(tmp_path / "run")
    assert path == tmp_path / "run" / "settings.json"
    assert sorted(p.name for p in path.parent.iterdir()) == ["settings.json"]  # the temp file was renamed
    data = json.loads(path.read_text())
    assert data == s.to_dict() and set(data) == {f.name for f in fields(Settings)}
    assert data["instance_list"] == str(ids) and data["train"]["lr"] == 3e-7
    assert data["rollout"]["mask_truncated"] is True
    assert Settings.from_json(path) == s  # the one serialized form: no environment, no profile re-applied
    env = {name.upper(): str(value) for name, value in s.flat().items() if value is not None}
    assert load_settings([], env, profile=False) == s
    s.replace(seed=10).write(tmp_path / "run")  # rewriting replaces the file
    assert json.loads(path.read_text())["seed"] == 10


def test_weight_sync_mode_follows_the_server():
    from qwen_swe.config.settings import load_settings

    assert load_settings([], {}).inference.sync_mode == "path"  # embedded: the server reads our disk
    assert load_settings([], {"VLLM_URL": "http://gpu-node:8000/v1"}).inference.sync_mode == "path"
    assert load_settings([], {"VLLM_URL": "https://ws--qwen-swe-vllm.modal.run/v1"}).inference.sync_mode == "modal"
    assert (
        load_settings(
            [], {"VLLM_URL": "https://ws--qwen-swe-vllm.modal.run/v1", "WEIGHT_SYNC": "path"}
        ).inference.sync_mode
        == "path"
    )


def test_upper_bounds_name_the_variable():
    from qwen_swe.config.settings import ConfigError, load_settings

    with pytest.raises(ConfigError, match=r"^SHAPED_LENGTH=1.5 is too large: .*use a value <= 1.0"):
        load_settings([], {"SHAPED_LENGTH": "1.5"})
    assert load_settings([], {"SHAPED_LENGTH": "1.0"}).reward.shaped_length == 1.0


def test_partial_rollouts_need_calls_in_flight_and_a_proxy_that_is_told_of_the_sync():
    url = "http://127.0.0.1:9"
    assert Settings.build(vllm_url=url, max_staleness=1, partial_rollouts=True).train.partial_rollouts
    with pytest.raises(ConfigError, match="PARTIAL_ROLLOUTS=1 needs MAX_STALENESS >= 1"):
        Settings.build(vllm_url=url, partial_rollouts=True)
    with pytest.raises(ConfigError, match="PARTIAL_ROLLOUTS=1 with ROLLOUT_BACKEND=ray"):
        Settings.build(vllm_url=url, max_staleness=1, partial_rollouts=True, rollout_backend="ray")


def test_over_sampling_needs_the_streaming_pool():
    url = "http://127.0.0.1:9"
    pooled = Settings.build(vllm_url=url, max_staleness=1, partial_rollouts=True, over_sampling=4)
    assert pooled.train.over_sampling == 4 and Settings.build(vllm_url=url).train.over_sampling == 0
    with pytest.raises(ConfigError, match="OVER_SAMPLING=4 needs PARTIAL_ROLLOUTS=1: .*set OVER_SAMPLING=0"):
        load_settings([], {"VLLM_URL": url, "MAX_STALENESS": "1", "OVER_SAMPLING": "4"})
    with pytest.raises(ConfigError, match="OVER_SAMPLING"):
        load_settings([], {"VLLM_URL": url, "OVER_SAMPLING": "-1"})


def test_a_kl_penalty_is_refused_for_the_supervised_warm_start():
    with pytest.raises(ConfigError, match="KL_LOSS_COEF=0.1 needs TRAIN_MODE=grpo"):
        Settings.build(vllm_url="http://127.0.0.1:9", train_mode="sft", kl_loss_coef=0.1)
    with pytest.raises(ConfigError, match="KL_LOSS_TYPE='k4' is not one of"):
        Settings.build(vllm_url="http://127.0.0.1:9", kl_loss_type="k4")
