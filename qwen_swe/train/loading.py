"""Sharded loading (``WEIGHT_LOADING=meta``): no rank ever holds the whole model.

The model is built with its parameters on the meta device (buffers such as RoPE's ``inv_freq`` are real: they
are computed, not loaded), sharded by FSDP2, materialised as empty local shards, and each rank then reads only
its own rows of every weight straight from the safetensors files into its fp32 shard. FSDP2 shards dim 0
(``Shard(0)``, torch.chunk layout), and a row range of a row-major tensor is one contiguous byte range of the
file, so one ``pread`` per tensor fills a shard with no full copy anywhere; the files are read, not
memory-mapped, so the page cache does not count against the rank.

Names: the policy's parameter names are mapped back to the checkpoint's (``lm.``, peft's ``base_model.model.``
and ``.base_layer.`` dropped). transformers 5 fuses MoE experts into ``mlp.experts.gate_up_proj`` ``[E, 2I, H]``
and ``mlp.experts.down_proj`` ``[E, H, I]`` while checkpoints keep one tensor per expert; those are assembled
from the per-expert tensors of the local experts only. Parameters no checkpoint has (LoRA adapters) are
initialised in full on CPU, in the same order and with the same RNG draws as today's path, and sliced.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from torch import Tensor, nn

from qwen_swe.errors import TrainerError

_DTYPES = {
    "F32": torch.float32,
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F64": torch.float64,
    "I64": torch.int64,
    "I32": torch.int32,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_EXPERTS = re.compile(r"^(?P<prefix>.*\.mlp\.experts)\.(?P<kind>gate_up_proj|down_proj)$")


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int  # absolute byte offset of the tensor's data in ``file``


class SafetensorsIndex:
    """Where every tensor of an HF folder lives (the safetensors header: 8-byte length, then JSON)."""

    def __init__(self, folder: Path) -> None:
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise TrainerError(
                f"WEIGHT_LOADING=meta reads safetensors files, and {folder} has none; convert the "
                "model to safetensors or use WEIGHT_LOADING=full"
            )
        self.tensors: dict[str, TensorInfo] = {}
        for file in files:
            with file.open("rb") as fh:
                (length,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(length))
            for name, meta in header.items():
                if name == "__metadata__":
                    continue
                if meta["dtype"] not in _DTYPES:
                    raise TrainerError(
                        f"{file}: tensor {name} has dtype {meta['dtype']}, which sharded loading "
                        "does not read; use WEIGHT_LOADING=full"
                    )
                self.tensors[name] = TensorInfo(
                    file, _DTYPES[meta["dtype"]], tuple(meta["shape"]), 8 + length + int(meta["data_offsets"][0])
                )

    def read_rows(self, name: str, rows: range, out: Tensor) -> None:
        """Rows ``rows`` of tensor ``name`` (dim 0) into ``out`` (any dtype, same element count)."""
        info = self.tensors[name]
        row_elems = 1
        for d in info.shape[1:]:
            row_elems *= d
        if out.numel() != len(rows) * row_elems:
            raise TrainerError(
                f"{name}: the checkpoint's shape {info.shape} does not fit the model's shard of "
                f"{tuple(out.shape)}; MODEL's config.json and weights disagree"
            )
        if not len(rows):
            return
        itemsize = torch.empty((), dtype=info.dtype).element_size()
        direct = out.dtype == info.dtype and out.is_contiguous() and out.device.type == "cpu"
        buf = out if direct else torch.empty(out.numel(), dtype=info.dtype)
        view = memoryview(buf.view(torch.uint8).numpy())  # type: ignore[arg-type]  # numpy's stubs lack the buffer protocol
        offset = info.start + rows.start * row_elems * itemsize
        with info.file.open("rb", buffering=0) as fh:
            fh.seek(offset)
            got = fh.readinto(view.cast("B"))
        if got != len(rows) * row_elems * itemsize:
            raise TrainerError(f"{info.file}: short read of {name} ({got} bytes); the file is truncated")
        if not direct:
            out.copy_(buf.view(out.shape))


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Parameters created inside go to the meta device; buffers stay real (they are computed at build time)."""
    original = nn.Module.register_parameter

    def register(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original(module, name, param)
        if param is not None and param.device.type != "meta":
            p = cast(nn.Parameter, module._parameters[name])  # just registered, not None
            module._parameters[name] = type(p)(p.to("meta"), requires_grad=p.requires_grad)

    nn.Module.register_parameter = register  # type: ignore[method-assign,assignment]  # patched inside the block only
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]


def resolve_folder(model_path: str) -> Path:
    """A local folder, or the hub cache's snapshot of a model name (same files ``from_pretrained`` reads)."""
    path = Path(model_path).expanduser()
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model_path, allow_patterns=["*.json", "*.safetensors"]))


