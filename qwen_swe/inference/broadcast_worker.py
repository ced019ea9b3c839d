"""The inference side of ``WEIGHT_SYNC=broadcast``: methods mixed into every vLLM worker.

vLLM loads this class with ``--worker-extension-cls qwen_swe.inference.broadcast_worker.BroadcastWorkerExtension``
and adds its methods to its worker class, so ``POST /collective_rpc {"method": "qwen_swe_join", ...}`` runs them in
every worker (each tensor-parallel rank). The trainer's rank 0 and the server's workers form their own process
group over a TCPStore the trainer hosts: gloo between CPU processes, NCCL between GPUs; it is not vLLM's group and
not the trainer's, so neither side's parallel layout changes. Each bucket arrives as its manifest (name, dtype,
shape as JSON) and one flat byte buffer, and goes into the model through vLLM's in-place ``reload_weights`` with
a weights iterator, the path a reload from disk takes, so names, tensor-parallel slicing and the kernels' weight
processing are vLLM's.

The manifest (protocol 2) is ``{"protocol": 2, "entries": [...], "lora_scaling": alpha/r}``, the bytes following
in entry order. An entry is ``{"kind": "tensor", "name", "dtype", "shape"}`` (a weight under its checkpoint name),
or ``{"kind": "lora", "module", "dtype", "a_shape", "b_shape"}``: one adapted linear's ``lora_A`` then ``lora_B``,
which the worker merges into the base weight read from its own model folder (``lora_merge.py``) and feeds as
``module + ".weight"``; ``lora_scaling`` is present once in a manifest that holds lora entries.

Imports only the standard library, torch, safetensors and this project's errors: it runs inside vLLM's environment.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from qwen_swe.errors import WeightSyncError
from qwen_swe.inference.lora_merge import BaseWeights, merge, model_folder

PROTOCOL = 2
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


@dataclass(frozen=True)
class LoraAdapter:
    """One adapted linear's adapter: ``module`` is its checkpoint name without ``.weight``, ``a`` is ``[r, in]``,
    ``b`` is ``[out, r]``; the server serves ``base + scaling * b @ a``."""

    module: str
    a: torch.Tensor
    b: torch.Tensor
    scaling: float


Entry = tuple[str, torch.Tensor] | LoraAdapter


def make_group(backend: str, host: str, port: int, rank: int, world: int, timeout: float) -> Any:
    """A process group of its own over a TCPStore (rank 0 hosts it); gloo or NCCL, never the default group."""
    wait = timedelta(seconds=timeout)
    store: dist.Store = dist.TCPStore(host, port, world, is_master=rank == 0, timeout=wait, wait_for_workers=False)
    store = dist.PrefixStore("qwen_swe_broadcast", store)
    if backend == "gloo":
        return dist.ProcessGroupGloo(store, rank, world, wait)
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = wait
        return dist.ProcessGroupNCCL(store, rank, world, options)
    raise ValueError(f"broadcast backend {backend!r} must be gloo or nccl")


def encode(bucket: list[Entry]) -> tuple[dict[str, Any], list[torch.Tensor]]:
    """Rank 0: a bucket's manifest and its tensors in the order their bytes go out."""
    entries: list[dict[str, Any]] = []
    tensors: list[torch.Tensor] = []
    scalings: set[float] = set()
    for item in bucket:
        if isinstance(item, LoraAdapter):
            entries.append(
                {
                    "kind": "lora",
                    "module": item.module,
                    "dtype": DTYPE_NAMES[item.a.dtype],
                    "a_shape": list(item.a.shape),
                    "b_shape": list(item.b.shape),
                }
            )
            tensors += [item.a, item.b.to(item.a.dtype)]
            scalings.add(float(item.scaling))
        else:
            name, tensor = item
            entries.append(
                {"kind": "tensor", "name": name, "dtype": DTYPE_NAMES[tensor.dtype], "shape": list(tensor.shape)}
            )
            tensors.append(tensor)
    manifest: dict[str, Any] = {"protocol": PROTOCOL, "entries": entries}
    if len(scalings) > 1:
        raise WeightSyncError(f"one LoRA scaling per sync, got {sorted(scalings)}")
    if scalings:
        manifest["lora_scaling"] = scalings.pop()
    return manifest, tensors


