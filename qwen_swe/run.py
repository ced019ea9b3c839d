"""The run's entry point: settings, leftovers reaped, the embedded server started if no VLLM_URL, then the
trainer under torchrun (rank 0 drives the rollouts). Re-running with the same OUTPUT_DIR resumes, with the
settings saved there."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from qwen_swe import preflight
from qwen_swe.backends.slime.checkpoints import TRACKER as SLIME_TRACKER
from qwen_swe.backends.slime.launcher import launch as launch_slime
from qwen_swe.config.profile import with_profile
from qwen_swe.config.resume import resumed_settings, run_folder
from qwen_swe.config.settings import Settings, given_settings, given_with_sources
from qwen_swe.config.show import precedence
from qwen_swe.config.show import render as show_config
from qwen_swe.errors import SETUP_EXIT_CODE, SetupError, TaskPackError
from qwen_swe.evaluate.__main__ import main as evaluate_main
from qwen_swe.inference.embedded_server import serving
from qwen_swe.paths import REPO_ROOT, cache_home, embedded_model_dir, python_path
from qwen_swe.plan.placement import devices_env
from qwen_swe.sandbox.docker_host import reap
from qwen_swe.supervise import FAULT_DIR_ENV, SUPERVISOR, Interrupted, failures, torchrun
from qwen_swe.supervise import install as install_supervisor
from qwen_swe.traffic.endpoint import sweep_stale
from qwen_swe.train.checkpoint import complete_checkpoints
from qwen_swe.viewer.build import write_viewer
from qwen_swe.warmstart.stage import WarmStartSpec, ensure_warm_start

log = logging.getLogger("qwen_swe")


def has_checkpoint(output_dir: Path) -> bool:
    """What a trainer resumes from: a complete checkpoint of the built-in one, or slime's tracker file."""
    return bool(complete_checkpoints(output_dir, warn=False)) or (output_dir / SLIME_TRACKER).is_file()


