"""The inference side of ``WEIGHT_SYNC=broadcast``: methods mixed into every vLLM worker.

vLLM loads this class with ``--worker-extension-cls qwen_swe.inference.broadcast_worker.BroadcastWorkerExtension``
and adds its methods to its worker class, so ``POST /collective_rpc {"method": "qwen_swe_join", ...}`` runs them in
every worker (each tensor-parallel rank). The trainer's rank 0 and the server's workers form their own process
group over a TCPStore the trainer hosts: gloo between CPU processes, NCCL between GPUs; it is not vLLM's group and
not the trainer's, so neither side's parallel layout changes. Each bucket arrives as its manifest (name, dtype,
shape as JSON) and one flat byte buffer, and goes into the model through vLLM's in-place ``reload_weights`` with
a weights iterator, the path a reload from disk takes, so names, tensor-parallel slicing and the kernels' weight
processing are vLLM's.

Imports only the standard library and torch: it runs inside vLLM's environment.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def make_group(backend: str, host: str, port: int, rank: int, world: int, timeout: float) -> Any:
    """A process group of its own over a TCPStore (rank 0 hosts it); gloo or NCCL, never the default group."""
    wait = timedelta(seconds=timeout)
    store = dist.TCPStore(host, port, world, is_master=rank == 0, timeout=wait, wait_for_workers=False)
    store = dist.PrefixStore("qwen_swe_broadcast", store)
    if backend == "gloo":
        return dist.ProcessGroupGloo(store, rank, world, wait)
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = wait
        return dist.ProcessGroupNCCL(store, rank, world, options)
    raise ValueError(f"broadcast backend {backend!r} must be gloo or nccl")


def unpack(flat: torch.Tensor, manifest: list[list[Any]]) -> list[tuple[str, torch.Tensor]]:
    """Split one received byte buffer into named tensors, in manifest order (views, no copy)."""
    out, offset = [], 0
    for name, dtype, shape in manifest:
        dt = DTYPES[dtype]
        count = 1
        for d in shape:
            count *= d
        size = count * torch.empty((), dtype=dt).element_size()
        out.append((name, flat[offset:offset + size].view(dt).view(shape)))
        offset += size
    return out


class BroadcastWorkerExtension:
    """Added to vLLM's worker class; every name starts with ``qwen_swe_`` so it never shadows one of vLLM's."""

    def qwen_swe_join(self, init: str) -> str:
        """Join the trainer's group: ``init`` is JSON with host, port, world, backend, timeout, rank_offset."""
        cfg = json.loads(init)
        rank = int(cfg["rank_offset"]) + int(getattr(self, "rank", 0))
        self.qwen_swe_group = make_group(cfg["backend"], cfg["host"], int(cfg["port"]), rank, int(cfg["world"]),
                                         float(cfg["timeout"]))
        self.qwen_swe_device = torch.device("cuda", torch.cuda.current_device()) if cfg["backend"] == "nccl" \
            else torch.device("cpu")
        return f"rank {rank}"

    def qwen_swe_receive(self) -> str:
        """Receive buckets from the trainer's rank 0 until it sends the end mark, feeding them to vLLM's in-place
        ``reload_weights`` as they arrive (one reload per sync, as from disk, but from the wire)."""
        counts = {"tensors": 0, "bytes": 0}

        def weights():
            while True:
                items = receive_manifest(self.qwen_swe_group, self.qwen_swe_device)
                if items is None:
                    return
                flat = torch.empty(sum(_nbytes(d, s) for _, d, s in items), dtype=torch.uint8,
                                   device=self.qwen_swe_device)
                self.qwen_swe_group.broadcast([flat], _root0()).wait()
                counts["tensors"] += len(items)
                counts["bytes"] += flat.numel()
                yield from unpack(flat, items)

        self.model_runner.reload_weights(weights_iterator=weights(), is_checkpoint_format=True)
        return f"{counts['tensors']} tensors, {counts['bytes']} bytes"

    def qwen_swe_leave(self) -> str:
        group = getattr(self, "qwen_swe_group", None)
        self.qwen_swe_group = None
        if group is not None and hasattr(group, "shutdown"):
            group.shutdown()
        return "left"


def send_manifest(group: Any, device: torch.device, manifest: list[list[Any]] | None,
                  wait: Callable[[Any], None] = lambda work: work.wait()) -> None:
    """Rank 0: the next bucket's manifest (length, then JSON bytes); ``None`` is the end mark (length 0)."""
    data = json.dumps(manifest).encode() if manifest is not None else b""
    wait(group.broadcast([torch.tensor([len(data)], dtype=torch.int64, device=device)], _root0()))
    if data:
        wait(group.broadcast([torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)], _root0()))


def receive_manifest(group: Any, device: torch.device) -> list[list[Any]] | None:
    length = torch.zeros(1, dtype=torch.int64, device=device)
    group.broadcast([length], _root0()).wait()
    if int(length.item()) == 0:
        return None
    data = torch.empty(int(length.item()), dtype=torch.uint8, device=device)
    group.broadcast([data], _root0()).wait()
    return json.loads(bytes(data.cpu().tolist()))


def _nbytes(dtype: str, shape: list[int]) -> int:
    count = 1
    for d in shape:
        count *= d
    return count * torch.empty((), dtype=DTYPES[dtype]).element_size()


def _root0() -> Any:
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    return opts
