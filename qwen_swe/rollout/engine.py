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
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from qwen_swe.agent.qwen import AgentResult, run_agent, take_diff
from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import Sample, Status, attempt_row, drop, run_of, stamp
from qwen_swe.errors import DropReason, InfraError
from qwen_swe.paths import AGENT_MOUNT, agent_bundle_dir
from qwen_swe.reward.harness import Grade, GradeStatus, grade_async
from qwen_swe.rollout.progress import BatchStats
from qwen_swe.rollout.settings import RolloutSettings
from qwen_swe.rollout.timeline import (
    AGENT_CLEANUP,
    AGENT_EXIT,
    AGENT_SETUP,
    AGENT_START,
    BOOT,
    DIFF,
    GRADE,
    TEARDOWN,
    Clock,
)
from qwen_swe.sandbox.base import Sandbox, SandboxFactory, SandboxRequest
from qwen_swe.sandbox.factory import DockerSandboxes
from qwen_swe.sandbox.settings import NO_NETWORK, parse_size
from qwen_swe.traffic.endpoint import SOCKET_DIR_IN_CONTAINER
from qwen_swe.traffic.proxy import RecordingProxy
from qwen_swe.traffic.toolcalls import tool_call_parser_for
from qwen_swe.traffic.trajectory import build_sample, to_sample
from qwen_swe.traffic.transcript import call_spans, transcript

log = logging.getLogger("qwen_swe.rollout")


