"""Bad input a user gives is refused before anything starts, with a message naming the setting and the fix."""

from __future__ import annotations

import time

import pytest

from qwen_swe import preflight
from qwen_swe.config.settings import Settings, load_settings
from qwen_swe.errors import ConfigError, DataError
from qwen_swe.paths import TASK_PACK, embedded_model_dir
from qwen_swe.plan.check import check_memory, plan_config
from qwen_swe.plan.placement import Gpu, nvidia_gpus, resolve
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


def _top5(logits: list[float], temperature: float) -> dict[str, float]:
    import math

    scaled = [z / temperature for z in logits]
    norm = math.log(sum(math.exp(z) for z in scaled))
    return {f"t{i}": z - norm for i, z in enumerate(scaled)}


def test_the_temperature_scale_of_served_logprobs_is_one_over_t_or_one():
    logits = [3.0, 2.1, 1.5, 0.2, -1.0]
    assert preflight.temperature_scale(_top5(logits, 1.0), _top5(logits, 0.5)) == pytest.approx(2.0)
    assert preflight.temperature_scale(_top5(logits, 1.0), _top5(logits, 1.0)) == pytest.approx(1.0)  # raw
    top_k = {k: v for k, v in _top5(logits, 0.5).items() if k != "t4"}  # a token masked out: gaps still scale 1/T
    assert preflight.temperature_scale(_top5(logits, 1.0), top_k) == pytest.approx(2.0)
    assert preflight.temperature_scale({"a": -0.01, "b": -0.03}, {"a": -0.01, "b": -0.05}) is None  # gap too small
    assert preflight.temperature_scale({"a": -0.1}, {"a": -0.05}) is None


@pytest.mark.parametrize(
    "changes, probed",
    [
        ({}, True),
        ({"train_mode": "sft"}, False),  # the demonstrations' likelihood: no served log-probs
        ({"tool_choice": "required"}, False),  # the trainer recomputes them
        ({"temperature": 1.0}, False),  # raw and processed are the same
    ],
)
def test_the_logprobs_mode_is_probed_only_when_grpo_uses_the_served_logprobs(changes, probed, caplog):
    settings = Settings.build(
        **{"vllm_url": "http://127.0.0.1:9/v1", "temperature": 0.7, "tool_choice": "auto", **changes}
    )
    with caplog.at_level("WARNING", logger="qwen_swe.preflight"):
        preflight.check_logprobs_mode(settings)  # nothing answers there: a probe is a warning, never a refusal
    assert ("could not probe which log-probs it serves" in caplog.text) == probed


SEED_MODEL = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
EIGHT_A100 = tuple(Gpu(i, 81920) for i in range(8))


def test_the_seed_model_is_planned_offline_and_refused_with_the_nearest_fit():
    """The seed's model on 8 x 80 GB, by name and with no hub: its defaults do not fit; the refusal names what does."""
    remote = Settings.build(vllm_url="http://10.9.8.7:8000/v1", model=SEED_MODEL)
    with pytest.raises(ConfigError) as refused:
        check_memory(remote, resolve(remote, EIGHT_A100))
    text = str(refused.value)
    assert f"MODEL={SEED_MODEL} trained on 8 GPU(s) of 80 GiB needs 369.6 GiB per GPU" in text, text
    assert "Nearest settings that fit: ACTIVATION_CHECKPOINTING=true MIXED_PRECISION=true (77.7 GiB)" in text, text
    assert "LORA_RANK=16" in text and text.endswith("MEMORY_CHECK=false starts anyway"), text
    fitted = remote.replace(activation_checkpointing=True, mixed_precision=True)
    check_memory(fitted, resolve(fitted, EIGHT_A100))  # the named fix passes

    local = Settings.build(vllm_url="http://127.0.0.1:8000/v1", model=SEED_MODEL)  # server on GPU 0, trainer 1-7
    with pytest.raises(ConfigError) as refused:
        check_memory(local, resolve(local, EIGHT_A100))
    text = str(refused.value)
    assert "trained on 7 GPU(s)" in text and "ACTIVATION_CHECKPOINTING=true LORA_RANK=16 (" in text, text
    assert "the server on another node (VLLM_URL=http://HOST:8000/v1) and the trainer on all 8 GPUs here" in text
    check_memory(local.replace(memory_check=False), resolve(local, EIGHT_A100))  # warned, not refused


def test_a_colocated_run_is_planned_beside_its_sleeping_server(caplog):
    """COLOCATE on one node of 8 x 80 GB, the server at TP 8 on the trainer's GPUs: the step carries the sleeping
    server's residue (2 GiB more than the same training alone), and the refusal says so."""
    from qwen_swe.plan.check import _planned
    from qwen_swe.plan.memory import GIB, SLEEPING_SERVER_BYTES

    colocated = Settings.build(vllm_url="http://127.0.0.1:8000/v1", model=SEED_MODEL, tp=8, colocate=True)
    alone = Settings.build(vllm_url="http://10.9.8.7:8000/v1", model=SEED_MODEL)
    config = plan_config(SEED_MODEL)
    assert _planned(colocated, config, 8, {}) == _planned(alone, config, 8, {}) + SLEEPING_SERVER_BYTES
    with pytest.raises(ConfigError) as refused:
        check_memory(colocated, resolve(colocated, EIGHT_A100))
    text = str(refused.value)
    assert "trained on 8 GPU(s) of 80 GiB needs 371.6 GiB per GPU (COLOCATE: beside the sleeping vLLM server" in text
    assert "ACTIVATION_CHECKPOINTING=true MIXED_PRECISION=true (79.7 GiB)" in text, text
    fitted = colocated.replace(activation_checkpointing=True, mixed_precision=True)
    with caplog.at_level("INFO", logger="qwen_swe.plan.check"):
        check_memory(fitted, resolve(fitted, EIGHT_A100))
    assert "COLOCATE: 398 GiB of host memory for the trainer's parked state" in caplog.text  # 12 + 2 bytes a weight
    lora = fitted.replace(lora_rank=16)
    assert _planned(lora, config, 8, {}) / GIB == pytest.approx(35.6, abs=0.05)


def test_a_model_without_a_config_to_plan_is_not_refused(caplog):
    settings = Settings.build(vllm_url="http://10.9.8.7:8000/v1", model="someone/unknown-model")
    assert plan_config(settings.model_name) is None
    check_memory(settings, resolve(settings, EIGHT_A100))
    assert "no config.json to plan its memory with offline" in caplog.text


def test_on_cpu_the_embedded_default_passes_at_once_and_changes_nothing(tmp_path):
    settings = load_settings([], env={})
    before = settings.to_dict()
    start = time.monotonic()
    place = resolve(settings, nvidia_gpus({"PATH": str(tmp_path)}))  # this machine: no nvidia-smi
    check_memory(settings, place)
    assert place.train == () and time.monotonic() - start < 0.5
    assert settings.to_dict() == before
