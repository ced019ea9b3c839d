"""Does the loop learn? Two questions, each with its own number, on generated tasks, on this machine.

- *Does GRPO fit?* (``--fit-tasks N``) A fixed set of N train tasks, never demonstrated, attempted ``--fit-k``
  times each before and after GRPO on exactly those tasks. It shows the optimizer works end to end (rollout
  log-probs, masks, advantages, ratios, weight sync push the policy toward reward); it is not generalisation.
  ``--fit-screen K`` picks them by a screen (K attempts of ``--fit-candidates`` tasks, seeds of its own): those
  resolved sometimes but not always, where a group can hold both outcomes; the before/after attempts are fresh.
- *Does it transfer?* The same before/after on held-out tasks (bug sites never trained on), with its interval and
  paired test; and base -> warm start on them (``--eval-base``).

The protocol, every phase through the project's own entry points (real Docker, qwen-code, proxy, vLLM CPU server,
FSDP2 trainer, swebench grading):

1. generate   ``python -m qwen_swe.data.generate --seed S``: bug-injection tasks, split by bug site into train and
              held-out (no held-out function is ever trained on).
2. warm start ``python -m qwen_swe.warmstart collect`` on train tasks only (the scripted expert through the real
              agent and proxy, resolved rollouts kept), then ``run_grpo.sh`` with ``TRAIN_MODE=sft``; with
              ``--stage``, the cached warm-start stage (``python -m qwen_swe.warmstart build``: the embedded
              default's policy when the inputs are its own).
3. evaluate   ``run_eval.sh`` on the held-out tasks (and the fit tasks), k attempts each, binary verdicts.
4. train      ``run_grpo.sh`` from the warm-started weights, ``REWARD_MODE=binary``: on the fit tasks with
              ``--fit-tasks``, else on the train tasks.
5. evaluate   the same attempts on the final weights: the end.

Every evaluation attempt samples with a seed derived from (``--seed``, task, attempt) and the same attempts are
made before and after (common random numbers); the GRPO rollouts send no seed, so no evaluation attempt reuses a
training rollout's randomness.

Prints both resolve rates with Wilson intervals, their difference with a one-sided two-proportion z-test and,
paired by task, the tasks gained and lost with an exact one-sided sign-flip test, the reward curve, and the wall
time per phase; writes the curve to ``WORK/learning.png`` and everything to ``WORK/learning.json``. The reference
of the timing ratio is the whole protocol's wall time, each phase summed over every invocation with the same
``--work`` (a rerun skips finished phases and resumes the others).

    .venv/bin/python -m benchmarks.bench_learning [--seed 0] [--heldout-tasks 32 --k 2] [--rl-steps 8]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qwen_swe.config.hardware import native_bf16
from qwen_swe.config.settings import load_settings
from qwen_swe.evaluate.report import wilson
from qwen_swe.evaluate.stats import one_sided_z, paired_sign_flip
from qwen_swe.inference.embedded_server import embedded_server
from qwen_swe.paths import cache_home, embedded_model_dir
from qwen_swe.supervise import install as install_supervisor
from qwen_swe.warmstart.expert import one_line_fix
from qwen_swe.warmstart.phases import AGENT_PROFILE, collect_command, latest_weights, run_logged, sft_command
from qwen_swe.warmstart.stage import MANIFEST, WarmStartSpec, ensure_warm_start

# The agent profile a small model can act in, the same in every phase (warm start, evaluation, training).
# Its sampling temperature is --temperature, or the one --pick-temperature chooses on train tasks.
AGENT = dict(AGENT_PROFILE)  # the warm start's agent profile, so its demonstrations and every phase agree
SCREEN_SEED_OFFSET = 1_000_003  # the fit screen's SEED: its attempts' derived seeds are apart from the evaluations'
EDIT_ERRORS = ("No changes to apply", "0 occurrences found")  # qwen-code's edit tool: a no-op, old text not found


class SharedServer:
    """The embedded CPU server of the weights being evaluated, started when an evaluation first needs them and kept
    for every evaluation of the same weights (a start costs about a minute of the 2 cores); one at a time. A phase
    points at it with the embedded profile it would have had on a server of its own (PROFILE=embedded)."""

    def __init__(self, work: Path) -> None:
        self.log_dir = work / "servers"
        self.model: Path | None = None
        self._stack = contextlib.ExitStack()
        self._env: dict[str, str] = {}

    def env(self, model: Path) -> dict[str, str]:
        if model != self.model:
            self.close()
            key = secrets.token_urlsafe(32)
            settings = load_settings([], env={"MODEL": str(model)})
            url = self._stack.enter_context(
                embedded_server(settings, log_dir=self.log_dir, model_dir=model, api_key=key)
            )
            self.model, self._env = model, {"VLLM_URL": url, "VLLM_API_KEY": key, "PROFILE": "embedded"}
        return self._env

    def close(self) -> None:
        self._stack.close()
        self.model = None


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class PhaseClock:
    """Wall time per phase, this invocation's and summed over every invocation with the same ``--work``: a rerun
    skips the phases whose result is there and resumes the others, and the budget must count them as they ran."""

    def __init__(self, path: Path) -> None:
        self.path, self.now = path, {}
        self.all: dict[str, float] = json.loads(path.read_text()) if path.is_file() else {}

    def add(self, phase: str, seconds: float) -> None:
        self.now[phase] = seconds
        self.all[phase] = self.all.get(phase, 0.0) + seconds
        self.path.write_text(json.dumps(self.all, indent=1) + "\n")  # after each phase: a crash keeps the rest


def _rate(res: dict[str, Any]) -> float:
    return res["resolved"] / max(res["attempts"], 1)


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two evaluations of the same attempts: the one-sided z-test of b's rate over a's, and the paired sign-flip."""
    z, p = one_sided_z(a["resolved"], a["attempts"], b["resolved"], b["attempts"])
    return {"z": z, "p_one_sided": p, "paired": paired_sign_flip(a["per_task"], b["per_task"])}


