"""Evaluation runs, no trainer (``bash examples/qwen_swe/run_eval.sh`` is the agent mode):

    python -m qwen_swe.evaluate --agent [--out DIR] [settings flags]        # EVAL_SAMPLES attempts per instance
    python -m qwen_swe.evaluate --predictions FILE [--out DIR] [settings flags]   # grade an existing file

Both write ``report.json`` (the harness's keys, pass@k, a Wilson interval, errors); the agent mode also writes
``predictions.jsonl``. Without settings they use the local task pack and the embedded server; ``--dataset``,
``--instance-list``, ``VLLM_URL`` and ``MODEL`` (any HF folder, e.g. a run's ``weights/vN``) choose otherwise."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from qwen_swe import preflight
from qwen_swe.config.settings import Settings, load_settings
from qwen_swe.data.instances import load_instances
from qwen_swe.errors import SETUP_EXIT_CODE, SetupError
from qwen_swe.evaluate.agent_runs import missing, run_attempts
from qwen_swe.evaluate.grade_only import grade_predictions, load_done
from qwen_swe.evaluate.predictions import read_predictions
from qwen_swe.evaluate.report import build_report
from qwen_swe.inference.embedded_server import serving
from qwen_swe.sandbox.docker_host import reap
from qwen_swe.supervise import Interrupted
from qwen_swe.supervise import install as install_supervisor


def parser() -> argparse.ArgumentParser:
    """The evaluation's own flags; the rest of the arguments are run settings (their --help lists them)."""
    p = argparse.ArgumentParser(
        prog="python -m qwen_swe.evaluate",
        description=__doc__,
        add_help=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--predictions", type=Path, help="grade this SWE-bench predictions JSONL")
    mode.add_argument("--agent", action="store_true", help="run the agent EVAL_SAMPLES times per instance")
    p.add_argument("--out", type=Path, help="output folder (default OUTPUT_DIR/eval); re-running resumes")
    p.add_argument("--concurrency", type=int, default=2, help="attempts graded at once")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    own, rest = parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    t0 = time.monotonic()
    install_supervisor()
    try:
        settings = load_settings(rest).replace(reward_mode="binary")
        rows = {r["instance_id"]: r for r in load_instances(settings.dataset_source, settings.instance_list)}
        out = own.out or settings.output_dir / "eval"
        try:
            report = _agent(settings, rows, out) if own.agent else _grade_only(settings, rows, own, out)
        finally:
            reap(settings.label)
    except SetupError as exc:
        print(f"qwen-swe evaluate: {exc}", file=sys.stderr)
        return SETUP_EXIT_CODE
    except Interrupted as stop:
        print(f"qwen-swe evaluate: {stop}; rerun with the same --out to resume", file=sys.stderr)
        return stop.exit_code
    report["seconds"] = round(time.monotonic() - t0, 3)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"resolved {report['resolved_instances']}/{report['submitted_instances']} instances "
        f"(pass@1 {report['pass_at_k'].get('1', 0.0):.3f}, resolve rate {report['resolve_rate']:.3f} "
        f"[{report['resolve_rate_ci95'][0]:.3f}, {report['resolve_rate_ci95'][1]:.3f}]); errors "
        f"{report['error_instances']}, empty {report['empty_patch_instances']} -> {out / 'report.json'}"
    )
    return 0


def _agent(settings: Settings, rows: dict[str, dict], out: Path) -> dict:
    preflight.check_model(settings.model_name)
    done = load_done(out)
    if not missing(list(rows.values()), settings.eval_samples, done):
        results = list(done.values())  # a re-run of a finished evaluation: its report, without starting a server
    else:
        with serving(settings, log_dir=out / "logs") as served:
            results = asyncio.run(run_attempts(list(rows.values()), served, out))
    return build_report(results, dataset_ids=rows, submitted_ids=rows)


def _grade_only(settings: Settings, rows: dict[str, dict], own: argparse.Namespace, out: Path) -> dict:
    predictions, bad = read_predictions(own.predictions)
    unknown = sorted({p.instance_id for p in predictions} - set(rows))
    for line in bad + [f"unknown instance id: {iid}" for iid in unknown]:
        print(f"skipped: {line}", file=sys.stderr)
    results = asyncio.run(grade_predictions(predictions, rows, settings, out, own.concurrency))
    return build_report(
        results,
        dataset_ids=rows,
        submitted_ids=[p.instance_id for p in predictions if p.instance_id in rows],
        unknown_ids=unknown,
        bad_lines=bad,
    )


if __name__ == "__main__":
    sys.exit(main())
