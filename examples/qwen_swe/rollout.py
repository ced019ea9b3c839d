"""One rollout batch: groups of samples, each sandbox -> agent (through the proxy) -> diff -> grade -> trajectory.

The async core (`RolloutEngine`) serves both trainers: the built-in FSDP2 trainer through `RolloutDriver`
(a long-lived event loop on rank 0) and slime's `generate_rollout(args, rollout_id, data_source, evaluation)`.
An infrastructure failure (container, agent API, grader) drops the sample with its reason; it never reaches the
loss as -1. A group that lost samples is dropped or refilled with fresh samples, as ``dropped_policy`` says.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import Settings, agent_bundle_dir
from .sample import Sample, Status

AGENT_MOUNT = "/opt/qwen-swe-agent"
PROBE_TEXT = "def add(a, b):\n    return a + b\n"


@dataclass
class BatchStats:
    """Live counters for the progress display and the step's metrics."""

    groups: int = 0
    running: int = 0
    graded: int = 0
    dropped: int = 0
    rewards: list[float] = field(default_factory=list)
    resolved: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def drop(self, reason: str) -> None:
        self.dropped += 1
        key = reason.split(":")[0][:60]
        self.reasons[key] = self.reasons.get(key, 0) + 1


class RolloutEngine:
    """Owns the proxy, the tokenizer and the concurrency bounds for a whole run."""

    def __init__(self, settings: Settings, *, upstream: str, model: str, served_model: str | None = None) -> None:
        self.settings = settings
        self.upstream = upstream
        self.model = model  # HF name or folder: the tokenizer and chat template the proxy renders with
        self.served_model = served_model or settings.served_model_name or model
        self.weight_version = 0
        self.proxy: Any = None
        self.tokenizer: Any = None
        self._executor: ThreadPoolExecutor | None = None
        self._samples = asyncio.Semaphore(settings.rollout_concurrency)
        self._boot = asyncio.Semaphore(settings.boot_concurrency)

    async def start(self) -> None:
        from transformers import AutoTokenizer

        from .proxy import RecordingProxy
        from .start_vllm import tool_parser_for

        # Each running sample parks blocking Docker calls (a whole agent run's exec) on the default executor, and
        # so does grading: size it for the samples plus the graders, or they starve each other (6 threads on 2 cores).
        workers = 2 * self.settings.rollout_concurrency + self.settings.boot_concurrency + 4
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rollout")
        asyncio.get_running_loop().set_default_executor(self._executor)
        self.tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, self.model)
        self.proxy = RecordingProxy(self.upstream, model=self.served_model, tokenizer=self.tokenizer,
                                    mode="tokens", request_timeout=self.settings.request_timeout,
                                    tool_parser=tool_parser_for(self.model))
        await self.proxy.start()

    async def stop(self) -> None:
        if self.proxy is not None:
            await self.proxy.stop()
            self.proxy = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def set_weight_version(self, version: int) -> None:
        self.weight_version = version
        if self.proxy is not None:
            self.proxy.weight_version = version

    # --- one sample ------------------------------------------------------------------------
    async def run_sample(self, sample: Sample, stats: BatchStats) -> Sample:
        """Fill ``sample`` in place; on infrastructure failure mark it ABORTED with ``metadata["drop_reason"]``."""
        async with self._samples:
            stats.running += 1
            try:
                return await asyncio.wait_for(self._run_sample(sample), self.settings.agent_timeout
                                              + self.settings.eval_timeout + 120)
            except asyncio.TimeoutError:
                return _drop(sample, "sample_timeout: outer time guard hit")
            except Exception as exc:  # noqa: BLE001 - a bad sample is data, not a crash of the run
                return _drop(sample, f"error: {exc.__class__.__name__}: {exc}")
            finally:
                stats.running -= 1
                if sample.status == Status.ABORTED:
                    stats.drop(sample.metadata.get("drop_reason", "unknown"))
                else:
                    stats.graded += 1
                    stats.rewards.append(float(sample.reward))
                    stats.resolved += bool(sample.metadata.get("resolved"))

    async def _run_sample(self, sample: Sample) -> Sample:
        from .qwen_agent import run_agent
        from .rewards import grade_async
        from .sandbox import DockerSandbox, SandboxError, image_for
        from .trajectory import build_sample, to_sample

        s, meta = self.settings, sample.metadata
        instance = {k: v for k, v in meta.items() if k not in _RUN_KEYS}
        meta["weight_version"] = self.weight_version
        t0 = time.monotonic()
        session = self.proxy.open_session({"instance_id": meta["instance_id"], "index": sample.index})
        turns: list = []
        try:
            sandbox = DockerSandbox(
                image_for(instance, s.image_namespace), run_id=s.label, role="rollout", cpus=s.sandbox_cpus,
                memory=s.sandbox_memory, network=s.sandbox_network, mounts={str(agent_bundle_dir()): AGENT_MOUNT},
                base_commit=instance.get("base_commit"), hide_future=True, boot_limit=self._boot)
            async with sandbox:
                agent = await run_agent(sandbox, base_url=session.base_url, model=self.served_model,
                                        prompt=str(sample.prompt), settings=s,
                                        profile="compact" if s.embedded else "full")
        except SandboxError as exc:
            return _drop(sample, f"sandbox: {exc}")
        finally:
            turns = self.proxy.close_session(session.id)
        t_agent = time.monotonic()
        meta.update(outcome=agent.outcome, patch=agent.patch, final_message=agent.final_message,
                    agent_seconds=round(t_agent - t0, 3), tool_calls=agent.tool_calls)
        if getattr(agent, "infra", False):
            return _drop(sample, f"agent_error: {agent.log_tail[-300:] if agent.log_tail else agent.outcome}")
        if not any(t.ok and t.sampled_ids for t in turns):
            return _drop(sample, "no_model_turns: the agent made no successful model call")

        traj = build_sample(turns, max_response_len=s.max_response_len, mask_truncated=s.mask_truncated,
                            tokenizer=self.tokenizer)
        stats = {"response_tokens": traj.metadata.get("sampled_tokens", traj.response_length),
                 "tool_calls": agent.tool_calls, "completed": agent.outcome == "completed"}
        grade = await grade_async(instance, agent.patch, settings=s, run_id=s.label, agent_stats=stats)
        if grade.status != "graded":
            return _drop(sample, f"grade_aborted: {grade.reason}")
        to_sample(traj, sample)
        meta = sample.metadata  # to_sample builds a new dict
        if s.tool_choice == "required":
            # Under a forced tool call vLLM reports logprobs after its grammar mask (notes/qwen_vllm_cpu.md 5.2),
            # not the policy's own; with one optimizer step per batch the trainer's recomputation is the
            # behaviour policy (ratio 1).
            sample.rollout_log_probs = None
        sample.reward = float(grade.reward)
        sample.status = Status.TRUNCATED if traj.metadata.get("truncated") else Status.COMPLETED
        meta.update(resolved=grade.resolved, f2p_passed=grade.f2p_passed, p2p_passed=grade.p2p_passed,
                    grade_details=_jsonable(grade.details), grade_timings=grade.timings,
                    trajectory=_jsonable(traj.metadata), turns=len(turns),
                    grade_seconds=round(time.monotonic() - t_agent, 3))
        sample.weight_versions = [str(self.weight_version)]
        return sample

    # --- one batch -----------------------------------------------------------------------------
    async def run_groups(self, groups: list[list[Sample]], stats: BatchStats) -> list[list[Sample]]:
        """Run groups concurrently; return the complete ones (a group with a dropped sample is refilled or gone).

        ``rollout_timeout`` bounds the whole batch: groups still running then are cancelled (their containers are
        removed on the way out) and their unfinished samples dropped with the reason, never the run crashed.
        """
        stats.groups += len(groups)

        async def one_group(group: list[Sample]) -> list[Sample] | None:
            await asyncio.gather(*(self.run_sample(x, stats) for x in group))
            retries = 2 if self.settings.dropped_policy == "replace" else 0
            while retries and any(x.status == Status.ABORTED for x in group):
                retries -= 1
                group = [_fresh_copy(x) if x.status == Status.ABORTED else x for x in group]
                await asyncio.gather(*(self.run_sample(x, stats) for x in group if x.status == Status.PENDING))
            return None if any(x.status == Status.ABORTED for x in group) else group

        tasks = [asyncio.ensure_future(one_group(g)) for g in groups]
        _, late = await asyncio.wait(tasks, timeout=self.settings.rollout_timeout)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
        for x in (x for g in groups for x in g if x.status == Status.PENDING):
            stats.drop(_drop(x, f"rollout_timeout: the batch exceeded {self.settings.rollout_timeout:.0f}s")
                       .metadata["drop_reason"])
        return [t.result() for t in tasks if t not in late and t.result() is not None]


