"""WEIGHT_SYNC=broadcast against the real vLLM CPU server (gloo between the trainer and its worker), and the same
call sequence against a loopback stand-in of the server (runs everywhere, also stands in for the GPU path).

The real server's worker is tests/vllm_sync.py (the weight-sync benchmark runs it too); run as a module
(``-m tests.integration.test_broadcast_sync publish OUT LORA``) this file is the torchrun worker of the trainer's
``publish`` into the stand-in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qwen_swe.paths import REPO_ROOT
from qwen_swe.supervise import run_rank, torchrun
from tests.vllm_sync import run_against

# --- the real vLLM CPU server --------------------------------------------------------------------------------


def _projections(config: dict) -> list[tuple[int, int]]:
    """(in, out) of each linear layer of one decoder layer ("all-linear" LoRA's targets): q, k, v, o, gate, up, down."""
    h, i, d = config["hidden_size"], config["intermediate_size"], config["head_dim"]
    q, kv = config["num_attention_heads"] * d, config["num_key_value_heads"] * d
    return [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]


@pytest.mark.vllm
@pytest.mark.slow
def test_broadcast_serves_exactly_what_the_disk_reload_serves(tmp_path):
    """On the tiny SmolLM2 (the real model's sizes are the weight-sync benchmark's), in 4 MiB buckets so that the
    full weights take several."""
    from safetensors.torch import load_file

    from qwen_swe.config import settings as config
    from qwen_swe.config.hardware import served_dtype
    from qwen_swe.inference.embedded_server import embedded_server
    from tests.tiny_model import tiny_smollm2_dir

    model = tiny_smollm2_dir()
    settings = config.load_settings([], env={"WEIGHT_SYNC": "broadcast"})
    with embedded_server(settings, log_dir=tmp_path / "logs", model_dir=model) as url:  # it needs the extension
        full = run_against(url, tmp_path / "full", model=model, bucket_mib=4)
        lora = run_against(url, tmp_path / "lora", lora=4, model=model, bucket_mib=4)
    for r in (full, lora):
        assert r["disk"] != r["before"] and r["restored"] == r["before"]  # the change is visible, and reversible
        assert r["broadcast"] == r["disk"]  # same token ids and logprobs as the disk path, to the last bit
        assert r["after_restore"] == r["before"]
        assert r["version"] == 3
    assert full["metrics"]["sync/broadcast_buckets"] >= 2 and lora["metrics"]["sync/broadcast_buckets"] == 1
    width = 2 if served_dtype() == "bfloat16" else 4  # the server's dtype: fp32 on a CPU without bf16
    parameters = sum(t.numel() for t in load_file(str(model / "model.safetensors")).values())  # tied: saved once
    assert full["metrics"]["sync/broadcast_bytes"] == parameters * width  # every parameter once
    # LoRA: only the rank-4 adapters, fp32 (A: 4 x in, B: out x 4 per projection), which the worker merges itself
    # into its base weights: the same answers as the layers merged on the trainer (in x out per projection)
    cfg = json.loads((model / "config.json").read_text())
    layers, projections = cfg["num_hidden_layers"], _projections(cfg)
    assert lora["metrics"]["sync/broadcast_bytes"] == layers * sum(4 * (i + o) for i, o in projections) * 4
    assert lora["merged_metrics"]["sync/broadcast_bytes"] == layers * sum(i * o for i, o in projections) * width
    assert lora["merged"] == lora["disk"] == lora["broadcast"]


# --- the same call sequence against a loopback stand-in of the server -------------------------------------------


class _StandIn:
    """The vLLM routes the sync uses, served over HTTP on loopback, dispatching ``collective_rpc`` to the real
    ``BroadcastWorkerExtension`` whose model runner records what ``reload_weights`` was fed."""

    def __init__(self, fail_reload: str = "", model: Path | None = None) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from types import SimpleNamespace

        from qwen_swe.inference.broadcast_worker import BroadcastWorkerExtension

        calls, loaded = self.calls, self.loaded = [], {}

        class Runner:
            def reload_weights(self, weights_iterator, is_checkpoint_format):
                for name, tensor in weights_iterator:
                    loaded[name] = tensor.clone()
                    if fail_reload == "first":
                        raise RuntimeError("bad tensor in the worker")
                if fail_reload == "end":
                    raise RuntimeError("reload failed in the worker")

        worker = BroadcastWorkerExtension()
        worker.rank, worker.model_runner = 0, Runner()
        worker.model_config = SimpleNamespace(model=str(model), dtype=torch.bfloat16)  # what vLLM's worker has

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                route = self.path.split("?")[0]
                calls.append(route if route != "/collective_rpc" else body["method"])
                status, out = 200, {}
                if route == "/collective_rpc":
                    try:
                        out = {"results": [getattr(worker, body["method"])(*body.get("args", []))]}
                    except Exception as exc:  # noqa: BLE001 - reported as vLLM does, HTTP 500
                        status, out = 500, {"error": {"message": str(exc)}}
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _buckets() -> list[list[tuple[str, torch.Tensor]]]:
    g = torch.Generator().manual_seed(0)
    return [
        [
            ("model.embed_tokens.weight", torch.randn(50, 8, generator=g).to(torch.bfloat16)),
            ("model.norm.weight", torch.randn(8, generator=g).to(torch.bfloat16)),
        ],
        [("model.layers.0.mlp.experts.3.up_proj.weight", torch.randn(4, 8, generator=g))],
    ]


def _sync(stand_in: _StandIn, backend: str = "gloo"):
    from qwen_swe.inference.broadcast import BroadcastSync
    from qwen_swe.inference.client import InferenceClient

    return BroadcastSync(
        InferenceClient(stand_in.url, timeout=30), host="127.0.0.1", port=0, backend=backend, timeout=60
    )


def _check_sequence(backend: str) -> None:
    stand_in = _StandIn()
    sync = _sync(stand_in, backend)
    try:
        sent = _buckets()
        metrics = sync.push(iter(sent), 1)
        sync.push(iter(sent), 2)
        sync.close()
    finally:
        stand_in.close()
    assert stand_in.calls == [
        "qwen_swe_join",  # the group is formed once, then each sync is paused around
        "/pause",
        "qwen_swe_receive",
        "/reset_prefix_cache",
        "/resume",
        "/pause",
        "qwen_swe_receive",
        "/reset_prefix_cache",
        "/resume",
        "qwen_swe_leave",
    ]
    want = dict(t for bucket in sent for t in bucket)
    assert stand_in.loaded.keys() == want.keys()
    assert all(
        stand_in.loaded[k].dtype == v.dtype and torch.equal(stand_in.loaded[k].cpu(), v) for k, v in want.items()
    )
    assert metrics["sync/broadcast_buckets"] == 2
    assert sync.client.weight_version.version == 2


def test_call_sequence_and_bytes_against_a_loopback_stand_in():
    _check_sequence("gloo")


@pytest.mark.gpu
def test_call_sequence_over_nccl_against_a_loopback_stand_in():
    _check_sequence("nccl")


def test_a_failed_reload_still_resumes_the_server_and_names_the_step():
    from qwen_swe.errors import WeightSyncError

    stand_in = _StandIn(fail_reload="end")
    try:
        with pytest.raises(WeightSyncError, match="qwen_swe_receive"):
            _sync(stand_in).push(iter(_buckets()), 1)
    finally:
        stand_in.close()
    assert stand_in.calls[-1] == "/resume"


def test_a_worker_failing_mid_stream_takes_the_rest_so_no_send_waits_and_the_next_sync_rejoins():
    """The worker's reload fails at the first tensor of 50 buckets: it takes the other buckets to the end mark before
    it answers, so the trainer's every send is met (an unmet one holds the trainer for the group's timeout)."""
    from qwen_swe.errors import WeightSyncError

    stand_in = _StandIn(fail_reload="first")
    sync = _sync(stand_in)
    many = [[(f"w{i}", torch.full((4,), float(i)))] for i in range(50)]
    try:
        for version in (1, 2):
            stream = iter(many)
            with pytest.raises(WeightSyncError, match="bad tensor"):
                sync.push(stream, version)
            assert next(stream, None) is None, "the trainer stopped sending: a send was left unmet"
            assert sync.group is None  # forgotten: a failed sync forms a new group next time
            assert stand_in.calls[-1] == "/resume"
            if version == 1:
                stand_in.calls.clear()
    finally:
        stand_in.close()
    assert stand_in.calls[:2] == ["qwen_swe_join", "/pause"]


def test_a_trainer_side_failure_ends_the_stream_and_resumes():
    stand_in = _StandIn()

    def broken():
        yield _buckets()[0]
        raise RuntimeError("gather failed")

    try:
        with pytest.raises(RuntimeError, match="gather failed"):
            _sync(stand_in).push(broken(), 1)
    finally:
        stand_in.close()
    assert stand_in.calls[-2:] == ["qwen_swe_receive", "/resume"]  # the end mark freed the worker; no cache reset
    assert "model.embed_tokens.weight" in stand_in.loaded


def test_a_folder_is_broadcast_from_its_files(tmp_path):
    """slime's converted checkpoints (and any HF folder) go out the same way, read one tensor at a time."""
    from safetensors.torch import save_file

    tensors = {"a.weight": torch.randn(64, 64), "b.weight": torch.randn(3)}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    stand_in = _StandIn()
    try:
        sync = _sync(stand_in)
        sync.bucket_bytes = 1  # one tensor per bucket
        assert sync.push(tmp_path, 1)["sync/broadcast_buckets"] == 2
    finally:
        stand_in.close()
    assert all(torch.equal(stand_in.loaded[k], v.to(torch.bfloat16)) for k, v in tensors.items())


def _adapter(module: str, base: torch.Tensor, seed: int):
    from qwen_swe.inference.broadcast_worker import LoraAdapter

    g = torch.Generator().manual_seed(seed)
    out, inp = base.shape
    return LoraAdapter(module, torch.randn(4, inp, generator=g), torch.randn(out, 4, generator=g), 4.0)


def test_lora_adapters_are_merged_from_the_base_every_time_no_drift():
    """Each sync merges into the base weight read from the server's folder, never onto the previous merge."""
    from safetensors import safe_open

    from tests.tiny_model import tiny_model_dir

    model = tiny_model_dir()
    names = ["model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"]
    with safe_open(str(model / "model.safetensors"), framework="pt") as fh:
        base = {n: fh.get_tensor(n + ".weight") for n in names}
    stand_in = _StandIn(model=model)
    sync = _sync(stand_in)
    try:
        for seed in (1, 2):
            adapters = [_adapter(n, base[n], seed + i) for i, n in enumerate(names)]
            metrics = sync.push(iter([adapters[:1], adapters[1:]]), seed)
            for ad in adapters:  # what train.policy.merge_lora writes, in the served dtype
                want = (base[ad.module] + 4.0 * (ad.b.float() @ ad.a.float())).to(torch.bfloat16)
                assert torch.equal(stand_in.loaded[ad.module + ".weight"], want)
            assert metrics["sync/broadcast_bytes"] == sum((a.a.numel() + a.b.numel()) * 4 for a in adapters)
        sync.close()
    finally:
        stand_in.close()


def test_a_base_tensor_missing_from_the_server_folder_is_a_clear_error(tmp_path):
    from safetensors.torch import save_file

    from qwen_swe.errors import WeightSyncError

    save_file({"model.layers.0.self_attn.q_proj.weight": torch.zeros(8, 8)}, str(tmp_path / "model.safetensors"))
    stand_in = _StandIn(model=tmp_path)
    try:
        with pytest.raises(WeightSyncError, match="has no base tensor 'model.layers.0.mlp.up_proj.weight'"):
            _sync(stand_in).push(iter([[_adapter("model.layers.0.mlp.up_proj", torch.zeros(8, 8), 0)]]), 1)
    finally:
        stand_in.close()
    assert stand_in.loaded == {} and stand_in.calls[-1] == "/resume"  # nothing fed to the reload


def test_fused_experts_go_out_under_per_expert_names():
    from qwen_swe.train.streaming import hf_tensors

    full = torch.arange(2 * 6 * 3, dtype=torch.float32).view(2, 6, 3)  # [E, 2I, H]
    out = dict(hf_tensors("model.layers.1.mlp.experts.gate_up_proj", full))
    assert torch.equal(out["model.layers.1.mlp.experts.1.gate_proj.weight"], full[1, :3])
    assert torch.equal(out["model.layers.1.mlp.experts.1.up_proj.weight"], full[1, 3:])
    down = dict(hf_tensors("model.layers.1.mlp.experts.down_proj", full))
    assert list(down) == [f"model.layers.1.mlp.experts.{e}.down_proj.weight" for e in range(2)]


def _publish_worker(out: Path, lora: int) -> None:
    """torchrun worker: the trainer's ``publish`` on 2 gloo ranks into the stand-in (rank 0 hosts it)."""
    import torch.distributed as dist

    from qwen_swe.config.settings import Settings
    from qwen_swe.train.policy import build_policy, full_state_dict
    from qwen_swe.train.publish import WeightExporter, publish
    from tests.tiny_model import tiny_model_dir

    dist.init_process_group("gloo")
    rank, model = dist.get_rank(), str(tiny_model_dir())  # built by the parent: the ranks only read it
    settings = Settings.build(
        vllm_url="http://127.0.0.1:9",
        model=model,
        output_dir=out,
        weight_sync="broadcast",
        broadcast_bucket_mb=4,
        lora_rank=lora,
    )
    torch.manual_seed(0)
    policy = build_policy(model, device=torch.device("cpu"), lora_rank=lora)
    if lora:
        with torch.no_grad():  # a trained adapter: B is not zero
            for name, p in policy.named_parameters():
                if ".lora_B." in name:
                    p.to_local().normal_()
    stand_in = _StandIn(model=Path(model)) if rank == 0 else None

    class Driver:  # the rollout driver's sync side, as RolloutDriver does it
        sync = _sync(stand_in) if rank == 0 else None

        def sync_weights(self, update):
            self.metrics = self.sync.push(update.payload, update.version)

    driver = Driver() if rank == 0 else None
    exporter = WeightExporter(out, model, policy)
    publish(settings, driver, policy, exporter, 1)
    sd = full_state_dict(policy)
    named = dict(policy.named_parameters())  # global shapes (DTensor)
    adapter_bytes = sum(p.numel() * 4 for n, p in named.items() if ".lora_" in n)  # fp32 A and B
    merged_bytes = sum(
        named[n.replace(".lora_A.default.", ".base_layer.")].numel() * 2  # the merged layers in bf16
        for n in named
        if ".lora_A." in n
    )
    folders = sorted(p.name for p in out.glob("weights/*"))  # before the disk export below: broadcast wrote none
    disk = exporter.export(2) if lora else None  # the disk path's merge, for comparison
    if rank == 0:
        stand_in.close()
        from safetensors.torch import load_file

        base = load_file(str(Path(model) / "model.safetensors"))  # the weights before the adapter
        want = {k: v.to(torch.bfloat16) for k, v in sd.items() if k != "lm_head.weight"}  # tied to the embedding
        if lora:  # only the adapted linears change; the frozen rest is not sent
            want = {k: v for k, v in want.items() if k.endswith("proj.weight")}
        got = stand_in.loaded
        served = load_file(str(disk / "model.safetensors")) if disk else {}  # as vLLM casts it: to bf16
        (out / "publish.json").write_text(
            json.dumps(
                {
                    "calls": stand_in.calls,
                    "keys_equal": sorted(got) == sorted(want),
                    "values_equal": all(torch.equal(got[k], want[k]) for k in want if k in got),
                    "disk_equal": all(torch.equal(got[k], served[k].to(torch.bfloat16)) for k in got) if disk else None,
                    "buckets": driver.metrics["sync/broadcast_buckets"],
                    "folders": folders,
                    "sent": len(got),
                    "bytes": driver.metrics["sync/broadcast_bytes"],
                    "adapter_bytes": adapter_bytes,
                    "merged_bytes": merged_bytes,
                    "changed_by_lora": sum(
                        not torch.equal(got[k], v.to(torch.bfloat16)) for k, v in base.items() if k in got
                    ),
                }
            )
        )
    dist.destroy_process_group()


def _publish(out: Path, lora: int = 0) -> dict:
    from tests.tiny_model import tiny_model_dir

    tiny_model_dir()  # once, here: two ranks building it at the same time race on the rename
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
    cmd = torchrun(2, out / "torchrun", ["-m", "tests.integration.test_broadcast_sync", "publish", str(out), str(lora)])
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-6000:]
    r = json.loads((out / "publish.json").read_text())
    assert r["calls"] == ["qwen_swe_join", "/pause", "qwen_swe_receive", "/reset_prefix_cache", "/resume"]
    assert r["keys_equal"] and r["values_equal"] and r["folders"] == []  # what the disk export holds; no disk
    return r


