"""Resumable checkpoints: sharded model and optimizer state (torch.distributed.checkpoint), the trainer's
step and weight version, the rollout driver's state (data-source position), per-rank RNG states and the
resolved settings, in ``OUTPUT_DIR/checkpoints/step_{n:06d}``.

Why it looks like this:
- A crash mid-save must never leave something that looks resumable: everything is written into
  ``step_N.tmp``, a ``complete`` marker goes in last, and only then the folder is renamed. Discovery
  ignores ``.tmp`` folders and folders without the marker, with a warning.
- A full disk must be a clear error before the save starts, not a truncated checkpoint: free space is
  checked against parameter bytes + 2 Adam moments of the trainable ones + a margin.
- ``step`` in a checkpoint is the number of *completed* steps, i.e. the step to run next.
All functions taking a model are collectives: every rank calls them.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import random
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from qwen_swe.errors import CheckpointError

log = logging.getLogger("qwen_swe.checkpoint")

MARKER = "complete"
STATE_FILE = "trainer_state.pkl"
MARGIN_FRACTION = 0.10
MARGIN_BYTES = 256 * 2**20


def checkpoint_dir(output_dir: Path) -> Path:
    return Path(output_dir) / "checkpoints"


def step_dir(output_dir: Path, step: int) -> Path:
    return checkpoint_dir(output_dir) / f"step_{step:06d}"


def _step_of(path: Path) -> int | None:
    name = path.name
    if not name.startswith("step_"):
        return None
    digits = name[5:].split(".")[0]
    return int(digits) if digits.isdigit() else None


def complete_checkpoints(output_dir: Path, warn: bool = True) -> list[tuple[int, Path]]:
    """Complete checkpoints, oldest first; half-written ones are skipped (with a warning unless ``warn=False``)."""
    root = checkpoint_dir(output_dir)
    found: list[tuple[int, Path]] = []
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        step = _step_of(path)
        if step is None or not path.is_dir():
            continue
        if path.name.endswith(".tmp") or not (path / MARKER).exists():
            if warn:
                log.warning(
                    "ignoring half-written checkpoint %s (no '%s' marker): a save was interrupted", path, MARKER
                )
            continue
        found.append((step, path))
    return sorted(found)


def latest_checkpoint(output_dir: Path) -> Path | None:
    found = complete_checkpoints(output_dir)
    return found[-1][1] if found else None


def expected_bytes(param_bytes: int, trainable_bytes: int) -> int:
    """Disk a checkpoint needs: weights + AdamW's two moments of the trainable weights + margin."""
    raw = param_bytes + 2 * trainable_bytes
    return int(raw * (1 + MARGIN_FRACTION)) + MARGIN_BYTES


def check_disk(folder: Path, needed: int) -> None:
    """Raise ``CheckpointError`` when the file system holding ``folder`` has less than ``needed`` bytes free."""
    probe = Path(folder)
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed:
        raise CheckpointError(
            f"not enough disk for {folder}: need about {needed / 2**30:.2f} GiB ({needed} bytes), "
            f"{free / 2**30:.2f} GiB ({free} bytes) free; free space, lower KEEP_CHECKPOINTS, "
            "or point OUTPUT_DIR at a larger disk"
        )


def _agree(error: str | None) -> None:
    """Collective: if any rank hit an error, every rank raises it (no rank is left waiting in a collective)."""
    errors: list[str | None] = [None] * dist.get_world_size()
    dist.all_gather_object(errors, error)
    first = next((e for e in errors if e), None)
    if first:
        raise CheckpointError(first)


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(
    output_dir: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    state: dict[str, Any],
    keep: int,
    needed_bytes: int | None = None,
) -> Path:
    """Collective: write checkpoint ``step`` atomically and keep only the newest ``keep`` complete ones.

    ``state`` (rank 0's is saved) holds the trainer's step, weight version, the driver's state and the
    resolved settings; it is pickled, so any plain Python values work. Returns the final folder.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    rank, final = dist.get_rank(), step_dir(output_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    error = None
    if rank == 0:
        try:
            if needed_bytes is not None:
                check_disk(final.parent, needed_bytes)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        except (CheckpointError, OSError) as exc:
            error = str(exc) if isinstance(exc, CheckpointError) else f"cannot create {tmp}: {exc}"
    _agree(error)
    t0 = time.monotonic()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp / "dcp"))
    torch.save(_rng_state(), tmp / f"rng_rank{rank}.pt")
    dist.barrier()
    if rank == 0:
        with open(tmp / STATE_FILE, "wb") as fh:
            pickle.dump(state, fh)
        meta = {
            "step": step,
            "weight_version": state.get("weight_version"),
            "world_size": dist.get_world_size(),
            "saved_at": time.time(),
            "seconds": round(time.monotonic() - t0, 3),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        (tmp / MARKER).write_text("ok\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        _fsync_dir(final.parent)
        prune_checkpoints(output_dir, keep)
    dist.barrier()
    return final


def prune_checkpoints(output_dir: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` complete checkpoints, and leftovers of interrupted saves."""
    complete = complete_checkpoints(output_dir, warn=False)
    for _, path in complete[:-keep] if keep > 0 else complete:
        shutil.rmtree(path, ignore_errors=True)
    kept = {p for _, p in complete[-keep:]} if keep > 0 else set()
    for path in checkpoint_dir(output_dir).iterdir():
        if path.is_dir() and _step_of(path) is not None and path not in kept:
            shutil.rmtree(path, ignore_errors=True)


def load_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Collective: restore model, optimizer and this rank's RNG from ``path``; return the saved state."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = Path(path)
    if not (path / MARKER).exists():
        raise CheckpointError(f"{path} is not a complete checkpoint (no '{MARKER}' marker); delete it and rerun")
    model_sd, optim_sd = get_state_dict(model, optimizer)
    sd: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
    dcp.load(sd, checkpoint_id=str(path / "dcp"))
    set_state_dict(model, optimizer, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    rng = path / f"rng_rank{dist.get_rank()}.pt"
    if rng.exists():
        _set_rng_state(torch.load(rng, weights_only=False))
    else:
        log.warning(
            "%s has no RNG state for rank %d (saved with another world size); RNG not restored", path, dist.get_rank()
        )
    with open(path / STATE_FILE, "rb") as fh:
        return pickle.load(fh)
