"""Settings files (``--config run.yaml`` or ``.toml``): their place in the precedence (flag > env > file > embedded
profile > default), the layouts they accept, the errors for unknown keys and bad values, and ``--print-config``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from qwen_swe.config.profile import EMBEDDED_PROFILE
from qwen_swe.config.settings import ConfigError, Settings, given_with_sources, load_settings
from qwen_swe.config.show import precedence, render, source_of
from qwen_swe.paths import REPO_ROOT

SERVER = {"VLLM_URL": "http://127.0.0.1:8000/v1"}


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_flag_wins_over_env_which_wins_over_the_file(tmp_path):
    cfg = write(tmp_path, "n_samples: 3\nrollout_batch_size: 6\nlr: 2.0e-5\nmax_turns: 7\n")
    s = load_settings(["--config", str(cfg), "--n-samples", "5"], {**SERVER, "ROLLOUT_BATCH_SIZE": "8"})
    assert (s.n_samples, s.rollout_batch_size, s.train.lr, s.agent.max_turns) == (5, 8, 2e-5, 7)
    _, sources = given_with_sources(["--config", str(cfg), "--n-samples", "5"], {**SERVER, "ROLLOUT_BATCH_SIZE": "8"})
    assert sources == {
        "n_samples": "flag",
        "rollout_batch_size": "env",
        "vllm_url": "env",
        "lr": f"file {cfg}",
        "max_turns": f"file {cfg}",
    }


def test_the_file_wins_over_the_embedded_profile_and_its_server_turns_the_profile_off(tmp_path):
    s = load_settings(["--config", str(write(tmp_path, "n_samples: 6\n"))], {})
    assert s.embedded and s.n_samples == 6 and s.agent.max_turns == EMBEDDED_PROFILE["max_turns"]
    s = load_settings(["--config", str(write(tmp_path, "vllm_url: http://h:8000/v1\n"))], {})
    assert not s.embedded and s.agent.max_turns == Settings().agent.max_turns  # the seed's default, no profile


def test_toml_sections_and_every_spelling_of_a_name(tmp_path):
    cfg = write(
        tmp_path,
        'N-SAMPLES = 4\nREWARD_MODE = "fractional"\n[train]\nlr = 3e-5\nmixed_precision = true\n'
        "[agent]\nmax-turns = 9\n",
        "run.toml",
    )
    s = load_settings(["--run-config", str(cfg)], SERVER)
    assert (s.n_samples, s.reward.reward_mode, s.train.lr, s.train.mixed_precision, s.agent.max_turns) == (
        4,
        "fractional",
        3e-5,
        True,
        9,
    )


def test_null_unsets_and_a_list_is_the_env_vars_commas(tmp_path):
    cfg = write(tmp_path, "max_model_len: null\nresume_override: [LR, VLLM_URL]\n")
    s = load_settings(["--config", str(cfg)], {**SERVER, "MAX_MODEL_LEN": ""})
    assert s.inference.max_model_len is None and s.resume_override == "LR,VLLM_URL"


@pytest.mark.parametrize(
    "text, message",
    [
        ("rollout_batchsize: 8\n", r"'rollout_batchsize' is not a setting; did you mean rollout_batch_size\?"),
        ("num_rollout: 3\n", r"'num_rollout' is not a setting; did you mean num_rollouts\?"),
        ("zzz_qqq: 1\n", r"'zzz_qqq' is not a setting; `--help` lists every setting"),
        ("train:\n  lrr: 1e-5\n", r"'lrr' is not a setting; did you mean lr\?"),
        ("agent:\n  lr: 1e-5\n", r"lr belongs to another section; move it to the top level"),
        ("served_url: http://x\n", r"SERVED_URL is filled in by the run, not a setting to give"),
    ],
)
def test_an_unknown_key_is_an_error_naming_the_nearest_setting(tmp_path, text, message):
    cfg = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as err:
        load_settings(["--config", str(cfg)], SERVER)
    assert str(err.value).startswith(str(cfg))


@pytest.mark.parametrize(
    "text, message",
    [
        ("n_samples: 2.5\n", r"N_SAMPLES='2.5' is not a valid int: samples per group"),
        ("n_samples: true\n", r"N_SAMPLES='true' is not a valid int"),
        ("mask_truncated: maybe\n", r"MASK_TRUNCATED='maybe' is not a valid bool"),
        ("lr: {a: 1}\n", r"lr takes one value, not a dict"),
    ],
)
def test_bad_values_get_the_env_vars_messages_prefixed_with_the_file(tmp_path, text, message):
    cfg = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message):
        load_settings(["--config", str(cfg)], SERVER)


def test_validation_and_cross_field_checks_apply_to_file_values(tmp_path):
    with pytest.raises(ConfigError, match=r"^N_SAMPLES=1 is too small"):
        load_settings(["--config", str(write(tmp_path, "n_samples: 1\n"))], SERVER)
    with pytest.raises(ConfigError, match=r"^BACKEND=slime needs SLIME_DIR"):
        load_settings(["--config", str(write(tmp_path, "backend: slime\n"))], SERVER)


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("run.json", "{}", r"give a \.yaml, \.yml or \.toml file"),
        ("run.yaml", "- a\n- b\n", r"the top level must be a mapping of settings, not a list"),
        ("run.yaml", "a: [\n", r"is not valid YAML"),
        ("run.toml", "a = \n", r"is not valid TOML"),
    ],
)
def test_unreadable_files_are_clear_errors(tmp_path, name, text, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(["--config", str(write(tmp_path, text, name))], SERVER)
    with pytest.raises(ConfigError, match=r"cannot be read"):
        load_settings(["--config", str(tmp_path / "missing.yaml")], SERVER)


def test_print_config_names_each_source_and_reads_back_as_a_config(tmp_path):
    cfg = write(tmp_path, "rollout_batch_size: 6\n")
    argv, env = ["--config", str(cfg), "--n-samples", "3"], {"LR": "2e-5"}
    given, sources = given_with_sources(argv, env)
    text = render(load_settings(argv, env), sources, profile=True)
    lines = {line.split(":")[0]: line for line in text.splitlines() if line and not line.startswith("#")}
    assert lines["n_samples"] == "n_samples: 3  # flag"
    assert lines["lr"] == "lr: 2.0e-05  # env"
    assert lines["rollout_batch_size"] == f"rollout_batch_size: 6  # file {cfg}"
    assert lines["max_turns"] == f"max_turns: {EMBEDDED_PROFILE['max_turns']}  # profile"
    assert lines["seed"] == "seed: 1234  # default"
    assert "served_url" not in lines  # filled in by the run
    assert text.startswith(f"# settings: flags > env vars > file {cfg} > embedded profile > defaults")
    again = write(tmp_path, text, "again.yaml")  # the output is a config file giving the same settings
    assert load_settings(["--config", str(again)], {}).to_dict() == load_settings(argv, env).to_dict()
    assert yaml.safe_load(text)["output_dir"] == str(load_settings(argv, env).output_dir)


def test_a_resumed_run_names_its_settings_file_as_the_source(tmp_path):
    saved = tmp_path / "settings.json"
    assert source_of("lr", {}, profile=False, resumed=saved) == f"resume {saved}"
    assert source_of("resume_override", {}, profile=False, resumed=saved) == "default"  # never carried over
    assert source_of("lr", {"lr": "flag"}, profile=False, resumed=saved) == "flag"
    assert "the resumed run's" in precedence({}, profile=False, resumed=saved)
    assert "embedded profile (off: VLLM_URL without PROFILE=embedded)" in precedence({}, profile=False)


@pytest.mark.parametrize(
    "recipe", sorted((REPO_ROOT / "examples" / "qwen_swe" / "configs").glob("*.*")), ids=lambda p: p.name
)
def test_the_shipped_recipes_load(recipe, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = load_settings(["--config", str(recipe)], {})
    assert s.to_dict()
