"""Rank 0's work with its errors shared across ranks, and new weights made served: an HF folder per version
(path reload, Modal) or, with WEIGHT_SYNC=broadcast, a bucket stream into the server's workers."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from qwen_swe.config.settings import Settings
from qwen_swe.errors import TrainerError
from qwen_swe.rollout.contract import RolloutSource, WeightUpdate
from qwen_swe.train import checkpoint as ckpt
from qwen_swe.train.policy import PolicyModel, full_state_dict, parameter_bytes, save_hf_folder
from qwen_swe.train.streaming import weight_buckets

KEEP_WEIGHT_VERSIONS = 2
T = TypeVar("T")


def on_rank0(fn: Callable[[], Any], what: str, *, share: bool = True) -> Any:
    """Run ``fn`` on rank 0; a failure there raises on every rank. Every rank gets its result when ``share``; else
    rank 0 keeps it (an object that lives on rank 0 only, such as the rollout source) and the others get ``None``."""
    box: list[Any] = [None]
    error: BaseException | None = None
    result: Any = None
    if dist.get_rank() == 0:
        try:
            result = fn()
            box = [("ok", result if share else None)]
        except Exception as exc:  # noqa: BLE001 - re-raised below on every rank
            error, box = exc, [("error", f"{what} failed on rank 0: {exc!r}")]
    dist.broadcast_object_list(box, src=0)
    kind, value = box[0]
    if kind == "error":
        if error is not None:
            raise error
        raise TrainerError(value)
    return result if dist.get_rank() == 0 else value


def rank0_only(obj: T | None) -> T:
    """``obj`` lives on rank 0 only (the rollout source, the server); the caller runs there, inside ``on_rank0``."""
    assert obj is not None, "an object of rank 0 used on another rank"
    return obj


class WeightExporter:
    """HF folders ``OUTPUT_DIR/weights/v{version:06d}`` (newest two kept) and their push to the server."""

    def __init__(self, output_dir: Path, model_path: str, policy: PolicyModel) -> None:
        self.root, self.model_path, self.policy = Path(output_dir) / "weights", model_path, policy
        self.tokenizer = None
        if dist.get_rank() == 0:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.bytes = parameter_bytes(policy)[0]

    def export(self, version: int) -> Path:
        """Collective: gather the weights and write the folder on rank 0."""
        sd = full_state_dict(self.policy)
        folder = self.root / f"v{version:06d}"

        def write() -> Path:
            ckpt.check_disk(self.root, self.bytes + ckpt.MARGIN_BYTES)
            self.root.mkdir(parents=True, exist_ok=True)
            save_hf_folder(sd, folder, self.model_path, self.tokenizer)
            # never the folder just written: after a resume from an older checkpoint, newer folders may exist
            versions = sorted(p for p in self.root.glob("v*") if p.is_dir() and p.name[1:].isdigit() and p != folder)
            for old in versions[: max(len(versions) - (KEEP_WEIGHT_VERSIONS - 1), 0)]:
                shutil.rmtree(old, ignore_errors=True)
            return folder

        return on_rank0(write, f"weight export to {folder}")


def publish(
    settings: Settings, source: RolloutSource | None, policy: PolicyModel, exporter: WeightExporter, version: int
) -> None:
    """Collective: make the server serve weight ``version``. By default through an HF folder (path reload, Modal);
    with WEIGHT_SYNC=broadcast streamed into the server's workers bucket by bucket, nothing written (with LoRA,
    only the adapters; the workers merge them into their base weights)."""
    inf = settings.inference
    if inf.sync_mode != "broadcast":
        update = WeightUpdate(version, folder=exporter.export(version))
        on_rank0(lambda: rank0_only(source).sync_weights(update), f"driver.sync_weights v{version}")
        return
    stream = weight_buckets(policy, inf.broadcast_bucket_mb << 20, getattr(torch, inf.broadcast_dtype))
    if dist.get_rank() != 0:
        for _ in stream:  # this rank's part of every gather
            pass

    def push() -> None:
        try:
            rank0_only(source).sync_weights(WeightUpdate(version, buckets=stream))
        finally:
            for _ in stream:  # after a failure on rank 0, finish the gathers the other ranks are in
                pass

    on_rank0(push, f"broadcast of weights v{version}")
