"""Checks before a run starts anything: each failure is a setup error naming the setting or file and the fix,
instead of a traceback from a trainer rank minutes later."""

from __future__ import annotations

import logging
from pathlib import Path

from qwen_swe.config.settings import Settings
from qwen_swe.data.instances import load_instances
from qwen_swe.errors import ConfigError, InferenceError
from qwen_swe.inference.client import InferenceClient
from qwen_swe.inference.sleep import sleep_mode_of
from qwen_swe.plan.check import check_memory
from qwen_swe.plan.placement import Placement, nvidia_gpus, resolve

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
SERVER_WAIT = 15.0  # seconds a given VLLM_URL may take to answer before the run refuses to start
PROBE_PROMPT = "My favourite colour is"  # a next token the model is unsure of, so log-prob gaps are measurable
PROBE_TEMPERATURE = 0.5

log = logging.getLogger(__name__)


def check(settings: Settings) -> Placement:
    """Every check, cheapest first; returns this node's GPU placement (nothing on CPU)."""
    place = resolve(settings, nvidia_gpus())
    check_dataset(settings)
    check_model(settings.model_name)
    check_memory(settings, place)
    if settings.inference.vllm_url:
        check_server(settings.inference.vllm_url)
        check_logprobs_mode(settings)
        check_sleep_mode(settings)
    return place


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
        raise ConfigError(
            f"MODEL={model} has no tokenizer ({', '.join(TOKENIZER_FILES)}): the proxy renders "
            "prompts with it and the trainer exports it with every weight version; copy the "
            "tokenizer files of the base model into the folder"
        )


def check_server(url: str) -> None:
    """VLLM_URL must answer before anything starts (rollouts against a dead server would all be dropped)."""
    try:
        InferenceClient(url, timeout=10.0).wait_ready(timeout=SERVER_WAIT, interval=1.0)
    except InferenceError as exc:
        raise ConfigError(
            f"VLLM_URL={url} does not answer ({exc}); start the server "
            "(python examples/qwen_swe/start_vllm.py) or fix the URL"
        ) from None


def check_logprobs_mode(settings: Settings) -> None:
    """GRPO at T != 1 takes the served log-probs as the behaviour policy's. They must be those of the distribution
    sampled from (vLLM's ``--logprobs-mode processed_logprobs``, which start_vllm.py and Modal pass); vLLM's default
    serves the model's own at temperature 1, which would put every importance ratio off 1 and clip it. Under a
    forced tool call the served log-probs are not used (the trainer recomputes them), so nothing to check."""
    if not settings.uses_served_logprobs or settings.logprob_temperature == 1.0:  # 1.0 also in SFT
        return
    url = settings.inference.vllm_url
    assert url is not None  # checked only with VLLM_URL
    client = InferenceClient(url, timeout=60.0, api_key=settings.inference.api_key)
    model = settings.inference.served_model_name or settings.model_name
    try:
        scale = served_temperature_scale(client, model)
    except (InferenceError, KeyError, IndexError, TypeError) as exc:
        log.warning(
            "VLLM_URL=%s: could not probe which log-probs it serves (%s); the importance ratios assume "
            "those of the sampled distribution (--logprobs-mode processed_logprobs)",
            url,
            exc,
        )
        return
    expected = 1.0 / PROBE_TEMPERATURE
    if scale is None:
        log.warning("VLLM_URL=%s: the probe's log-probs were too close to tell which mode it serves", url)
    elif abs(scale - 1.0) < abs(scale - expected):
        raise ConfigError(
            f"VLLM_URL={url} serves temperature-1 log-probs (vLLM's default --logprobs-mode "
            f"raw_logprobs; a log-prob gap scaled {scale:.2f}x at temperature {PROBE_TEMPERATURE}, "
            f"expected {expected:.2f}x) while TEMPERATURE={settings.agent.temperature} is trained: "
            "every importance ratio would be off 1. Restart the server with --logprobs-mode "
            "processed_logprobs (start_vllm.py does), or set TEMPERATURE=1"
        )


def check_sleep_mode(settings: Settings) -> None:
    """COLOCATE with a given VLLM_URL: its /sleep must release GPU memory, or the trainer runs out of it beside the
    server (a server started without --enable-sleep-mode still answers /sleep, releasing nothing)."""
    if not settings.placement.colocate:
        return
    url = settings.inference.vllm_url
    assert url is not None  # checked only with VLLM_URL
    client = InferenceClient(url, timeout=60.0, api_key=settings.inference.api_key)
    try:
        enabled = sleep_mode_of(client.get("/server_info", query={"config_format": "json"}))
    except InferenceError as exc:
        raise ConfigError(f"COLOCATE=true: could not ask VLLM_URL={url} whether it sleeps ({exc})") from None
    if enabled is False:
        raise ConfigError(
            f"COLOCATE=true, but VLLM_URL={url} was started without --enable-sleep-mode, so it would "
            "keep its GPU memory while the trainer steps: restart it with COLOCATE=true "
            "(start_vllm.py then adds the flag), or unset COLOCATE"
        )


def served_temperature_scale(client: InferenceClient, model: str) -> float | None:
    """``temperature_scale`` of the top log-probs the server gives for one token at temperature 1 and the probe's."""
    return temperature_scale(_top_logprobs(client, model, 1.0), _top_logprobs(client, model, PROBE_TEMPERATURE))


def _top_logprobs(client: InferenceClient, model: str, temperature: float) -> dict[str, float]:
    body = client.post(
        "/v1/completions",
        {"model": model, "prompt": PROBE_PROMPT, "max_tokens": 1, "temperature": temperature, "seed": 0, "logprobs": 5},
    )
    return dict(body["choices"][0]["logprobs"]["top_logprobs"][0])


def temperature_scale(at_one: dict[str, float], at_t: dict[str, float], min_gap: float = 0.05) -> float | None:
    """How much wider the served log-prob gap between the most and least likely shared top token is at the probe
    temperature than at 1: 1/T for the log-probs of the sampled distribution (log-softmax(z / T) scales every
    difference of logits by 1/T, whatever the normaliser), 1 for the model's own. None when the gap at 1 is too
    small to measure."""
    shared = [tok for tok in at_one if tok in at_t]
    if len(shared) < 2:
        return None
    hi, lo = max(shared, key=at_one.__getitem__), min(shared, key=at_one.__getitem__)
    gap = at_one[hi] - at_one[lo]
    return (at_t[hi] - at_t[lo]) / gap if gap >= min_gap else None
