"""Build the task images locally, without Docker Hub: debootstrap -> import -> apt -> one image per task.

Docker Hub is unreachable on these machines, so nothing is ``FROM`` a hub image: a Debian minbase root file
system from ``debootstrap`` is imported, Python/git/pytest are installed in a host-network container, and each
task's repository is copied into ``/testbed`` with ``put_archive``. Every image carries a hash of its inputs
as a label; an image whose label matches is reused, so the whole build is idempotent and cheap to re-run.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from qwen_swe.data.taskpack.repo import make_repo
from qwen_swe.errors import TaskPackError
from qwen_swe.paths import TESTBED, cache_home, file_sha256
from qwen_swe.sandbox.docker_host import ENGINE_ERRORS

SUITE = "bookworm"
BASE_IMAGE = f"qwen-swe/base:{SUITE}"
PY_IMAGE = f"qwen-swe/py-git-pytest:{SUITE}"
PACKAGES = ("python3", "python3-pytest", "git", "patch", "ca-certificates")
LABEL_INPUTS = "qwen-swe.inputs"
BUILD_LABELS = {"qwen-swe": "1", "qwen-swe.role": "build"}
# What containers started from a task image inherit unless they set their own labels (theirs win).
IMAGE_LABELS = {"qwen-swe": "1", "qwen-swe.role": "image"}
DEFAULT_MIRROR = "http://deb.debian.org/debian"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
APT_TIMEOUT = 1200
DEBOOTSTRAP_TIMEOUT = 1800
BUILDER_VERSION = "2"  # bump to force a rebuild when the recipe below changes


@dataclass(frozen=True)
class StepResult:
    """One image of the build: what it is, whether it was built or reused, and how long that took."""

    image: str
    action: str  # "built" | "reused" | "tagged"
    seconds: float
    detail: str = ""


def debian_mirror() -> str:
    """The Debian mirror the machine's apt uses (``DEBIAN_MIRROR`` wins), so debootstrap needs no new access."""
    if os.environ.get("DEBIAN_MIRROR"):
        return os.environ["DEBIAN_MIRROR"].rstrip("/")
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        if not path.is_file() or not path.name.endswith((".list", ".sources")):
            continue
        for uri in re.findall(r"(?:^deb\s+(?:\[[^\]]*\]\s+)?|^URIs:\s*)(\S+)", _read(path), flags=re.M):
            if uri.rstrip("/").endswith("/debian"):
                return uri.rstrip("/")
    return DEFAULT_MIRROR


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def rootfs_tarball(log: Callable[[str], None] = print) -> tuple[Path, float]:
    """The cached minbase root file system tarball (made with debootstrap on first use) and the seconds spent."""
    cache = cache_home() / "rootfs"
    tarball = cache / f"debian-{SUITE}-minbase.tar"
    if tarball.is_file():
        return tarball, 0.0
    if shutil.which("debootstrap") is None:
        raise TaskPackError("debootstrap is not installed: run scripts/setup.sh (or apt-get install debootstrap)")
    cache.mkdir(parents=True, exist_ok=True)
    mirror = debian_mirror()
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="debootstrap-", dir=cache))
    try:
        root = work / "root"
        log(f"debootstrap --variant=minbase {SUITE} from {mirror} (about a minute)")
        _run(
            ["debootstrap", "--variant=minbase", SUITE, str(root), mirror],
            DEBOOTSTRAP_TIMEOUT,
            f"debootstrap from {mirror}; set DEBIAN_MIRROR to a reachable Debian mirror",
        )
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (root / junk).glob("*"):
                if entry.is_file():
                    entry.unlink()
        partial = work / "rootfs.tar"
        _run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], 600, "tar of the root file system")
        partial.replace(tarball)
    finally:
        _unmount_under(work)
        shutil.rmtree(work, ignore_errors=True)
    return tarball, time.monotonic() - start


def _unmount_under(folder: Path) -> None:
    """debootstrap mounts /proc and /sys in its target; a failed run can leave them, and rmtree must not enter."""
    prefix = str(folder.resolve()) + "/"
    mounts = [line.split()[1] for line in _read(Path("/proc/mounts")).splitlines() if len(line.split()) > 1]
    for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=60)


def _run(cmd: list[str], timeout: float, what: str) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TaskPackError(f"{what} timed out after {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise TaskPackError(f"{what} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join((BUILDER_VERSION, *parts)).encode()).hexdigest()[:32]


