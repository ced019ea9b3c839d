"""The FSDP2 trainer on 2 gloo ranks under torchrun, with the tiny Qwen3 and a synthetic rollout driver.

The driver below is our own interface's test double (not an external system): deterministic samples with
rewards, and rollout log-probs computed from the weights it was last synced with. So a KL of ~0 at every
step proves the exported HF folder holds exactly the weights the trainer has.

Run as a module (``-m tests.integration.test_trainer_fsdp roundtrip DIR``) it is also the torchrun worker
of the checkpoint round-trip test.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import Sample
from qwen_swe.paths import REPO_ROOT, embedded_model_dir
from qwen_swe.rollout.contract import WeightUpdate
from qwen_swe.supervise import run_rank, torchrun
from tests.tiny_model import tiny_model_dir


class FakeDriver:
    """Deterministic groups; instance 2, 5, 8, ... has flat rewards (a zero-variance group)."""

    def __init__(self, settings: Settings, flat: bool = False) -> None:
        self.settings, self.flat, self.position = settings, flat, 0
        self.events = Path(settings.output_dir) / "driver_events.jsonl"
        self._load(settings.model_name)

    def _load(self, path: str | Path) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()

    def _event(self, **kw) -> None:
        self.events.parent.mkdir(parents=True, exist_ok=True)
        with self.events.open("a") as fh:
            fh.write(json.dumps({**kw, "t": time.time()}) + "\n")

    def generate(self, step: int, weight_version: int) -> tuple[list[Sample], dict]:
        self._event(kind="generate", step=step, version=weight_version, position=self.position)
        out = self._batch(self.position, weight_version, self.model)
        self.position += self.settings.rollout_batch_size
        return out, {"rollout/dropped_samples": 1, "rollout/groups_kept": self.settings.rollout_batch_size}

    def _batch(self, position: int, weight_version: int, model) -> list[Sample]:
        s, out = self.settings, []
        for g in range(s.rollout_batch_size):
            inst = position + g
            for i in range(s.n_samples):
                rng = random.Random(inst * 1000 + i)
                p, r = rng.randint(4, 9), rng.randint(4, 12)
                tokens = [rng.randrange(100, 5000) for _ in range(p + r)]
                reward = -1.0 if self.flat or inst % 3 == 2 else float(i % 2) * 2 - 1
                with torch.no_grad():
                    logits = model(torch.tensor([tokens])).logits[0].float()
                lp = torch.log_softmax(logits, -1)[p - 1 : p + r - 1].gather(-1, torch.tensor(tokens[p:])[:, None])
                out.append(
                    Sample(
                        group_index=inst,
                        index=inst * s.n_samples + i,
                        tokens=tokens,
                        response_length=r,
                        loss_mask=[0 if j == 1 else 1 for j in range(r)],
                        rollout_log_probs=lp[:, 0].tolist(),
                        reward=reward,
                        metadata={
                            "instance_id": f"fake-{inst}",
                            "weight_version": weight_version,
                            "resolved": reward > 0,
                        },
                    )
                )
        return out

    def sync_weights(self, update: WeightUpdate) -> None:
        self._event(kind="sync", version=update.version, folder=str(update.folder))
        self._load(update.folder)

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self._event(kind="load_state", state=state)
        self.position = state["position"]

    def close(self) -> None:
        pass


class SleepyDriver(FakeDriver):
    """MAX_STALENESS >= 1: each batch is made in a background thread that first sleeps (a slow rollout), from the
    weights served when it was submitted; its checkpointed position is the oldest batch in flight's."""

    SLEEP = 4.0

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.in_flight: dict[int, tuple[int, threading.Thread, list]] = {}

    def submit(self, step: int, weight_version: int) -> None:
        position, model, box = self.position, self.model, []
        self.position += self.settings.rollout_batch_size
        self._event(kind="submit", step=step, version=weight_version, position=position)

        def work() -> None:
            t0 = time.time()
            time.sleep(self.SLEEP)
            box.append(self._batch(position, weight_version, model))
            self._event(kind="generated", step=step, start=t0)

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        self.in_flight[step] = (position, thread, box)

    def collect(self, step: int) -> tuple[list[Sample], dict]:
        _, thread, box = self.in_flight.pop(step)
        thread.join()
        self._event(kind="collect", step=step)
        return box[0], {"rollout/groups_kept": self.settings.rollout_batch_size}

    def state_dict(self) -> dict:
        return {"position": min(p for p, _, _ in self.in_flight.values())} if self.in_flight else super().state_dict()


