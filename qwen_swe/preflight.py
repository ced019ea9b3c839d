"""Checks before a run starts anything: each failure is a setup error naming the setting or file and the fix,
instead of a traceback from a trainer rank minutes later."""

from __future__ import annotations

from pathlib import Path

from qwen_swe.config.settings import Settings
from qwen_swe.data.source import load_instances
from qwen_swe.errors import ConfigError, InferenceError
from qwen_swe.inference.client import InferenceClient

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
SERVER_WAIT = 15.0  # seconds a given VLLM_URL may take to answer before the run refuses to start


def check(settings: Settings) -> None:
    check_dataset(settings)
    check_model(settings.model_name)
    if settings.inference.vllm_url:
        check_server(settings.inference.vllm_url)


def check_dataset(settings: Settings) -> None:
    """The rows load and validate, and every listed instance id exists (``DataError`` says which do not)."""
    load_instances(settings.dataset_source, settings.instance_list)


def check_model(model: str) -> None:
    """A local model folder must hold an HF config and a tokenizer (hub names are checked where they load)."""
    if not model.startswith(("/", ".", "~")):
        return
    folder = Path(model).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"MODEL={model} does not exist: give an HF model folder or a Hugging Face name")
    if not (folder / "config.json").is_file():
        raise ConfigError(f"MODEL={model} has no config.json: give the folder of an HF checkpoint")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(f"MODEL={model} has no tokenizer ({', '.join(TOKENIZER_FILES)}): the proxy renders "
                          "prompts with it and the trainer exports it with every weight version; copy the "
                          "tokenizer files of the base model into the folder")


def check_server(url: str) -> None:
    """VLLM_URL must answer before anything starts (rollouts against a dead server would all be dropped)."""
    try:
        InferenceClient(url, timeout=10.0).wait_ready(timeout=SERVER_WAIT, interval=1.0)
    except InferenceError as exc:
        raise ConfigError(f"VLLM_URL={url} does not answer ({exc}); start the server "
                          "(python examples/qwen_swe/start_vllm.py) or fix the URL") from None
