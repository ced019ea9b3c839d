"""The warm start as a stage of the pipeline: a base model, supervised on expert demonstrations of train tasks,
built once and cached under ``QWEN_SWE_HOME/warmstart/<key>/model``.

Why a stage: a small base model never resolves a task, so GRPO from it sees only failures; the warm-started one
makes real attempts. Why cached by a key: building it takes minutes (demonstrations through the real agent, then
SFT through the real trainer), and its result depends only on the inputs the key digests (``key``), so any change
to them builds a new folder and nothing else does. Why atomic: the folder is built beside its place and renamed
into it when complete, so a killed build leaves an unfinished folder, never a model. Why resumable: a build takes
half an hour here (hours on a CPU without bf16); the next build of the same key goes on from the unfinished folder:
demonstrations that finished are kept, SFT resumes from its last checkpoint.
Why the held-out check: a model warm-started on a held-out task would make every held-out result a lie, so the
stage refuses such tasks before anything runs (``check_train_only``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from qwen_swe.agent.bundle import QWEN_CODE_VERSION
from qwen_swe.config.hardware import native_bf16
from qwen_swe.errors import ConfigError, DataError, SetupError
from qwen_swe.inference.embedded_model import STAMP_NAME
from qwen_swe.paths import cache_home, embedded_model_dir, embedded_tasks, file_sha256
from qwen_swe.warmstart.collect import DEMOS, usable
from qwen_swe.warmstart.expert import EXPERT_VERSION
from qwen_swe.warmstart.phases import (
    AGENT_PROFILE,
    PROGRESS_INTERVAL,
    Progress,
    collect_command,
    format_seconds,
    latest_weights,
    run_logged,
    sft_command,
)

# Bump when the stage's own procedure changes what it builds (the task choice, the commands, the folder's layout).
STAGE_VERSION = 1
HELDOUT_NAME = "heldout.jsonl"  # the split python -m qwen_swe.data.generate writes beside train.jsonl
COMPLETE, MANIFEST, DIGESTS = "complete", "warmstart.json", "file_digests.json"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "generation_config.json",
)

Runner = Callable[[list[str], dict[str, str], Path], None]


@dataclass(frozen=True)
class WarmStartSpec:
    """What a warm start is made of: 48 localized train tasks (the benchmark's best warm start demonstrated 60;
    fewer keep the first set-up within 30 minutes), 12 SFT steps of 8 (each demonstration seen twice) at lr 1e-4
    (the benchmark's warm-start rate), no stumbles (``--demo-recover`` did not help there). Docs: the build's
    measured time and what the policy resolves."""

    model: Path = field(default_factory=embedded_model_dir)  # the base: a local HF folder
    tasks: Path = field(default_factory=embedded_tasks)  # a train split, its held-out split beside it
    demos: int = 48  # train tasks demonstrated (0 = every one the expert can play)
    recover: float = 0.0  # fraction of them demonstrated a second time, with a stumble and a recovery
    steps: int = 12
    batch: int = 8
    lr: float = 1e-4
    seed: int = 0
    # bf16 compute in SFT where the machine has it natively (hardware.native_bf16), fp32 master weights
    mixed_precision: bool = field(default_factory=native_bf16)

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", Path(self.model).expanduser())
        object.__setattr__(self, "tasks", Path(self.tasks).expanduser())
        if self.demos < 0 or self.steps < 1 or self.batch < 1 or not self.lr > 0 or not 0 <= self.recover <= 1:
            raise ConfigError(
                f"warm start: demos >= 0, steps >= 1, batch >= 1, lr > 0 and recover in [0, 1] "
                f"(got demos {self.demos}, steps {self.steps}, batch {self.batch}, lr {self.lr}, "
                f"recover {self.recover})"
            )


def model_digest(folder: Path, digests: Path) -> str:
    """The base model's content. The embedded folder carries the stamp of its conversion's inputs (the GGUF's hash,
    the converter's version, the template's hash), which decides its bytes: that, without reading 0.5 GB. Any other
    folder: the hash of every file's name and content, each file's hash kept in ``digests`` under its size, mtime
    and inode (as git's index does), so only a changed file is read again."""
    if not (folder / "config.json").is_file():
        raise DataError(
            f"{folder}: not a Hugging Face model folder (no config.json); the warm start's base model "
            "is a local folder (scripts/setup.sh builds the embedded one)"
        )
    if (folder / STAMP_NAME).is_file():
        stamp = json.loads((folder / STAMP_NAME).read_text())
        return "stamp:" + hashlib.sha256(json.dumps(stamp, sort_keys=True).encode()).hexdigest()
    try:
        known: dict[str, list] = json.loads(digests.read_text())
    except (OSError, ValueError):
        known = {}
    whole, changed = hashlib.sha256(), False
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if any(part.startswith(".") for part in rel.split("/")):  # locks, stamps, temporary files
            continue
        stat = path.stat()
        signature = [stat.st_size, stat.st_mtime_ns, stat.st_ino]
        entry = known.get(str(path.resolve()))
        if not entry or entry[:3] != signature:
            entry = known[str(path.resolve())] = [*signature, file_sha256(path)]
            changed = True
        whole.update(f"{rel}\0{entry[3]}\n".encode())
    if changed:
        digests.parent.mkdir(parents=True, exist_ok=True)
        tmp = digests.with_name(f".{digests.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=0, sort_keys=True) + "\n")
        os.replace(tmp, digests)  # a concurrent writer may win: its entries are as true, ours are recomputed
    return "files:" + whole.hexdigest()


def key_inputs(spec: WarmStartSpec, digests: Path | None = None) -> dict[str, Any]:
    """Everything the warm start depends on: the base model's content, the tasks file's content, the expert's and
    the stage's versions, the agent the demonstrations are recorded in (qwen-code's version: its prompts and tool
    schemas are in every demonstration; the profile), the SFT settings and the seed; not paths, mtimes or the order
    anything was given in."""
    digests = digests or cache_home() / "warmstart" / DIGESTS
    return {
        "stage": STAGE_VERSION,
        "expert": EXPERT_VERSION,
        "qwen_code": QWEN_CODE_VERSION,
        "agent": dict(AGENT_PROFILE),
        "model": model_digest(spec.model, digests),
        "tasks": _tasks_sha256(spec.tasks),
        **{k: v for k, v in asdict(spec).items() if k not in ("model", "tasks")},
    }


def key(spec: WarmStartSpec, digests: Path | None = None) -> str:
    """The name of the warm start's folder: a digest of ``key_inputs``."""
    return _digest(key_inputs(spec, digests))


def _digest(inputs: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def _tasks_sha256(tasks: Path) -> str:
    if not tasks.is_file():
        raise DataError(
            f"{tasks}: no such tasks file; scripts/setup.sh generates the embedded default's "
            "(python -m qwen_swe.data.generate --seed 0)"
        )
    return file_sha256(tasks)


def _read_rows(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except ValueError as exc:
        raise DataError(f"{path}: not JSON lines ({exc}); regenerate it (python -m qwen_swe.data.generate)") from None


def check_train_only(tasks: Path) -> dict[str, Any]:
    """Refuse tasks that are, or share a task or a bug site with, the held-out split beside them; return the
    guarantee for the manifest. A bug site is ``path::function`` within a repository, so it is compared with its
    repository, as the generator splits them."""
    _tasks_sha256(tasks)
    heldout = tasks.with_name(HELDOUT_NAME)
    if tasks.name.startswith("heldout") or (heldout.is_file() and tasks.samefile(heldout)):
        raise DataError(
            f"{tasks} is a held-out split: the warm start trains on the train split beside it, never on "
            "the tasks its results are measured on"
        )
    if not heldout.is_file():
        raise DataError(
            f"{tasks}: no held-out split beside it ({heldout}), so nothing shows that none of its tasks "
            "is held out; give the train.jsonl that python -m qwen_swe.data.generate wrote"
        )
    rows, held = _read_rows(tasks), _read_rows(heldout)
    held_ids = {r.get("instance_id") for r in held}
    held_sites = {(r.get("repo"), r["bug_site"]) for r in held if r.get("bug_site")}
    bad = sorted(
        str(r.get("instance_id"))
        for r in rows
        if r.get("instance_id") in held_ids or (r.get("repo"), r.get("bug_site")) in held_sites
    )
    if bad:
        more = f" and {len(bad) - 20} more" if len(bad) > 20 else ""
        raise DataError(
            f"{tasks}: {len(bad)} tasks are held out in {heldout} (the same instance id or bug site): "
            f"{', '.join(bad[:20])}{more}; the warm start never trains on a held-out task"
        )
    return {
        "heldout_file": str(heldout),
        "heldout_sha256": file_sha256(heldout),
        "heldout_tasks": len(held),
        "heldout_sites": len(held_sites),
        "train_tasks": len(rows),
        "shared_tasks": 0,
        "shared_sites": 0,
    }


def select_tasks(rows: list[dict[str, Any]], count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` tasks the expert can play (0 = all), a seeded draw, so the same inputs choose the same tasks."""
    playable, _ = usable(rows)
    random.Random(f"warmstart-{seed}").shuffle(playable)
    return playable[: count or None]


def _build(
    spec: WarmStartSpec, inputs: dict[str, Any], build: Path, run: Runner, guarantee: dict[str, Any], interval: float
) -> dict[str, Any]:
    """Demonstrations, then SFT, into ``build``; returns the manifest. ``build/model`` is the result."""
    name = _digest(inputs)
    times: dict[str, float] = {}
    chosen = select_tasks(_read_rows(spec.tasks), spec.demos, spec.seed)
    if not chosen:
        raise DataError(f"{spec.tasks}: no task the expert can play (a one-line gold patch, a distinct statement)")
    dataset = build / "demo_tasks.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in chosen))
    demos, sft = build / "demos", build / "sft"
    start = time.monotonic()
    report = _collected(demos)
    resumed = report is not None
    if report is None:
        shutil.rmtree(demos, ignore_errors=True)  # a killed collection's partial output
        with Progress(f"demonstrations of {len(chosen)} train tasks", interval):
            cmd, env = collect_command(
                demos,
                dataset,
                str(spec.model),
                spec.recover,
                spec.seed,
                spec.mixed_precision,
                f"qwen-swe-warmstart-{name}",
            )
            run(cmd, env, build / "logs" / "collect.log")
        report = _collected(demos)
    else:
        print(f"warm start: reusing the {report['demonstrations']} demonstrations in {demos}", flush=True)
    times["collect"] = round(time.monotonic() - start, 1)
    if report is None:
        raise SetupError(
            f"the demonstrations left no report, or none resolved, in {demos}; see {build / 'logs' / 'collect.log'}"
        )
    start = time.monotonic()
    model = build / "model"
    if model.is_dir():  # renamed whole out of the finished SFT run: a build stopped after it
        print(f"warm start: reusing the finished SFT's model {model}", flush=True)
        resumed = True
    else:
        with Progress(f"SFT, {spec.steps} steps of {spec.batch}", interval, sft / "metrics.jsonl", spec.steps):
            cmd, env = sft_command(
                demos / DEMOS,
                sft,
                str(spec.model),
                spec.steps,
                spec.batch,
                spec.lr,
                spec.seed,
                spec.mixed_precision,
                f"qwen-swe-warmstart-sft-{name}",
            )
            run(cmd, env, build / "logs" / "sft.log")  # into the stopped build's run folder: it resumes
        if (sft / "metrics.jsonl").is_file():
            shutil.copy2(sft / "metrics.jsonl", build / "logs" / "sft_metrics.jsonl")
        os.rename(latest_weights(sft), model)
    times["sft"] = round(time.monotonic() - start, 1)
    for file in TOKENIZER_FILES:  # the exporter saves the tokenizer; what it did not write comes from the base
        if (spec.model / file).is_file() and not (model / file).exists():
            shutil.copy2(spec.model / file, model / file)
    shutil.rmtree(sft, ignore_errors=True)  # checkpoints with optimizer state: gigabytes nothing reads again
    report.pop("drops", None)  # the per-task detail stays in demos/demos_report.json
    return {
        "key": name,
        "spec": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(spec).items()},
        "key_inputs": inputs,
        "demo_tasks": [row["instance_id"] for row in chosen],
        "demos": report,
        "heldout_check": guarantee,
        "seconds": times,  # this attempt's: a resumed build's phases done before are not in them
        "resumed": resumed,
    }


def _collected(demos: Path) -> dict[str, Any] | None:
    """The report of a finished collection with at least one demonstration (written after ``demos.jsonl``), or None."""
    try:
        report = json.loads((demos / "demos_report.json").read_text())
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) and report.get("demonstrations") and (demos / DEMOS).is_file() else None


def complete(folder: Path) -> bool:
    return (folder / COMPLETE).is_file() and (folder / "model" / "config.json").is_file()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One build per key at a time, across processes; the lock goes with the process, however it ends."""
    with path.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"warm start: waiting for another process building it ({path})", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _leftovers(root: Path, name: str) -> Iterator[Path]:
    yield from root.glob(f".{name}.build-*")  # an older stage's temporary folders, not resumable
    if (root / name).exists():
        yield root / name  # a folder at the place without its marker was not built by this stage: never used


def ensure_warm_start(
    spec: WarmStartSpec, home: Path, run: Runner = run_logged, interval: float = PROGRESS_INTERVAL
) -> Path:
    """The warm-started model folder ``home/warmstart/<key>/model``, built first if it is not there (one build at a
    time per key, across processes). ``run(argv, env, log)`` runs a phase; tests pass a fake."""
    guarantee = check_train_only(spec.tasks)  # also when cached: the held-out split beside the tasks may be new
    root = Path(home) / "warmstart"
    root.mkdir(parents=True, exist_ok=True)
    inputs = key_inputs(spec, root / DIGESTS)
    name = _digest(inputs)
    target = root / name
    with _locked(root / f".{name}.lock"):
        if complete(target):
            print(f"warm start: reusing {target / 'model'} (key {name})", flush=True)
            return target / "model"
        for leftover in list(_leftovers(root, name)):
            print(f"warm start: removing the unfinished build {leftover}", flush=True)
            shutil.rmtree(leftover)
        print(
            f"warm start: building {name} from {spec.model} on {spec.demos or 'all'} tasks of {spec.tasks}, "
            f"{spec.steps} SFT steps of {spec.batch} at lr {spec.lr:g}; once, then cached in {target}",
            flush=True,
        )
        start = time.monotonic()
        build = root / f".{name}.build"
        if build.is_dir():
            print(f"warm start: resuming the unfinished build {build}", flush=True)
        build.mkdir(exist_ok=True)
        build.chmod(0o755)  # servers and containers of other users read the model
        try:
            manifest = _build(spec, inputs, build, run, guarantee, interval)
        except BaseException:
            print(f"warm start: stopped; the next build of {name} resumes from {build}", flush=True)
            raise
        manifest["seconds"]["total"] = round(time.monotonic() - start, 1)
        (build / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        (build / COMPLETE).write_text(name + "\n")
        os.rename(build, target)
    print(f"warm start: ready at {target / 'model'} in {format_seconds(time.monotonic() - start)}", flush=True)
    return target / "model"