def make_driver(settings: Settings) -> FakeDriver:
    return SleepyDriver(settings) if settings.train.max_staleness else FakeDriver(settings)


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}


def _torchrun(args: list[str], log_dir: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = torchrun(2, log_dir, args)
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def run_trainer(out: Path, model: str, steps: int, **extra) -> subprocess.CompletedProcess:
    """The trainer reads its settings from the run's settings.json, as under run_grpo.sh."""
    settings = Settings.build(
        **{
            "model": model,
            "vllm_url": "http://127.0.0.1:9",
            "output_dir": out,
            "num_rollouts": steps,
            "rollout_batch_size": 3,
            "n_samples": 2,
            "lr": 1e-3,
            **extra,
        }
    )
    path = settings.write(out)
    return _torchrun(["-m", "tests.fake_trainer", "fsdp", "--settings", str(path)], out / "logs" / "torchrun")


def _events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "driver_events.jsonl").read_text().splitlines()]


def metrics_rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("trainer") / "run"
    proc = run_trainer(out, str(tiny_model_dir()), steps=2)
    yield out, proc
    shutil.rmtree(out.parent, ignore_errors=True)  # ~0.5 GiB of checkpoints; retention only covers tmp_path


def test_two_ranks_train_export_and_sync_in_order(first_run):
    out, proc = first_run
    kinds = [(e["kind"], e.get("step"), e["version"]) for e in _events(out)]
    assert kinds == [("generate", 0, 0), ("sync", None, 1), ("generate", 1, 1), ("sync", None, 2)]
    rows = metrics_rows(out)
    assert [r["step"] for r in rows] == [0, 1] and [r["weight_version"] for r in rows] == [1, 2]
    for r in rows:
        assert not r["skipped_update"] and r["zero_variance_groups"] == 1 and r["trainable_samples"] == 4
        assert r["samples"] == 6 and r["dropped_samples"] == 1 and r["grad_norm"] > 0
        assert r["approx_kl"] < 1e-8 and abs(r["ratio_mean"] - 1) < 1e-5  # exported == trained weights
        # the trainer's phases as a timeline: in order, one after another, each as long as its time/ figure
        spans = r["phases"]["spans"]
        assert [x["kind"] for x in spans] == ["rollout", "swap", "train", "save", "sync"]
        assert all(a["end"] <= b["start"] + 1e-3 for a, b in zip(spans, spans[1:]))
        assert all(abs((x["end"] - x["start"]) - r[f"time/{x['kind']}"]) < 2e-3 for x in spans)
        assert spans[-1]["end"] <= r["phases"]["seconds"] + 1e-3 and abs(r["phases"]["seconds"] - r["time/step"]) < 0.05
    assert rows[1]["phases"]["origin"] >= rows[0]["phases"]["origin"] + rows[0]["time/step"] - 1e-3
    assert "step 2/2 v2" in proc.stdout
    assert (out / "rewards.png").stat().st_size > 1000 and list((out / "tb").iterdir())
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_000001", "step_000002"]
    base, v1, v2 = (_weights(p) for p in (tiny_model_dir(), out / "weights/v000001", out / "weights/v000002"))
    assert base.keys() == v1.keys()
    assert any(not torch.equal(base[k], v1[k]) for k in base) and any(not torch.equal(v1[k], v2[k]) for k in v1)


