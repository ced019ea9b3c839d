"""The trainer side of ``WEIGHT_SYNC=broadcast``: stream weights into the vLLM workers, no disk round trip.

Once: the trainer's rank 0 hosts a TCPStore and forms a process group with the server's workers (which join
through ``POST /collective_rpc qwen_swe_join``, see ``broadcast_worker.py``); gloo on CPU, NCCL on GPUs. Every
sync: ``/pause`` -> ``collective_rpc qwen_swe_receive`` in flight while rank 0 broadcasts every bucket (its
manifest, then its bytes) and an end mark, the workers feeding them to vLLM's in-place ``reload_weights`` as they
arrive -> ``/reset_prefix_cache`` -> ``/resume`` (always), and the version recorded, as the disk reload does. The
RPC blocks until the workers have loaded everything, so it runs in a helper thread while this thread broadcasts;
both have timeouts.

The server needs ``--worker-extension-cls qwen_swe.inference.broadcast_worker.BroadcastWorkerExtension`` with the
repository on its PYTHONPATH (the launcher adds both when WEIGHT_SYNC=broadcast) and must reach the trainer's
``BROADCAST_HOST:BROADCAST_PORT``.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from qwen_swe.errors import WeightSyncError
from qwen_swe.inference.broadcast_worker import Entry, encode, make_group, send_manifest
from qwen_swe.inference.client import InferenceClient

Bucket = list[Entry]  # (checkpoint name, tensor), or a LoraAdapter the server merges into its base weight


def folder_buckets(folder: Path, bucket_bytes: int, dtype: torch.dtype) -> Iterator[Bucket]:
    """The tensors of an HF safetensors folder in buckets, one tensor read at a time."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise WeightSyncError(f"{folder} has no safetensors files to broadcast")
    bucket: Bucket = []
    size = 0
    for file in files:
        with safe_open(str(file), framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118 - safe_open has keys() but is not iterable
                tensor = fh.get_tensor(name).to(dtype)
                bucket.append((name, tensor))
                size += tensor.numel() * tensor.element_size()
                if size >= bucket_bytes:
                    yield bucket
                    bucket, size = [], 0
    if bucket:
        yield bucket


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class _Stopped(Exception):
    """The server's receive call ended while a send was still waiting for it."""


class _Call(threading.Thread):
    """One blocking RPC to the server, run beside the broadcast it waits for."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(name="qwen-swe-broadcast-rpc", daemon=True)
        self.fn, self.result = fn, None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller in outcome()
            self.error = exc

    def outcome(self, timeout: float, what: str) -> Any:
        self.join(timeout)
        if self.is_alive():
            raise WeightSyncError(f"{what}: the server did not answer within {timeout:.0f} s")
        if self.error is not None:
            raise WeightSyncError(f"{what} failed on the server: {self.error}") from self.error
        return self.result


class BroadcastSync:
    """``WeightSync`` whose weights are buckets of named tensors, or of LoRA adapters the server merges itself
    (``train.streaming.weight_buckets`` on rank 0)."""

    def __init__(
        self,
        client: InferenceClient,
        *,
        host: str,
        port: int,
        workers: int = 1,
        backend: str = "gloo",
        timeout: float = 600.0,
        bucket_bytes: int = 256 << 20,
        dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        if backend == "nccl" and not torch.cuda.is_available():
            raise WeightSyncError("WEIGHT_SYNC=broadcast over NCCL needs a GPU on the trainer; on CPU it uses gloo")
        self.client, self.host, self.port, self.workers = client, host, port, workers
        self.backend, self.timeout, self.bucket_bytes, self.dtype = backend, timeout, bucket_bytes, dtype
        self.group: Any = None
        self._auto_port = port == 0

    def _rpc(self, method: str, arg: str | None) -> Any:
        body = {"method": method, "args": [arg] if arg is not None else [], "timeout": self.timeout}
        return self.client.post("/collective_rpc", body, timeout=self.timeout + 30)

    def connect(self) -> None:
        """Form the group with the server's workers (rank 0 here, 1..workers there); once per run."""
        if self.group is not None:
            return
        if not self.port:
            self.port = free_port(self.host)
        init = json.dumps(
            {
                "host": self.host,
                "port": self.port,
                "world": 1 + self.workers,
                "rank_offset": 1,
                "backend": self.backend,
                "timeout": self.timeout,
            }
        )
        call = _Call(lambda: self._rpc("qwen_swe_join", init))
        try:
            self.group = make_group(self.backend, self.host, self.port, 0, 1 + self.workers, self.timeout)
        except Exception as exc:
            raise WeightSyncError(
                f"could not host the broadcast group on {self.host}:{self.port}: {exc}; set "
                "BROADCAST_PORT to a free port the server can reach"
            ) from exc
        call.outcome(
            self.timeout,
            f"qwen_swe_join at {self.client.root} (is the server started with the worker "
            "extension, see qwen_swe/inference/broadcast.py?)",
        )

    def push(self, weights: Iterable[Bucket] | str | os.PathLike[str], version: int) -> dict[str, float]:
        """Serve ``weights`` (buckets, or an HF folder on this machine, e.g. slime's converted checkpoint, read
        bucket by bucket) as weight ``version``."""
        t0 = time.monotonic()
        if isinstance(weights, (str, os.PathLike)):
            weights = folder_buckets(Path(weights), self.bucket_bytes, self.dtype)
        self.connect()
        sent = {"buckets": 0, "bytes": 0}
        self.client.update_paused(lambda: self._stream(weights, sent), f"broadcast v{version}")
        return {
            "sync/reload_seconds": time.monotonic() - t0,
            "sync/broadcast_buckets": sent["buckets"],
            "sync/broadcast_bytes": sent["bytes"],
        }

    def _stream(self, weights: Iterable[Bucket], sent: dict[str, int]) -> None:
        """One ``qwen_swe_receive`` in flight on the server while every bucket goes out: manifest, then bytes."""
        device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")
        call = _Call(lambda: self._rpc("qwen_swe_receive", None))
        opts = torch.distributed.BroadcastOptions()
        opts.rootRank = 0
        group = self.group

        def wait(work: Any) -> None:  # a send completes only when the workers take it: watch the RPC meanwhile
            while not work.is_completed():
                if not call.is_alive():
                    raise _Stopped()
                time.sleep(0.0005)
            work.wait()

        try:
            for bucket in weights:
                manifest, tensors = encode(bucket)
                send_manifest(group, device, manifest, wait)
                flat = torch.cat([t.contiguous().reshape(-1).view(torch.uint8) for t in tensors]).to(device)
                wait(group.broadcast([flat], opts))
                sent["buckets"] += 1
                sent["bytes"] += flat.numel()
        except _Stopped:  # the workers stopped receiving (an error there); outcome() below reports it
            pass
        finally:  # the end mark, also after a failure here, so the workers never wait for a bucket that won't come
            if call.is_alive():
                try:
                    send_manifest(group, device, None, wait)
                except _Stopped:  # the RPC may return (done, or failed) before gloo marks the send complete
                    pass
            try:
                call.outcome(self.timeout, "qwen_swe_receive")
            except WeightSyncError:
                self._forget()  # the server side failed mid-stream: form a new group next time
                raise

    def _forget(self) -> None:
        if self.group is not None:
            self.group.abort()  # a send may still be pending; destroying the group would wait for it
        self.group = None
        if self._auto_port:
            self.port = 0

    def close(self) -> None:
        if self.group is None:
            return
        try:
            self.client.post("/collective_rpc", {"method": "qwen_swe_leave", "timeout": 60.0}, timeout=90)
        finally:
            self.group = None
