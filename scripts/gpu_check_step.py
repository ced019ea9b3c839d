"""scripts/gpu_check.sh's training stage, a torchrun worker: one FSDP2 step of the served model on NCCL (gloo with
``--device cpu``), its weights pushed into the running server by broadcast (WEIGHT_SYNC=broadcast's path), and
the server's log-probs of a fixed prompt before and after, which must have moved. Without ``--url`` only the step,
whose own log-probs of the target must rise (what runs on CPU). Rank 0 writes ``step.json`` (the stages' seconds,
the log-probs) into ``--out``; the exit code is 0 only if everything checked moved.

    torchrun --standalone --nproc_per_node=1 scripts/gpu_check_step.py --url http://127.0.0.1:8011/v1 --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

PROMPT = "The capital of France is"
TARGET = " a city of bridges and of bicycles."  # trained towards, so the server's answer moves
LR = 1e-3  # large on purpose: one step must move the served log-probs visibly
MOVED = 1e-3  # nats: smaller changes of the probe's log-probs count as unmoved (bf16 noise)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--url",
        default=None,
        help="the running server's OpenAI base URL (ends with /v1); without it, "
        "only the step (the CPU fallback: --device cpu)",
    )
    p.add_argument("--out", type=Path, required=True, help="folder for step.json")
    p.add_argument("--model", default=None, help="the model folder the server serves (default: the embedded one)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cuda = NCCL, cpu = gloo")
    p.add_argument(
        "--sync-backend",
        choices=("nccl", "gloo"),
        default=None,
        help="the broadcast group's backend; default nccl on cuda. NCCL refuses two ranks on one GPU, so a "
        "server on the trainer's GPU takes gloo",
    )
    return p.parse_args(argv)


def probe(client, model: str) -> dict:
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
    return {"token_ids": choice["token_ids"], "logprobs": choice["logprobs"]["token_logprobs"]}


def moved(before: dict, after: dict) -> bool:
    if before["token_ids"] != after["token_ids"]:
        return True
    return max(abs(a - b) for a, b in zip(before["logprobs"], after["logprobs"])) > MOVED


def train_step(model: str, device, lr: float = LR) -> dict:
    """One FSDP2 step that raises the log-probs of TARGET after PROMPT; returns the policy and their mean before
    and after (collective: every rank calls it)."""
    import torch
    from transformers import AutoTokenizer

    from qwen_swe.train.policy import build_policy, make_micro_batch

    policy = build_policy(model, device=device, weight_loading="meta")
    tok = AutoTokenizer.from_pretrained(model)
    prompt, target = tok(PROMPT)["input_ids"], tok(TARGET, add_special_tokens=False)["input_ids"]
    mb = make_micro_batch([{"tokens": prompt + target, "response_length": len(target)}], device)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr)
    logprobs, _ = policy(mb.input_ids, mb.attention_mask, mb.positions, mb.targets)
    (-logprobs.mean()).backward()
    optimizer.step()
    with torch.no_grad():
        after, _ = policy(mb.input_ids, mb.attention_mask, mb.positions, mb.targets)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return {"policy": policy, "before": logprobs.mean().item(), "after": after.mean().item()}


def main(argv: list[str]) -> int:
    args = parse(argv)
    import torch
    import torch.distributed as dist

    from qwen_swe.inference.broadcast import BroadcastSync
    from qwen_swe.inference.client import InferenceClient
    from qwen_swe.paths import embedded_model_dir
    from qwen_swe.train.streaming import weight_buckets

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print(
            "gpu_check_step: --device cuda but torch sees no CUDA GPU (is .venv's torch the CUDA build? "
            "bash scripts/setup.sh --gpu)",
            file=sys.stderr,
        )
        return 2
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    client = InferenceClient(args.url, timeout=300) if args.url and rank == 0 else None
    served = client.models()[0] if client else ""
    report: dict = {"backend": "nccl" if cuda else "gloo", "seconds": {}}
    report["server_before"] = probe(client, served) if client else None

    t0 = time.monotonic()
    step = train_step(args.model or str(embedded_model_dir()), device)
    report["seconds"]["fsdp_step"] = time.monotonic() - t0
    report["logprob_before"], report["logprob_after"] = step["before"], step["after"]
    ok = step["after"] > step["before"]

    if args.url:
        t0 = time.monotonic()
        report["sync_backend"] = args.sync_backend or report["backend"]
        sync = BroadcastSync(client, host="127.0.0.1", port=0, backend=report["sync_backend"]) if client else None
        if sync:
            sync.connect()
        dist.barrier()
        stream = weight_buckets(step["policy"], 64 << 20, torch.bfloat16)  # collective: rank 0 sends
        report["sync"] = sync.push(stream, 1) if sync else [None for _ in stream]
        report["seconds"]["broadcast"] = time.monotonic() - t0
        if sync:
            report["server_after"] = probe(client, served)
            report["server_moved"] = moved(report["server_before"], report["server_after"])
            ok = ok and report["server_moved"]
            sync.close()
    if rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "step.json").write_text(json.dumps({**report, "ok": ok}, indent=2))
        served_text = (
            ""
            if not args.url
            else (
                f"; broadcast {report['seconds']['broadcast']:.1f} s, the server's "
                f"log-probs {'moved' if report['server_moved'] else 'did NOT move'}"
            )
        )
        print(
            f"fsdp step on {report['backend']} {report['seconds']['fsdp_step']:.1f} s, target log-prob "
            f"{step['before']:.3f} -> {step['after']:.3f}{served_text}"
        )
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
