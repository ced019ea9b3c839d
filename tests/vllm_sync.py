"""The torchrun worker that makes the real vLLM CPU server serve changed weights twice, through the disk (export +
reload) and by broadcast, and what it answered each time; shared by tests/integration/test_broadcast_sync.py and
benchmarks/bench_weight_sync.py (``run_against``).

Run as a module (``-m tests.vllm_sync URL OUT LORA MODEL BUCKET_BYTES``) it is the worker: 2 gloo trainer ranks
build the served model sharded (SmolLM2 in the benchmark, the tiny SmolLM2 in the test), change it, and make the
server serve the change twice, once through the disk (today's path) and once by broadcast; rank 0 records what the
server answered and how long each took, and restores the server's original weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from qwen_swe.paths import REPO_ROOT, embedded_model_dir
from qwen_swe.supervise import run_rank, torchrun

PROMPT = "The capital of France is"


def _probe(client, model: str) -> tuple[list[int], list[float]]:
    body = client.post(
        "/v1/completions",
        {
            "model": model,
            "prompt": PROMPT,
            "max_tokens": 8,
            "temperature": 0.0,
            "return_token_ids": True,
            "logprobs": 0,
        },
    )
    choice = body["choices"][0]
    return choice["token_ids"], choice["logprobs"]["token_logprobs"]


def _worker(url: str, out: Path, lora: int, model: str, bucket_bytes: int) -> None:
    import torch.distributed as dist

    from qwen_swe.config.hardware import served_dtype
    from qwen_swe.inference.broadcast import BroadcastSync
    from qwen_swe.inference.client import InferenceClient
    from qwen_swe.train.policy import build_policy, full_state_dict, save_hf_folder
    from qwen_swe.train.streaming import weight_buckets

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    policy = build_policy(model, device=torch.device("cpu"), weight_loading="meta", lora_rank=lora)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if lora and ".lora_B." in name:  # a trained adapter
                p.to_local().normal_(std=0.05)
            elif not lora and "down_proj" in name and int(name.split("layers.")[1].split(".")[0]) < 10:
                p.to_local().zero_()  # silence every MLP of the first ten layers, on each rank's shard
    client = InferenceClient(url, timeout=300) if rank == 0 else None
    served = client.models()[0] if client else None
    result: dict = {}
    if rank == 0:
        result["before"] = _probe(client, served)
    # today's path: gather the full state dict, write an HF folder, the server reloads it
    t0 = time.monotonic()
    sd = full_state_dict(policy)
    if rank == 0:
        folder = save_hf_folder(sd, out / "v000001", model, None)
        client.reload_weights(folder)
        result["disk_seconds"] = time.monotonic() - t0
        result["disk"] = _probe(client, served)
        client.reload_weights(model)
        result["restored"] = _probe(client, served)
    del sd
    # broadcast: bucket by bucket into the worker, no folder
    sync = BroadcastSync(client, host="127.0.0.1", port=0) if rank == 0 else None
    if rank == 0:
        sync.connect()
    dist.barrier()
    t0 = time.monotonic()
    dtype = getattr(torch, served_dtype())  # the server's, as the embedded profile's BROADCAST_DTYPE
    stream = weight_buckets(policy, bucket_bytes, dtype)  # what trainer.publish streams
    if rank == 0:
        result["metrics"] = sync.push(stream, 2)
        result["broadcast_seconds"] = time.monotonic() - t0
        result["broadcast"] = _probe(client, served)
        result["version"] = client.weight_version.version
        client.reload_weights(model)  # the server may be shared: leave it as it was
        result["after_restore"] = _probe(client, served)
    else:
        for _ in stream:
            pass
    if lora:  # the previous LoRA broadcast, for comparison: the adapted layers merged on the trainer, full size
        dist.barrier()
        t0 = time.monotonic()
        stream = merged_lora_buckets(policy, bucket_bytes, dtype)
        if rank == 0:
            result["merged_metrics"] = sync.push(stream, 3)
            result["merged_seconds"] = time.monotonic() - t0
            result["merged"] = _probe(client, served)
            client.reload_weights(model)
        else:
            for _ in stream:
                pass
    if rank == 0:
        sync.close()
        (out / "result.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


def merged_lora_buckets(policy, bucket_bytes: int, dtype: torch.dtype):
    """Collective: the adapted layers merged on the trainer (``W + alpha/r * B @ A``), as broadcast sent them before
    the server merged adapters itself; kept for the benchmark's comparison."""
    import torch.distributed as dist

    from qwen_swe.train.loading import checkpoint_name
    from qwen_swe.train.streaming import _gather, _lora_scaling

    params, scaling = dict(policy.named_parameters()), _lora_scaling(policy)
    bucket, size = [], 0
    for pname, param in params.items():
        prefix = pname.split(".base_layer.")[0]
        a, b = params.get(f"{prefix}.lora_A.default.weight"), params.get(f"{prefix}.lora_B.default.weight")
        if ".base_layer." not in pname or a is None or b is None:
            continue
        full, fa, fb = _gather(param), _gather(a), _gather(b)
        if dist.get_rank() != 0:
            continue
        full = (full + scaling * (fb.float() @ fa.float())).to(dtype).contiguous()
        bucket.append((checkpoint_name(pname), full))
        size += full.numel() * full.element_size()
        if size >= bucket_bytes:
            yield bucket
            bucket, size = [], 0
    if bucket:
        yield bucket


def run_against(url: str, out: Path, lora: int = 0, model: Path | None = None, bucket_mib: int = 64) -> dict:
    """The worker on 2 torchrun ranks against the server at ``url``, which serves ``model`` (default the embedded
    SmolLM2), in buckets of ``bucket_mib``: what the server answered and how long each path took."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
    worker = [url, str(out), str(lora), str(model or embedded_model_dir()), str(bucket_mib << 20)]
    cmd = torchrun(2, out / "torchrun", ["-m", "tests.vllm_sync", *worker])
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0 or not (out / "result.json").exists():
        raise RuntimeError(f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return json.loads((out / "result.json").read_text())


if __name__ == "__main__":  # a torchrun worker
    run_rank(lambda: _worker(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])))