def _existing(client: Any, name: str) -> Any | None:
    found = client.images.list(name=name)  # a reference filter: empty when the name is not there
    return found[0] if found else None


def _current(client: Any, name: str, inputs: str) -> Any | None:
    image = _existing(client, name)
    if image is not None and (image.labels or {}).get(LABEL_INPUTS) == inputs:
        return image
    return None


def _drop_replaced(client: Any, old: Any | None, name: str) -> None:
    """Remove the image a rebuild replaced, when nothing else names it (best effort: a container may use it)."""
    if old is None:
        return
    try:
        old.reload()
        if not old.tags:
            client.images.remove(old.id, noprune=False)
    except ENGINE_ERRORS:
        pass


def _changes(inputs: str, workdir: str = "/") -> list[str]:
    labels = " ".join(f"{k}={v}" for k, v in {**IMAGE_LABELS, LABEL_INPUTS: inputs}.items())
    return [f"LABEL {labels}", 'CMD ["/bin/bash"]', f"WORKDIR {workdir}", f"ENV {PATH_ENV}", "ENV LANG=C.UTF-8"]


def _commit(container: Any, name: str, inputs: str, workdir: str = "/") -> Any:
    repository, tag = name.rsplit(":", 1)
    # Docker merges the build container's labels into the image and no API removes a label, so the role is
    # overridden: containers started from the image must not look like build leftovers to a reaper.
    conf = {
        "Labels": {**IMAGE_LABELS, LABEL_INPUTS: inputs},
        "Cmd": ["/bin/bash"],
        "WorkingDir": workdir,
        "Env": [PATH_ENV, "LANG=C.UTF-8"],
    }
    return container.commit(repository=repository, tag=tag, conf=conf)


def ensure_base(client: Any, log: Callable[[str], None] = print) -> list[StepResult]:
    """``qwen-swe/base:bookworm`` from the debootstrap tarball (the tarball step is reported separately)."""
    tarball, boot_seconds = rootfs_tarball(log)
    steps = [StepResult(str(tarball), "built" if boot_seconds else "reused", boot_seconds, "debootstrap + tar")]
    start = time.monotonic()
    inputs = _digest("base", SUITE, file_sha256(tarball))
    if _current(client, BASE_IMAGE, inputs) is not None:
        return steps + [StepResult(BASE_IMAGE, "reused", time.monotonic() - start)]
    old = _existing(client, BASE_IMAGE)
    repository, tag = BASE_IMAGE.rsplit(":", 1)
    client.api.import_image_from_file(str(tarball), repository=repository, tag=tag, changes=_changes(inputs))
    _drop_replaced(client, old, BASE_IMAGE)
    if _current(client, BASE_IMAGE, inputs) is None:
        raise TaskPackError(f"docker import of {tarball} did not produce {BASE_IMAGE} with its inputs label")
    return steps + [StepResult(BASE_IMAGE, "built", time.monotonic() - start, "docker import")]


def ensure_python(client: Any, log: Callable[[str], None] = print) -> StepResult:
    """``qwen-swe/py-git-pytest:bookworm``: apt-get in a host-network container on the base, then commit."""
    start = time.monotonic()
    base = client.images.get(BASE_IMAGE)
    script = (
        "set -eu; export DEBIAN_FRONTEND=noninteractive; apt-get update -q; "
        f"apt-get install -y -q --no-install-recommends {' '.join(PACKAGES)}; "
        "apt-get clean; rm -rf /var/lib/apt/lists/*; python3 -m pytest --version; git --version"
    )
    inputs = _digest("python", base.id, script)
    if _current(client, PY_IMAGE, inputs) is not None:
        return StepResult(PY_IMAGE, "reused", time.monotonic() - start)
    old = _existing(client, PY_IMAGE)
    log(f"installing {', '.join(PACKAGES)} into {PY_IMAGE}")
    container = client.containers.create(
        BASE_IMAGE, command=["bash", "-c", script], network_mode="host", labels=BUILD_LABELS
    )
    try:
        container.start()
        try:
            status = container.wait(timeout=APT_TIMEOUT).get("StatusCode")
        except requests.exceptions.RequestException:
            raise TaskPackError(
                f"apt-get install in {BASE_IMAGE} did not finish within {APT_TIMEOUT} s; "
                "check the Debian mirror (DEBIAN_MIRROR) and the host network"
            ) from None
        if status != 0:
            tail = container.logs(tail=40).decode(errors="replace")
            raise TaskPackError(
                f"apt-get install in {BASE_IMAGE} failed (exit {status}); check the Debian mirror "
                f"(DEBIAN_MIRROR) and host network:\n{tail}"
            )
        _commit(container, PY_IMAGE, inputs)
    finally:
        container.remove(force=True)
    _drop_replaced(client, old, PY_IMAGE)
    return StepResult(PY_IMAGE, "built", time.monotonic() - start, "apt-get + commit")