_RUN_KEYS = {"weight_version", "outcome", "patch", "final_message", "agent_seconds", "tool_calls", "resolved",
             "f2p_passed", "p2p_passed", "grade_details", "grade_timings", "trajectory", "turns", "grade_seconds",
             "drop_reason"}


def _fresh_copy(sample: Sample) -> Sample:
    """A new attempt at the same instance, for ``dropped_policy=replace``."""
    fresh = copy.deepcopy(sample)
    fresh.status = Status.PENDING
    fresh.metadata = {k: v for k, v in sample.metadata.items() if k not in _RUN_KEYS}
    fresh.tokens, fresh.loss_mask, fresh.rollout_log_probs, fresh.reward = [], None, None, None
    return fresh


def _drop(sample: Sample, reason: str) -> Sample:
    sample.status = Status.ABORTED
    sample.remove_sample = True
    sample.reward = 0.0
    sample.metadata["drop_reason"] = reason
    return sample


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def batch_metrics(stats: BatchStats, groups: list[list[Sample]], seconds: float) -> dict[str, float]:
    samples = [x for g in groups for x in g]
    n = max(len(samples), 1)
    return {
        "rollout/groups_requested": stats.groups,
        "rollout/groups_kept": len(groups),
        "rollout/dropped_samples": stats.dropped,
        "rollout/reward_mean": sum(float(x.reward) for x in samples) / n if samples else 0.0,
        "rollout/resolve_rate": sum(bool(x.metadata.get("resolved")) for x in samples) / n if samples else 0.0,
        "rollout/response_len_mean": sum(x.response_length for x in samples) / n if samples else 0.0,
        "rollout/agent_seconds_mean": sum(x.metadata.get("agent_seconds", 0.0) for x in samples) / n,
        "rollout/grade_seconds_mean": sum(x.metadata.get("grade_seconds", 0.0) for x in samples) / n,
        "time/rollout": seconds,
    }


