"""Bad input a user gives is refused before anything starts, with a message naming the setting and the fix."""

from __future__ import annotations

import pytest

from qwen_swe import preflight
from qwen_swe.config.settings import Settings
from qwen_swe.errors import ConfigError, DataError
from qwen_swe.paths import TASK_PACK, embedded_model_dir
from qwen_swe.run import main


def test_a_model_folder_needs_a_config_and_a_tokenizer(tmp_path):
    with pytest.raises(ConfigError, match=r"MODEL=.*missing does not exist"):
        preflight.check_model(str(tmp_path / "missing"))
    (tmp_path / "m").mkdir()
    with pytest.raises(ConfigError, match=r"has no config.json"):
        preflight.check_model(str(tmp_path / "m"))
    (tmp_path / "m" / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"has no tokenizer .*copy the tokenizer files"):
        preflight.check_model(str(tmp_path / "m"))
    (tmp_path / "m" / "tokenizer.json").write_text("{}")
    preflight.check_model(str(tmp_path / "m"))
    preflight.check_model("Qwen/Qwen3-Coder-30B-A3B-Instruct")  # a hub name is checked where it loads


def test_unknown_instance_ids_are_named(tmp_path):
    ids = tmp_path / "ids.txt"
    ids.write_text("qwenswe__confparse-1\nnope__missing-9\n")
    settings = Settings.build(dataset=str(TASK_PACK), instance_list=ids, vllm_url="http://127.0.0.1:9/v1")
    with pytest.raises(DataError, match="nope__missing-9"):
        preflight.check_dataset(settings)


def test_a_server_that_does_not_answer_is_refused_at_start(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(preflight, "SERVER_WAIT", 1.0)
    for key in ("MODEL", "INSTANCE_LIST"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VLLM_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("DATASET", str(TASK_PACK))
    monkeypatch.setenv("MODEL", str(embedded_model_dir()))
    monkeypatch.setenv("OUTPUT_DIR", str(tmp_path / "run"))
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "VLLM_URL=http://127.0.0.1:9/v1 does not answer" in err and "start_vllm.py" in err
