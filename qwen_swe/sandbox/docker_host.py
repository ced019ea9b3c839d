"""The Docker host around the containers: a client, images, labels, and the sweep (``reap``) that removes what a
killed run left behind. ``docker.py`` makes the containers themselves.

A process killed in the middle of a container create leaves the request to the engine, and that container lands
later, possibly after the run's sweep. So a create is announced (``announced``: a file named after the run and the
container, there while the request is out) and ``reap`` first waits out every announced create of the run. Whether
one is still in flight is asked of the engine, not guessed from time: Docker reserves a container's name when its
create starts (before the slow part, copying the image on vfs), so creating a container of that name fails with
409 exactly while the create is in flight or its container exists. The question is a create of ``PROBE_IMAGE``
(``FROM scratch``: nothing to copy, about 50 ms), removed at once when the name was free.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import tempfile
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from qwen_swe.errors import SandboxError

LABEL = "qwen-swe"
log = logging.getLogger("qwen_swe.sandbox")
ARCH = "x86_64"
REAP_THREADS = 8  # containers removed at once by a sweep
PROBE_IMAGE = "qwen-swe/probe:1"  # built here from scratch: what a sweep creates to ask whether a name is held
ANNOUNCE_PREFIX = "qwen-swe-creating."  # <prefix><run key>.<container name>, in the temp folder
CREATE_WAIT = 300.0  # seconds a sweep waits for the announced creates still in flight (vfs under load: 13-25 s)
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


def _announcement(run_id: str, name: str) -> Path:
    """The file that announces container ``name``'s create; the run id is hashed, so any id makes a file name."""
    key = hashlib.sha1(run_id.encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"{ANNOUNCE_PREFIX}{key}.{name}"


@contextlib.contextmanager
def announced(run_id: str, name: str) -> Iterator[None]:
    """Around a create of container ``name`` of ``run_id``: its announcement outlives a process killed inside."""
    path = _announcement(run_id, name)
    path.write_text(run_id)  # the sweep's probe carries the run's label
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def settle(client: docker.DockerClient, run_id: str | None = None) -> None:
    """Wait until no announced create of ``run_id`` (of every run: None) is in flight, so that a sweep after it sees
    every container it must remove; see the module docstring for how."""
    pattern = _announcement(run_id, "*").name if run_id else f"{ANNOUNCE_PREFIX}*"
    found = sorted(Path(tempfile.gettempdir()).glob(pattern))
    image = _probe_image(client) if found else ""
    deadline = time.monotonic() + CREATE_WAIT
    for path in found:
        name = path.name.rsplit(".", 1)[1]
        try:
            owner = path.read_text()
        except FileNotFoundError:  # its creator is done with it
            continue
        # until its creator is done with it, no create holds the name any more, or its container exists
        while path.exists() and _name_held(client, image, name, owner) and not _exists(client, name):
            if time.monotonic() > deadline:  # its announcement stays: the next sweep waits for it again
                log.warning(
                    "container %s is still being created after %.0f s; the next sweep removes it", name, CREATE_WAIT
                )
                break
            time.sleep(0.5)
        else:
            path.unlink(missing_ok=True)


def _name_held(client: docker.DockerClient, image: str, name: str, run_id: str) -> bool:
    """Whether a container create holds ``name`` (in flight, or done): a probe of ``image`` by that name fails with
    409."""
    try:
        probe = client.api.create_container(image, command=["true"], name=name, labels=labels_for(run_id, "probe"))
    except docker.errors.APIError as exc:
        if exc.status_code == 409:
            return True
        raise
    client.api.remove_container(probe["Id"], force=True)
    return False


def _exists(client: docker.DockerClient, name: str) -> bool:
    try:
        client.api.inspect_container(name)
        return True
    except docker.errors.NotFound:
        return False


def _probe_image(client: docker.DockerClient) -> str:
    try:
        client.images.get(PROBE_IMAGE)
    except docker.errors.ImageNotFound:  # no layers, no command: created, never started
        client.images.build(fileobj=io.BytesIO(b"FROM scratch\nLABEL qwen-swe.probe=1\n"), tag=PROBE_IMAGE, rm=True)
    return PROBE_IMAGE


def reap(run_id: str | None = None, client: docker.DockerClient | None = None) -> int:
    """Force-remove every container labelled by this project (of one run when ``run_id`` is given), once the run's
    announced creates have landed or failed (``settle``).

    A run calls this at start and at exit, so containers of a runner killed with SIGKILL are gone by the next start.
    The removals run side by side: each waits mostly on the engine, not on the CPU (on vfs under load, four in a
    row took 70-124 s, four at once 13-24 s: ``benchmarks/bench_reap``), and a stopping run waits for them. Returns
    how many were removed.
    """
    own = client is None
    client = client or docker_client()
    try:
        settle(client, run_id)
        found = containers_of(client, run_id)
        if not found:
            return 0
        with ThreadPoolExecutor(min(len(found), REAP_THREADS), thread_name_prefix="reap") as pool:
            return sum(pool.map(_remove, found))
    finally:
        if own:
            client.close()


def containers_of(client: docker.DockerClient, run_id: str | None = None) -> list[Any]:
    """The containers labelled by this project (of one run when ``run_id`` is given), running or not; one removed
    while they are listed is left out (docker-py inspects each listed container, which then raises NotFound)."""
    filters = [f"{LABEL}=1"] + ([f"{LABEL}.run={run_id}"] if run_id else [])
    return client.containers.list(all=True, filters={"label": filters}, ignore_removed=True)


def _remove(container: Any) -> bool:
    try:
        container.remove(force=True)
        return True
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:  # still being created or removed: the next sweep gets it
        log.warning("could not remove %s yet: %s", container.name, exc)
        return False