def test_resume_restores_state_and_syncs_first(first_run):
    out, _ = first_run
    saved_v2 = _weights(out / "weights/v000002")
    before = len(_events(out))
    (out / "checkpoints" / "step_000003.tmp").mkdir()
    (out / "checkpoints" / "step_000004").mkdir()  # no marker: a save that died
    proc = run_trainer(out, str(tiny_model_dir()), steps=3)
    assert "ignoring half-written checkpoint" in proc.stderr and "step_000004" in proc.stderr
    new = [(e["kind"], e.get("step"), e["version"] if "version" in e else e["state"]) for e in _events(out)[before:]]
    assert new == [("load_state", None, {"position": 6}), ("sync", None, 2), ("generate", 2, 2), ("sync", None, 3)]
    assert _events(out)[before + 2]["position"] == 6  # the next groups, not the first ones again
    resumed_v2 = _weights(out / "weights/v000002")  # re-exported from the loaded checkpoint
    assert all(torch.equal(saved_v2[k], resumed_v2[k]) for k in saved_v2)
    rows = metrics_rows(out)
    assert [r["step"] for r in rows] == [0, 1, 2] and rows[2]["weight_version"] == 3
    assert rows[2]["approx_kl"] < 1e-8
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_000001", "step_000002", "step_000003"]
    assert sorted(p.name for p in (out / "weights").iterdir()) == ["v000002", "v000003"]


@pytest.fixture(scope="module")
def async_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("trainer_async") / "run"
    run_trainer(out, str(tiny_model_dir()), steps=3, max_staleness=1)
    yield out
    shutil.rmtree(out.parent, ignore_errors=True)


def test_off_policy_rollouts_overlap_training_and_record_their_versions(async_run):
    out = async_run
    events = _events(out)
    order = [(e["kind"], e.get("step"), e.get("version")) for e in events if e["kind"] != "generated"]
    assert order == [
        ("submit", 0, 0),
        ("collect", 0, None),
        ("submit", 1, 0),
        ("sync", None, 1),
        ("collect", 1, None),
        ("submit", 2, 1),
        ("sync", None, 2),
        ("collect", 2, None),
        ("sync", None, 3),
    ]
    # while step k trained (its batch collected .. its weights synced), batch k+1 was being generated
    at = {(e["kind"], e.get("step", e.get("version"))): e for e in events}
    for k in (0, 1):
        train_start, train_end = at[("collect", k)]["t"], at[("sync", k + 1)]["t"]
        gen_start, gen_end = at[("generated", k + 1)]["start"], at[("generated", k + 1)]["t"]
        assert gen_start < train_end and gen_end > train_start, (k, gen_start, gen_end, train_start, train_end)
    rows = metrics_rows(out)
    assert [r["weight_version"] for r in rows] == [1, 2, 3]
    assert [r["async/staleness_max"] for r in rows] == [0, 1, 1]  # batch k+1 was sampled from v_k, trained at v_k+1
    assert rows[1]["async/staleness_1"] == 6 and rows[1]["dropped/stale"] == 0
    assert rows[1]["async/uncorrected_stale_samples"] == 0  # rollout log-probs known: the PPO ratio corrects
    assert rows[0]["approx_kl"] < 1e-8 and rows[1]["approx_kl"] > 1e-8  # the ratio sees the lag, not 1
    assert rows[1]["time/rollout"] < SleepyDriver.SLEEP  # waited for less than the rollout took


def test_off_policy_resume_serves_the_batch_that_was_in_flight_again(async_run):
    out = async_run
    for name in ("step_000002", "step_000003"):  # as if killed after step 1's checkpoint, batch 1 in flight
        shutil.rmtree(out / "checkpoints" / name)
    before = len(_events(out))
    run_trainer(out, str(tiny_model_dir()), steps=2, max_staleness=1)
    new = [
        (e["kind"], e.get("step"), e.get("position", e.get("state")))
        for e in _events(out)[before:]
        if e["kind"] in ("load_state", "submit")
    ]
    assert new == [("load_state", None, {"position": 3}), ("submit", 1, 3)]  # step 1's groups, not step 2's
    assert [r["step"] for r in metrics_rows(out)] == [0, 1]


def test_checkpoint_round_trip_bit_identical_on_two_ranks(tmp_path):
    _torchrun(["-m", "tests.integration.test_trainer_fsdp", "roundtrip", str(tmp_path)], tmp_path / "torchrun")
    results = [json.loads((tmp_path / f"roundtrip_rank{r}.json").read_text()) for r in (0, 1)]
    for res in results:
        assert res["params"] > 0 and res["params_equal"] == res["params"]
        assert res["optim_tensors"] >= 2 * res["params"] and res["optim_equal"] == res["optim_tensors"]
        assert res["rng_equal"] and res["next_step_equal"] and res["state"] == {"step": 1, "weight_version": 1}
        assert res["sharded"]  # each rank really held a shard, not a replica


