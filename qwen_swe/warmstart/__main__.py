"""``python -m qwen_swe.warmstart collect --out DIR``: expert demonstrations for the warm start;
``python -m qwen_swe.warmstart build``: the whole warm start, cached under QWEN_SWE_HOME/warmstart (stage.py).

collect: the settings come from the environment as for a run (MODEL: the tokenizer and chat template; the agent and
sandbox sections); DATASET/INSTANCE_LIST choose the tasks. Then train on them with
``TRAIN_MODE=sft SFT_DATA=DIR/demos.jsonl bash examples/qwen_swe/run_grpo.sh``.

build: demonstrations of train tasks, then SFT, both through those commands, into a folder named by the digest of
its inputs, reused while they are the same; the folder's path is the last line printed (``--print-key``: the digest
only, nothing built).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

from qwen_swe.config.hardware import native_bf16
from qwen_swe.config.settings import load_settings
from qwen_swe.data.instances import load_instances
from qwen_swe.errors import SETUP_EXIT_CODE, SetupError
from qwen_swe.paths import cache_home
from qwen_swe.sandbox.docker_host import reap
from qwen_swe.supervise import Interrupted, install
from qwen_swe.warmstart.collect import collect
from qwen_swe.warmstart.stage import DIGESTS, WarmStartSpec, ensure_warm_start, key


def parser() -> argparse.ArgumentParser:
    """One sub-command each; collect's unknown flags are run settings (``--seed``, ``--model``), build has its own."""
    ap = argparse.ArgumentParser(
        prog="python -m qwen_swe.warmstart", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = ap.add_subparsers(dest="command", required=True)
    collecting = commands.add_parser(
        "collect", help="demonstrations of DATASET's tasks (run settings from the environment or as flags)"
    )
    collecting.add_argument("--out", type=Path, required=True, help="folder for demos.jsonl and demos_report.json")
    collecting.add_argument(
        "--recover",
        type=float,
        default=0.0,
        help="fraction of tasks with a second demonstration that stumbles on an edit, then recovers (default 0: none)",
    )
    default = {f.name: f.default for f in fields(WarmStartSpec)}
    building = commands.add_parser(
        "build",
        help="the cached warm start (defaults: the embedded default's)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    building.add_argument(
        "--model", type=Path, default=None, help="the base model's HF folder (default: the embedded SmolLM2 folder)"
    )
    building.add_argument(
        "--tasks",
        type=Path,
        default=None,
        help="a train split with its heldout.jsonl beside it (default: the seed-0 generated train split)",
    )
    building.add_argument("--demos", type=int, default=default["demos"], help="tasks demonstrated (0 = all)")
    building.add_argument(
        "--recover",
        type=float,
        default=default["recover"],
        help="fraction of them demonstrated again with a stumble and a recovery",
    )
    building.add_argument("--steps", type=int, default=default["steps"], help="SFT steps")
    building.add_argument("--batch", type=int, default=default["batch"], help="demonstrations per SFT step")
    building.add_argument("--lr", type=float, default=default["lr"], help="SFT learning rate")
    building.add_argument("--seed", type=int, default=default["seed"], help="the task draw's and SFT's seed")
    building.add_argument(
        "--mixed-precision",
        action=argparse.BooleanOptionalAction,
        default=argparse.SUPPRESS,  # not shown: it depends on the machine
        help="bf16 compute in SFT (default: where the machine has it natively)",
    )
    building.add_argument("--print-key", action="store_true", help="print the key of these inputs; build nothing")
    return ap


def build(own: argparse.Namespace) -> int:
    """The warm start of these inputs, built unless cached; its folder is the last line printed."""
    paths = {name: value for name, value in (("model", own.model), ("tasks", own.tasks)) if value is not None}
    spec = WarmStartSpec(
        **paths,
        demos=own.demos,
        recover=own.recover,
        steps=own.steps,
        batch=own.batch,
        lr=own.lr,
        seed=own.seed,
        mixed_precision=getattr(own, "mixed_precision", native_bf16()),
    )
    home = cache_home()
    if own.print_key:
        print(key(spec, home / "warmstart" / DIGESTS))
        return 0
    print(ensure_warm_start(spec, home), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = parser()
    own, rest = ap.parse_known_args(argv)
    if own.command == "build" and rest:
        ap.error(f"build takes no run settings ({' '.join(rest)}): its inputs are its own flags")
    install()
    settings = None
    try:
        if own.command == "build":
            return build(own)
        settings = load_settings(rest)
        rows = load_instances(settings.dataset_source, settings.instance_list)
        start = time.monotonic()
        report = asyncio.run(collect(rows, settings, own.out, own.recover))
        print(json.dumps({**report, "seconds": round(time.monotonic() - start, 1)}))
        return 0 if report["demonstrations"] else 1
    except SetupError as exc:
        print(f"qwen-swe warmstart {own.command}: {exc}", file=sys.stderr)
        return SETUP_EXIT_CODE
    except Interrupted as stop:
        return stop.exit_code
    finally:
        if settings is not None:
            reap(settings.label)


if __name__ == "__main__":
    sys.exit(main())