def test_trainer_publish_streams_every_weight_from_two_ranks(tmp_path):
    r = _publish(tmp_path)
    assert r["buckets"] == 2 and r["changed_by_lora"] == 0  # the 19 MB embedding, then the rest


def test_trainer_publish_with_lora_sends_only_the_adapters_and_the_worker_merges_them(tmp_path):
    r = _publish(tmp_path, lora=4)
    assert r["bytes"] == r["adapter_bytes"] < r["merged_bytes"] / 4  # A and B in fp32, nothing else
    # the worker's reload was fed the merged layers, as before: q, k, v, o, gate, up, down of both layers
    assert r["sent"] == 2 * 7 and r["changed_by_lora"] == r["sent"]
    assert r["disk_equal"]  # bit for bit what the disk export (WeightExporter) serves in bf16


# --- the whole trainer with WEIGHT_SYNC=broadcast ---------------------------------------------------------------


def make_broadcast_driver(settings):
    """The trainer tests' synthetic driver whose server is the loopback stand-in, fed by broadcast: its rollout
    log-probs come from exactly the weights the stand-in's worker received."""
    from tests.integration.test_trainer_fsdp import FakeDriver

    class BroadcastDriver(FakeDriver):
        def __init__(self, settings) -> None:
            super().__init__(settings)
            self.stand_in = _StandIn()
            self.sync = _sync(self.stand_in)

        def sync_weights(self, update) -> None:
            self._event(kind="sync", version=update.version, folder=None)
            self.sync.push(update.payload, update.version)
            received = {k: v.float() for k, v in self.stand_in.loaded.items()}
            missing, unexpected = self.model.load_state_dict(received, strict=False)
            assert not unexpected, unexpected

        def close(self) -> None:
            self.stand_in.close()

    return BroadcastDriver(settings)