def test_flat_rewards_skip_the_update_but_count_the_step(tmp_path):
    from qwen_swe.train.trainer import train

    settings = Settings.build(
        vllm_url="http://127.0.0.1:9",
        model=str(tiny_model_dir()),
        output_dir=tmp_path / "run",
        num_rollouts=2,
        rollout_batch_size=2,
        n_samples=2,
    )
    result = train(settings, FakeDriver(settings, flat=True), model_path=settings.model_name)
    assert result["step"] == 1 and result["skipped_update"] and result["weight_version"] == 0
    assert [(e["kind"], e["version"]) for e in _events(settings.output_dir)] == [("generate", 0), ("generate", 0)]
    assert [r["zero_variance_groups"] for r in metrics_rows(settings.output_dir)] == [2, 2]
    assert not (settings.output_dir / "weights").exists()
    assert (settings.output_dir / "checkpoints" / "step_000002" / "complete").exists()


def test_sft_writes_only_the_saved_steps_weights(tmp_path):
    """Nothing serves between SFT steps: every step updates, but only the step that saves exports its weights."""
    from qwen_swe.train.trainer import train

    demos = tmp_path / "demos.jsonl"
    demos.write_text("")  # the FakeDriver stands in for the demonstrations' driver
    settings = Settings.build(
        vllm_url="http://127.0.0.1:9",
        model=str(tiny_model_dir()),
        output_dir=tmp_path / "run",
        train_mode="sft",
        sft_data=str(demos),
        num_rollouts=3,
        save_interval=3,
        rollout_batch_size=2,
        n_samples=2,
    )
    train(settings, FakeDriver(settings), model_path=settings.model_name)
    assert [r["skipped_update"] for r in metrics_rows(settings.output_dir)] == [False] * 3
    assert sorted(p.name for p in (settings.output_dir / "weights").iterdir()) == ["v000003"]


def test_lora_exports_merged_weights(tmp_path):
    from qwen_swe.train.trainer import train

    settings = Settings.build(
        vllm_url="http://127.0.0.1:9",
        model=str(tiny_model_dir()),
        output_dir=tmp_path / "run",
        num_rollouts=2,
        rollout_batch_size=3,
        n_samples=2,
        lr=1e-2,
        lora_rank=4,
        lr_warmup_steps=2,
    )
    train(settings, FakeDriver(settings), model_path=settings.model_name)
    rows = metrics_rows(settings.output_dir)
    assert [r["lr"] for r in rows] == [5e-3, 1e-2]  # the warm-up's first update at half the rate
    # step 2 was sampled from the merged v1 export: it reproduces the adapted model to float precision
    assert abs(rows[1]["ratio_mean"] - 1) < 1e-5 and rows[1]["weight_version"] == 2
    base, v1 = _weights(tiny_model_dir()), _weights(settings.output_dir / "weights/v000001")
    assert base.keys() == v1.keys()  # plain HF names, no peft prefixes or adapter tensors
    changed = {k for k in base if not torch.equal(base[k], v1[k])}
    assert changed and all(k.endswith("proj.weight") for k in changed)  # only LoRA-adapted linears moved


@pytest.mark.parametrize("lora_rank,mixed_precision", [(0, False), (4, False), (4, True)])
def test_kl_penalty_measures_the_distance_from_the_start_weights(tmp_path, lora_rank, mixed_precision):
    """The reference is the start: at the first update the policy *is* it (KL 0, so its forward matches the policy's,
    also with the adapters switched off); it stays frozen while the policy moves (KL > 0 at the second). LoRA with
    bf16 compute is the case peft's own ``disable_adapter()`` broke (FSDP2 then failed to assign the gradients)."""
    from qwen_swe.train.trainer import train

    settings = Settings.build(
        vllm_url="http://127.0.0.1:9",
        model=str(tiny_model_dir()),
        output_dir=tmp_path / "run",
        num_rollouts=2,
        rollout_batch_size=3,
        n_samples=2,
        lr=1e-2,
        lora_rank=lora_rank,
        mixed_precision=mixed_precision,
        kl_loss_coef=0.5,
    )
    train(settings, FakeDriver(settings), model_path=settings.model_name)
    first, second = metrics_rows(settings.output_dir)
    assert not first["skipped_update"] and not second["skipped_update"]
    assert first["kl_ref"] < 1e-7 and first["approx_kl"] < 1e-5  # bf16 compute against fp32 rollout log-probs
    assert second["kl_ref"] > 1e-4 and second["approx_kl"] < 1e-5  # far from the start, on-policy for its rollout