class RolloutEngine:
    """Owns the proxy, the tokenizer and the concurrency bounds for a whole run. ``sandboxes`` makes the rollout and
    grading machines (default: Docker containers, the rollout ones bounded by SANDBOX_BOOT_CONCURRENCY)."""

    def __init__(
        self,
        settings: Settings,
        *,
        upstream: str,
        model: str,
        served_model: str | None = None,
        sandboxes: SandboxFactory | None = None,
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self.model = model  # HF name or folder: the tokenizer and chat template the proxy renders with
        self.served_model = served_model or settings.inference.served_model_name or model
        self.weight_version = 0
        self.proxy: Any = None
        self.tokenizer: Any = None
        self._executor: ThreadPoolExecutor | None = None
        self._samples = asyncio.Semaphore(settings.rollout.rollout_concurrency)
        self._boot = asyncio.Semaphore(settings.sandbox.boot_concurrency)
        self._sandboxes = sandboxes or DockerSandboxes(settings.sandbox, boot_limit=self._boot)
        self._grade_sandboxes = sandboxes  # None: the grader's default (its own containers, starts not bounded)

    async def start(self) -> None:
        from transformers import AutoTokenizer  # late: heavy, and only the rollout side needs it

        # Each running sample parks blocking Docker calls (a whole agent run's exec) on the default executor, and
        # so does grading: size it for the samples plus the graders, or they starve each other (6 threads on 2 cores).
        workers = 2 * self.settings.rollout.rollout_concurrency + self.settings.sandbox.boot_concurrency + 4
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rollout")
        asyncio.get_running_loop().set_default_executor(self._executor)
        self.tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, self.model)
        self.proxy = RecordingProxy(
            self.upstream,
            model=self.served_model,
            tokenizer=self.tokenizer,
            mode="tokens",
            request_timeout=self.settings.inference.request_timeout,
            tool_parser=tool_call_parser_for(self.model),
            api_key=self.settings.inference.api_key,
        )
        await self.proxy.start()
        warn_network(self.settings.sandbox.sandbox_network)

    async def stop(self) -> None:
        if self.proxy is not None:
            await self.proxy.stop()
            self.proxy = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def begin_sync(self, version: int) -> None:
        """A sync to ``version`` starts: a model call in flight from now may end with its tokens."""
        if self.proxy is not None:
            self.proxy.next_weight_version = version

    def set_weight_version(self, version: int) -> None:
        self.weight_version = version
        if self.proxy is not None:
            self.proxy.weight_version = version

    # --- one sample: start sandbox -> run agent -> take diff -> build trajectory -> grade --------------
    async def run_sample(self, sample: Sample, stats: BatchStats) -> Sample:
        """Fill ``sample`` in place. An infrastructure failure marks it ABORTED with its ``DropReason``; any other
        exception is a bug and propagates."""
        async with self._samples:
            stats.running += 1
            try:
                guard = self.settings.agent.agent_timeout + self.settings.reward.eval_timeout + 120
                return await asyncio.wait_for(self._run_sample(sample), guard)
            except TimeoutError:
                return drop(sample, DropReason.SAMPLE_TIMEOUT, "outer time guard hit")
            except InfraError as exc:
                return drop(sample, exc.reason, str(exc))
            finally:
                stats.running -= 1
                stats.count(sample)

    async def _run_sample(self, sample: Sample) -> Sample:
        clock = Clock()
        try:
            return await self._attempt(sample, clock)
        finally:  # a dropped sample keeps the spans it reached
            stamp(sample, timeline=clock.record())

    async def _attempt(self, sample: Sample, clock: Clock) -> Sample:
        instance = attempt_row(sample)
        stamp(sample, weight_version=self.weight_version)
        t0 = clock.origin_mono
        session = self.proxy.open_session(
            {"instance_id": instance["instance_id"], "index": sample.index}, seed=run_of(sample).attempt_seed
        )

        def fresh_session() -> str:  # a re-run of the agent starts from an empty session
            nonlocal session
            session = self.proxy.restart_session(session.id)
            return session.base_url

        try:  # the sandbox raises SandboxError (an InfraError) for whatever its engine does
            async with (
                self.proxy.endpoint(session.id) as endpoint,
                self._start_sandbox(instance, endpoint.folder) as sandbox,
            ):
                booted = time.monotonic()
                clock.add(BOOT, t0, booted)
                agent = await self._run_agent(sandbox, endpoint.socket_in_container, str(sample.prompt), fresh_session)
                ran = time.monotonic()
                with clock.span(DIFF):
                    patch = await take_diff(sandbox)
                down = time.monotonic()
        finally:  # the model calls made, also when the attempt broke off
            turns = self.proxy.close_session(session.id)
            for kind, start, end, attrs in call_spans(turns):
                clock.add(kind, start, end, attrs)
        if session.bug is not None:  # a bug in the proxy, not the infrastructure: fail loudly
            raise session.bug
        t_agent = time.monotonic()
        clock.add(TEARDOWN, down, t_agent)
        _agent_spans(clock, agent, turns, booted, ran)
        stamp(
            sample,
            conversation=transcript(turns),
            outcome=agent.outcome,
            patch=patch,
            final_message=agent.final_message,
            agent_seconds=round(t_agent - t0, 3),
            tool_calls=agent.tool_calls,
        )
        _check_agent(agent, turns)
        traj = self._build_trajectory(turns)
        with clock.span(GRADE) as attrs:
            grade = await self._grade(instance, patch, agent, traj)
            attrs.update(grade.timings or {})
        return self._fill(sample, traj, grade, turns, grade_seconds=time.monotonic() - t_agent)

    def _start_sandbox(self, instance: dict, endpoint_dir: Any) -> Sandbox:
        """The rollout machine: SANDBOX_NETWORK (default none), the bundle and the session's socket folder mounted,
        what it writes bounded by SANDBOX_DISK."""
        mounts = {str(agent_bundle_dir()): AGENT_MOUNT, str(endpoint_dir): SOCKET_DIR_IN_CONTAINER}
        return self._sandboxes(
            SandboxRequest(
                instance,
                self.settings.label,
                "rollout",
                base_commit=instance.get("base_commit"),
                hide_future=True,
                mounts=mounts,
                disk_limit=parse_size(self.settings.sandbox.sandbox_disk),
            )
        )

    async def _run_agent(
        self, sandbox: Sandbox, model_socket: str, prompt: str, fresh_session: Callable[[], str]
    ) -> AgentResult:
        s = self.settings
        return await run_agent(
            sandbox,
            base_url="",
            model=self.served_model,
            prompt=prompt,
            agent=s.agent,
            inference=s.inference,
            profile="compact" if s.embedded else "full",
            fresh_session=fresh_session,
            model_socket=model_socket,
        )

    def _build_trajectory(self, turns: list) -> Any:
        s = self.settings
        return build_sample(
            turns,
            max_response_len=s.rollout.max_response_len,
            mask_truncated=s.rollout.mask_truncated,
            tokenizer=self.tokenizer,
        )

    async def _grade(self, instance: dict, patch: str, agent: AgentResult, traj: Any) -> Grade:
        stats = {
            "response_tokens": traj.metadata.get("sampled_tokens", traj.response_length),
            "tool_calls": agent.tool_calls,
            "completed": agent.outcome == "completed",
        }
        s = self.settings
        grade = await grade_async(
            instance,
            patch,
            reward=s.reward,
            sandbox=s.sandbox,
            run_id=s.label,
            log_dir=s.output_dir / "grades",
            agent_stats=stats,
            sandboxes=self._grade_sandboxes,
        )
        if grade.status != GradeStatus.GRADED:
            raise GradeAborted(grade.reason or "the grader aborted")
        return grade

    def _fill(self, sample: Sample, traj: Any, grade: Grade, turns: list, grade_seconds: float) -> Sample:
        to_sample(traj, sample)
        if not self.settings.uses_served_logprobs:
            sample.rollout_log_probs = None
        sample.reward = float(grade.reward)
        sample.status = Status.TRUNCATED if traj.metadata.get("truncated") else Status.COMPLETED
        stamp(
            sample,
            resolved=grade.resolved,
            reward_hack_suspected=bool(grade.details.get("reward_hack")),
            f2p_passed=grade.f2p_passed,
            p2p_passed=grade.p2p_passed,
            grade_details=_jsonable(grade.details),
            grade_timings=grade.timings,
            trajectory=_jsonable(traj.metadata),
            turns=len(turns),
            grade_seconds=round(grade_seconds, 3),
        )
        # every version a turn was sampled with (a trajectory may span a sync); the record keeps the oldest, the start's
        started = run_of(sample).weight_version
        assert started is not None  # stamped when the attempt began
        versions = {int(v) for v in sample.weight_versions} | {int(started)}
        sample.weight_versions = [str(v) for v in sorted(versions)]
        return sample

    # --- one batch -----------------------------------------------------------------------------
    async def run_groups(self, groups: list[list[Sample]], stats: BatchStats) -> list[list[Sample]]:
        """Run groups concurrently; return the complete ones (see ``run_batch``)."""

        async def run_samples(samples: list[Sample]) -> None:
            await asyncio.gather(*(self.run_sample(x, stats) for x in samples))

        return await run_batch(run_samples, groups, stats, self.settings.rollout)


