"""Keep an external vLLM server on-policy under slime's FSDP backend: newest slime checkpoint -> HF folder -> reload.

slime v0.2.2 pushes weights only into SGLang engines it manages; with ``--debug-train-only`` (no engines) its
``update_weights`` is a no-op, so nothing would ever reach our vLLM server. What slime does do, with
``--save-interval 1``, is write a checkpoint after every training step, synchronously, before it asks for the next
rollout. Its FSDP layout (``slime/backends/fsdp_utils/checkpoint.py`` at v0.2.2)::

    {save}/latest_checkpointed_iteration.txt   "<rollout_id + 1>", written last by rank 0
    {save}/iter_{rollout_id + 1:07d}/model/     torch.distributed.checkpoint of {"model_state": {"model": sd}}
    {save}/iter_{rollout_id + 1:07d}/meta.json  iteration, rollout_id, next_rollout_id, global_step, ...

so before rollout ``r`` the weights trained on rollout ``r - 1`` are ``iter_{r:07d}``. ``SlimeWeightSync`` reads
that folder without a process group, writes HF safetensors (the model's own parameter names, the dtype of its
config, its config and tokenizer files) into a new folder, and asks the server to reload it. The weight version
is the checkpoint's iteration: the number of training steps baked into the served weights (0 = the base model).

slime 0.3.x (Megatron) converts nothing here: the launcher passes ``--save-hf OUTPUT_DIR/hf_export/slime_{rollout_id}``
and Megatron writes an HF folder after each step's checkpoint; the newest complete one before rollout ``r`` (its
``model.safetensors.index.json``, written last, exists) is served as it is.

The layout is read by ``checkpoints.py`` and the conversion is ``convert.py``; this module decides what is served
before each rollout and which old checkpoints and exports are removed.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

from qwen_swe.backends.slime.checkpoints import (
    ITER_RE,
    SlimeCheckpoint,
    list_checkpoints,
    newest_checkpoint,
    read_tracker,
)
from qwen_swe.backends.slime.convert import convert_checkpoint
from qwen_swe.errors import InferenceError, WeightSyncError
from qwen_swe.inference.weight_sync import WeightSync

log = logging.getLogger(__name__)

EXPORT_DIR = "hf_export"
MEGATRON_EXPORT_DONE = "model.safetensors.index.json"  # slime 0.3.x's --save-hf writes it last (config.json first)
DEFAULT_KEEP_CHECKPOINTS = 3  # Settings.keep_checkpoints' default; slime's args do not carry it


class SlimeWeightSync:
    """Called by the rollout function before each training rollout; see the module docstring.

    ``save_dir`` is slime's ``--save``; ``hf_checkpoint`` its ``--hf-checkpoint`` (config and tokenizer of the
    exported folders); ``sync`` pushes an exported folder into the server (``qwen_swe.inference.weight_sync``).
    Stateless between calls apart from the files it writes, so a fresh instance per rollout behaves the same as one
    kept for the whole run.
    """

    def __init__(
        self,
        save_dir: str | os.PathLike[str] | None,
        hf_checkpoint: str | None,
        sync: WeightSync,
        *,
        export_root: str | os.PathLike[str] | None = None,
        keep_exports: int = 2,
        keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS,
        allow_frozen: bool = False,
        max_staleness: int = 0,
        hf_exports: str | None = None,
    ) -> None:
        if not save_dir:
            raise WeightSyncError(
                "no checkpoint folder: slime's --save (or OUTPUT_DIR) must be set, with "
                "--save-interval 1, for the vLLM server to follow training"
            )
        self.save_dir = Path(save_dir).expanduser()
        self.hf_checkpoint = hf_checkpoint
        self.sync = sync
        self.export_root = Path(export_root) if export_root else self.save_dir / EXPORT_DIR
        self.keep_exports = max(1, keep_exports)
        self.keep_checkpoints = keep_checkpoints
        self.allow_frozen = allow_frozen
        self.max_staleness = max_staleness  # 1 under slime's train_async.py: the next rollout overlaps a step
        self.hf_exports = hf_exports  # slime 0.3.x's --save-hf pattern: Megatron writes the HF folders itself
        self.timings: dict[str, float] = {}

    def before_rollout(self, rollout_id: int) -> int:
        """Make the server serve the weights trained on rollout ``rollout_id - 1`` (or up to ``max_staleness``
        rollouts before it); return their version (the steps baked in; 0 = the base model, for rollout 0 only)."""
        version, newest = self._due(rollout_id)
        if newest is None:
            return 0
        t0 = time.monotonic()
        target = newest if isinstance(newest, Path) else self._export(newest)
        t1 = time.monotonic()
        try:
            self.sync.push(target, version)
        except InferenceError as exc:
            if not self.allow_frozen:
                raise WeightSyncError(f"reloading {target} into the inference server failed: {exc}") from exc
            log.warning("ALLOW_FROZEN_SERVER: reload of %s failed (%s); the server keeps its old weights", target, exc)
            return 0
        self.timings = {"convert_seconds": round(t1 - t0, 3), "reload_seconds": round(time.monotonic() - t1, 3)}
        if isinstance(newest, Path):
            self._prune_megatron(target)
        else:
            self._prune(newest)
        log.info("serving %s (weight version %d) for rollout %d: %s", target, version, rollout_id, self.timings)
        return version

    def _due(self, rollout_id: int) -> tuple[int, Path | SlimeCheckpoint | None]:
        """(version, weights) of the newest weights there are, refused (or, with ALLOW_FROZEN_SERVER, warned about)
        when they are older than the staleness bound allows; (0, None) when there are none yet."""
        newest: Path | SlimeCheckpoint | None  # Megatron's own HF folder (hf_exports), else slime's checkpoint
        if self.hf_exports:
            version, newest = self._newest_export(rollout_id)
            wanted, flag = Path(self.hf_exports.format(rollout_id=rollout_id - 1)), "--save-hf"
        else:
            checkpoint = newest_checkpoint(self.save_dir)
            version, newest = (checkpoint.iteration, checkpoint) if checkpoint else (0, None)
            wanted, flag = self.save_dir / f"iter_{rollout_id:07d}" / "model", "--save"
        if rollout_id >= 1 and version < rollout_id - self.max_staleness:
            have = (
                f"the newest is {(newest.path if isinstance(newest, SlimeCheckpoint) else newest).name}"
                if newest
                else "there is none"
            )
            message = (
                f"rollout {rollout_id} must run on the weights trained on rollout {rollout_id - 1}: "
                f"{wanted} is missing ({have}). Run slime with --save-interval 1 and the same {flag} folder "
                f"as this rollout function reads"
            )
            if not self.allow_frozen:
                raise WeightSyncError(message)
            log.warning("ALLOW_FROZEN_SERVER: %s; serving older weights", message)
        return version, newest

    def _export(self, checkpoint: SlimeCheckpoint) -> Path:
        """slime v0.2.2's FSDP checkpoint as an HF folder (converted once)."""
        if self.hf_checkpoint is None:
            raise WeightSyncError("no --hf-checkpoint (MODEL): the HF folder needs the model's config and tokenizer")
        target = self.export_root / checkpoint.path.name
        if not (target / "config.json").is_file():
            convert_checkpoint(checkpoint.model_dir, self.hf_checkpoint, target)
        return target

    def _newest_export(self, rollout_id: int) -> tuple[int, Path | None]:
        """(version, folder) of the newest ``--save-hf`` folder written before rollout ``rollout_id``, or (0, None):
        Megatron writes it after the step's checkpoint, inside the save slime waits for before the next rollout."""
        assert self.hf_exports is not None  # called only with --save-hf
        for r in range(rollout_id - 1, -1, -1):
            folder = Path(self.hf_exports.format(rollout_id=r))
            if (folder / MEGATRON_EXPORT_DONE).is_file():
                return r + 1, folder
        return 0, None

    def _prune_megatron(self, served: Path) -> None:
        """KEEP_CHECKPOINTS under Megatron: its ``iter_*`` folders (model and optimizer, every step) beyond the
        newest ``keep_checkpoints`` that the tracker confirms, and the HF copies beyond the newest ``keep_exports``."""
        assert self.hf_exports is not None  # called only with --save-hf
        name = re.compile(re.escape(Path(self.hf_exports).name).replace(re.escape("{rollout_id}"), r"(\d+)") + "$")
        parent = Path(self.hf_exports).parent
        exports = sorted((p for p in parent.iterdir() if name.match(p.name)), key=lambda p: _number(name, p.name))
        _remove(p for p in exports[: -self.keep_exports] if p != served)
        done = read_tracker(self.save_dir) or 0
        saved = sorted(
            (p for p in self.save_dir.iterdir() if (m := ITER_RE.match(p.name)) and int(m[1]) <= done),
            key=lambda p: p.name,
        )
        _remove(saved[: -self.keep_checkpoints])

    def _prune(self, served: SlimeCheckpoint) -> None:
        """Drop old exports (the served one and the one before stay) and all but the newest ``keep_checkpoints``
        slime checkpoints: with one checkpoint per step (model + optimizer) they would otherwise fill the disk."""
        exports = (
            sorted(
                (p for p in self.export_root.iterdir() if ITER_RE.match(p.name)),
                key=lambda p: _number(ITER_RE, p.name),
            )
            if self.export_root.is_dir()
            else []
        )
        _remove(p for p in exports[: -self.keep_exports] if p.name != served.path.name)
        old = list_checkpoints(self.save_dir)[: -self.keep_checkpoints]
        _remove(c.path for c in old if c.iteration < served.iteration)


def _number(pattern: re.Pattern[str], name: str) -> int:
    """The number in ``name``, which ``pattern`` (its first group the number) is known to match."""
    match = pattern.match(name)
    assert match is not None
    return int(match[1])


def _remove(paths: Iterable[Path]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