def _train_broadcast(out: Path, steps: int) -> None:
    from qwen_swe.config.settings import Settings
    from tests.tiny_model import tiny_model_dir

    settings = Settings.build(
        model=str(tiny_model_dir()),
        vllm_url="http://127.0.0.1:9",
        output_dir=out,
        num_rollouts=steps,
        rollout_batch_size=3,
        n_samples=2,
        lr=1e-3,
        weight_sync="broadcast",
        broadcast_dtype="float32",
        broadcast_bucket_mb=1,
        weight_loading="meta",
    )
    path = settings.write(out)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
    cmd = torchrun(2, out / "torchrun", ["-m", "tests.fake_trainer", "broadcast", "--settings", str(path)])
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-6000:]


def test_trainer_trains_on_the_weights_it_broadcast_and_resumes(tmp_path):
    out = tmp_path / "run"
    _train_broadcast(out, steps=2)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["weight_version"] for r in rows] == [1, 2]
    # step 2 was sampled from what the stand-in received after step 1: exactly the trained policy
    assert abs(rows[1]["ratio_mean"] - 1) < 1e-5 and rows[1]["approx_kl"] < 1e-6
    assert not (out / "weights").exists()  # no HF folder on disk
    _train_broadcast(out, steps=3)  # resume: the checkpoint's weights go out first, then step 3 on them
    events = [json.loads(line) for line in (out / "driver_events.jsonl").read_text().splitlines()]
    kinds = [(e["kind"], e.get("version")) for e in events]
    assert kinds[-4:] == [("load_state", None), ("sync", 2), ("generate", 2), ("sync", 3)]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert abs(rows[-1]["ratio_mean"] - 1) < 1e-5


if __name__ == "__main__":  # a torchrun worker
    run_rank(lambda: _publish_worker(Path(sys.argv[2]), int(sys.argv[3])))
