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
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_swe.errors import InferenceError, WeightSyncError
from qwen_swe.inference.weight_sync import WeightSync

log = logging.getLogger(__name__)

TRACKER = "latest_checkpointed_iteration.txt"
MODEL_PREFIX = "model_state.model."  # how DCP flattens slime's {"model_state": ModelState} -> {"model": sd}
WRAPPER_INFIXES = ("_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")
EXPORT_DIR = "hf_export"
AUX_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "tokenizer.model",
)
_ITER_RE = re.compile(r"^iter_(\d{7,})$")
MEGATRON_EXPORT_DONE = "model.safetensors.index.json"  # slime 0.3.x's --save-hf writes it last (config.json first)
DEFAULT_SHARD_BYTES = 4 << 30
DEFAULT_KEEP_CHECKPOINTS = 3  # Settings.keep_checkpoints' default; slime's args do not carry it


@dataclass(frozen=True)
class SlimeCheckpoint:
    """One complete checkpoint slime wrote: ``iteration`` = rollout_id + 1 of the step that produced it."""

    iteration: int
    path: Path

    @property
    def model_dir(self) -> Path:
        return self.path / "model"

    @property
    def rollout_id(self) -> int:
        return self.iteration - 1


# ------------------------------------------------------------------------------------------------
# finding checkpoints
# ------------------------------------------------------------------------------------------------


def read_tracker(save_dir: str | os.PathLike[str]) -> int | None:
    """The iteration in ``latest_checkpointed_iteration.txt`` (slime writes it after the checkpoint), or None."""
    path = Path(save_dir).expanduser() / TRACKER
    try:
        return int(path.read_text().strip())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise WeightSyncError(f"{path} is unreadable ({exc}); it should hold one iteration number") from None


def list_checkpoints(save_dir: str | os.PathLike[str]) -> list[SlimeCheckpoint]:
    """Complete checkpoints, oldest first: the DCP ``model/.metadata`` exists (DCP writes it last) and the
    iteration is not newer than the tracker (slime bumps the tracker only after a save finished)."""
    root = Path(save_dir).expanduser()
    tracker = read_tracker(root)
    if tracker is None or not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        m = _ITER_RE.match(child.name)
        if m and int(m.group(1)) <= tracker and (child / "model" / ".metadata").is_file():
            found.append(SlimeCheckpoint(int(m.group(1)), child))
    return sorted(found, key=lambda c: c.iteration)


def newest_checkpoint(save_dir: str | os.PathLike[str]) -> SlimeCheckpoint | None:
    found = list_checkpoints(save_dir)
    return found[-1] if found else None


# ------------------------------------------------------------------------------------------------
# DCP -> HF conversion
# ------------------------------------------------------------------------------------------------


def hf_name(dcp_key: str) -> str:
    """The HF parameter name of one DCP key of slime's model checkpoint."""
    if not dcp_key.startswith(MODEL_PREFIX):
        raise WeightSyncError(
            f"checkpoint key {dcp_key!r} does not start with {MODEL_PREFIX!r}: this is not "
            "a model checkpoint written by slime v0.2.2's FSDP backend"
        )
    name = dcp_key[len(MODEL_PREFIX) :]
    for infix in WRAPPER_INFIXES:
        name = name.replace(infix, "")
    return name


def convert_checkpoint(
    model_dir: str | os.PathLike[str],
    hf_source: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    dtype: Any = "auto",
    shard_bytes: int = DEFAULT_SHARD_BYTES,
) -> Path:
    """Write the DCP model checkpoint in ``model_dir`` as an HF folder ``out_dir``: safetensors shards with the
    model's own parameter names, cast to ``dtype`` ("auto" = the dtype in the config; None = as stored), plus
    the config and tokenizer files of ``hf_source``. Loads one shard's worth of tensors at a time, so memory
    stays near ``shard_bytes`` whatever the model size. Atomic: the folder appears complete or not at all."""
    model_dir, out = Path(model_dir), Path(out_dir)
    source = resolve_hf_dir(hf_source)
    plan = _plan_conversion(model_dir, source, dtype, shard_bytes)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _write_shards(plan, model_dir, tmp)
        for name in AUX_FILES:
            if (source / name).is_file():
                shutil.copy2(source / name, tmp / name)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


@dataclass
class _Conversion:
    """Which tensors go to which shard, under which HF name and dtype."""

    entries: dict[str, Any]
    names: dict[str, str]
    dtypes: dict[str, Any]
    shards: list[list[str]]


