"""The warm start's two phases as commands: demonstrations (``python -m qwen_swe.warmstart collect``), then SFT
(``run_grpo.sh`` with ``TRAIN_MODE=sft``), each through the entry point a user would run.

One home for the commands, so the cached warm start (``stage.py``) and the learning benchmark build the same
thing the same way; a runner that gives each command a log, a timeout and a clean stop; and the progress lines a
build of minutes prints while a phase runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from types import MappingProxyType
from typing import Any

from qwen_swe.config.fields import env_name
from qwen_swe.config.profile import WARM_START_AGENT
from qwen_swe.config.settings import all_fields
from qwen_swe.errors import SetupError
from qwen_swe.paths import REPO_ROOT
from qwen_swe.progress import INTERVAL, format_seconds, show
from qwen_swe.progress import line as progress_line
from qwen_swe.supervise import SUPERVISOR

# The agent profile the demonstrations are recorded in, as the phases' environment (the learning benchmark measured
# the warm start with it; the embedded default trains in it).
AGENT_PROFILE: Mapping[str, str] = MappingProxyType({env_name(k): str(v) for k, v in WARM_START_AGENT.items()})
PHASE_TIMEOUT = 3 * 3600.0  # seconds; the longest warm start measured here took about half an hour
PROGRESS_INTERVAL = INTERVAL  # seconds between progress lines within a phase
STOP_GRACE = 60.0  # seconds a stopped phase has to remove its containers and its trainer
# A stopped SFT loses at most a third of its steps; a checkpoint of SmolLM2 with its optimizer costs seconds.
SFT_CHECKPOINTS = 3
# Settings that say where and with what a phase runs, not what it computes: the user's values pass through.
# Every other setting in the caller's environment is removed, so a phase computes what its command says and
# nothing an exported LORA_RANK or MAX_TURNS adds; a setting added later is removed until it is listed here.
RESOURCE_SETTINGS = frozenset(
    {
        "SANDBOX_CPUS",
        "SANDBOX_MEMORY",
        "SANDBOX_NETWORK",
        "BOOT_CONCURRENCY",
        "ROLLOUT_CONCURRENCY",
        "ROLLOUT_TIMEOUT",
        "EVAL_TIMEOUT",
        "REQUEST_TIMEOUT",
        "STOP_TIMEOUT",
        "IMAGE_NAMESPACE",
        "ROLLOUT_BACKEND",
        "RAY_ADDRESS",
        "RAY_WORKERS_PER_NODE",
        "TRAIN_PROCS",
        "MICRO_BATCH_SIZE",
        "ACTIVATION_CHECKPOINTING",
        "WEIGHT_LOADING",
    }
)

Command = tuple[list[str], dict[str, str]]  # argv, and the settings it runs with (over the caller's environment)


def _common(model: str, seed: int, mixed_precision: bool) -> dict[str, str]:
    return {**AGENT_PROFILE, "MODEL": model, "SEED": str(seed), "MIXED_PRECISION": str(mixed_precision).lower()}


def collect_command(
    out: Path, dataset: Path, model: str, recover: float, seed: int, mixed_precision: bool, run_id: str
) -> Command:
    """Demonstrations of the tasks in ``dataset`` into ``out`` (``demos.jsonl``, ``demos_report.json``).
    ``model``'s tokenizer and chat template shape the demonstrations' token ids, so it is the model SFT trains;
    ``run_id`` labels the containers, which the phase removes by that label when it ends."""
    return (
        [sys.executable, "-m", "qwen_swe.warmstart", "collect", "--out", str(out), "--recover", str(recover)],
        {
            **_common(model, seed, mixed_precision),
            "DATASET": str(dataset),
            "OUTPUT_DIR": str(out),
            "REWARD_MODE": "binary",
            "RUN_ID": run_id,
        },
    )


def sft_command(
    demos: Path, out: Path, model: str, steps: int, batch: int, lr: float, seed: int, mixed_precision: bool, run_id: str
) -> Command:
    """``steps`` supervised steps of ``batch`` demonstrations from ``demos`` on ``model``, in the run folder ``out``;
    ``SFT_CHECKPOINTS`` checkpoints, the last at the end, so the run's last ``weights/v*`` folder is the result
    (``latest_weights``) and the same command, run again into ``out`` after a stop, resumes from the newest."""
    return (
        ["bash", str(REPO_ROOT / "examples" / "qwen_swe" / "run_grpo.sh")],
        {
            **_common(model, seed, mixed_precision),
            "TRAIN_MODE": "sft",
            "SFT_DATA": str(demos),
            "NUM_ROLLOUTS": str(steps),
            "ROLLOUT_BATCH_SIZE": str(batch),
            "LR": str(lr),
            "OUTPUT_DIR": str(out),
            "KEEP_CHECKPOINTS": "1",
            "SAVE_INTERVAL": str(-(-steps // SFT_CHECKPOINTS)),
            "RUN_ID": run_id,
            # SFT has no server or containers beside it: a 3000-token demonstration's activations (about 2.5 GB a
            # rank) fit, and recomputing them made a step slower (117-137 s against 92-117 s on idle cores). The
            # gradient is the same either way, so the warm start's key does not hold it; a user's value still wins.
            "ACTIVATION_CHECKPOINTING": os.environ.get("ACTIVATION_CHECKPOINTING", "false"),
        },
    )


def latest_weights(run: Path) -> Path:
    """The newest exported HF folder of a training run (``OUTPUT_DIR/weights/v{version:06d}``)."""
    versions = sorted(p for p in (run / "weights").glob("v*") if p.is_dir() and p.name[1:].isdigit())
    if not versions:
        raise SetupError(f"{run} has no weights/v*: the run made no update; see its log")
    return versions[-1]


def child_env(env: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) without its run settings (``RESOURCE_SETTINGS`` excepted), then ``env``."""
    base = os.environ if base is None else base
    settings = {env_name(f.name) for f in all_fields()} - RESOURCE_SETTINGS
    return {**{k: v for k, v in base.items() if k not in settings}, **env}


