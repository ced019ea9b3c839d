"""The memory plan as a preflight check: a GPU run whose plan does not fit is refused before anything starts,
with the nearest settings that do fit (fewest changes first), instead of an out-of-memory error on a trainer rank
after the first rollout."""

from __future__ import annotations

import functools
import itertools
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from qwen_swe.config.settings import Settings
from qwen_swe.errors import ConfigError
from qwen_swe.plan.memory import BUILT_IN, GIB, ModelShape, TrainShape, colocated, model_shape, plan
from qwen_swe.plan.placement import Placement

PROMPT_TOKENS = 2048  # the prompt before the longest response (the CLI's --prompt-len default)
LORA_RANK = 16  # the rank proposed when only LoRA fits
MIN_RESPONSE = 4096  # the shortest MAX_RESPONSE_LEN proposed
SHOWN = 3  # alternatives named in a refusal

log = logging.getLogger(__name__)


def plan_config(model: str) -> str | None:
    """The config the plan reads for MODEL, offline: a folder's config.json, else a built-in shape by name."""
    folder = Path(model).expanduser()
    if (folder / "config.json").is_file():
        return str(folder)
    stem = model.rstrip("/").rsplit("/", 1)[-1].lower()
    return next((name for name, path in BUILT_IN.items() if stem in (name, path.stem)), None)


def train_shape(
    settings: Settings, world: int, *, prompt_len: int = PROMPT_TOKENS, gpu: bool = True, **changes: Any
) -> TrainShape:
    """The shape of the training ``settings`` describe on ``world`` ranks, with flat-named ``changes``."""
    tr = settings.replace(**changes).train if changes else settings.train
    response = changes.get("max_response_len", settings.rollout.max_response_len)
    return TrainShape(
        world=world,
        micro_batch=tr.micro_batch_size,
        seq_len=prompt_len + response,
        response_len=response,
        lora_rank=tr.lora_rank,
        activation_checkpointing=tr.activation_checkpointing,
        mixed_precision=tr.mixed_precision,
        gpu=gpu,
        reference=tr.kl_loss_coef > 0,
        scaled_logits=settings.logprob_temperature != 1.0,
    )


@functools.lru_cache(maxsize=8)
def cached_shape(config: str, lora_rank: int, lora_alpha: int) -> ModelShape:
    """``model_shape`` once per process and rank (the seed's model takes 5 s on the meta device, 15 s with LoRA)."""
    return model_shape(config, lora_rank=lora_rank, lora_alpha=lora_alpha)


def check_memory(settings: Settings, place: Placement) -> None:
    """Refuse a GPU run whose plan does not fit its training GPUs; on CPU (no training GPU) nothing to plan."""
    if not place.train:
        return
    config = plan_config(settings.model_name)
    if config is None:
        log.warning(
            "MODEL=%s: no config.json to plan its memory with offline (give a model folder); starting "
            "without the memory check",
            settings.model_name,
        )
        return
    gib = place.train_memory_gib
    need = _planned(settings, config, len(place.train), {})
    if need <= gib * GIB:
        log.info("memory plan: %.1f GiB per training GPU of %.0f GiB%s", need / GIB, gib, _shared(settings))
        if settings.placement.colocate:
            _check_host(_host(settings, config, len(place.train)))
        return
    message = refusal(settings, config, place, need)
    if not settings.placement.memory_check:
        log.warning("MEMORY_CHECK=false: starting anyway; %s", message)
        return
    raise ConfigError(message)


def refusal(settings: Settings, config: str, place: Placement, need: float) -> str:
    world, gib = len(place.train), place.train_memory_gib
    fixes = [
        f"{_describe(c, place)} ({_planned(settings, config, _world(c, place), c) / GIB:.1f} GiB)"
        for c in nearest(settings, config, place)
    ]
    head = (
        f"the memory plan does not fit: MODEL={settings.model_name} trained on {world} GPU(s) of {gib:.0f} GiB "
        f"needs {need / GIB:.1f} GiB per GPU{_shared(settings)} (`python -m qwen_swe.plan --config {config} "
        f"--train-procs {world} --gpu-memory-gb {gib:.0f} --search` shows why)"
    )
    tail = "; MEMORY_CHECK=false starts anyway"
    if not fixes:
        return head + "; no change of micro-batch, checkpointing, precision, LoRA or response length fits" + tail
    return head + ". Nearest settings that fit: " + "; or ".join(fixes) + tail