def _testbed_archive(repo_dir: Path) -> bytes:
    """A tar of the repository (work tree and .git) rooted at ``testbed/``, owned by root, stable metadata."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted([repo_dir, *repo_dir.rglob("*")]):
            rel = path.relative_to(repo_dir)
            info = tar.gettarinfo(str(path), arcname=str(Path("testbed") / rel) if rel.parts else "testbed")
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 1_700_000_000
            if info.isdir():
                info.mode = 0o755
                tar.addfile(info)
            else:
                info.mode = 0o644
                with path.open("rb") as f:
                    tar.addfile(info, f)
    return buf.getvalue()


def ensure_task(client: Any, row: dict[str, Any], log: Callable[[str], None] = print) -> StepResult:
    """The row's ``image``: the python image plus ``/testbed`` as a one-commit git repository at base_commit.

    Tasks over the same repository state share one image (tagged once per task); the inputs label decides.
    """
    start = time.monotonic()
    name, repo, base_commit = row["image"], row["repo"], row["base_commit"]
    parent = client.images.get(PY_IMAGE)
    inputs = _digest("task", parent.id, repo, base_commit)
    if _current(client, name, inputs) is not None:
        return StepResult(name, "reused", time.monotonic() - start)
    old = _existing(client, name)
    twins = client.images.list(filters={"label": f"{LABEL_INPUTS}={inputs}"})
    if twins:
        repository, tag = name.rsplit(":", 1)
        twins[0].tag(repository, tag)
        _drop_replaced(client, old, name)
        twin = twins[0].tags[0] if twins[0].tags else twins[0].short_id
        return StepResult(name, "tagged", time.monotonic() - start, f"same repository state as {twin}")
    with tempfile.TemporaryDirectory(prefix="qwen-swe-testbed-") as tmp:
        repo_dir = Path(tmp) / "testbed"
        sha = make_repo(repo.split("/", 1)[1], repo_dir)
        if sha != base_commit:
            raise TaskPackError(
                f"{row['instance_id']}: repository {repo} builds as {sha}, but tasks.jsonl says "
                f"{base_commit}: run `python -m qwen_swe.data.taskpack generate` and commit"
            )
        commit_testbed(client, name, repo_dir, inputs)
    _drop_replaced(client, old, name)
    return StepResult(name, "built", time.monotonic() - start, f"{repo}@{base_commit[:10]}")


def commit_testbed(client: Any, name: str, repo_dir: Path, inputs: str) -> None:
    """Commit image ``name``: the python image plus ``repo_dir`` (work tree and .git) as ``/testbed``."""
    archive = _testbed_archive(repo_dir)
    container = client.containers.create(PY_IMAGE, command=["true"], network_mode="none", labels=BUILD_LABELS)
    try:
        if not container.put_archive("/", archive):
            raise TaskPackError(f"copying {repo_dir} into the build container of {name} failed")
        _commit(container, name, inputs, workdir=TESTBED)
    finally:
        container.remove(force=True)


def ensure_testbed_image(client: Any, name: str, repo_dir: Path) -> StepResult:
    """Image ``name`` with ``repo_dir`` as /testbed, reused while its tag (a content hash of the commits) is current."""
    start = time.monotonic()
    inputs = _digest("testbed", client.images.get(PY_IMAGE).id, name)
    if _current(client, name, inputs) is not None:
        return StepResult(name, "reused", time.monotonic() - start)
    commit_testbed(client, name, repo_dir, inputs)
    return StepResult(name, "built", time.monotonic() - start, str(repo_dir.name))


def build_all(rows: Iterable[dict[str, Any]], client: Any, log: Callable[[str], None] = print) -> list[StepResult]:
    """Every image the task pack needs, in order; prints each step as it finishes."""
    steps: list[StepResult] = []

    def record(step: StepResult) -> None:
        steps.append(step)
        log(f"{step.action:>7}  {step.seconds:7.1f} s  {step.image}" + (f"  ({step.detail})" if step.detail else ""))

    for step in ensure_base(client, log):
        record(step)
    record(ensure_python(client, log))
    for row in rows:
        record(ensure_task(client, row, log))
    return steps
