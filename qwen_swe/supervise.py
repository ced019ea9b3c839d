"""Process supervision: a run stops cleanly on SIGTERM or SIGINT, and nothing it started outlives it.

- The first SIGTERM/SIGINT raises ``Interrupted`` in the main thread, wherever it is (building images, starting
  the server, waiting for the trainer); the ``finally`` blocks on the way out stop the trainer and the server by
  their process groups (SIGTERM, then SIGKILL after the grace) and remove the run's containers. The process then
  exits with 128 + the signal number.
- A second signal does not wait: every process group the run started gets SIGKILL and the process exits at once.
- Children are started in their own session (so a terminal's Ctrl-C reaches only the run, which then stops them
  in order) and with ``PR_SET_PDEATHSIG``: if the run dies by SIGKILL, the kernel sends them SIGTERM. The next
  run reaps the containers that were left.

Signals are process-wide, so the supervisor is too: ``install`` once, in the entry point.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


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

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.stopping:  # the second signal: no more waiting
            self.kill_all()
            os._exit(128 + signum)
        self.stopping = True
        raise Interrupted(signum)

    def spawn(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` in its own session, dying with this process; its group is stopped on the way out."""
        _prctl()  # resolved here, not in the forked child (no dlopen between fork and exec)
        proc = subprocess.Popen(list(argv), start_new_session=True, preexec_fn=die_with_parent, **kwargs)
        with self._lock:
            self.groups.add(proc.pid)
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


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux); used as a preexec_fn."""
    parent = os.getppid()
    prctl = _prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)


def run_rank(main: Callable[[], int | None]) -> NoReturn:
    """A torchrun worker's entry: run ``main``, print an exception as the interpreter would, then leave without the
    interpreter's finalization. gloo's worker threads can abort that finalization under CPU load (SIGABRT,
    "terminate called without an active exception", no Python frame left): torchrun then fails the whole job and
    stops the other ranks mid-work. ``main`` closes what it opened in its own ``finally`` blocks."""
    try:
        status = main() or 0
    except SystemExit as stop:
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
        status = 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # noqa: BLE001 - printed as the interpreter would, then the same exit
        traceback.print_exc()
        status = 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
