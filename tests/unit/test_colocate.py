"""COLOCATE on CPU: the trainer's FSDP2 state parked in host memory and restored bit for bit on gloo, the turns in the
peers' order, the server command and the weight push as the colocated run sends them. (The real server's sleep routes
are exercised in tests/integration/test_colocate_server.py.)"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from qwen_swe.config.settings import Settings
from qwen_swe.errors import InferenceError, TrainerError
from qwen_swe.inference.client import InferenceClient
from qwen_swe.inference.serve_config import ServeConfig
from qwen_swe.inference.sleep import sleep_mode_of
from qwen_swe.inference.weight_sync import make_weight_sync
from qwen_swe.train.colocate import Colocation
from qwen_swe.train.offload import TrainerOffload, optimizer_state
from qwen_swe.train.policy import build_policy
from tests.tiny_model import tiny_model_dir


def _trainer(seed: int = 0):
    torch.manual_seed(seed)
    policy = build_policy(str(tiny_model_dir()), device=torch.device("cpu"))
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-3, weight_decay=0.0)
    return policy, opt


def _step(policy, opt, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(100, 5000, (2, 12), generator=gen)
    positions = torch.tensor([5, 6, 7, 8, 17, 18, 19, 20, 21, 22])
    logp, _ = policy(ids, None, positions, ids.reshape(-1)[positions + 1])
    (-logp.mean()).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _snapshot(policy, opt) -> list[torch.Tensor]:
    return [_local(p).clone() for p in policy.parameters()] + [_local(v).clone() for v in optimizer_state(opt)]


def test_offload_releases_the_state_and_restores_it_exactly(world_of_one):
    policy, opt = _trainer()
    _step(policy, opt, 1)
    before = _snapshot(policy, opt)
    off = TrainerOffload(opt, policy)
    released = off.offload_optimizer()
    assert released >= 2 * sum(_local(p).numel() * 4 for p in policy.parameters())  # two fp32 moments
    assert all(_local(v).untyped_storage().nbytes() == 0 for v in optimizer_state(opt))
    assert all(_local(p).untyped_storage().nbytes() > 0 for p in policy.parameters())  # still there for the push
    sizes = sum(_local(p).untyped_storage().nbytes() for p in policy.parameters())
    parameters = off.offload_parameters()
    assert parameters >= sizes  # and the buffers
    assert all(_local(p).untyped_storage().nbytes() == 0 for p in policy.parameters())
    with pytest.raises(TrainerError, match="already offloaded"):
        off.offload_parameters()
    assert off.reload() == released + parameters
    after = _snapshot(policy, opt)
    assert len(after) == len(before) and all(torch.equal(a, b) for a, b in zip(after, before))


def test_a_step_after_offload_and_reload_equals_one_without(world_of_one):
    kept, kept_opt = _trainer()
    moved, moved_opt = _trainer()
    off = TrainerOffload(moved_opt, moved)
    for seed in (1, 2, 3):
        _step(kept, kept_opt, seed)
        _step(moved, moved_opt, seed)
        off.offload_optimizer()
        off.offload_parameters()
        off.reload()
    assert all(torch.equal(a, b) for a, b in zip(_snapshot(kept, kept_opt), _snapshot(moved, moved_opt)))


class Recorder:
    """The server's sleep routes and the trainer's offload, as calls in one list."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def sleep(self) -> float:
        self.calls.append("server.sleep")
        return 0.0

    def wake_up(self, tags: tuple[str, ...] = ()) -> float:
        self.calls.append("server.wake_up " + ",".join(tags))
        return 0.0

    def offload_optimizer(self) -> int:
        self.calls.append("trainer.offload_optimizer")
        return 1

    def offload_parameters(self) -> int:
        self.calls.append("trainer.offload_parameters")
        return 1

    def reload(self) -> int:
        self.calls.append("trainer.reload")
        return 2


def test_the_turns_follow_the_peers_order(world_of_one):
    rec = Recorder()
    turns = Colocation(True, rec)
    turns.start()  # before the trainer allocates
    turns.attach(rec)  # type: ignore[arg-type]
    turns.to_rollouts(None)  # a fresh run: the server already serves the start weights
    turns.to_trainer()
    turns.to_trainer()  # idempotent: the trainer already holds the GPUs
    turns.to_rollouts(lambda: rec.calls.append("push"))
    assert rec.calls == [
        "server.sleep",
        "trainer.offload_optimizer",
        "server.wake_up weights",
        "trainer.offload_parameters",
        "server.wake_up kv_cache",
        "server.sleep",
        "trainer.reload",
        "trainer.offload_optimizer",
        "server.wake_up weights",
        "push",
        "trainer.offload_parameters",
        "server.wake_up kv_cache",
    ]
    assert set(turns.metrics()) == {
        "colocate/sleep_seconds",
        "colocate/reload_seconds",
        "colocate/offload_seconds",
        "colocate/wake_seconds",
    }
    with pytest.raises(TrainerError, match="while the trainer is offloaded"):
        turns.to_rollouts(None)