def dump_rollouts(path: Path, groups: list[list[Sample]], dropped: list[Sample]) -> None:
    """One JSON line per sample (kept and dropped): instance, patch, reward, status, turns, timings."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        for x in [s for g in groups for s in g] + dropped:
            m = x.metadata
            fh.write(json.dumps({
                "instance_id": m.get("instance_id"), "group_index": x.group_index, "index": x.index,
                "status": x.status.value if hasattr(x.status, "value") else str(x.status),
                "reward": x.reward, "resolved": m.get("resolved"), "drop_reason": m.get("drop_reason"),
                "outcome": m.get("outcome"), "patch": m.get("patch"), "turns": m.get("turns"),
                "response_length": x.response_length, "weight_version": m.get("weight_version"),
                "agent_seconds": m.get("agent_seconds"), "grade_seconds": m.get("grade_seconds"),
                "grade": m.get("grade_details"), "trajectory": m.get("trajectory"),
            }, default=str) + "\n")


class RolloutDriver:
    """The built-in trainer's rank-0 rollout side: a long-lived event loop thread holding the engine and proxy."""

    def __init__(self, settings: Settings, *, upstream: str, model: str, data_source: Any = None,
                 served_model: str | None = None) -> None:
        from .data_source import SWEBenchDataSource
        from .inference import InferenceClient

        self.settings = settings
        self.data_source = data_source or SWEBenchDataSource.from_settings(settings)
        self.client = InferenceClient(upstream, timeout=settings.request_timeout)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rollout-loop", daemon=True)
        self._thread.start()
        self.engine = RolloutEngine(settings, upstream=upstream, model=model, served_model=served_model)
        self._call(self.engine.start())
        self.last_sync: dict[str, float] = {}

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def generate(self, step: int, weight_version: int) -> tuple[list[Sample], dict[str, Any]]:
        from .progress import live_progress

        s = self.settings
        self.engine.set_weight_version(weight_version)
        groups = self.data_source.get_samples(s.rollout_batch_size)
        stats, t0 = BatchStats(), time.monotonic()
        with live_progress(stats, f"step {step}"):
            kept = self._call(self.engine.run_groups(groups, stats))
        dropped = [x for g in groups for x in g if x.status == Status.ABORTED]
        dump_rollouts(Path(s.output_dir) / "rollouts" / f"step_{step:06d}.jsonl", kept, dropped)
        metrics = batch_metrics(stats, kept, time.monotonic() - t0)
        metrics.update({f"dropped/{k}": v for k, v in stats.reasons.items()})
        metrics.update(self.last_sync)  # the sync that happened before this rollout, reported once
        self.last_sync = {}
        return [x for g in kept for x in g], metrics

    def sync_weights(self, hf_dir: Path, version: int) -> None:
        before = self.probe_logprob()
        if self.settings.sync_mode == "modal":  # the server cannot read our disk: go through the weights Volume
            from .modal_inference import push_and_reload

            push_and_reload(hf_dir, f"v{version:06d}")
        else:
            self.client.reload_weights(str(hf_dir))
        self.engine.set_weight_version(version)
        self.last_sync = {"sync/probe_logprob_before": before, "sync/probe_logprob_after": self.probe_logprob(),
                          "sync/version": version}
        logging.getLogger("qwen_swe").info("weights v%d served from %s: %s", version, hf_dir, self.last_sync)

    def probe_logprob(self) -> float:
        """Log-probability the server gives a fixed text: it changes exactly when the served weights change.

        Diagnostic only: a server without vLLM's ``prompt_logprobs`` gives NaN, with a warning, not a failed run.
        """
        from .inference import InferenceError

        body = {"model": self.engine.served_model, "prompt": PROBE_TEXT, "max_tokens": 1, "temperature": 0.0,
                "prompt_logprobs": 0}
        try:
            choice = self.client.post_json("/v1/completions", body)["choices"][0]
            return float(sum(next(iter(d.values()))["logprob"] for d in choice["prompt_logprobs"] if d))
        except (InferenceError, KeyError, IndexError, TypeError, StopIteration) as exc:
            logging.getLogger("qwen_swe").warning("weight-sync probe unavailable: %s", exc)
            return float("nan")

    def state_dict(self) -> dict[str, Any]:
        return {"data_source": self.data_source.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.data_source.load_state_dict(state["data_source"])

    def close(self) -> None:
        try:
            self._call(self.engine.stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)


def make_driver(settings: Settings) -> RolloutDriver:
    """Factory the trainer calls on rank 0 (``--driver examples.qwen_swe.rollout:make_driver``)."""
    upstream = settings.vllm_url or settings.served_url
    if not upstream:
        raise RuntimeError("no inference server: set VLLM_URL, or start the run with run_grpo.sh "
                           "(which starts the embedded server and passes SERVED_URL)")
    return RolloutDriver(settings, upstream=upstream, model=settings.model_name,
                         served_model=settings.served_model_name)


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    """slime's rollout-function contract: exactly ``rollout_batch_size`` groups of ``n_samples_per_prompt``.

    Settings come from the environment (as run_grpo.sh exports them), with slime's own sizes from ``args``.
    Before a training rollout, the newest slime checkpoint is converted and reloaded into the vLLM server so
    the rollout is on-policy; groups that lost samples are replaced by fresh groups from the data source.
    """
    from .slime_backend import settings_from_slime_args

    return asyncio.run(_slime_rollout(settings_from_slime_args(args), args, rollout_id, data_source, evaluation))


async def _slime_rollout(settings: Settings, args: Any, rollout_id: int, data_source: Any,
                         evaluation: bool) -> Any:
    upstream = settings.vllm_url or settings.served_url
    version = 0
    if not evaluation:
        from .slime_weights import SlimeWeightSync

        version = await asyncio.to_thread(SlimeWeightSync(args, upstream).before_rollout, rollout_id)
    engine = RolloutEngine(settings, upstream=upstream, model=settings.model_name,
                           served_model=settings.served_model_name)
    await engine.start()
    try:
        engine.set_weight_version(version)
        want, kept, stats, attempts = settings.rollout_batch_size, [], BatchStats(), 0
        while len(kept) < want and attempts < 3:
            attempts += 1
            kept += await engine.run_groups(data_source.get_samples(want - len(kept)), stats)
        if len(kept) < want:
            raise RuntimeError(f"rollout {rollout_id}: only {len(kept)} of {want} groups survived 3 attempts; "
                               f"dropped samples by reason: {stats.reasons}")
        kept = sorted(kept[:want], key=lambda g: g[0].index)
        from .slime_backend import trim_trailing_pad, validate_rollout_batch

        for x in (x for g in kept for x in g):
            trim_trailing_pad(x)
        validate_rollout_batch(kept, n_samples_per_prompt=settings.n_samples, rollout_batch_size=want)
        if evaluation:
            flat = [x for g in kept for x in g]
            return {"swebench": {"rewards": [x.reward for x in flat],
                                 "truncated": [x.status == Status.TRUNCATED for x in flat], "samples": flat}}
        return kept
    finally:
        await engine.stop()
