"""How new weights reach the inference server: one interface, one implementation per way of getting there.

- ``PathReload``: the server reads the trainer's disk (same machine or a shared file system): vLLM's
  /pause -> /collective_rpc reload_weights -> /reset_prefix_cache -> /resume through ``InferenceClient``.
- ``ModalVolume``: the server runs on Modal and cannot see our disk: upload the folder into the weights Volume,
  then call the deployed app's ``Server.reload`` (a Modal function call, not a web request).
- ``BroadcastSync`` (``broadcast.py``): no folder at all; the trainer streams the weights bucket by bucket into the
  vLLM workers over a process group set up with them (gloo on CPU, NCCL on GPUs). Its ``push`` takes the buckets
  (``train.streaming.weight_buckets``) where the others take a folder, or a local folder (slime's converted
  checkpoint), which it reads bucket by bucket, so the server needs no access to our disk; path reload stays the
  fallback.
- slime's checkpoints are converted to an HF folder first (``backends/slime/weights.py``) and then pushed through
  one of these.

``ProbedSync`` wraps any of them with the served-weights probe: the log-probability the server gives a fixed
text, before and after, which changes exactly when the served weights change (diagnostic only).
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any, Protocol

from qwen_swe.errors import InferenceError
from qwen_swe.inference.client import InferenceClient
from qwen_swe.inference.settings import InferenceSettings

log = logging.getLogger("qwen_swe.weight_sync")
PROBE_TEXT = "def add(a, b):\n    return a + b\n"


class WeightSync(Protocol):
    def push(self, folder: Any, version: int) -> dict[str, float]:
        """Make the server serve ``folder`` as weight ``version`` (an HF folder, or for ``BroadcastSync`` an
        iterable of buckets of named tensors); return timing metrics."""
        ...


class PathReload:
    """The server reads ``folder`` at the same path (a new folder every version)."""

    def __init__(self, client: InferenceClient) -> None:
        self.client = client

    def push(self, folder: Path, version: int) -> dict[str, float]:
        t0 = time.monotonic()
        self.client.reload_weights(str(folder))
        return {"sync/reload_seconds": time.monotonic() - t0}


class ModalVolume:
    """Upload ``folder`` into the Modal weights Volume as ``v{version:06d}`` and reload it there."""

    def push(self, folder: Path, version: int) -> dict[str, float]:
        from qwen_swe.inference import modal_app  # late: optional dependency, only for a Modal server

        t0 = time.monotonic()
        modal_app.push_and_reload(folder, f"v{version:06d}")
        return {"sync/reload_seconds": time.monotonic() - t0}


def make_weight_sync(settings: InferenceSettings, client: InferenceClient, *, colocated: bool = False) -> WeightSync:
    """The sync the settings ask for (``WEIGHT_SYNC``; auto = Modal for a ``*.modal.run`` server). ``colocated``
    (COLOCATE): a broadcast goes over gloo, through host memory, since NCCL refuses two ranks of one group on the
    same GPU, which the trainer's rank 0 and the server's first worker then are."""
    if settings.sync_mode == "broadcast":
        import torch  # late: only the trainer's side of a broadcast needs torch

        from qwen_swe.inference.broadcast import BroadcastSync  # late: imports torch.distributed

        return BroadcastSync(
            client,
            host=settings.broadcast_host,
            port=settings.broadcast_port,
            workers=settings.tp,
            backend="nccl" if torch.cuda.is_available() and not colocated else "gloo",
            timeout=settings.request_timeout,
            bucket_bytes=settings.broadcast_bucket_mb << 20,
            dtype=getattr(torch, settings.broadcast_dtype),
        )
    return ModalVolume() if settings.sync_mode == "modal" else PathReload(client)


def probe_logprob(client: InferenceClient, served_model: str) -> float:
    """Log-probability the server gives ``PROBE_TEXT``; NaN with a warning where ``prompt_logprobs`` is missing."""
    body = {"model": served_model, "prompt": PROBE_TEXT, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
    try:
        choice = client.post("/v1/completions", body)["choices"][0]
        return float(sum(next(iter(d.values()))["logprob"] for d in choice["prompt_logprobs"] if d))
    except (InferenceError, KeyError, IndexError, TypeError, StopIteration) as exc:
        log.warning("weight-sync probe unavailable: %s", exc)
        return math.nan


class ProbedSync:
    """Any ``WeightSync`` plus the probe before and after, reported as ``sync/*`` metrics."""

    def __init__(self, inner: WeightSync, client: InferenceClient, served_model: str) -> None:
        self.inner, self.client, self.served_model = inner, client, served_model

    def push(self, folder: Path, version: int) -> dict[str, float]:
        before = probe_logprob(self.client, self.served_model)
        metrics = self.inner.push(folder, version)
        metrics.update(
            {
                "sync/probe_logprob_before": before,
                "sync/probe_logprob_after": probe_logprob(self.client, self.served_model),
                "sync/version": version,
            }
        )
        log.info(
            "weights v%d served from %s: %s", version, folder if isinstance(folder, Path) else "a broadcast", metrics
        )
        return metrics
