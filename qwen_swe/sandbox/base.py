"""The sandbox contract: an isolated machine with a repository in it. ``docker.py`` implements it.

Callers that make machines (the grader) take a ``SandboxFactory`` and describe what they need with a
``SandboxRequest``, so a second backend is one class and one factory, and the callers do not change."""

from __future__ import annotations

import abc
import shlex
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Self

from qwen_swe.errors import SandboxError
from qwen_swe.paths import TESTBED


@dataclass
class ExecResult:
    exit_code: int
    output: str  # stdout and stderr merged, head and tail kept when over the limit
    timed_out: bool
    truncated: bool
    seconds: float


@dataclass(frozen=True)
class SandboxRequest:
    """A new machine for one SWE-bench row, as its caller needs it; the backend adds its own limits and image names."""

    instance: Mapping[str, Any]
    run_id: str  # the label a run's clean-up finds its machines by
    role: str  # "rollout", "grade", ...
    network: str | None = None  # None: the backend's own setting
    base_commit: str | None = None  # checked out at start when given
    hide_future: bool = True  # scrub commits after base_commit
    output_limit: int = 1 << 20  # bytes of one command's output kept (head and tail)
    mounts: Mapping[str, str] = field(default_factory=dict)  # host folder -> path inside, read-only
    disk_limit: int = 0  # bytes the machine may write (0: no budget); past it a command fails


class Sandbox(abc.ABC):
    """An isolated machine with a repository in it; ``async with`` guarantees it is removed on every path."""

    image: str = ""  # what the machine is made from, for logs

    async def prepare(self) -> None:  # noqa: B027 - an optional step: a no-op unless a sandbox needs it
        """Fetch what ``start`` needs (an image), so a caller can time the two apart; nothing by default."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def exec(
        self, cmd: str, timeout: float, *, workdir: str | None = None, env: dict[str, str] | None = None
    ) -> ExecResult: ...

    @abc.abstractmethod
    async def read_file(self, path: str) -> bytes: ...

    @abc.abstractmethod
    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    async def git_diff(self, repo: str = TESTBED, exclude: Sequence[str] = ()) -> str:
        """The working tree against the index, new files included (``git add -N``), minus the ``exclude`` paths.

        The diff goes through a file, so git's warnings on stderr never end up in the patch and no cap cuts it.
        """
        out = f"/tmp/.qwen-swe-diff-{uuid.uuid4().hex[:12]}"
        specs = " ".join(shlex.quote(f":(exclude){p}") for p in exclude)
        git = "git -c safe.directory='*' -c core.fileMode=false"
        # intent-to-add only the untracked files: `git add -N .` would also stage deletions, hiding them
        new = f"{git} ls-files -z --others --exclude-standard | xargs -0 -r {git} add -N --"
        res = await self.exec(
            f"{new} && {git} diff --no-color --no-ext-diff -- . {specs} > {out}", timeout=120, workdir=repo
        )
        if res.exit_code != 0:
            raise SandboxError(f"git diff in {repo} failed (exit {res.exit_code}): {res.output[-2000:]}")
        try:
            return (await self.read_file(out)).decode("utf-8", errors="replace")
        finally:
            await self.exec(f"rm -f {out}", timeout=30)

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class SandboxFactory(Protocol):
    """Makes a sandbox (not started) for a request: the Docker one, or a test's local double."""

    def __call__(self, request: SandboxRequest) -> Sandbox: ...