def nearest(settings: Settings, config: str, place: Placement) -> list[dict[str, Any]]:
    """The fitting changes of the fewest settings (up to SHOWN), and the nearest that keeps full fine-tuning when
    those all switch LoRA on."""
    budget = place.train_memory_gib * GIB
    fitting = [c for c in _changes(settings, place) if _planned(settings, config, _world(c, place), c) <= budget]
    if not fitting:
        return []
    shown = [c for c in fitting if len(c) == len(fitting[0])][:SHOWN]
    full = next((c for c in fitting if "lora_rank" not in c), None)
    return shown + ([full] if full is not None and full not in shown else [])


def _changes(settings: Settings, place: Placement) -> Iterator[dict[str, Any]]:
    """Changes of one setting, then two, ...: each setting moves only towards less memory."""
    tr, response = settings.train, settings.rollout.max_response_len
    knobs: list[tuple[str, list[Any]]] = []
    if tr.micro_batch_size > 1:
        knobs.append(
            ("micro_batch_size", sorted({max(1, tr.micro_batch_size >> k) for k in (1, 2, 3)} | {1}, reverse=True))
        )
    if not tr.activation_checkpointing:
        knobs.append(("activation_checkpointing", [True]))
    if not tr.mixed_precision:
        knobs.append(("mixed_precision", [True]))
    if place.serve and len(place.gpus) > len(place.train):
        knobs.append(("world", [len(place.gpus)]))  # the server moves to another node
    if not tr.lora_rank:
        knobs.append(("lora_rank", [LORA_RANK]))
    shorter = [r for r in (response // 2, response // 4) if r >= MIN_RESPONSE]
    if shorter:
        knobs.append(("max_response_len", shorter))
    for size in range(1, len(knobs) + 1):
        for combo in itertools.combinations(knobs, size):
            for values in itertools.product(*(v for _, v in combo)):
                yield dict(zip((k for k, _ in combo), values))


def _planned(settings: Settings, config: str, world: int, change: dict[str, Any]) -> float:
    """Bytes per training GPU; under COLOCATE the larger of the step beside the sleeping server and the push."""
    changes = {k: v for k, v in change.items() if k != "world"}
    lora = changes.get("lora_rank", settings.train.lora_rank)
    shape = cached_shape(config, lora, settings.train.lora_alpha)
    shape_of_training = train_shape(settings, world, **changes)
    trainer = plan(shape, shape_of_training)
    if not settings.placement.colocate:
        return trainer.total
    inf = settings.inference
    return colocated(shape, shape_of_training, trainer, tp=inf.tp, bucket_bytes=inf.broadcast_bucket_mb << 20).total


def _check_host(need: float) -> None:
    """COLOCATE parks the trainer's state in pinned host memory beside the sleeping server's weights."""
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    say = log.warning if need > have else log.info
    say(
        "COLOCATE: %.0f GiB of host memory for the trainer's parked state and the sleeping server's weights, of "
        "%.0f GiB here",
        need / GIB,
        have / GIB,
    )


def _host(settings: Settings, config: str, world: int) -> float:
    shape = cached_shape(config, settings.train.lora_rank, settings.train.lora_alpha)
    shaped = train_shape(settings, world)
    inf = settings.inference
    return colocated(shape, shaped, plan(shape, shaped), tp=inf.tp, bucket_bytes=inf.broadcast_bucket_mb << 20).host


def _shared(settings: Settings) -> str:
    return (
        " (COLOCATE: beside the sleeping vLLM server, and with its weights during the push)"
        if settings.placement.colocate
        else ""
    )


def _world(change: dict[str, Any], place: Placement) -> int:
    return change.get("world", len(place.train))


def _describe(change: dict[str, Any], place: Placement) -> str:
    parts = []
    for key, value in change.items():
        if key == "world":
            parts.append(
                f"the server on another node (VLLM_URL=http://HOST:8000/v1) and the trainer on all {value} GPUs here"
            )
        else:
            parts.append(f"{key.upper()}={str(value).lower()}")
    return " ".join(parts)
