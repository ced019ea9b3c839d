"""slime checkpoint -> HF folder -> vLLM, without slime: a checkpoint in slime v0.2.2's FSDP layout is written
by torch.distributed.checkpoint from an FSDP2 model on 2 gloo ranks (this file is also the torchrun worker),
converted by ``qwen_swe.backends.slime.convert``, compared tensor by tensor with the weights that were saved,
and (marker vllm) reloaded into the embedded vLLM server, whose greedy output must change."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qwen_swe import paths
from qwen_swe.backends.slime.checkpoints import list_checkpoints, newest_checkpoint
from qwen_swe.backends.slime.convert import convert_checkpoint
from qwen_swe.backends.slime.weights import SlimeWeightSync
from qwen_swe.errors import WeightSyncError
from qwen_swe.inference.server import free_port
from qwen_swe.supervise import run_rank, torchrun

PERTURBED = "mlp.down_proj.weight"  # the worker flips the sign of these before saving


def perturb(named_params) -> int:
    """The known change the worker applies before saving: every MLP down-projection negated."""
    import torch

    n = 0
    with torch.no_grad():
        for name, tensor in named_params:
            if name.endswith(PERTURBED):
                tensor.mul_(-1.0)
                n += 1
    return n


def write_slime_checkpoint(hf_dir: Path, save_dir: Path, rollout_id: int, *, optimizer: bool) -> Path:
    """Run this file under torchrun (2 gloo ranks); returns the iteration folder it wrote."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(paths.REPO_ROOT)}
    rendezvous = ["--master-addr", "127.0.0.1", "--master-port", str(port)]
    writer = [__file__, "--hf", str(hf_dir), "--save", str(save_dir), "--rollout-id", str(rollout_id)]
    writer += ["--optimizer"] if optimizer else []
    cmd = torchrun(2, save_dir.with_name(save_dir.name + "-torchrun"), [*rendezvous, *writer], standalone=False)
    done = subprocess.run(cmd, env=env, cwd=paths.REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"torchrun writer failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return save_dir / f"iter_{rollout_id + 1:07d}"


def expected_state(hf_dir: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32)
    assert perturb(model.named_parameters()) > 0
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def tiny_hf():
    from tests.tiny_model import tiny_model_dir

    return tiny_model_dir()


def test_checkpoint_in_slime_layout_converts_to_the_saved_weights(tmp_path, tiny_hf):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    save = tmp_path / "run"
    it = write_slime_checkpoint(tiny_hf, save, rollout_id=0, optimizer=True)
    # slime v0.2.2's layout, as its FSDP checkpoint.save writes it
    assert (save / "latest_checkpointed_iteration.txt").read_text() == "1"
    assert (it / "model" / ".metadata").is_file() and (it / "optimizer" / ".metadata").is_file()
    meta = json.loads((it / "meta.json").read_text())
    assert (meta["iteration"], meta["rollout_id"], meta["next_rollout_id"], meta["world_size"]) == (1, 0, 1, 2)
    assert [c.iteration for c in list_checkpoints(save)] == [1]

    out = convert_checkpoint(it / "model", tiny_hf, tmp_path / "hf", shard_bytes=8 << 20)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 1, "a small shard size must produce several shards"
    got = {}
    for name in files:
        got.update(load_file(str(out / name)))
    want = expected_state(tiny_hf)
    assert "lm_head.weight" not in got, "tied embeddings are stored once, as in the HF folder"
    assert set(got) == set(want) - {"lm_head.weight"}
    for key, tensor in want.items():
        if key in got:
            assert got[key].dtype == tensor.dtype and torch.equal(got[key], tensor), key
    for aux in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (out / aux).read_bytes() == (tiny_hf / aux).read_bytes()

    reloaded = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).state_dict()
    assert all(torch.equal(reloaded[k], v) for k, v in want.items())


def test_version_guard_refuses_stale_weights_and_accepts_the_base_model_for_rollout_0(tmp_path, tiny_hf):
    class NeverCalled:
        def push(self, folder, version):  # pragma: no cover - reaching this is the failure
            raise AssertionError(f"push({folder}, {version}) must not be called here")

    sync = SlimeWeightSync(tmp_path / "run", str(tiny_hf), NeverCalled())
    assert sync.before_rollout(0) == 0, "rollout 0 runs on the base model"
    with pytest.raises(WeightSyncError, match=r"rollout 1 .*iter_0000001.* is missing.*--save-interval 1"):
        sync.before_rollout(1)

    write_slime_checkpoint(tiny_hf, tmp_path / "run", rollout_id=0, optimizer=False)
    with pytest.raises(WeightSyncError, match=r"iter_0000002.*the newest is iter_0000001"):
        sync.before_rollout(2)
    # an unfinished save (no tracker bump yet) is not a checkpoint
    partial = tmp_path / "run" / "iter_0000002" / "model"
    partial.mkdir(parents=True)
    (partial / ".metadata").write_bytes(b"")
    assert newest_checkpoint(tmp_path / "run").iteration == 1


