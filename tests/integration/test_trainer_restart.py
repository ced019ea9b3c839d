"""A trainer rank that dies in native code: the run starts the trainer again (under torchrun, 2 ranks), at most
TRAINER_RESTARTS times, and keeps the dead rank's thread stacks; an error of the run's own is not retried.

Run as a module (``-m tests.integration.test_trainer_restart MODE STATE_DIR``) it is the torchrun worker: rank 0
crashes by a real SIGSEGV (``crash-once``: on its first start only; ``crash``: always) or raises (``error``)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from qwen_swe.config.settings import Settings
from qwen_swe.paths import python_path
from qwen_swe.run import restarting
from qwen_swe.supervise import torchrun

pytestmark = pytest.mark.docker  # a restart reaps the run's containers first, as a rerun does

MODULE = "tests.integration.test_trainer_restart"


def _run(tmp_path: Path, mode: str, restarts: int = 1) -> tuple[int, list[str], Path]:
    out = tmp_path / "run"
    settings = Settings.build(
        output_dir=out, vllm_url="http://127.0.0.1:9", run_id="restart-test", trainer_restarts=restarts
    )
    cmd = torchrun(2, out / "logs" / "torchrun", ["-m", MODULE, mode, str(tmp_path / "state")])
    env = {**os.environ, "PYTHONPATH": python_path(inherited=os.environ.get("PYTHONPATH")), "OMP_NUM_THREADS": "1"}
    status = restarting(cmd, env, settings)
    starts = (tmp_path / "state" / "starts").read_text().split()
    return status, starts, out / "logs" / "faults"


def test_a_native_crash_starts_the_trainer_again_and_keeps_the_stacks(tmp_path, caplog):
    status, starts, faults = _run(tmp_path, "crash-once")
    assert status == 0
    assert starts == ["rank0", "rank0"]  # the crashed start, then the one that finished
    (kept,) = faults.iterdir()  # the first attempt's folder: rank 0's stacks only (rank 1 was stopped, no fault)
    assert kept.name.endswith("-attempt0") and [p.name for p in kept.iterdir()] == ["rank0.native"]
    stacks = (kept / "rank0.native").read_text()
    assert "Fatal Python error: Segmentation fault" in stacks and "in crash" in stacks
    assert "restart 1 of TRAINER_RESTARTS=1" in caplog.text and "trainer rank0 died in native code" in caplog.text


def test_the_restarts_are_bounded(tmp_path):
    killed, crashed = (tmp_path / "run/logs/faults" / f"20000101-00000{i}-attempt0" for i in (0, 1))
    for folder, text in ((killed, ""), (crashed, "Fatal Python error: Segmentation fault")):  # an earlier start's
        folder.mkdir(parents=True)
        (folder / "rank0.native").write_text(text)
    status, starts, faults = _run(tmp_path, "crash", restarts=1)
    assert status != 0 and starts == ["rank0", "rank0"]
    assert not killed.exists() and (crashed / "rank0.native").stat().st_size  # only the empty notes were removed
    assert sorted(p.name.rsplit("-", 1)[1] for p in faults.iterdir() if p != crashed) == ["attempt0", "attempt1"]


def test_an_error_of_the_run_is_not_retried(tmp_path, caplog):
    status, starts, faults = _run(tmp_path, "error", restarts=3)
    assert status != 0 and starts == ["rank0"]
    (kept,) = faults.iterdir()  # rank 0's error noted; rank 1 was stopped: its empty stack file is gone
    assert [p.name for p in kept.iterdir()] == ["rank0.error"]
    assert "ValueError: an error of the run's own" in (kept / "rank0.error").read_text()
    assert "restart" not in caplog.text


# --- the torchrun worker --------------------------------------------------------------------------------------------


def crash() -> None:
    import ctypes

    ctypes.string_at(0)  # a read of address 0: SIGSEGV in native code


def _worker(mode: str, state: Path) -> int:
    rank = int(os.environ["RANK"])
    state.mkdir(parents=True, exist_ok=True)
    if rank != 0:  # until rank 0 is done; torchrun stops it when rank 0 fails
        deadline = time.monotonic() + 120
        while not (state / "done").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return 0
    first = not (state / "starts").exists()
    with (state / "starts").open("a") as fh:
        fh.write("rank0\n")
    if mode == "error":
        raise ValueError("an error of the run's own")
    if mode == "crash" or first:
        crash()
    (state / "done").touch()
    return 0


if __name__ == "__main__":
    from qwen_swe.supervise import run_rank

    run_rank(lambda: _worker(sys.argv[1], Path(sys.argv[2])))
