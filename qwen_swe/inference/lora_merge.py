"""The server side of a LoRA broadcast: each adapted weight rebuilt from the base checkpoint and its adapter.

With ``LORA_RANK > 0`` the trainer sends only ``lora_A``/``lora_B`` per adapted linear (fp32) and ``alpha/r``;
the worker reads that linear's base weight from the model folder the server was started from and computes
``W_base + (alpha/r) * B @ A`` in fp32, the same expression the disk export (``train.policy.merge_lora``) writes,
then casts to the served dtype. Always from the base, never onto the previous merge: no drift across steps.

Base tensors are read one at a time through ``safe_open`` (memory-mapped): no copy of the checkpoint stays
resident, only the tensor being merged. Imports only the standard library, torch and safetensors (all in vLLM's
environment) and this project's error type.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch

from qwen_swe.errors import WeightSyncError


def merge(base: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scaling: float, dtype: torch.dtype) -> torch.Tensor:
    """``base + scaling * b @ a`` in fp32, cast to ``dtype`` (bit for bit what the disk export computes)."""
    return (base.float() + scaling * (b.float() @ a.float())).to(dtype)


def model_folder(model: str) -> Path:
    """The local folder of the served model (a path, or a hub id already in the local cache)."""
    path = Path(model)
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, local_files_only=True, allow_patterns=["*.safetensors", "*.json"]))
    except Exception as exc:  # noqa: BLE001 - any failure means: no local base weights
        raise WeightSyncError(
            f"a LoRA broadcast needs the base weights, but the server's model {model!r} is not a "
            f"local folder nor in the local hub cache ({exc}); start the server from the trainer's "
            "base model folder"
        ) from exc


class BaseWeights:
    """Name -> file index of a safetensors folder (headers only, built once), and one-tensor reads."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.files: dict[str, Path] = {}
        index = self.folder / "model.safetensors.index.json"
        if index.exists():
            weight_map = json.loads(index.read_text())["weight_map"]
            self.files = {name: self.folder / file for name, file in weight_map.items()}
        else:
            from safetensors import safe_open

            for file in sorted(self.folder.glob("*.safetensors")):
                with safe_open(str(file), framework="pt") as fh:
                    self.files.update((name, file) for name in fh.keys())  # noqa: SIM118 - safe_open is not iterable
        if not self.files:
            raise WeightSyncError(
                f"{self.folder} holds no safetensors weights: a LoRA broadcast merges the adapter "
                "into the base weights the server was started from"
            )

    def check(self, names: list[str]) -> None:
        missing = [n for n in names if n not in self.files]
        if missing:
            raise WeightSyncError(
                f"the server's model folder {self.folder} has no base tensor {missing[0]!r} (and "
                f"{len(missing) - 1} more) that the LoRA broadcast names: the server must be started "
                "from the model the trainer adapts"
            )

    def reader(self) -> _Reader:
        return _Reader(self)


class _Reader:
    """Open files for one sync (memory maps, closed at the end); ``get`` copies out a single tensor."""

    def __init__(self, base: BaseWeights) -> None:
        self.base, self.stack = base, ExitStack()
        self.handles: dict[Path, Any] = {}

    def get(self, name: str) -> torch.Tensor:
        from safetensors import safe_open

        self.base.check([name])
        file = self.base.files[name]
        if file not in self.handles:
            self.handles[file] = self.stack.enter_context(safe_open(str(file), framework="pt"))
        return self.handles[file].get_tensor(name)

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stack.close()