class LaggingServerDriver(FakeDriver):
    """A server whose log-probs are 0.5 below the trainer's on every token (other weights or kernels)."""

    def _batch(self, position: int, weight_version: int, model) -> list[Sample]:
        out = super()._batch(position, weight_version, model)
        for sample in out:
            sample.rollout_log_probs = [lp - 0.5 for lp in sample.rollout_log_probs]
        return out


def test_truncated_importance_sampling_weights_the_tokens_the_server_under_sampled(tmp_path):
    """TIS_CAP: the ratio is taken against the trainer's own log-probs (no clipping, no approx KL however far the
    server is), and each token's weight exp(trainer - server) = e^0.5 = 1.65 is capped at 1.2 everywhere."""
    from qwen_swe.train.trainer import train

    settings = Settings.build(
        vllm_url="http://127.0.0.1:9",
        model=str(tiny_model_dir()),
        output_dir=tmp_path / "run",
        num_rollouts=1,
        rollout_batch_size=3,
        n_samples=2,
        lr=1e-2,
        tis_cap=1.2,
    )
    train(settings, LaggingServerDriver(settings), model_path=settings.model_name)
    (row,) = metrics_rows(settings.output_dir)
    assert not row["skipped_update"]
    assert row["tis_ratio"] == pytest.approx(math.exp(0.5), rel=1e-4)
    assert row["tis_clip_fraction"] == 1.0
    assert row["logprob_diff_abs"] == pytest.approx(0.5, abs=1e-4)
    assert row["clip_fraction"] == 0.0 and row["approx_kl"] < 1e-9


@pytest.mark.slow
def test_one_step_on_smollm2(tmp_path):
    model = embedded_model_dir()
    if not (model / "config.json").exists():
        pytest.skip(f"no SmolLM2 folder at {model}; it is made by scripts/setup/50_model.sh")
    out = tmp_path / "smol"
    run_trainer(out, str(model), steps=1, rollout_batch_size=2, lr=1e-5)
    row = metrics_rows(out)[0]
    assert not row["skipped_update"] and row["grad_norm"] > 0 and row["approx_kl"] < 1e-6
    base, v1 = _weights(model), _weights(out / "weights/v000001")
    assert any(not torch.equal(base[k], v1[k]) for k in base if k in v1)


def _roundtrip(out: Path) -> None:
    """torchrun worker: train a step, save, load into a fresh model and optimizer, compare everything."""
    import torch.distributed as dist

    from qwen_swe.train import checkpoint as ckpt
    from qwen_swe.train.policy import build_policy
    from qwen_swe.train.update import clip_and_step, train_on_batch

    dist.init_process_group("gloo")
    rank, cpu = dist.get_rank(), torch.device("cpu")
    settings = Settings.build(vllm_url="http://127.0.0.1:9", micro_batch_size=2)
    rng = random.Random(5)
    items = []
    for i in range(5):
        p, r = rng.randint(3, 8), rng.randint(3, 10)
        items.append(
            {
                "tokens": [rng.randrange(100, 5000) for _ in range(p + r)],
                "response_length": r,
                "loss_mask": [1] * r,
                "advantage": (-1.0) ** i,
                "rollout_log_probs": None,
            }
        )

    def fresh():
        policy = build_policy(str(tiny_model_dir()), device=cpu)
        return policy, torch.optim.AdamW(policy.parameters(), lr=1e-3, weight_decay=0.0)

    def step(policy, opt):
        train_on_batch(policy, items, settings, cpu)
        clip_and_step(policy, opt, 1.0)

    torch.manual_seed(0)
    policy, opt = fresh()
    step(policy, opt)
    torch.manual_seed(100 + rank)
    path = ckpt.save_checkpoint(out, 1, policy, opt, state={"step": 1, "weight_version": 1}, keep=2)
    draw = torch.rand(3)
    policy2, opt2 = fresh()
    state = ckpt.load_checkpoint(path, policy2, opt2)
    rng_equal = torch.equal(torch.rand(3), draw)
    pairs = list(zip(policy.parameters(), policy2.parameters()))
    params_equal = sum(torch.equal(a.to_local(), b.to_local()) for a, b in pairs)
    optim = [(opt.state[a][k], opt2.state[b][k]) for a, b in pairs for k in opt.state[a]]
    optim_equal = sum(
        torch.equal(getattr(x, "to_local", lambda: x)(), getattr(y, "to_local", lambda: y)())  # noqa: B023 - called at once
        for x, y in optim
    )
    sharded = all(a.to_local().numel() < a.numel() for a, _ in pairs if a.shape[0] >= 2)
    step(policy, opt)
    step(policy2, opt2)
    next_equal = all(torch.equal(a.to_local(), b.to_local()) for a, b in zip(policy.parameters(), policy2.parameters()))
    (out / f"roundtrip_rank{rank}.json").write_text(
        json.dumps(
            {
                "params": len(pairs),
                "params_equal": params_equal,
                "optim_tensors": len(optim),
                "optim_equal": optim_equal,
                "rng_equal": rng_equal,
                "next_step_equal": next_equal,
                "state": state,
                "sharded": sharded,
            }
        )
    )
    dist.destroy_process_group()