def test_without_colocate_only_the_push_runs(world_of_one):
    pushed: list[int] = []
    turns = Colocation(False, None)
    turns.start()
    turns.to_trainer()
    turns.to_rollouts(lambda: pushed.append(1))
    turns.to_rollouts(None)
    assert pushed == [1] and turns.metrics() == {}


def test_the_server_command_asks_for_sleep_mode_only_where_vllm_has_it():
    gpu = ServeConfig(model="Qwen/Qwen3-Coder-30B-A3B-Instruct", sleep_mode=True)
    assert "--enable-sleep-mode" in gpu.argv()
    assert "--enable-sleep-mode" not in dataclasses.replace(gpu, cpu=True).argv()  # the CPU build refuses the flag
    assert "--enable-sleep-mode" not in dataclasses.replace(gpu, sleep_mode=False).argv()


def test_the_server_info_says_whether_sleep_frees_gpu_memory():
    def info(device: str, flag: bool) -> dict:
        return {"vllm_config": {"device_config": {"device_type": device}, "model_config": {"enable_sleep_mode": flag}}}

    assert sleep_mode_of(info("cuda", True)) is True
    assert sleep_mode_of(info("cuda", False)) is False  # preflight refuses this server under COLOCATE
    assert sleep_mode_of(info("cpu", False)) is None  # nothing to release: the CPU build's routes only pause
    with pytest.raises(InferenceError, match="no vLLM config"):
        sleep_mode_of({"detail": "Not Found"})


def test_a_colocated_broadcast_goes_over_gloo(monkeypatch):
    """NCCL refuses two ranks of one group on the same GPU: the trainer's rank 0 and the server's first worker."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    settings = Settings.build(vllm_url="http://127.0.0.1:8000/v1", weight_sync="broadcast").inference
    client = InferenceClient("http://127.0.0.1:9")
    assert make_weight_sync(settings, client).backend == "nccl"
    assert make_weight_sync(settings, client, colocated=True).backend == "gloo"


def test_the_trainer_loop_takes_turns_with_the_server(world_of_one, tmp_path, monkeypatch):
    """The built-in trainer (world of one, gloo) under COLOCATE: the server sleeps before the trainer allocates; each
    rollout runs with the trainer's state in host memory; each step sleeps the server, reloads, trains, saves, parks
    the optimizer state, wakes the server's weights, pushes, parks the parameters, wakes the KV cache."""
    from qwen_swe.train import trainer
    from tests.integration.test_trainer_fsdp import FakeDriver

    rec, parked = Recorder(), []

    class RecordingOffload(TrainerOffload):
        def __init__(self, *args) -> None:
            super().__init__(*args)
            parked.append(self)

        def offload_optimizer(self) -> int:
            rec.calls.append("trainer.offload_optimizer")
            return super().offload_optimizer()

        def offload_parameters(self) -> int:
            rec.calls.append("trainer.offload_parameters")
            return super().offload_parameters()

        def reload(self) -> int:
            rec.calls.append("trainer.reload")
            return super().reload()

    class Driver(FakeDriver):
        def generate(self, step, weight_version):
            rec.calls.append(f"generate {step} v{weight_version} parked={parked[0].parameters.offloaded}")
            return super().generate(step, weight_version)

        def sync_weights(self, update):
            rec.calls.append(f"push v{update.version}")
            super().sync_weights(update)

    save = trainer._save
    monkeypatch.setattr(trainer, "TrainerOffload", RecordingOffload)
    monkeypatch.setattr(trainer, "_colocation", lambda settings: Colocation(settings.placement.colocate, rec))
    monkeypatch.setattr(trainer, "_save", lambda *a: (rec.calls.append(f"save {a[3]}"), save(*a)))
    settings = Settings.build(
        model=str(tiny_model_dir()),
        vllm_url="http://127.0.0.1:9",
        output_dir=tmp_path,
        num_rollouts=2,
        rollout_batch_size=2,
        n_samples=2,
        lr=1e-3,
        colocate=True,
    )
    last = trainer.train(settings, Driver(settings), model_path=settings.model_name)
    hand_back = ["trainer.offload_optimizer", "server.wake_up weights"]
    park = ["trainer.offload_parameters", "server.wake_up kv_cache"]
    assert rec.calls == (
        ["server.sleep"]
        + hand_back
        + park
        + ["generate 0 v0 parked=True", "server.sleep", "trainer.reload", "save 1"]
        + hand_back
        + ["push v1"]
        + park
        + ["generate 1 v1 parked=True", "server.sleep", "trainer.reload", "save 2"]
        + hand_back
        + ["push v2"]
        + park
    )
    assert last["weight_version"] == 2 and last["colocate/reload_seconds"] >= 0.0 and "time/swap" in last