def _plan_conversion(model_dir: Path, source: Path, dtype: Any, shard_bytes: int) -> _Conversion:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    config = json.loads((source / "config.json").read_text())
    target = _target_dtype(config, dtype)
    try:
        meta = dcp.FileSystemReader(str(model_dir)).read_metadata()
    except Exception as exc:  # noqa: BLE001 - any reader failure means "not a readable DCP folder"
        raise WeightSyncError(
            f"cannot read the DCP checkpoint in {model_dir} ({exc.__class__.__name__}: {exc}); is the save complete?"
        ) from None
    entries = {k: v for k, v in meta.state_dict_metadata.items() if isinstance(v, TensorStorageMetadata)}
    names = {k: hf_name(k) for k in entries}
    tied = bool(config.get("tie_word_embeddings", False))
    keys = [k for k in entries if not (tied and names[k] == "lm_head.weight")]  # the HF folder stores it once
    _check_names([names[k] for k in keys], source, tied)
    dtypes = {
        k: target
        if target is not None and entries[k].properties.dtype.is_floating_point
        else entries[k].properties.dtype
        for k in keys
    }
    shards: list[list[str]] = [[]]
    size = 0
    for k in keys:
        nbytes = entries[k].size.numel() * dtypes[k].itemsize
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(k)
        size += nbytes
    return _Conversion(entries, names, dtypes, shards)


def _write_shards(plan: _Conversion, model_dir: Path, tmp: Path) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import save_file

    weight_map: dict[str, str] = {}
    total = 0
    count = len(plan.shards)
    for n, group in enumerate(plan.shards, 1):
        state = {k: torch.empty(tuple(plan.entries[k].size), dtype=plan.entries[k].properties.dtype) for k in group}
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
            warnings.simplefilter("ignore", UserWarning)
            dcp.load(state, checkpoint_id=str(model_dir), no_dist=True)
        fname = "model.safetensors" if count == 1 else f"model-{n:05d}-of-{count:05d}.safetensors"
        tensors = {plan.names[k]: state[k].to(plan.dtypes[k]).contiguous() for k in group}
        save_file(tensors, str(tmp / fname), metadata={"format": "pt"})
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        weight_map.update(dict.fromkeys(tensors, fname))
        del state, tensors
    if count > 1:
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def resolve_hf_dir(hf_checkpoint: str | os.PathLike[str]) -> Path:
    """A local folder with the model's config and tokenizer: ``hf_checkpoint`` itself, or its Hugging Face
    cache snapshot (the same files slime's ``--hf-checkpoint`` loads)."""
    local = Path(hf_checkpoint).expanduser()
    if (local / "config.json").is_file():
        return local
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(str(hf_checkpoint), allow_patterns=list(AUX_FILES)))
    except Exception as exc:  # noqa: BLE001 - hub errors vary; the message says what to do
        raise WeightSyncError(
            f"--hf-checkpoint {hf_checkpoint!r} is neither a folder with config.json nor a "
            f"downloadable Hugging Face model ({exc.__class__.__name__}); pass a local "
            "folder"
        ) from None


def _target_dtype(config: dict[str, Any], dtype: Any) -> Any:
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    name = config.get("torch_dtype") or config.get("dtype") if dtype == "auto" else dtype
    if not name:
        return None
    value = getattr(torch, str(name).replace("torch.", ""), None)
    if not isinstance(value, torch.dtype):
        raise WeightSyncError(f"unknown dtype {name!r} (config.json torch_dtype/dtype or the dtype argument)")
    return value


def _check_names(names: list[str], source: Path, tied: bool) -> None:
    """The converted names must be the HF checkpoint's own (when its weights are local), else vLLM rejects them."""
    expected = _hf_weight_names(source)
    if expected is None:
        return
    if tied:
        expected.discard("lm_head.weight")
    got = set(names)
    missing, extra = sorted(expected - got), sorted(got - expected)
    if missing or extra:
        raise WeightSyncError(
            f"the checkpoint's parameters do not match {source}: missing {missing[:5]} "
            f"({len(missing)}), unexpected {extra[:5]} ({len(extra)}); was it trained "
            "from this --hf-checkpoint?"
        )


def _hf_weight_names(source: Path) -> set[str] | None:
    index = source / "model.safetensors.index.json"
    if index.is_file():
        return set(json.loads(index.read_text())["weight_map"])
    single = source / "model.safetensors"
    if single.is_file():
        from safetensors import safe_open

        with safe_open(str(single), framework="pt") as fh:
            return set(fh.keys())
    return None


# ------------------------------------------------------------------------------------------------
# the sync before each rollout
# ------------------------------------------------------------------------------------------------


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
            (p for p in self.save_dir.iterdir() if (m := _ITER_RE.match(p.name)) and int(m[1]) <= done),
            key=lambda p: p.name,
        )
        _remove(saved[: -self.keep_checkpoints])

    def _prune(self, served: SlimeCheckpoint) -> None:
        """Drop old exports (the served one and the one before stay) and all but the newest ``keep_checkpoints``
        slime checkpoints: with one checkpoint per step (model + optimizer) they would otherwise fill the disk."""
        exports = (
            sorted(
                (p for p in self.export_root.iterdir() if _ITER_RE.match(p.name)),
                key=lambda p: _number(_ITER_RE, p.name),
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