def unpack(flat: torch.Tensor, manifest: dict[str, Any]) -> list[Entry]:
    """Split one received byte buffer into named tensors and adapters, in manifest order (views, no copy)."""
    out: list[Entry] = []
    offset = 0

    def take(dtype: str, shape: list[int]) -> torch.Tensor:
        nonlocal offset
        size = _nbytes(dtype, shape)
        view = flat[offset : offset + size].view(DTYPES[dtype]).view(shape)
        offset += size
        return view

    for e in manifest["entries"]:
        if e["kind"] == "lora":
            a, b = take(e["dtype"], e["a_shape"]), take(e["dtype"], e["b_shape"])
            out.append(LoraAdapter(e["module"], a, b, float(manifest["lora_scaling"])))
        else:
            out.append((e["name"], take(e["dtype"], e["shape"])))
    return out


def manifest_bytes(manifest: dict[str, Any]) -> int:
    """Bytes of the buffer that follows ``manifest``; refuses a protocol or an entry kind this worker does not speak."""
    if not isinstance(manifest, dict) or manifest.get("protocol") != PROTOCOL:
        got = manifest.get("protocol") if isinstance(manifest, dict) else "1 (a list)"
        raise WeightSyncError(
            f"broadcast manifest protocol {got}, this worker speaks {PROTOCOL}: the trainer and the "
            "server must run the same qwen_swe (restart the server)"
        )
    total = 0
    for e in manifest["entries"]:
        if e["kind"] == "tensor":
            total += _nbytes(e["dtype"], e["shape"])
        elif e["kind"] == "lora":
            total += _nbytes(e["dtype"], e["a_shape"]) + _nbytes(e["dtype"], e["b_shape"])
        else:
            raise WeightSyncError(f"unknown broadcast manifest entry kind {e['kind']!r} (protocol {PROTOCOL})")
    return total


