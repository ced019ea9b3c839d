"""The real loop against the scripted model, for PARTIAL_ROLLOUTS' end-to-end test and benchmark
(``tests/e2e/test_partial_run.py``, ``benchmarks/bench_partial.py``).

Everything is real but the model's choices: the trainer under torchrun (FSDP2 on CPU, training SmolLM2-135M), the
driver and its proxy, the Docker sandbox, qwen-code and the grader, on the embedded default's generated tasks (whose
fixes are one-line edits). The trainer is started as ``run.py`` starts it, with the embedded profile's agent and
reward and the scripted vLLM (``tests/scripted_vllm.py``) as the run's server.

The scripted model's plan for each rollout is drawn at its first call, from a seeded generator: whether it fixes the
bug (alternating per instance: the first attempt at an instance fixes it, the second does not, ..., so a group of 2
has both outcomes) and its model time (``seconds``), spread evenly over its calls. The first call writes a
``run_shell_command`` with the plan's number, which every later prompt of the rollout holds, so the plan is found again.
A fixing rollout is: the numbered shell call, ``read_file`` of the file, the gold ``edit``, a final message; a failing
one skips the edit.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwen_swe.config.profile import with_profile
from qwen_swe.config.settings import Settings
from qwen_swe.paths import REPO_ROOT, embedded_model_dir, embedded_tasks, python_path
from qwen_swe.run import trainer_command
from qwen_swe.sandbox.docker_host import reap
from qwen_swe.supervise import SUPERVISOR
from tests.scripted_server import Context, Reply
from tests.scripted_vllm import Held
from tests.task_pack import gold_edit
from tests.toolcall_text import hermes_call

PLAN = re.compile(r"qsplan-(\d+)")
Seconds = Callable[[random.Random, str, int], float]  # (generator, instance, version) -> model seconds


def fixable_rows() -> list[dict[str, Any]]:
    """The embedded default's generated train tasks (every fix a one-line edit, every issue text its own)."""
    rows = [json.loads(line) for line in embedded_tasks().read_text().splitlines() if line.strip()]
    return [r for r in rows if gold_edit(r["patch"])]


@dataclass
class Plan:
    number: int
    instance_id: str
    fixes: bool
    seconds: float
    version: int  # the served version when the rollout began
    hold_until: int = 0  # its second call is generated only once this version is served

    @property
    def calls(self) -> int:
        return 4 if self.fixes else 3


@dataclass
class PlanScript:
    """The scripted model's choices; ``seconds`` draws a rollout's model time, ``hold`` (instance, version) a
    version its second call waits for (0: none)."""

    rows: list[dict[str, Any]]
    seed: int
    seconds: Seconds
    version: Callable[[], int] = lambda: 0
    hold: Callable[[str, int], int] = lambda instance, version: 0
    plans: list[Plan] = field(default_factory=list)
    _tried: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.by_id = {r["instance_id"]: r for r in self.rows}

    def __call__(self, ctx: Context) -> Reply:
        if "<|im_start|>" not in ctx.prompt_text:
            return Reply(text="ok")  # not a rollout (the sync's probe)
        found = PLAN.search(ctx.prompt_text)
        plan = self.plans[int(found.group(1))] if found else self._new(ctx.prompt_text)
        turn = ctx.assistant_turns
        text = self._text(plan, turn)
        delay = plan.seconds / plan.calls
        if turn == 1 and plan.hold_until:
            return Held(text=text, delay=delay, until_version=plan.hold_until)
        return Reply(text=text, delay=delay)

    def _new(self, prompt: str) -> Plan:
        row = next((r for r in self.rows if r["problem_statement"].strip() in prompt), None) or next(
            (r for r in self.rows if r["problem_statement"].strip()[:300] in prompt), None
        )
        if row is None:
            raise AssertionError(f"no instance's issue in the prompt: {prompt[-500:]!r}")
        iid = row["instance_id"]
        self._tried[iid] = self._tried.get(iid, 0) + 1
        version = self.version()
        plan = Plan(
            len(self.plans),
            iid,
            self._tried[iid] % 2 == 1,
            self.seconds(self.rng, iid, version),
            version,
            self.hold(iid, version),
        )
        self.plans.append(plan)
        return plan

    def _text(self, plan: Plan, turn: int) -> str:
        row = self.by_id[plan.instance_id]
        path, old, new = gold_edit(row["patch"]) or ("", "", "")
        steps = [
            hermes_call("run_shell_command", command=f"echo qsplan-{plan.number}"),
            hermes_call("read_file", file_path=f"/testbed/{path}"),
            *(
                [hermes_call("edit", file_path=f"/testbed/{path}", old_string=old, new_string=new)]
                if plan.fixes
                else []
            ),
            "Done.",
        ]
        return steps[min(turn, len(steps) - 1)]


def run_settings(out: Path, url: str, **values: Any) -> Settings:
    """The embedded default's run (its generated tasks, compact agent, binary reward, SmolLM2 trained on CPU) against
    ``url``; ``values`` (flat setting names) override."""
    given = {
        "output_dir": out,
        "model": str(embedded_model_dir()),
        "served_model_name": "scripted",
        "served_url": url,
        "stop_timeout": 20.0,
        **values,
    }
    return Settings.build(**with_profile(given))


def run_trainer(settings: Settings, timeout: float) -> subprocess.CompletedProcess:
    """The trainer as ``run.py`` starts it (torchrun, its own process group), stopped as a group on a timeout; the
    run's containers are reaped afterwards whatever happened."""
    cmd = trainer_command(settings, settings.write(settings.output_dir))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": python_path(inherited=os.environ.get("PYTHONPATH"))}
    log = (settings.output_dir / "trainer.log").open("w")
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    finally:  # also when the test's own time limit raises in here: a test never leaves its trainer running
        SUPERVISOR.stop(proc, grace=60)  # as run.py stops its trainer: the group, SIGKILL after the grace
        log.close()
        reap(settings.label)  # waits for the creates in flight when the trainer died
    return subprocess.CompletedProcess(cmd, proc.returncode, (settings.output_dir / "trainer.log").read_text(), "")


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