if __name__ == "__main__" and sys.argv[1:2] == ["roundtrip"]:  # a torchrun worker
    run_rank(lambda: _roundtrip(Path(sys.argv[2])))


class SavingDriver(FakeDriver):
    """FakeDriver that also writes each step's groups as SAVE_ROLLOUT_DATA does."""

    def generate(self, step: int, weight_version: int) -> tuple[list[Sample], dict]:
        from qwen_swe.rollout.record import dump_rollout_data

        samples, metrics = super().generate(step, weight_version)
        groups: dict[int, list[Sample]] = {}
        for x in samples:
            groups.setdefault(int(x.group_index), []).append(x)
        dump_rollout_data(
            Path(self.settings.output_dir) / "rollout_data" / f"step_{step:06d}.jsonl.gz", list(groups.values())
        )
        return samples, metrics


def test_a_replay_of_saved_rollouts_reproduces_the_live_update_and_the_probe_sees_its_direction(tmp_path):
    """LOAD_ROLLOUT_DATA: the saved groups, replayed from the same start weights, give the live run's updates bit for
    bit (no server, no rollouts); the probe then finds the first update raised the successes over the failures."""
    from qwen_swe.rollout.driver import make_driver
    from qwen_swe.train import probe
    from qwen_swe.train.trainer import train

    common = dict(
        vllm_url="http://127.0.0.1:9",
        model=str(tiny_model_dir()),
        num_rollouts=2,
        rollout_batch_size=3,
        n_samples=2,
        lr=1e-2,
        temperature=0.7,
    )
    live = Settings.build(output_dir=tmp_path / "live", **common)
    train(live, SavingDriver(live), model_path=live.model_name)
    replay = Settings.build(
        output_dir=tmp_path / "replay", load_rollout_data=str(tmp_path / "live" / "rollout_data"), **common
    )
    assert replay.offline and not live.offline
    train(replay, make_driver(replay), model_path=replay.model_name)
    for a, b in zip(metrics_rows(live.output_dir), metrics_rows(replay.output_dir)):
        assert [a[k] for k in ("loss", "trainable_samples", "approx_kl")] == [
            b[k] for k in ("loss", "trainable_samples", "approx_kl")
        ]
    ours, theirs = _weights(live.output_dir / "weights/v000002"), _weights(replay.output_dir / "weights/v000002")
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)

    trajectories = probe.load(tmp_path / "live" / "rollout_data" / "step_000000.jsonl.gz")
    probe.score(trajectories, str(tiny_model_dir()), "before", 0.7)
    probe.score(trajectories, str(replay.output_dir / "weights/v000001"), "after", 0.7)
    s = probe.summarise(probe.groups_of(trajectories))
    assert (s["mixed_groups"], s["equal_groups"]) == (2, 1)  # instance 2 has equal rewards
    assert s["margin_delta"] > 0 and s["margins_up"] == 2 and s["success_delta"] > s["failure_delta"], s
