"""The Docker host around the containers: a client, images, labels, and the sweep (``reap``) that removes what a
killed run left behind. ``docker.py`` makes the containers themselves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker
import docker.errors
import requests

from qwen_swe.errors import SandboxError

LABEL = "qwen-swe"
log = logging.getLogger("qwen_swe.sandbox")
ARCH = "x86_64"
REAP_THREADS = 8  # containers removed at once by a sweep
DOCKER_TIMEOUT = 120  # seconds a Docker API call may stall (exec streams are not bounded by it)
# what the docker package or its HTTP client raises when the engine fails (API, connection, HTTP timeouts)
ENGINE_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)


def image_for(instance: Mapping[str, Any], namespace: str = "swebench") -> str:
    """The instance's image: its ``image`` column when present, else swebench's official name.

    With a namespace the name is ``<ns>/sweb.eval.x86_64.<id>:latest`` with ``__`` written ``_1776_`` (Docker Hub
    forbids double underscores); with ``namespace=""`` it is the local name ``sweb.eval.x86_64.<id>:latest``.
    Both follow swebench 4.1.0's ``TestSpec.instance_image_key``.
    """
    if instance.get("image"):
        return str(instance["image"])
    key = f"sweb.eval.{ARCH}.{instance['instance_id'].lower()}:latest"
    return f"{namespace}/{key}".replace("__", "_1776_") if namespace else key


def labels_for(run_id: str, role: str) -> dict[str, str]:
    return {LABEL: "1", f"{LABEL}.run": run_id, f"{LABEL}.role": role}


def docker_client(timeout: int = DOCKER_TIMEOUT) -> docker.DockerClient:
    """A client for the local engine, with an error that says how to start one."""
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
        return client
    except Exception as exc:  # noqa: BLE001 - docker raises several unrelated types here
        raise SandboxError(
            f"cannot reach the Docker engine ({exc}); start it (scripts/setup.sh) or set DOCKER_HOST"
        ) from exc


def ensure_image(client: docker.DockerClient, image: str) -> None:
    """Make sure ``image`` is present locally; pull it once when its name has a registry namespace.

    Never builds and never retries: a missing image is a setup problem and the error says how to fix it. The pull
    streams progress, so the client's timeout bounds a stall, not a long download. Blocking; call it from a thread.
    """
    try:
        client.images.get(image)
        return
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError as exc:
        raise SandboxError(f"Docker could not inspect image {image}: {exc}") from exc
    how = (
        f"pull it (docker pull {image}) on a host that reaches its registry, or build the local task images "
        f"with `python -m qwen_swe.data.taskpack build`"
    )
    name, tag = _split_ref(image)
    if "/" not in name:
        raise SandboxError(f"image {image} is not present locally; {how}")
    try:
        client.images.pull(name, tag=tag)
    except Exception as exc:  # noqa: BLE001 - network, registry and auth errors all mean "not available"
        raise SandboxError(f"image {image} is not present locally and pulling it failed ({exc}); {how}") from exc


def _split_ref(image: str) -> tuple[str, str | None]:
    """(repository, tag) of an image reference; a digest reference keeps its digest in the repository part."""
    if "@" in image:
        return image, None
    if ":" in image.rsplit("/", 1)[-1]:
        name, tag = image.rsplit(":", 1)
        return name, tag
    return image, "latest"


def reap(run_id: str | None = None, client: docker.DockerClient | None = None) -> int:
    """Force-remove every container labelled by this project (of one run when ``run_id`` is given).

    A run calls this at start and at exit, so containers of a runner killed with SIGKILL are gone by the next start.
    The removals run side by side: each waits mostly on the engine, not on the CPU (on vfs under load, four in a
    row took 70-124 s, four at once 13-24 s: ``benchmarks/bench_reap``), and a stopping run waits for them. Returns
    how many were removed.
    """
    own = client is None
    client = client or docker_client()
    filters = [f"{LABEL}=1"] + ([f"{LABEL}.run={run_id}"] if run_id else [])
    try:
        found = client.containers.list(all=True, filters={"label": filters}, ignore_removed=True)
        if not found:
            return 0
        with ThreadPoolExecutor(min(len(found), REAP_THREADS), thread_name_prefix="reap") as pool:
            return sum(pool.map(_remove, found))
    finally:
        if own:
            client.close()


def _remove(container: Any) -> bool:
    try:
        container.remove(force=True)
        return True
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:  # still being created or removed: the next sweep gets it
        log.warning("could not remove %s yet: %s", container.name, exc)
        return False


def reap_until_quiet(run_id: str, *, quiet: float = 10.0, timeout: float = 60.0) -> int:
    """``reap`` until nothing of the run has appeared for ``quiet`` seconds (at most ``timeout``).

    A process killed in the middle of a container create leaves the request in flight in the daemon; that container
    lands after a first sweep, so a stopping run sweeps until the daemon is quiet.
    """
    start = last_found = time.monotonic()
    total = 0
    while True:
        found = reap(run_id)
        total += found
        now = time.monotonic()
        last_found = now if found else last_found
        if now - last_found >= quiet or now - start >= timeout:
            return total
        time.sleep(1.0)
