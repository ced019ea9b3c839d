"""scripts/setup/pip_install.sh: uv installs from the sources pip is configured with, by pip's rule (the best
version over all of them), so a local CPU build in a find-links folder wins over an index's plain release."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from qwen_swe.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "setup" / "pip_install.sh"


def _wheel(folder: Path, name: str, version: str) -> None:
    """A minimal pure-Python wheel of ``name`` ``version``, with a module that says its version."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    rows = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*rows, f"{info}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)


def _simple_index(root: Path, name: str, wheel_dir: Path) -> str:
    """A PEP 503 index (file://) at ``root`` whose ``name`` page lists that project's wheels in ``wheel_dir``."""
    page = root / name
    page.mkdir(parents=True)
    links = "".join(f'<a href="{w.as_uri()}">{w.name}</a>\n' for w in sorted(wheel_dir.glob(f"{name}-*.whl")))
    (page / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return root.as_uri()


def _install(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    target = tmp_path / "venv"
    if not target.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True, timeout=120)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_")) and k != "TORCH_INDEX_URL"}
    return subprocess.run(
        ["bash", str(SCRIPT), str(target / "bin" / "python"), *args],
        cwd=REPO_ROOT,
        env={**base, "PIP_CONFIG_FILE": os.devnull, "UV_CACHE_DIR": str(tmp_path / "uv-cache"), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _installed(tmp_path: Path, name: str) -> str:
    python = tmp_path / "venv" / "bin" / "python"
    return subprocess.run(
        [str(python), "-c", f"import {name}; print({name}.VERSION)"], capture_output=True, text=True, timeout=60
    ).stdout.strip()


def test_the_local_build_in_pips_find_links_beats_the_indexs_release(tmp_path):
    _wheel(tmp_path / "released", "qsdemo", "1.0")
    _wheel(tmp_path / "local", "qsdemo", "1.0+cpu")
    index = _simple_index(tmp_path / "index", "qsdemo", tmp_path / "released")
    proc = _install(tmp_path, {"PIP_INDEX_URL": index, "PIP_FIND_LINKS": str(tmp_path / "local")}, "qsdemo==1.0")
    assert proc.returncode == 0, proc.stderr
    assert _installed(tmp_path, "qsdemo") == "1.0+cpu"


def test_torch_index_url_is_a_source_and_does_not_shadow_the_index(tmp_path):
    _wheel(tmp_path / "released", "qsdemo", "2.0")
    _wheel(tmp_path / "torch", "qsdemo", "1.0")  # the torch index lists other packages too, at other versions
    _wheel(tmp_path / "torch", "qstorch", "1.0+cpu")
    _wheel(tmp_path / "released", "qstorch", "1.0")
    index = _simple_index(tmp_path / "index", "qsdemo", tmp_path / "released")
    _simple_index(tmp_path / "index", "qstorch", tmp_path / "released")
    extra = _simple_index(tmp_path / "torch-index", "qsdemo", tmp_path / "torch")
    _simple_index(tmp_path / "torch-index", "qstorch", tmp_path / "torch")
    proc = _install(tmp_path, {"PIP_INDEX_URL": index, "TORCH_INDEX_URL": extra}, "qsdemo==2.0", "qstorch==1.0")
    assert proc.returncode == 0, proc.stderr  # uv's own rule would stop at the first index that has the name
    assert (_installed(tmp_path, "qsdemo"), _installed(tmp_path, "qstorch")) == ("2.0", "1.0+cpu")


def test_pips_constraint_holds(tmp_path):
    _wheel(tmp_path / "local", "qsdemo", "1.0")
    _wheel(tmp_path / "local", "qsdemo", "2.0")
    (tmp_path / "constraints.txt").write_text("qsdemo<2\n")
    env = {
        "PIP_INDEX_URL": _simple_index(tmp_path / "index", "qsdemo", tmp_path / "local"),
        "PIP_CONSTRAINT": str(tmp_path / "constraints.txt"),
    }
    proc = _install(tmp_path, env, "qsdemo")
    assert proc.returncode == 0, proc.stderr
    assert _installed(tmp_path, "qsdemo") == "1.0"
