"""``python -m qwen_swe.warmstart collect --dataset TRAIN.jsonl --out DIR``: expert demonstrations for the warm start.

The settings come from the environment as for a run (MODEL: the tokenizer and chat template; the agent and sandbox
sections); DATASET/INSTANCE_LIST choose the tasks. Then train on them with
``TRAIN_MODE=sft SFT_DATA=DIR/demos.jsonl bash examples/qwen_swe/run_grpo.sh``.
"""

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
from qwen_swe.sandbox.docker import reap
from qwen_swe.supervise import Interrupted, install
from qwen_swe.warmstart.collect import collect


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qwen_swe.warmstart", description=__doc__)
    parser.add_argument("command", choices=("collect",))
    parser.add_argument("--out", type=Path, required=True, help="folder for demos.jsonl and demos_report.json")
    parser.add_argument("--recover", type=float, default=0.0,
                        help="fraction of tasks with a second demonstration that stumbles on an edit, then recovers")
    own, rest = parser.parse_known_args(argv)
    install()
    settings = None
    try:
        settings = load_settings(rest)
        rows = load_instances(settings.dataset_source, settings.instance_list)
        start = time.monotonic()
        report = asyncio.run(collect(rows, settings, own.out, own.recover))
        print(json.dumps({**report, "seconds": round(time.monotonic() - start, 1)}))
        return 0 if report["demonstrations"] else 1
    except SetupError as exc:
        print(f"qwen-swe warmstart: {exc}", file=sys.stderr)
        return SETUP_EXIT_CODE
    except Interrupted as stop:
        return stop.exit_code
    finally:
        if settings is not None:
            reap(settings.label)


if __name__ == "__main__":
    sys.exit(main())