def checkpoint_name(param_name: str) -> str:
    """The policy's parameter name -> the HF checkpoint's tensor name."""
    name = param_name.removeprefix("lm.").removeprefix("base_model.model.")
    return name.replace(".base_layer.", ".")


@contextmanager
def recording_adapters(lm_holder: dict[str, nn.Module], values: dict[str, Tensor]) -> Iterator[None]:
    """peft draws each adapter on CPU, then moves it to its base layer's device (meta here): record the CPU
    values just before that move, so the adapters equal today's bit for bit (same draws, same order).

    ``values`` is filled (names relative to the wrapped model) when the block ends; ``lm_holder["lm"]`` must
    by then hold the wrapped model.
    """
    from peft.tuners.tuners_utils import BaseTunerLayer

    original = BaseTunerLayer._move_adapter_to_device_of_base_layer
    seen: list[tuple[BaseTunerLayer, str, dict[str, Tensor]]] = []

    def move(layer: BaseTunerLayer, adapter_name: str, device: torch.device | None = None) -> None:
        params = {
            f"{part}.{adapter_name}.{n}": p.detach().clone()
            for part in ("lora_A", "lora_B")
            if adapter_name in getattr(layer, part, {})
            for n, p in getattr(layer, part)[adapter_name].named_parameters()
            if p.device.type != "meta"
        }
        seen.append((layer, adapter_name, params))
        original(layer, adapter_name, device)

    BaseTunerLayer._move_adapter_to_device_of_base_layer = move  # type: ignore[method-assign,assignment]  # patched inside the block only
    try:
        yield
    finally:
        BaseTunerLayer._move_adapter_to_device_of_base_layer = original  # type: ignore[method-assign]
    names = {id(m): n for n, m in lm_holder["lm"].named_modules()}
    for layer, _, params in seen:
        for key, value in params.items():
            values[f"{names[id(layer)]}.{key}"] = value


def local_rows(param: Tensor) -> range:
    """The dim-0 rows of the global tensor this rank's shard holds (FSDP2's ``Shard(0)``)."""
    from torch.distributed.tensor import DTensor, Shard

    if not isinstance(param, DTensor):
        return range(param.shape[0] if param.dim() else 1)
    if any(not isinstance(p, Shard) or p.dim != 0 for p in param.placements):
        raise TrainerError(f"sharded loading expects FSDP2's Shard(0) placement, got {param.placements}")
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
    return range(offset[0], offset[0] + (shape[0] if shape else 1))


def load_local_shards(policy: nn.Module, index: SafetensorsIndex, extra: dict[str, Tensor]) -> None:
    """Fill every (materialised, sharded) parameter of ``policy`` with its rows from the checkpoint."""
    missing: list[str] = []
    with torch.no_grad():
        for pname, param in policy.named_parameters():
            local = param.to_local() if hasattr(param, "to_local") else param
            rows = local_rows(param)
            name = checkpoint_name(pname)
            inner = pname.removeprefix("lm.")
            if inner in extra:
                local.copy_(extra[inner][rows.start : rows.stop].view(local.shape))
            elif name in index.tensors:
                index.read_rows(name, rows, local)
            elif _EXPERTS.match(name):
                _read_experts(index, name, rows, local, missing)
            else:
                missing.append(name)
    if missing:
        raise TrainerError(
            f"the checkpoint has no tensors for {missing[:5]} ({len(missing)} in all); the model "
            "class does not match its files, use WEIGHT_LOADING=full"
        )


def _read_experts(index: SafetensorsIndex, name: str, rows: range, local: Tensor, missing: list[str]) -> None:
    """Fused ``[E, ...]`` expert weights from per-expert checkpoint tensors, local experts only."""
    m = _EXPERTS.match(name)
    assert m is not None
    parts = ("gate_proj", "up_proj") if m["kind"] == "gate_up_proj" else ("down_proj",)
    for i, expert in enumerate(rows):
        keys = [f"{m['prefix']}.{expert}.{part}.weight" for part in parts]
        if any(k not in index.tensors for k in keys):
            missing.append(keys[0])
            return
        pieces = local[i].chunk(len(parts), dim=0)
        for key, piece in zip(keys, pieces):
            index.read_rows(key, range(index.tensors[key].shape[0]), piece)


def materialize(policy: nn.Module, device: torch.device) -> None:
    """Allocate the local shards (empty) and put back the buffers ``to_empty`` would have wiped."""
    buffers = {name: b.detach().clone() for name, b in policy.named_buffers()}
    policy.to_empty(device=device)
    with torch.no_grad():
        for name, b in policy.named_buffers():
            b.copy_(buffers[name])