def warn_network(network: str) -> None:
    """Say, once per engine, when rollout containers are given a network beyond their model socket."""
    if network != NO_NETWORK:
        log.warning(
            "SANDBOX_NETWORK=%s: rollout containers are not cut off; the agent's shell can reach %s. Use it "
            "only for images whose tests need the network; the default, none, leaves only the session's "
            "model socket",
            network,
            "every service on this host's loopback (the inference server and its "
            "admin routes, the trainer, Ray) and the internet"
            if network == "host"
            else "other machines",
        )


# Runs some samples of one group (a first attempt, or the refills of its dropped ones), filling them in place.
GroupRunner = Callable[[list[Sample]], Awaitable[None]]


async def run_batch(
    run_samples: GroupRunner, groups: list[list[Sample]], stats: BatchStats, rollout: RolloutSettings
) -> list[list[Sample]]:
    """Run groups concurrently; return the complete ones (a group with a dropped sample is refilled or gone).

    ``rollout_timeout`` bounds the whole batch: groups still running then are cancelled (containers removed on the
    way out), their unfinished samples dropped with the reason, never the run crashed; a cancel of the batch cancels
    them alike, dropping nothing (PENDING: no drop, no reward). The local engine and the Ray pool share these rules.
    """
    stats.groups += len(groups)
    stats.planned += sum(len(g) for g in groups)

    async def one_group(group: list[Sample]) -> list[Sample] | None:
        await run_samples(group)
        retries = 2 if rollout.dropped_policy == "replace" else 0
        while retries and any(x.status == Status.ABORTED for x in group):
            retries -= 1
            group = [_fresh_copy(x) if x.status == Status.ABORTED else x for x in group]
            stats.planned += sum(x.status == Status.PENDING for x in group)
            await run_samples([x for x in group if x.status == Status.PENDING])
        return None if any(x.status == Status.ABORTED for x in group) else group

    tasks = [asyncio.ensure_future(one_group(g)) for g in groups]
    late = set(tasks)  # all of them if the caller gives the batch up (a written-off pool group)
    try:
        _, late = await asyncio.wait(tasks, timeout=rollout.rollout_timeout)
    finally:  # asyncio.wait leaves them running; each removes its machines on the way out
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
    for x in (x for g in groups for x in g if x.status == Status.PENDING):
        stats.count(drop(x, DropReason.ROLLOUT_TIMEOUT, f"the batch exceeded {rollout.rollout_timeout:.0f}s"))
    return [g for t in tasks if t not in late and (g := t.result()) is not None]


