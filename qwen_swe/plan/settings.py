"""The placement settings section: which GPUs of this node serve and which train (or both, taking turns, under
COLOCATE), and whether the memory plan may refuse a run (``plan/placement.py`` resolves and checks them,
``preflight.py`` runs the plan)."""

from __future__ import annotations

from dataclasses import dataclass

from qwen_swe.config.fields import opt, validate


@dataclass(frozen=True)
class PlacementSettings:
    colocate: bool = opt(
        False,
        "trainer and a vLLM server on this node share GPUs, taking turns: the server sleeps "
        "while the trainer steps, the trainer's state waits in host memory while it serves "
        "(needs MAX_STALENESS=0; GPU memory released only by vLLM's CUDA build)",
    )
    train_gpus: str | None = opt(
        None,
        "GPUs of this node the trainer's ranks use, one rank each (2-7 or 2,3,4); "
        "default: every visible GPU a local server does not use (under COLOCATE: every "
        "visible GPU)",
    )
    inference_gpus: str | None = opt(
        None,
        "GPUs of this node a local vLLM server uses (start_vllm.py and the embedded server); default: the first TP",
    )
    memory_check: bool = opt(
        True, "refuse a GPU run whose memory plan (python -m qwen_swe.plan) does not fit; false = start anyway"
    )

    def __post_init__(self) -> None:
        validate(self)