def split_train(train: list[dict[str, Any]], seed: int, rl_sites: float) -> tuple[list[dict], list[dict]]:
    """(tasks the expert may demonstrate, tasks GRPO trains on): with ``rl_sites`` > 0 that fraction of the train
    bug sites (a seeded shuffle) is kept for GRPO and never demonstrated, so a reward there needs the skill the warm
    start taught rather than a demonstration remembered; with 0 both are all of train."""
    if not 0 <= rl_sites < 1:
        raise ValueError(f"--rl-sites must be in [0, 1), got {rl_sites}")
    if not rl_sites:
        return train, train
    sites = sorted({r["bug_site"] for r in train})
    random.Random(f"rl-sites-{seed}").shuffle(sites)
    kept = set(sites[: max(1, round(len(sites) * rl_sites))])
    demo = [r for r in train if r["bug_site"] not in kept]
    if not demo:
        raise ValueError(f"--rl-sites {rl_sites} leaves no train site to demonstrate ({len(sites)} sites)")
    return demo, [r for r in train if r["bug_site"] in kept]


def _calls(rollout: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(tool name, arguments) of every call the policy made in a recorded rollout."""
    messages = (rollout.get("conversation") or {}).get("messages") or []
    out = []
    for c in (c for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []):
        try:
            arguments = json.loads(c["function"].get("arguments") or "{}")
        except ValueError:
            arguments = {}
        out.append((c["function"]["name"], arguments if isinstance(arguments, dict) else {}))
    return out


def _edit_error(rollout: dict[str, Any]) -> bool:
    """Whether an edit was refused: qwen-code's answers to an edit that changes nothing or whose text is not there."""
    messages = (rollout.get("conversation") or {}).get("messages") or []
    return any(m.get("role") == "tool" and any(e in str(m.get("content")) for e in EDIT_ERRORS) for m in messages)


def funnel(rollouts: list[dict[str, Any]], rows: dict[str, dict[str, Any]]) -> dict[str, int]:
    """How far attempts get, counted against each task's gold patch: a tool call, reading the file to fix, an edit
    whose ``old_string`` holds the buggy line, the gold fix exactly, a patch, resolved; and on the side, the
    attempts with a refused edit (``EDIT_ERRORS``) and those of them resolved all the same (recovered)."""
    out = dict.fromkeys(
        (
            "attempts",
            "tool_call",
            "read_target",
            "edit_buggy_line",
            "exact_fix",
            "patch",
            "resolved",
            "edit_error",
            "recovered",
        ),
        0,
    )
    for r in rollouts:
        if r.get("status") == "aborted":
            continue
        fix = one_line_fix(rows[r["instance_id"]]["patch"]) if r["instance_id"] in rows else None
        calls = _calls(r)
        edits = [a for name, a in calls if name == "edit"]
        buggy = fix.buggy.strip() if fix else None
        refused = _edit_error(r)
        hits = {
            "attempts": True,
            "tool_call": bool(calls),
            "read_target": bool(fix)
            and any(name == "read_file" and str(a.get("file_path", "")).endswith("/" + fix.path) for name, a in calls),
            "edit_buggy_line": bool(buggy) and any(buggy in str(e.get("old_string", "")) for e in edits),
            "exact_fix": bool(fix)
            and any(
                str(e.get("old_string", "")).strip() == buggy
                and str(e.get("new_string", "")).strip() == fix.fixed.strip()
                for e in edits
            ),
            "patch": bool((r.get("patch") or "").strip()),
            "resolved": bool(r.get("resolved")),
            "edit_error": refused,
            "recovered": refused and bool(r.get("resolved")),
        }
        for key, hit in hits.items():
            out[key] += bool(hit)
    return out


def rollout_fractions(rollouts: Path) -> dict[str, float]:
    """Of the training rollouts: the fractions that call a tool, that edit a file, that leave a patch, resolved."""
    rows = [json.loads(line) for f in sorted(rollouts.glob("step_*.jsonl")) for line in f.read_text().splitlines()]
    rows = [r for r in rows if r.get("status") != "aborted"]
    n = max(len(rows), 1)
    return {
        "rollouts": len(rows),
        "tool_call": sum(bool(_calls(r)) for r in rows) / n,
        "edit_call": sum(bool({"edit", "write_file"} & {name for name, _ in _calls(r)}) for r in rows) / n,
        "non_empty_patch": sum(bool((r.get("patch") or "").strip()) for r in rows) / n,
        "resolved": sum(bool(r.get("resolved")) for r in rows) / n,
    }


def evaluate_phase(
    name: str,
    model: Path,
    heldout: Path,
    k: int,
    work: Path,
    seed: int,
    temperature: float,
    server: SharedServer,
) -> dict[str, Any]:
    """``k`` attempts at each task of ``heldout`` by ``model``, on the server of its weights."""
    out = work / name
    run_logged(
        ["bash", "examples/qwen_swe/run_eval.sh"],
        {
            **AGENT,
            **server.env(model),
            "TEMPERATURE": str(temperature),
            "MODEL": str(model),
            "DATASET": str(heldout),
            "EVAL_SAMPLES": str(k),
            "OUTPUT_DIR": str(out),
            "REWARD_MODE": "binary",
            "SEED": str(seed),
            "RUN_ID": f"qwen-swe-bench-{name}",
        },
        work / f"{name}.log",
    )
    results = read_rows(out / "eval" / "results.jsonl")
    graded = [r for r in results if r["outcome"] != "error"]
    per_task: dict[str, int] = {}
    for r in graded:
        per_task[r["instance_id"]] = per_task.get(r["instance_id"], 0) + (r["outcome"] == "resolved")
    return {
        "attempts": len(graded),
        "resolved": sum(r["outcome"] == "resolved" for r in graded),
        "empty": sum(r["outcome"] == "empty_patch" for r in graded),
        "errors": len(results) - len(graded),
        "per_task": per_task,
    }


def screen_fit_tasks(
    rows: list[dict[str, Any]],
    args: argparse.Namespace,
    model: Path,
    work: Path,
    temperature: float,
    server: SharedServer,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The first ``--fit-candidates`` of ``rows``, attempted ``--fit-screen`` times each with seeds of their own
    (``SEED`` + SCREEN_SEED_OFFSET: no evaluation or training rollout uses them); kept, in order, those the policy
    resolved sometimes but not always: the tasks where a group can have both outcomes. The fit's before and after
    attempts are fresh, so the selection does not bias the comparison."""
    candidates = _write_rows(work / "fit_candidates.jsonl", rows[: args.fit_candidates])
    res = evaluate_phase(
        "fit_screen", model, candidates, args.fit_screen, work, args.seed + SCREEN_SEED_OFFSET, temperature, server
    )
    kept = [r for r in read_rows(candidates) if 0 < res["per_task"].get(r["instance_id"], 0) < args.fit_screen]
    return kept, res


def run_protocol(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_learning_"))
    work.mkdir(parents=True, exist_ok=True)
    server = SharedServer(work)
    try:
        return _protocol(args, work, server)
    finally:
        server.close()


def _protocol(args: argparse.Namespace, work: Path, server: SharedServer) -> dict[str, Any]:
    print(f"bench_learning: seed {args.seed}, work {work}", flush=True)
    clock = PhaseClock(work / "phase_times.json")
    t0 = time.monotonic()

    tasks = work / "tasks"
    if not (tasks / "report.json").is_file():  # a phase whose result is there is skipped (evaluations resume)
        run_logged(
            [
                sys.executable,
                "-m",
                "qwen_swe.data.generate",
                "--seed",
                str(args.seed),
                "--count",
                str(args.count),
                "--out",
                str(tasks),
                *(["--localized"] if args.localized else []),
            ],
            {},
            work / "generate.log",
        )
    clock.add("generate", time.monotonic() - t0)
    rng = random.Random(f"bench-{args.seed}")
    train = read_rows(tasks / "train.jsonl")
    heldout = read_rows(tasks / "heldout.jsonl")
    rng.shuffle(train)
    rng.shuffle(heldout)
    demo_pool, rl_pool = split_train(train, args.seed, args.rl_sites)
    demo_rows = _write_rows(work / "demo_tasks.jsonl", demo_pool[: args.demos or None])
    heldout_rows = _write_rows(work / "heldout_eval.jsonl", heldout[: args.heldout_tasks])
    train_rows = _write_rows(work / "train.jsonl", rl_pool)
    assert not {r["bug_site"] for r in train} & {r["bug_site"] for r in heldout}, "a held-out site is in train"

    t = time.monotonic()
    common = {**AGENT, "SEED": str(args.seed), "MIXED_PRECISION": str(args.mixed_precision).lower()}
    model = args.model or str(embedded_model_dir())  # its tokenizer and chat template shape the demos
    if args.stage:  # the cached stage draws its demonstrations from the whole train split
        if args.rl_sites:
            raise ValueError("--stage draws its demonstrations from every train site; drop --rl-sites")
        start_model = ensure_warm_start(
            WarmStartSpec(
                model=Path(model),
                tasks=tasks / "train.jsonl",
                demos=args.demos,
                recover=args.demo_recover,
                steps=args.sft_steps,
                batch=args.sft_batch,
                lr=args.sft_lr,
                seed=args.seed,
                mixed_precision=args.mixed_precision,
            ),
            cache_home(),
        )
        manifest = json.loads((start_model.parent / MANIFEST).read_text())
        demos, demonstrated = manifest["demos"], set(manifest["demo_tasks"])
    else:
        if not (work / "demos" / "demos_report.json").is_file():
            run_logged(
                *collect_command(
                    work / "demos",
                    demo_rows,
                    model,
                    args.demo_recover,
                    args.seed,
                    args.mixed_precision,
                    "qwen-swe-bench-demos",
                ),
                work / "collect.log",
            )
        demos = json.loads((work / "demos" / "demos_report.json").read_text())
        demonstrated = {r["instance_id"] for r in read_rows(demo_rows)}
        if not (work / "sft" / "weights" / f"v{args.sft_steps:06d}").is_dir():  # the warm start's last weights
            run_logged(
                *sft_command(
                    work / "demos" / "demos.jsonl",
                    work / "sft",
                    model,
                    args.sft_steps,
                    args.sft_batch,
                    args.sft_lr,
                    args.seed,
                    args.mixed_precision,
                    "qwen-swe-bench-sft",
                ),
                work / "sft.log",
            )
        start_model = latest_weights(work / "sft")
    clock.add("warm_start", time.monotonic() - t)
    t = time.monotonic()
    temperature, picked = args.temperature, {}
    if args.pick_temperature:  # on train tasks only, before any held-out attempt
        pick_rows = _write_rows(work / "pick_tasks.jsonl", rl_pool[: args.pick_tasks])
        for value in sorted(args.pick_temperature, reverse=True):
            picked[value] = evaluate_phase(
                f"pick_t{value:g}", start_model, pick_rows, 1, work, args.seed, value, server
            )
        temperature = max(picked, key=lambda v: picked[v]["resolved"])  # ties: the first, the highest temperature
        clock.add("pick_temperature", time.monotonic() - t)

    # The fit set: train tasks the warm start never saw demonstrated, a seeded draw fixed before any attempt.
    undemonstrated = [r for r in rl_pool if r["instance_id"] not in demonstrated]
    screen = None
    if args.fit_tasks and args.fit_screen:
        t = time.monotonic()
        undemonstrated, screen = screen_fit_tasks(undemonstrated, args, start_model, work, temperature, server)
        clock.add("fit_screen", time.monotonic() - t)
    fit_rows = _write_rows(work / "fit_tasks.jsonl", undemonstrated[: args.fit_tasks])
    if args.fit_tasks and len(read_rows(fit_rows)) < args.fit_tasks:
        raise ValueError(
            f"--fit-tasks {args.fit_tasks}: only {len(read_rows(fit_rows))} train tasks were not "
            "demonstrated (and passed --fit-screen); ask for fewer, demonstrate fewer (--demos), or "
            "screen more (--fit-candidates)"
        )

    before = after = base = None  # --heldout-tasks 0: the fit question only
    if args.heldout_tasks:
        t = time.monotonic()
        before = evaluate_phase("eval_start", start_model, heldout_rows, args.k, work, args.seed, temperature, server)
        clock.add("eval_start", time.monotonic() - t)
    fit_before = None
    if args.fit_tasks:
        t = time.monotonic()
        fit_before = evaluate_phase(
            "fit_start", start_model, fit_rows, args.fit_k, work, args.seed, temperature, server
        )
        clock.add("fit_start", time.monotonic() - t)
    if args.eval_base and before:  # what the warm start did on the held-out tasks: the same attempts, base model
        t = time.monotonic()
        base = evaluate_phase("eval_base", Path(model), heldout_rows, args.k, work, args.seed, temperature, server)
        clock.add("eval_base", time.monotonic() - t)

    server.close()  # the GRPO run starts its own, beside its trainer
    t = time.monotonic()
    rl = work / "rl"
    rl_temperature = temperature if args.rl_temperature is None else args.rl_temperature
    run_logged(
        ["bash", "examples/qwen_swe/run_grpo.sh"],
        {
            **common,
            "TEMPERATURE": str(rl_temperature),
            "MODEL": str(start_model),
            "DATASET": str(fit_rows if args.fit_tasks else train_rows),
            "REWARD_MODE": "binary",
            "NUM_ROLLOUTS": str(args.rl_steps),
            "ROLLOUT_BATCH_SIZE": str(args.rl_batch),
            "N_SAMPLES": str(args.n_samples),
            "LR": str(args.rl_lr),
            "OUTPUT_DIR": str(rl),
            "DYNAMIC_SAMPLING": str(args.dynamic_sampling).lower(),
            "SAMPLING_ROUNDS": str(args.sampling_rounds),
            "KL_LOSS_COEF": str(args.kl_coef),
            "LORA_RANK": str(args.rl_lora_rank),
            "KEEP_CHECKPOINTS": "1",
            "LR_WARMUP_STEPS": str(args.rl_warmup_steps),
            "SAVE_INTERVAL": str(args.rl_steps),
            "RUN_ID": "qwen-swe-bench-rl",
        },
        work / "rl.log",
    )
    steps = read_rows(rl / "metrics.jsonl")
    end_model = latest_weights(rl) if any(not s.get("skipped_update") for s in steps) else start_model
    clock.add("rl", time.monotonic() - t)

    if before:
        t = time.monotonic()
        after = evaluate_phase("eval_end", end_model, heldout_rows, args.k, work, args.seed, temperature, server)
        clock.add("eval_end", time.monotonic() - t)
    fit = None
    if fit_before:
        t = time.monotonic()
        fit_after = evaluate_phase("fit_end", end_model, fit_rows, args.fit_k, work, args.seed, temperature, server)
        clock.add("fit_end", time.monotonic() - t)
        fit = {
            "tasks": len(read_rows(fit_rows)),
            "screen": screen,
            "before": fit_before,
            "after": fit_after,
            "difference": _rate(fit_after) - _rate(fit_before),
            **compare(fit_before, fit_after),
        }
    trained_ids = {r["instance_id"] for f in (rl / "rollouts").glob("step_*.jsonl") for r in read_rows(f)}
    assert not trained_ids & {r["instance_id"] for r in heldout}, "a held-out task reached GRPO"
    times = {**clock.now, "total": time.monotonic() - t0}
    times_all = {**clock.all, "total": sum(clock.all.values())}

    if base:  # base -> start: the warm start's own change, tested as GRPO's start -> end is
        base = {**base, **compare(base, before)}
    result = {
        "seed": args.seed,
        "args": vars(args),
        "demos": demos,
        "temperature": temperature,
        "rl_temperature": rl_temperature,
        "temperature_on_train": {f"{v:g}": r["resolved"] for v, r in picked.items()},
        "before": before,
        "after": after,
        "base": base,
        "fit": fit,
        **({"difference": _rate(after) - _rate(before), **compare(before, after)} if before and after else {}),
        "times": times,
        "times_all_invocations": times_all,
        "reward_curve": [s.get("reward_mean") for s in steps],
        "resolve_curve": [s.get("resolve_rate") for s in steps],
        "kl_to_start": [s.get("kl_ref") for s in steps],
        "groups_drawn": [s.get("sampling/groups_drawn", s.get("rollout/groups_requested")) for s in steps],
        "updates": sum(not s.get("skipped_update") for s in steps),
        "end_model": str(end_model),
        "rollouts": rollout_fractions(rl / "rollouts"),
        "funnels": funnels(work),
    }
    (work / "learning.json").write_text(json.dumps(result, indent=1) + "\n")
    _plot(steps, before, after, fit, work / "learning.png")
    _report(result, work)
    return result


def funnels(work: Path) -> dict[str, dict[str, int]]:
    """The funnel of the held-out attempts at the start and the end, and of the GRPO rollouts on train tasks."""
    rows = {r["instance_id"]: r for split in ("train", "heldout") for r in read_rows(work / "tasks" / f"{split}.jsonl")}
    files = {
        "heldout_start": [work / "eval_start" / "eval" / "rollouts.jsonl"],
        "heldout_end": [work / "eval_end" / "eval" / "rollouts.jsonl"],
        "fit_start": [work / "fit_start" / "eval" / "rollouts.jsonl"],
        "fit_end": [work / "fit_end" / "eval" / "rollouts.jsonl"],
        "grpo_train": sorted((work / "rl" / "rollouts").glob("step_*.jsonl")),
    }
    return {
        name: funnel([r for f in paths if f.is_file() for r in read_rows(f)], rows)
        for name, paths in files.items()
        if any(f.is_file() for f in paths)
    }


def _plot(steps: list[dict[str, Any]], before: dict | None, after: dict | None, fit: dict | None, png: Path) -> None:
    import matplotlib  # late: only for the picture

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [s["step"] for s in steps]
    ax.plot(xs, [s.get("reward_mean", 0.0) for s in steps], marker="o", label="train reward (binary, mean)")
    ax.plot(xs, [s.get("resolve_rate", 0.0) for s in steps], marker="s", label="train resolve rate")
    end = max(xs, default=0) + 0.5
    points = [("held-out start", before, -0.5, "*"), ("held-out end", after, end, "*")] if before and after else []
    if fit:
        points += [("fit tasks start", fit["before"], -0.5, "D"), ("fit tasks end", fit["after"], end, "D")]
    for name, res, x, marker in points:
        ax.scatter([x], [_rate(res)], marker=marker, s=120, label=f"{name}: {_rate(res):.2f}")
    ax.set_xlabel("GRPO step")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def _report_heldout(r: dict[str, Any], rate: Callable[[dict], str]) -> None:
    print(f"held-out start: {rate(r['before'])}")
    print(f"held-out end:   {rate(r['after'])}")
    print(f"difference {r['difference']:+.3f}, z {r['z']:.2f}, one-sided p {r['p_one_sided']:.4f}")
    pair = r["paired"]
    print(
        f"paired by task: {len(pair['gained'])} tasks gained {sum(pair['gained'].values())} resolved attempts, "
        f"{len(pair['lost'])} lost {sum(pair['lost'].values())}; "
        f"sign-flip test one-sided p {pair['p_one_sided']:.4f}"
    )
    for kind in ("gained", "lost"):
        if pair[kind]:
            print(f"  {kind}: " + ", ".join(f"{i} ({n})" for i, n in sorted(pair[kind].items())))


def _report(r: dict[str, Any], work: Path) -> None:
    def rate(res: dict) -> str:
        low, high = wilson(res["resolved"], res["attempts"])
        return (
            f"{res['resolved']}/{res['attempts']} = {res['resolved'] / max(res['attempts'], 1):.3f} "
            f"[{low:.3f}, {high:.3f}] (empty patches {res['empty']}, errors {res['errors']})"
        )

    print(f"command: {' '.join(sys.argv)}  (seed {r['seed']}, work {work})")
    print(
        f"warm start: {r['demos']['demonstrations']} expert demonstrations of {r['demos']['tasks']} train tasks, "
        f"{r['args']['sft_steps']} SFT steps of {r['args']['sft_batch']}"
        + (f"; recovering from a stumble: {r['demos']['stumbles']}" if r["demos"].get("stumbles") else "")
    )
    if r["temperature_on_train"]:
        print(
            f"sampling temperature {r['temperature']:g}, chosen on {r['args']['pick_tasks']} train tasks "
            f"(resolved per temperature: {r['temperature_on_train']})"
        )
    if r["rl_temperature"] != r["temperature"]:
        print(f"GRPO rollouts sampled at temperature {r['rl_temperature']:g}, every evaluation at {r['temperature']:g}")
    if r["base"]:
        b = r["base"]
        print(f"held-out base:  {rate(b)}  (the base model, before the warm start)")
        print(
            f"  warm start: z {b['z']:.2f}, one-sided p {b['p_one_sided']:.4f}; paired by task "
            f"{len(b['paired']['gained'])} tasks gained, {len(b['paired']['lost'])} lost, "
            f"sign-flip p {b['paired']['p_one_sided']:.4f}"
        )
    if r["fit"]:
        fit = r["fit"]
        print(
            f"does GRPO fit? {fit['tasks']} train tasks never demonstrated, GRPO on exactly them; fresh attempts "
            f"seeded apart from every training rollout (a fit on training tasks, not generalisation)"
        )
        if fit.get("screen"):
            sc = fit["screen"]
            print(
                f"fit screen: {len(sc['per_task'])} candidates x {r['args']['fit_screen']} attempts, resolved "
                f"{sc['resolved']}/{sc['attempts']}; kept the first {fit['tasks']} resolved sometimes, not always"
            )
        print(f"fit start: {rate(fit['before'])}")
        print(f"fit end:   {rate(fit['after'])}")
        print(
            f"fit difference {fit['difference']:+.3f}, z {fit['z']:.2f}, one-sided p {fit['p_one_sided']:.4f}; "
            f"paired by task {len(fit['paired']['gained'])} gained, {len(fit['paired']['lost'])} lost, "
            f"sign-flip p {fit['paired']['p_one_sided']:.4f}"
        )
        every = r["times_all_invocations"]  # after set-up: the fit's own phases, the warm start's if built here
        minutes = (
            sum(every.get(k, 0.0) for k in ("generate", "warm_start", "fit_screen", "fit_start", "rl", "fit_end")) / 60
        )
        met = (
            fit["difference"] >= 0.15
            and fit["p_one_sided"] < 0.05
            and minutes <= 60
            and min(fit["before"]["attempts"], fit["after"]["attempts"]) >= 64
        )
        print(
            f"fit target (+15 points, one-sided p < 0.05, >= 64 attempts a side, <= 60 min): "
            f"{'met' if met else 'NOT met'} ({fit['difference'] * 100:+.1f} points in {minutes:.0f} min)"
        )
        print(
            "does it transfer? the same before/after on held-out tasks:"
            if r["before"]
            else "does it transfer? not measured (--heldout-tasks 0)"
        )
    if r["before"]:
        _report_heldout(r, rate)
    print(f"{r['updates']} of {len(r['reward_curve'])} GRPO steps updated")
    f = r["rollouts"]
    print(
        f"GRPO rollouts: {f['rollouts']}; a tool call {f['tool_call']:.2f}, an edit {f['edit_call']:.2f}, "
        f"a non-empty patch {f['non_empty_patch']:.2f}, resolved {f['resolved']:.2f}"
    )
    for name, counts in r["funnels"].items():
        print(f"funnel {name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    print("reward curve: " + " ".join(f"{x:+.2f}" if x is not None else "-" for x in r["reward_curve"]))
    if any(x is not None for x in r["kl_to_start"]):  # measured at each update, before it
        print("KL to the start per token: " + " ".join(f"{x:.4f}" if x is not None else "-" for x in r["kl_to_start"]))
    print("wall time: " + ", ".join(f"{k} {v:.0f}s" for k, v in r["times"].items()))
    every = r["times_all_invocations"]
    print("wall time over every invocation with this --work: " + ", ".join(f"{k} {v:.0f}s" for k, v in every.items()))
    print(f"ratio total / 60-minute budget = {every['total'] / 3600:.2f}; curve: {work / 'learning.png'}")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--model",
        default=None,
        help="the base model the warm start trains (MODEL: a local HF folder or a hub name); default "
        "the embedded SmolLM2-135M-Instruct folder",
    )
    ap.add_argument("--count", type=int, default=1000, help="tasks generated (all valid ones by default)")
    ap.add_argument(
        "--localized",
        action="store_true",
        help="generate only bugs whose failure's traceback passes through the faulty line",
    )
    ap.add_argument("--demos", type=int, default=0, help="train tasks the expert demonstrates (0 = all)")
    ap.add_argument(
        "--demo-recover",
        type=float,
        default=0.0,
        help="fraction of demonstrated tasks with a second demonstration that stumbles on an edit "
        "first and recovers (the stumble untrained)",
    )
    ap.add_argument("--sft-steps", type=int, default=16)
    ap.add_argument("--sft-batch", type=int, default=4)
    ap.add_argument("--sft-lr", type=float, default=5e-5)
    ap.add_argument("--heldout-tasks", type=int, default=32)
    ap.add_argument("--k", type=int, default=2, help="attempts per held-out task")
    ap.add_argument(
        "--eval-base",
        action="store_true",
        help="also evaluate the base model on the same held-out attempts, to measure the warm start",
    )
    ap.add_argument("--rl-steps", type=int, default=8)
    ap.add_argument("--rl-batch", type=int, default=4, help="groups per GRPO step")
    ap.add_argument("--n-samples", type=int, default=4, help="samples per group")
    ap.add_argument("--rl-lr", type=float, default=1e-5)
    ap.add_argument(
        "--dynamic-sampling",
        action="store_true",
        help="GRPO trains only on groups whose rewards differ and draws new ones for the rest "
        "(DYNAMIC_SAMPLING), for up to --sampling-rounds rounds a step",
    )
    ap.add_argument("--sampling-rounds", type=int, default=4)
    ap.add_argument(
        "--rl-lora-rank",
        type=int,
        default=0,
        help="GRPO trains LoRA adapters of this rank on the warm-started weights (LORA_RANK, alpha 16); "
        "0 = every weight",
    )
    ap.add_argument(
        "--rl-warmup-steps",
        type=int,
        default=0,
        help="GRPO's learning rate rises linearly over this many updates (LR_WARMUP_STEPS); 0 = none",
    )
    ap.add_argument(
        "--kl-coef",
        type=float,
        default=0.0,
        help="GRPO's KL penalty to the warm-started policy (KL_LOSS_COEF, low_var_kl); 0 = none",
    )
    ap.add_argument(
        "--rl-sites",
        type=float,
        default=0.0,
        help="fraction of train bug sites kept for GRPO and never demonstrated (0: GRPO on all train)",
    )
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of every attempt")
    ap.add_argument(
        "--rl-temperature",
        type=float,
        default=None,
        help="sampling temperature of the GRPO rollouts, and the trainer's log-probs (TEMPERATURE); "
        "default: the evaluations' temperature",
    )
    ap.add_argument(
        "--pick-temperature",
        type=lambda v: [float(x) for x in v.split(",")],
        default=[],
        metavar="T1,T2,...",
        help="choose the temperature among these on train tasks (after the warm "
        "start, before any held-out attempt); the most resolved wins, ties go to the higher",
    )
    ap.add_argument("--pick-tasks", type=int, default=16, help="train tasks, one attempt each, per candidate")
    ap.add_argument(
        "--mixed-precision",
        action=argparse.BooleanOptionalAction,
        default=native_bf16(),
        help="bf16 compute in SFT and GRPO (MIXED_PRECISION; about 1.6x faster on a CPU with AVX512-BF16, about "
        "25x slower on one without; default: where the machine has it natively)",
    )
    ap.add_argument(
        "--stage",
        action="store_true",
        help="take the warm start from the cached stage (python -m qwen_swe.warmstart build) with these "
        "--demos/--sft-* settings, built once per key: with the embedded default's settings, its policy",
    )
    ap.add_argument(
        "--fit-tasks",
        type=int,
        default=0,
        help="does GRPO fit? this many train tasks never demonstrated, evaluated before and after GRPO "
        "on exactly them (0 = off: GRPO on the train tasks)",
    )
    ap.add_argument("--fit-k", type=int, default=8, help="attempts per fit task, before and after")
    ap.add_argument(
        "--fit-screen",
        type=int,
        default=0,
        metavar="K",
        help="choose the fit tasks by a screen: K attempts of each candidate (seeds of their own), "
        "keeping those resolved sometimes but not always (0 = off: the first --fit-tasks)",
    )
    ap.add_argument("--fit-candidates", type=int, default=24, help="undemonstrated train tasks --fit-screen tries")
    ap.add_argument("--work", default=None)
    return ap


if __name__ == "__main__":
    install_supervisor()  # a SIGTERM unwinds: the phase running and the evaluations' server are stopped
    run_protocol(parser().parse_args())