@pytest.mark.vllm
def test_converted_checkpoint_reloads_into_the_embedded_server(tmp_path, embedded_vllm):
    from qwen_swe.inference.client import InferenceClient
    from qwen_swe.inference.weight_sync import PathReload

    base = paths.embedded_model_dir()
    client = embedded_vllm if hasattr(embedded_vllm, "reload_weights") else InferenceClient(str(embedded_vllm))
    save = tmp_path / "run"
    write_slime_checkpoint(base, save, rollout_id=0, optimizer=False)

    def greedy() -> str:
        served = client.models()[0]
        body = client.post(
            "/v1/completions",
            {"model": served, "prompt": "The capital of France is", "max_tokens": 12, "temperature": 0.0},
        )
        return body["choices"][0]["text"]

    before = greedy()
    try:
        version = SlimeWeightSync(save, str(base), PathReload(client)).before_rollout(1)
        assert version == 1
        assert (save / "hf_export" / "iter_0000001" / "model.safetensors").is_file()
        after = greedy()
        assert after != before, "the reloaded (sign-flipped MLP) weights must change the greedy output"
    finally:
        client.reload_weights(str(base))
    assert greedy() == before, "reloading the base folder restores the original output"


@pytest.mark.vllm
def test_launcher_accepts_a_server_with_the_reload_routes(tmp_path, embedded_vllm):
    from qwen_swe.backends.slime.launcher import check_server
    from qwen_swe.config.settings import Settings

    problems, _ = check_server(Settings.build(vllm_url=str(embedded_vllm), output_dir=tmp_path))
    assert problems == [], "the embedded server runs with VLLM_SERVER_DEV_MODE=1, so it takes new weights"


# ------------------------------------------------------------------------------------------------
# torchrun worker: an FSDP2 model saved exactly in slime v0.2.2's FSDP checkpoint layout
# ------------------------------------------------------------------------------------------------


def _worker(argv: list[str]) -> None:
    import time

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.checkpoint.stateful import Stateful
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    p = argparse.ArgumentParser()
    p.add_argument("--hf", required=True)
    p.add_argument("--save", required=True)
    p.add_argument("--rollout-id", type=int, required=True)
    p.add_argument("--optimizer", action="store_true")
    a = p.parse_args(argv)

    class Wrapped(Stateful):  # slime's ModelState / OptimizerState: {"model": sd} / {"optim": osd}
        def __init__(self, key, fn):
            self.key, self.fn = key, fn

        def state_dict(self):
            return {self.key: self.fn()}

        def load_state_dict(self, state_dict):  # pragma: no cover - saving only
            raise NotImplementedError

    dist.init_process_group("gloo")
    try:
        rank = dist.get_rank()
        model = AutoModelForCausalLM.from_pretrained(a.hf, dtype=torch.float32)
        perturb(model.named_parameters())
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        optim = torch.optim.AdamW(model.parameters(), lr=0.0) if a.optimizer else None

        step = a.rollout_id + 1
        it = Path(a.save) / f"iter_{step:07d}"
        if rank == 0:
            for sub in ("model", "optimizer", "lr_scheduler"):
                (it / sub).mkdir(parents=True, exist_ok=True)
        dist.barrier()
        dcp.save(
            {"model_state": Wrapped("model", lambda: get_state_dict(model, optimizers=[])[0])},
            checkpoint_id=str(it / "model"),
        )
        if optim is not None:
            dcp.save(
                {"optim_state": Wrapped("optim", lambda: get_state_dict(model, optimizers=optim)[1])},
                checkpoint_id=str(it / "optimizer"),
            )
        if rank == 0:
            torch.save({"torch": torch.get_rng_state()}, it / "rng.pt")
            meta = {
                "iteration": step,
                "rollout_id": a.rollout_id,
                "next_rollout_id": a.rollout_id + 1,
                "global_step": step,
                "micro_step": step,
                "world_size": dist.get_world_size(),
                "timestamp": time.time(),
            }
            (it / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
            (Path(a.save) / "latest_checkpointed_iteration.txt").write_text(str(step))
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":  # a torchrun worker
    run_rank(lambda: _worker(sys.argv[1:]))