class BroadcastWorkerExtension:
    """Added to vLLM's worker class; every name starts with ``qwen_swe_`` so it never shadows one of vLLM's."""

    model_config: Any  # vLLM's worker sets these two (annotations only: no attribute of ours)
    model_runner: Any

    def qwen_swe_join(self, init: str) -> str:
        """Join the trainer's group: ``init`` is JSON with host, port, world, backend, timeout, rank_offset."""
        cfg = json.loads(init)
        rank = int(cfg["rank_offset"]) + int(getattr(self, "rank", 0))
        self.qwen_swe_group = make_group(
            cfg["backend"], cfg["host"], int(cfg["port"]), rank, int(cfg["world"]), float(cfg["timeout"])
        )
        self.qwen_swe_device = (
            torch.device("cuda", torch.cuda.current_device()) if cfg["backend"] == "nccl" else torch.device("cpu")
        )
        return f"rank {rank}"

    def qwen_swe_receive(self) -> str:
        """Receive buckets from the trainer's rank 0 until it sends the end mark, feeding them to vLLM's in-place
        ``reload_weights`` as they arrive (one reload per sync, as from disk, but from the wire); LoRA adapters are
        merged into the base weights from the server's model folder first. A failure here (the reload, a merge) is
        raised only after the rest of the stream is taken to its end mark: a send the workers never take holds the
        trainer for the group's whole timeout (gloo waits for it when the group goes)."""
        counts = {"tensors": 0, "bytes": 0, "merged": 0}
        wire = "between buckets"  # or "receiving" (a wire operation under way), or "ended" (the end mark taken)
        with ExitStack() as stack:
            reader: list[Any] = []  # the base checkpoint, opened at the first adapter of this sync

            def weights() -> Iterator[tuple[str, torch.Tensor]]:
                nonlocal wire
                while True:
                    wire = "receiving"
                    bucket = receive_bucket(self.qwen_swe_group, self.qwen_swe_device)
                    if bucket is None:
                        wire = "ended"
                        return
                    wire = "between buckets"
                    manifest, flat = bucket
                    lora = [e["module"] + ".weight" for e in manifest["entries"] if e["kind"] == "lora"]
                    if lora:  # before this bucket feeds anything: a wrong model folder fails on its first adapter
                        self._qwen_swe_base().check(lora)
                        if not reader:
                            reader.append(stack.enter_context(self._qwen_swe_base().reader()))
                    counts["tensors"] += len(manifest["entries"])
                    counts["bytes"] += flat.numel()
                    for item in unpack(flat, manifest):
                        if isinstance(item, LoraAdapter):
                            name = item.module + ".weight"
                            counts["merged"] += 1
                            yield (
                                name,
                                merge(
                                    reader[0].get(name).to(flat.device),
                                    item.a,
                                    item.b,
                                    item.scaling,
                                    self.model_config.dtype,
                                ),
                            )
                        else:
                            yield item

            try:
                self.model_runner.reload_weights(weights_iterator=weights(), is_checkpoint_format=True)
            except Exception:
                if wire == "between buckets":  # not a failure of the wire itself: take the rest, unused
                    while receive_bucket(self.qwen_swe_group, self.qwen_swe_device) is not None:
                        pass
                raise
        return f"{counts['tensors']} entries ({counts['merged']} LoRA merges), {counts['bytes']} bytes"

    def _qwen_swe_base(self) -> BaseWeights:
        """The served model's safetensors index, built on first use (headers only) and kept."""
        base = getattr(self, "qwen_swe_base", None)
        if base is None:
            base = self.qwen_swe_base = BaseWeights(model_folder(str(self.model_config.model)))
        return base

    def qwen_swe_leave(self) -> str:
        group = getattr(self, "qwen_swe_group", None)
        self.qwen_swe_group = None
        if group is not None and hasattr(group, "shutdown"):
            group.shutdown()
        return "left"


def send_manifest(
    group: Any,
    device: torch.device,
    manifest: dict[str, Any] | None,
    wait: Callable[[Any], None] = lambda work: work.wait(),
) -> None:
    """Rank 0: the next bucket's manifest (length, then JSON bytes); ``None`` is the end mark (length 0)."""
    data = json.dumps(manifest).encode() if manifest is not None else b""
    wait(group.broadcast([torch.tensor([len(data)], dtype=torch.int64, device=device)], _root0()))
    if data:
        wait(group.broadcast([torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)], _root0()))


def receive_manifest(group: Any, device: torch.device) -> dict[str, Any] | None:
    length = torch.zeros(1, dtype=torch.int64, device=device)
    group.broadcast([length], _root0()).wait()
    if int(length.item()) == 0:
        return None
    data = torch.empty(int(length.item()), dtype=torch.uint8, device=device)
    group.broadcast([data], _root0()).wait()
    return json.loads(bytes(data.cpu().tolist()))


def receive_bucket(group: Any, device: torch.device) -> tuple[dict[str, Any], torch.Tensor] | None:
    """The next bucket's manifest and flat bytes from rank 0; ``None`` at the end mark."""
    manifest = receive_manifest(group, device)
    if manifest is None:
        return None
    flat = torch.empty(manifest_bytes(manifest), dtype=torch.uint8, device=device)
    group.broadcast([flat], _root0()).wait()
    return manifest, flat


def _nbytes(dtype: str, shape: list[int]) -> int:
    count = 1
    for d in shape:
        count *= d
    return count * torch.empty((), dtype=DTYPES[dtype]).element_size()


def _root0() -> Any:
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    return opts
