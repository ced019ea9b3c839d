"""Node's compile cache for the agent: qwen-code's JavaScript compiled once per bundle, read by every rollout.

Each start of the CLI compiles about 7 MB of JavaScript before its first model call. V8 keeps the compiled code in
``NODE_COMPILE_CACHE``, one entry per file, keyed by the file's path and checked against its contents, Node's
version and its flags, so a stale entry is recompiled, never used. The path is part of the key, so the cache is made
where rollouts see the bundle: a container mounts the bundle read-only at ``AGENT_MOUNT``, its ``compile-cache``
folder writable on top, and runs the CLI exactly as a rollout does, against no server; it loads what a rollout loads,
fails its one model call and exits, and Node writes the cache. Rollouts read it through the bundle's read-only mount
(``agent_env``); a missing cache costs the compile and nothing else. Made once by the set-up
(``scripts/setup/65_agent_cache.sh``); a rebuilt bundle starts without one.

    .venv/bin/python -m qwen_swe.agent.compile_cache [--image IMAGE] [--force]
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from qwen_swe.agent.bundle import COMPILE_CACHE, AgentBundle
from qwen_swe.agent.qwen import QWEN_HOME, RUN_DIR, agent_command, agent_env, cli_files
from qwen_swe.agent.settings import AgentSettings
from qwen_swe.data.taskpack.images import PY_IMAGE
from qwen_swe.errors import BundleError
from qwen_swe.inference.settings import InferenceSettings
from qwen_swe.paths import AGENT_MOUNT, agent_bundle_dir
from qwen_swe.sandbox.docker_host import ENGINE_ERRORS, docker_client, labels_for

COMPLETE = ".complete"  # written last, with what made the cache
FILL_TIMEOUT = 300.0  # seconds the CLI gets to start, fail its call and exit (about 11 s on 2 loaded cores)
NO_SERVER = "http://127.0.0.1:9/v1"  # no network in the container: the one model call fails at once
FILL_AGENT = AgentSettings(agent_timeout=int(FILL_TIMEOUT / 2))


def fill_script(cli: str | None = None) -> str:
    """The shell line a rollout runs (``agent_command``, or ``cli``), with the files a rollout gives the CLI
    (``cli_files``, the compact profile) and a prompt of its own."""
    files = cli_files(FILL_AGENT, InferenceSettings(), "compact", "Say hi.")
    setup = [f"mkdir -p {QWEN_HOME} {RUN_DIR} /tmp/cache-fill"]
    setup += [f"printf %s {shlex.quote(text)} > {path}" for path, text in files.items()]
    setup.append("cd /tmp/cache-fill")
    return " && ".join(setup) + f" && {{ {cli or agent_command(FILL_AGENT)} || true; }}"  # its call fails: no server


def run_cli(
    bundle: AgentBundle, image: str, cache: Path, *, writable: bool, script: str | None = None, **env: str
) -> tuple[int, str]:
    """``script`` (default ``fill_script()``) in a container of ``image`` with no network, the bundle read-only at
    ``AGENT_MOUNT`` and ``cache`` at its compile cache, in the agent's environment plus ``env``: its exit status and
    its output. Removed at the end; BundleError when Docker fails or it outruns FILL_TIMEOUT."""
    try:
        container = docker_client().containers.create(
            image,
            command=["sh", "-c", script or fill_script()],
            environment={**agent_env(NO_SERVER, "compile-cache", "compact", "compile-cache"), **env},
            network_mode="none",
            labels=labels_for("compile-cache", "setup"),
            volumes={
                str(bundle.root): {"bind": AGENT_MOUNT, "mode": "ro"},
                str(cache): {"bind": f"{AGENT_MOUNT}/{COMPILE_CACHE}", "mode": "rw" if writable else "ro"},
            },
        )
    except ENGINE_ERRORS as exc:
        raise BundleError(
            f"the compile cache needs Docker and the image {image} ({exc}); run scripts/setup.sh"
        ) from None
    try:
        container.start()
        status = container.wait(timeout=FILL_TIMEOUT).get("StatusCode")
        return status, container.logs().decode(errors="replace")
    except ENGINE_ERRORS as exc:
        raise BundleError(f"the compile cache's container did not finish within {FILL_TIMEOUT:.0f} s ({exc})") from None
    finally:
        container.remove(force=True)


def fill(bundle: AgentBundle, image: str = PY_IMAGE, *, cache: Path | None = None, force: bool = False) -> dict:
    """Make ``bundle``'s compile cache (or ``cache``, mounted in its place) in a container of ``image``, unless one
    is complete; returns what its ``.complete`` file records. Raises BundleError when Docker or the CLI fails."""
    bundle.info()  # a complete bundle, or the error that says how to make one
    cache = cache or bundle.compile_cache
    done = cache / COMPLETE
    if done.is_file() and not force:
        return json.loads(done.read_text())
    bundle.compile_cache.mkdir(exist_ok=True)  # the mount point, inside the read-only bundle mount
    if cache.exists():
        shutil.rmtree(cache)
    cache.mkdir()
    start = time.monotonic()
    status, logs = run_cli(bundle, image, cache, writable=True)
    files = [p for p in cache.rglob("*") if p.is_file()]
    if status != 0 or not files:
        raise BundleError(f"qwen-code wrote no compile cache in {image} (exit {status}); its output:\n{logs[-2000:]}")
    for path in (cache, *cache.rglob("*")):  # rollouts read it as whatever user the image runs
        path.chmod(path.stat().st_mode | (0o555 if path.is_dir() else 0o444))
    info: dict[str, Any] = {
        "image": image,
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
        "seconds": round(time.monotonic() - start, 1),
        "bundle": bundle.info(),
    }
    done.write_text(json.dumps(info, indent=1) + "\n")
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Compile qwen-code once for every rollout (Node's compile cache)")
    parser.add_argument("--image", default=PY_IMAGE, help=f"an image with sh and glibc (default {PY_IMAGE})")
    parser.add_argument("--force", action="store_true", help="make it again even when one is complete")
    args = parser.parse_args(argv)
    try:
        info = fill(AgentBundle(agent_bundle_dir()), args.image, force=args.force)
    except BundleError as exc:
        print(f"agent compile cache: {exc}", file=sys.stderr)
        return 1
    print(f"agent compile cache: {info['files']} files, {info['bytes'] / 1e6:.1f} MB (made in {info['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
