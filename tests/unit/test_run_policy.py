"""Which policy a run trains: the embedded default the warm-started SmolLM2, anything else what MODEL names. The
warm start's build itself is the stage's (tests/unit/test_warmstart_stage.py) and the embedded run's (tests/e2e)."""

from __future__ import annotations

import pytest

from qwen_swe import run
from qwen_swe.config.settings import load_settings
from qwen_swe.paths import embedded_model_dir


@pytest.fixture
def built(monkeypatch, tmp_path):
    calls = []

    def fake_ensure(spec, home):
        calls.append((spec, home))
        return tmp_path / "warmstart" / "k" / "model"

    monkeypatch.setattr(run, "ensure_warm_start", fake_ensure)
    return calls


def test_the_embedded_default_trains_the_warm_started_policy(built, tmp_path):
    settings = run.ensure_policy(load_settings([], env={"OUTPUT_DIR": str(tmp_path / "run")}))
    assert settings.model_name == str(tmp_path / "warmstart" / "k" / "model")
    [(spec, _)] = built
    assert spec.model == embedded_model_dir() and spec.tasks.name == "train.jsonl"


@pytest.mark.parametrize(
    "env",
    [
        {"MODEL": "/models/base"},  # MODEL=<base folder> still runs the base model
        {"VLLM_URL": "http://127.0.0.1:9", "MODEL": "m"},  # the real thing: the user's model
        {"TRAIN_MODE": "sft", "SFT_DATA": "demos.jsonl"},  # building the warm start itself
    ],
)
def test_any_other_run_trains_what_it_names(built, tmp_path, env):
    before = load_settings([], env={"OUTPUT_DIR": str(tmp_path / "run"), **env})
    assert run.ensure_policy(before) == before and built == []
