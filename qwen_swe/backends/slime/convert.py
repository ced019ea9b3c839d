"""slime's DCP model checkpoint -> an HF folder vLLM loads: safetensors shards with the model's own parameter names,
the dtype of its config, its config and tokenizer files. One shard's worth of tensors is loaded at a time, and the
folder appears complete or not at all."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_swe.errors import WeightSyncError

MODEL_PREFIX = "model_state.model."  # how DCP flattens slime's {"model_state": ModelState} -> {"model": sd}
WRAPPER_INFIXES = ("_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")
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
DEFAULT_SHARD_BYTES = 4 << 30


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