def load_run_settings(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Settings:
    """A new run's settings come from the environment (and flags, and a --config file); a resumed run's from its
    settings.json, with only what the environment may change on resume (``config/resume.py``)."""
    return resolve_run_settings(argv, env)[0]


def resolve_run_settings(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[Settings, dict[str, str], Path | None]:
    """``load_run_settings``, with where each given value came from and the settings.json resumed from (if any)."""
    given, sources = given_with_sources(argv, env)
    folder = run_folder(given)
    saved = folder / "settings.json"
    if not has_checkpoint(folder):
        return Settings.build(**with_profile(given)), sources, None
    if not saved.is_file():
        log.warning("%s holds a checkpoint but no settings.json: resuming with this environment's settings", folder)
        return Settings.build(**with_profile(given)), sources, None
    settings, note = resumed_settings(saved, given)
    log.info("%s", note)
    return settings, sources, saved


def print_config(argv: Sequence[str]) -> int:
    """``--print-config``: the settings this run would use, each with its source; nothing starts."""
    settings, sources, resumed = resolve_run_settings(argv)
    print(show_config(settings, sources, profile=resumed is None and settings.embedded, resumed=resumed), end="")
    return 0


def trainer_command(settings: Settings, settings_file: Path, gpus: tuple[int, ...] = ()) -> list[str]:
    procs = len(gpus) or settings.train.train_procs or _default_procs()  # one rank per placed GPU
    entry = ["-m", "qwen_swe.train.trainer", "--settings", str(settings_file)]
    return torchrun(procs, Path(settings.output_dir) / "logs" / "torchrun", entry)


def _default_procs() -> int:
    import torch

    return torch.cuda.device_count() or 2


def run_trainer(settings: Settings, gpus: tuple[int, ...] = ()) -> int:
    """Run torchrun in its own process group, dying with this process; stopped by its group id on the way out."""
    env = {
        **os.environ,
        **devices_env(gpus),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "PYTHONPATH": python_path(inherited=os.environ.get("PYTHONPATH")),
    }
    cmd = trainer_command(settings, settings.write(settings.output_dir), gpus)  # with the started server's URL
    log.info("trainer: %s", " ".join(cmd))
    return restarting(cmd, env, settings)


def restarting(cmd: list[str], env: Mapping[str, str], settings: Settings) -> int:
    """Run the trainer ``cmd``; when its first failure was a rank's death in native code, start it again (it resumes
    from its newest checkpoint), at most TRAINER_RESTARTS times. Any other failure returns at once."""
    restarts, started = settings.train.trainer_restarts, time.strftime("%Y%m%d-%H%M%S")
    root = Path(settings.output_dir) / "logs" / "faults"
    for killed in root.glob("*-attempt*"):  # a run killed (SIGKILL) before it read its notes: the empty ones go
        failures(killed)
    for attempt in range(restarts + 1):
        faults = root / f"{started}-attempt{attempt}"  # this invocation's
        proc = SUPERVISOR.spawn(cmd, env={**env, FAULT_DIR_ENV: str(faults)}, cwd=REPO_ROOT)
        try:
            status = proc.wait()
        finally:
            SUPERVISOR.stop(proc, grace=settings.stop_timeout)
            found = failures(faults)  # also when the run is stopped: the empty notes go
            with contextlib.suppress(OSError):
                root.rmdir()  # and the folder, when no run's notes are kept
        if status == 0 or not found or not found[0].native:  # done, or an error that starting again would repeat
            return status
        log.error("trainer %s died in native code; its threads' stacks (%s):\n%s", found[0].rank, faults, found[0].text)
        if attempt == restarts:
            break
        # as a rerun would: the dead attempt's containers and sockets go, the newest checkpoint's weights are served
        log.warning(
            "starting the trainer again from its newest checkpoint (restart %d of TRAINER_RESTARTS=%d)",
            attempt + 1,
            restarts,
        )
        clear_leftovers(settings)
    return status


def clear_leftovers(settings: Settings) -> None:
    """The run's containers and its rollouts' dead socket folders: those of a runner killed with SIGKILL (at start),
    of a trainer rank ended at once by SIGTERM or a crash (its ``finally`` blocks never ran). Logged when it found
    any: on a loaded engine the removals can take most of a stop."""
    t0 = time.monotonic()
    containers, folders = reap(settings.label), sweep_stale()
    if containers or folders:
        log.info(
            "removed %d container(s) and %d socket folder(s) left by the run in %.1f s",
            containers,
            folders,
            time.monotonic() - t0,
        )


def ensure_task_images(settings: Settings) -> None:
    """The embedded default's generated tasks and their images, made here if missing (reused by their inputs)."""
    if not (settings.embedded and settings.dataset is None):
        return
    cmd = [sys.executable, "-m", "qwen_swe.data.generate", "--seed", "0", "--localized", "--reuse"]
    proc = SUPERVISOR.spawn(cmd, cwd=REPO_ROOT)
    try:
        if proc.wait(timeout=3600) != 0:
            raise TaskPackError(
                f"generating the embedded tasks failed (exit {proc.returncode}); run `{' '.join(cmd[1:])}` to see why"
            )
    finally:
        SUPERVISOR.stop(proc, grace=settings.stop_timeout)


def ensure_policy(settings: Settings) -> Settings:
    """The embedded default trains the warm-started SmolLM2: the base model supervised on expert demonstrations of
    train tasks, built here once (about half an hour on 2 cores; ``scripts/setup.sh`` builds it ahead) and reused
    while its inputs are the same. MODEL=<folder> trains that folder instead, the base model included."""
    if not settings.embedded or settings.inference.model or settings.offline:
        return settings
    log.info(
        "embedded default: the policy is the warm-started SmolLM2 (python -m qwen_swe.warmstart build; "
        "MODEL=%s trains the base model)",
        embedded_model_dir(),
    )
    return settings.replace(model=str(ensure_warm_start(WarmStartSpec(), cache_home())))


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the settings (the only place this process does), then run. A setup error exits 2 with its message;
    SIGTERM or SIGINT stops everything the run started and exits 128 + the signal number."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = list(sys.argv[1:] if argv is None else argv)
    if "--eval" in args:  # evaluation only, no trainer: the same as run_eval.sh
        return evaluate_main(["--agent", *(a for a in args if a != "--eval")])
    install_supervisor()
    try:
        if "--print-config" in args:
            return print_config([a for a in args if a != "--print-config"])
        settings, sources, resumed = resolve_run_settings(args)
        log.info("%s", precedence(sources, profile=resumed is None and settings.embedded, resumed=resumed))
        if settings.backend == "slime":
            return launch_slime(settings, given=frozenset(given_settings(args)))
        return run(settings)
    except SetupError as exc:
        print(f"qwen-swe: {exc}", file=sys.stderr)
        return SETUP_EXIT_CODE
    except Interrupted as stop:  # run()'s sweep waited for the creates in flight when the trainer died
        log.warning("%s: everything the run started is stopped; rerun with the same OUTPUT_DIR to resume", stop)
        return stop.exit_code


def run(settings: Settings) -> int:
    """Reap leftovers, build the task images and the warm start, start the embedded server if needed, then train."""
    if not settings.offline:  # demonstrations or replayed rollouts: no tasks, no server
        ensure_task_images(settings)
        settings = ensure_policy(settings)
    settings.write(settings.output_dir)
    log.info(
        "run %s -> %s (%s)",
        settings.label,
        settings.output_dir,
        " on ".join(filter(None, ("embedded default" if settings.embedded else "", settings.inference.vllm_url))),
    )
    place = preflight.check(settings)  # the GPU placement, () on CPU
    clear_leftovers(settings)
    try:
        if settings.offline:
            return run_trainer(settings, place.train)
        with serving(settings, log_dir=settings.output_dir / "logs") as resolved:
            return run_trainer(resolved, place.train)
    finally:
        clear_leftovers(settings)
        log.info("viewer: %s", write_viewer(settings.output_dir))


if __name__ == "__main__":
    sys.exit(main())
