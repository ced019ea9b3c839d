"""Process supervision: a run stops cleanly on SIGTERM or SIGINT, and nothing it started outlives it.

- The first SIGTERM/SIGINT raises ``Interrupted`` in the main thread, wherever it is (building images, starting
  the server, waiting for the trainer); the ``finally`` blocks on the way out stop the trainer and the server by
  their process groups (SIGTERM, then SIGKILL after the grace) and remove the run's containers. The process then
  exits with 128 + the signal number.
- A second signal does not wait: every process group the run started gets SIGKILL and the process exits at once.
- The signal is never lost. Python ignores an exception raised where it cannot propagate (an at-fork hook, a
  ``__del__``): it prints "Exception ignored in ..." and goes on, and so would the run. ``spawn`` keeps the stop
  signals blocked across its fork (a ``preexec_fn`` runs the at-fork hooks), and an ``Interrupted`` that is ignored
  anyway (another thread took the signal) is raised again by re-sending the signal.
- Children are started in their own session (so a terminal's Ctrl-C reaches only the run, which then stops them
  in order) and with ``PR_SET_PDEATHSIG``: if the run dies by SIGKILL, the kernel sends them SIGTERM. The next
  run reaps the containers that were left.

A trainer rank that dies in native code (SIGSEGV, SIGBUS, SIGABRT, ...) writes every thread's Python stack to its
fault file (``FAULT_DIR_ENV``), and one that fails otherwise notes why; ``failures`` reads them, so the run can tell
a trainer whose first failure was a native crash (started again from its newest checkpoint) from one that failed on
its own (starting again would repeat it).

Signals are process-wide, so the supervisor is too: ``install`` once, in the entry point.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import faulthandler
import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
REDELIVERY_DELAY = 0.01  # seconds before a stop signal whose Interrupted was ignored is sent again
EXIT_GRACE = 30.0  # seconds a child still registered at exit gets between SIGTERM and SIGKILL
FAULT_DIR_ENV = "QWEN_SWE_FAULT_DIR"  # where run_rank notes how a rank failed


class Interrupted(BaseException):
    """The run was asked to stop; a BaseException so that no ``except Exception`` on the way out swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class Supervisor:
    """The process groups this process started, and what the stop signals do."""

    def __init__(self) -> None:
        self.groups: set[int] = set()
        self.stopping = False
        self._lock = threading.Lock()
        self._default_unraisable: Callable[[Any], object] = sys.unraisablehook

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                signal.signal(sig, self._handle)
            if sys.unraisablehook is not self._unraisable:  # once per process
                self._default_unraisable = sys.unraisablehook
                sys.unraisablehook = self._unraisable
                atexit.register(self.stop_all, EXIT_GRACE)

    def _unraisable(self, unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, Interrupted):  # raised where Python ignores it: raise it again,
            self.stopping = False  # from another thread, so that it is not handled (and ignored) in this hook too
            threading.Timer(REDELIVERY_DELAY, os.kill, (os.getpid(), unraisable.exc_value.signum)).start()
            return
        self._default_unraisable(unraisable)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.stopping:  # the second signal: no more waiting
            self.kill_all()
            os._exit(128 + signum)
        self.stopping = True
        raise Interrupted(signum)

    def spawn(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` in its own session, dying with this process; its group is stopped on the way out."""
        _prctl()  # resolved here, not in the forked child (no dlopen between fork and exec)
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # until the child is registered
        try:
            proc = subprocess.Popen(list(argv), start_new_session=True, preexec_fn=_child_setup, **kwargs)
            with self._lock:
                self.groups.add(proc.pid)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return proc

    def stop(self, proc: subprocess.Popen, grace: float) -> None:
        """SIGTERM to the process group, SIGKILL after ``grace`` seconds; then the group is gone."""
        try:
            if proc.poll() is None:
                signal_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    signal_group(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=30)
            signal_group(proc.pid, signal.SIGKILL)  # workers left in the group by a parent that already exited
        finally:
            with self._lock:
                self.groups.discard(proc.pid)

    def stop_all(self, grace: float) -> None:
        """Stop every group still registered: at exit, a child whose ``spawn`` the stop signal cut short (it raised
        after the fork, so no caller holds the child to stop it)."""
        with self._lock:
            groups = list(self.groups)
        for pgid in groups:
            signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while not all(_reaped(g) for g in groups) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.kill_all()  # what is left of each group
        with self._lock:
            self.groups.difference_update(groups)

    def kill_all(self) -> None:
        with self._lock:
            groups = list(self.groups)
        for pgid in groups:
            signal_group(pgid, signal.SIGKILL)


SUPERVISOR = Supervisor()  # process-wide, as signal handlers are


def install() -> Supervisor:
    SUPERVISOR.install()
    return SUPERVISOR


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@functools.cache
def _prctl() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: no parent-death signal, the stop path still works
        return None


def _reaped(pid: int) -> bool:
    """Whether this process's child ``pid`` has exited (and is reaped now)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:  # reaped already
        return True


def _child_setup() -> None:
    """A spawned child, between fork and exec: the parent's blocked stop signals unblocked, dying with the parent."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    die_with_parent()


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux); used as a preexec_fn."""
    parent = os.getppid()
    prctl = _prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)


def torchrun(
    procs: int, log_dir: Path | str, entry: Sequence[str], *, python: str = sys.executable, standalone: bool = True
) -> list[str]:
    """The command that runs ``entry`` (``-m module args`` or ``script args``, after any torchrun options of its own)
    on ``procs`` local ranks. torchrun's own folder goes to ``log_dir``: by default each start makes a new
    ``torchelastic_*`` in /tmp and never removes it. ``standalone``: a private rendezvous on a free port."""
    rendezvous = ["--standalone"] if standalone else []
    options = [*rendezvous, f"--nproc-per-node={procs}", f"--log-dir={log_dir}"]
    return [python, "-m", "torch.distributed.run", *options, *entry]


def run_rank(main: Callable[[], int | None]) -> NoReturn:
    """A torchrun worker's entry: run ``main``, print an exception as the interpreter would, then leave without the
    interpreter's finalization. gloo's worker threads can abort that finalization under CPU load (SIGABRT,
    "terminate called without an active exception", no Python frame left): torchrun then fails the whole job and
    stops the other ranks mid-work. ``main`` closes what it opened in its own ``finally`` blocks. A crash in native
    code (SIGSEGV, SIGBUS, ...) prints every thread's Python stack first, to stderr or, under ``FAULT_DIR_ENV``, to
    ``rank{RANK}.native`` there (a rank's C++ threads, gloo's, die in silence otherwise); a failure of its own (an
    exception, a non-zero status) is noted in ``rank{RANK}.error`` there."""
    folder = os.environ.get(FAULT_DIR_ENV)
    rank = os.environ.get("RANK", "0")
    if folder:
        os.makedirs(folder, exist_ok=True)
        native = open(os.path.join(folder, f"rank{rank}.native"), "w")  # noqa: SIM115 - written at the crash
        faulthandler.enable(file=native, all_threads=True)
    else:
        faulthandler.enable(all_threads=True)
    try:
        status = main() or 0
        why = f"exit status {status}"
    except SystemExit as stop:
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
        status = 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
        why = f"exit status {status}: {stop.code}"
    except BaseException:  # noqa: BLE001 - printed as the interpreter would, then the same exit
        why = traceback.format_exc()
        print(why, end="", file=sys.stderr)
        status = 1
    if folder and status:
        Path(folder, f"rank{rank}.error").write_text(why)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


class Failure(NamedTuple):
    rank: str  # "rank0"
    native: bool  # died in native code (else: an error of its own)
    at: float  # when (the file's mtime)
    text: str  # the threads' stacks, or the error


def failures(folder: Path) -> list[Failure]:
    """What ``run_rank`` noted in ``folder``, the first failure first: the rank that failed first is the cause, the
    others may only have lost their peer. Empty stack files (ranks that did not crash) are removed, and so is the
    folder when nothing is left."""
    found = []
    for path in folder.glob("rank*.*") if folder.is_dir() else []:
        text = path.read_text(errors="replace")
        if text.strip():
            found.append(Failure(path.stem, path.suffix == ".native", path.stat().st_mtime, text))
        else:
            path.unlink()
    with contextlib.suppress(OSError):
        folder.rmdir()  # only when empty
    return sorted(found, key=lambda f: f.at)