def run_logged(cmd: list[str], env: dict[str, str], log: Path, timeout: float = PHASE_TIMEOUT) -> None:
    """Run one phase from the repository root, its output in ``log``; stopped (its process group: SIGTERM, then
    SIGKILL after ``STOP_GRACE``) on a timeout, a failure or an interrupt, so nothing it started outlives it."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:  # a resumed phase's log keeps the stopped attempt's
        proc = SUPERVISOR.spawn(cmd, cwd=REPO_ROOT, env=child_env(env), stdout=out, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SetupError(f"{' '.join(cmd)} did not finish in {timeout:.0f} s; see {log}") from None
        finally:
            SUPERVISOR.stop(proc, STOP_GRACE)
    if code != 0:
        raise SetupError(f"{' '.join(cmd)} exited {code}; see {log}:\n{log.read_text()[-3000:]}")


class StepsDone:
    """The SFT steps done of ``steps``: the lines of the phase's ``metrics.jsonl``, one a step (none without it)."""

    def __init__(self, metrics: Path | None, steps: int) -> None:
        self.metrics, self.steps = metrics, steps

    @property
    def total(self) -> int:
        return self.steps if self.metrics is not None else 0

    @property
    def done(self) -> int:
        if self.metrics is None:
            return 0
        try:
            return min(sum(1 for line in self.metrics.read_text().splitlines() if line.strip()), self.steps)
        except OSError:  # not written yet
            return 0

    def detail(self) -> str:
        return ""


class Progress:
    """A phase's start, its progress while it runs (``qwen_swe.progress``: a line every ``interval`` seconds behind
    a pipe, with the SFT steps done and an ETA when ``metrics`` counts them; a bar on a terminal) and its end;
    on stdout, flushed, beside the build's other lines."""

    def __init__(self, phase: str, interval: float, metrics: Path | None = None, steps: int = 0) -> None:
        self.label, self.interval, self.counts = f"warm start: {phase}", interval, StepsDone(metrics, steps)
        self.start = time.monotonic()
        self.view: AbstractContextManager[None] | None = None

    def line(self) -> str:
        return progress_line(self.label, self.counts, time.monotonic() - self.start, "steps")

    def __enter__(self) -> Progress:
        self.start = time.monotonic()
        print(f"{self.label} ...", flush=True)
        self.view = show(self.counts, self.label, unit="steps", interval=self.interval, file=sys.stdout)
        self.view.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.view is not None:
            self.view.__exit__(*exc)
        print(
            f"{self.label} {'done' if exc[0] is None else 'failed'} in {format_seconds(time.monotonic() - self.start)}",
            flush=True,
        )