def _fresh_copy(sample: Sample) -> Sample:
    """A new attempt at the same instance (``dropped_policy=replace``): the row without the failed attempt's record."""
    fresh = copy.deepcopy(sample)
    fresh.status = Status.PENDING
    fresh.metadata = attempt_row(sample)
    fresh.tokens, fresh.loss_mask, fresh.rollout_log_probs, fresh.reward = [], None, None, None
    return fresh


class AgentFailure(InfraError):
    """The agent could not talk to the model (API errors, no successful model call): not the model's doing."""

    def __init__(self, reason: DropReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class GradeAborted(InfraError):
    reason = DropReason.GRADE_ABORTED


def _check_agent(agent: AgentResult, turns: list) -> None:
    if agent.infra:
        raise AgentFailure(DropReason.AGENT_ERROR, agent.log_tail[-300:] if agent.log_tail else agent.outcome)
    if not any(t.ok and t.sampled_ids for t in turns):
        raise AgentFailure(DropReason.NO_MODEL_TURNS, "the agent made no successful model call")


def _agent_spans(clock: Clock, agent: AgentResult, turns: list, booted: float, returned: float) -> None:
    """The agent's run around its model calls (recorded already): set-up, start until the first call, exit after
    the last, clean-up."""
    if not agent.exec_started:
        return
    calls = call_spans(turns)
    clock.add(AGENT_SETUP, booted, agent.exec_started)
    clock.add(AGENT_START, agent.exec_started, calls[0][1] if calls else agent.exec_ended)
    clock.add(AGENT_EXIT, calls[-1][2] if calls else agent.exec_ended, agent.exec_ended)
    clock.add(AGENT_CLEANUP, agent.exec_ended, returned)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def batch_metrics(stats: BatchStats, groups: list[list[Sample]], seconds: float) -> dict[str, float]:
    samples = [x for g in groups for x in g]
    runs = [run_of(x) for x in samples]
    n = max(len(samples), 1)
    return {
        "rollout/groups_requested": stats.groups,
        "rollout/groups_kept": len(groups),
        "rollout/dropped_samples": stats.dropped,
        "rollout/reward_mean": sum(float(x.reward) for x in samples) / n if samples else 0.0,
        "rollout/resolve_rate": sum(bool(r.resolved) for r in runs) / n if samples else 0.0,
        "rollout/reward_hack_suspected": sum(bool(r.reward_hack_suspected) for r in runs),
        "rollout/response_len_mean": sum(x.response_length for x in samples) / n if samples else 0.0,
        "rollout/agent_seconds_mean": sum(r.agent_seconds or 0.0 for r in runs) / n,
        "rollout/grade_seconds_mean": sum(r.grade_seconds or 0.0 for r in runs) / n,
        "time/rollout": seconds,
    }
