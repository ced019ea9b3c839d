"""``python -m qwen_swe.evaluate --predictions FILE [--out DIR] [settings flags]``: grade a SWE-bench predictions
file and write ``report.json`` (the harness's keys, pass@k, errors per bad line). Without settings it grades
against the local task pack; ``--dataset``/``--instance-list`` (or the env vars) choose the rows."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Sequence

from qwen_swe.config.settings import load_settings
from qwen_swe.data.source import load_instances
from qwen_swe.errors import SETUP_EXIT_CODE, SetupError
from qwen_swe.evaluate.grade_only import grade_predictions
from qwen_swe.evaluate.predictions import read_predictions
from qwen_swe.evaluate.report import build_report
from qwen_swe.sandbox.docker import reap


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qwen_swe.evaluate", add_help=False)
    parser.add_argument("--predictions", type=Path, required=True, help="SWE-bench predictions JSONL")
    parser.add_argument("--out", type=Path, help="output folder (default OUTPUT_DIR/eval); re-running resumes")
    parser.add_argument("--concurrency", type=int, default=2, help="attempts graded at once")
    own, rest = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    t0 = time.monotonic()
    try:
        settings = load_settings(rest)
        rows = {r["instance_id"]: r for r in load_instances(settings.dataset_source, settings.instance_list)}
        predictions, bad = read_predictions(own.predictions)
    except SetupError as exc:
        print(f"qwen-swe evaluate: {exc}", file=sys.stderr)
        return SETUP_EXIT_CODE
    out = own.out or settings.output_dir / "eval"
    unknown = sorted({p.instance_id for p in predictions} - set(rows))
    for line in bad + [f"unknown instance id: {iid}" for iid in unknown]:
        print(f"skipped: {line}", file=sys.stderr)
    try:
        results = asyncio.run(grade_predictions(predictions, rows, settings, out, own.concurrency))
    finally:
        reap(settings.label)
    report = build_report(results, dataset_ids=rows, submitted_ids=[p.instance_id for p in predictions
                                                                      if p.instance_id in rows],
                          unknown_ids=unknown, bad_lines=bad, seconds=time.monotonic() - t0)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"resolved {report['resolved_instances']}/{report['submitted_instances']} instances "
          f"(pass@1 {report['pass_at_k'].get('1', 0.0):.3f}); errors {report['error_instances']}, empty "
          f"{report['empty_patch_instances']}, bad lines {len(bad)}, unknown ids {len(unknown)} "
          f"-> {out / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
