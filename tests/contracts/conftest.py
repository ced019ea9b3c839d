"""Fixtures of the slime contract suite (``slime_*.py`` here), which runs inside ``.venv-slime`` with SLIME_PATH set;
``test_run_in_slime_venv.py`` runs it that way for each vendored release. Nothing here imports slime or transformers
at import time: the main suite loads this file too."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

# ours, re-imported once slime is importable so they take slime's Sample and DataSource (restored after)
OURS = {
    "sample": "qwen_swe.data.sample",
    "data_source": "qwen_swe.data.source",
    "trajectory": "qwen_swe.traffic.trajectory",
    "rollout": "qwen_swe.rollout.engine",
    "slime_rollout": "qwen_swe.backends.slime.rollout",
    "slime_backend": "qwen_swe.backends.slime.launcher",
    "entry_data_source": "examples.qwen_swe.data_source",
    "entry_rollout": "examples.qwen_swe.rollout",
}


@pytest.fixture(scope="session")
def slime():
    """The slime checkout on SLIME_PATH importable, its light modules loaded, and our modules re-imported. Once per
    process: v0.3.1's ``load_function`` caches what it loaded, so a second import of ours would not be seen."""
    if int(importlib.metadata.version("transformers").split(".")[0]) >= 5 or not all(
        importlib.util.find_spec(m) for m in ("ray", "httpx")
    ):
        pytest.skip(
            "slime's light modules need transformers<5, ray and httpx in this interpreter: run "
            "tests/contracts/test_run_in_slime_venv.py, which runs these in .venv-slime (scripts/setup.sh)"
        )
    root = Path(os.environ["SLIME_PATH"]).expanduser().resolve()
    if not (root / "slime" / "utils" / "types.py").is_file():
        pytest.fail(f"SLIME_PATH={root} is not a slime checkout (no slime/utils/types.py)")
    # appended, not prepended: slime's own regular ``examples`` package must not hide ours
    sys.path.append(str(root))
    saved = {name: sys.modules.pop(name) for name in OURS.values() if name in sys.modules}
    try:
        ns = types.SimpleNamespace(
            root=root,
            types=importlib.import_module("slime.utils.types"),
            mask_utils=importlib.import_module("slime.utils.mask_utils"),
            slime_data_source=importlib.import_module("slime.rollout.data_source"),
            base_types=importlib.import_module("slime.rollout.base_types"),
            load_function=importlib.import_module("slime.utils.misc").load_function,
        )
        for attr, name in OURS.items():
            setattr(ns, attr, importlib.import_module(name))
        ns.release = ns.slime_backend.slime_version(root)
        yield ns
    finally:
        for name in OURS.values():
            sys.modules.pop(name, None)
        sys.modules.update(saved)
        sys.path.remove(str(root))


def _release(slime: types.SimpleNamespace, release: str) -> types.SimpleNamespace:
    """A module written for one release fails (not skips) when SLIME_PATH names another."""
    if slime.release != release:
        pytest.fail(
            f"{slime.root} is slime {slime.release}; these checks are v{release}'s: set SLIME_PATH to "
            f"slime-v{release} (test_run_in_slime_venv.py picks the files for each release)"
        )
    return slime


@pytest.fixture(scope="module")
def slime_v022(slime):
    return _release(slime, "0.2.2")


@pytest.fixture(scope="module")
def slime_v031(slime):
    return _release(slime, "0.3.1")


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    from transformers import AutoTokenizer

    from tests.tiny_model import qwen_tokenizer_dir

    return AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))
