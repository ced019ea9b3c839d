"""Markers name the real resources a test needs. Locally a missing resource skips the test with the reason;
under CI (CI=true) it fails instead, because a CI run that skips Docker, vLLM or agent tests tests nothing."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from functools import cache

import pytest

from qwen_swe import paths

SHARED_DATA = paths.REPO_ROOT.parent / "shared" / "data" / "swebench"
SLIME_VENDOR = paths.REPO_ROOT.parent / "shared" / "vendor"  # slime releases, unmodified (shared/vendor/README.md)
SLIME_RELEASES = ("slime-v0.2.2", "slime-v0.3.1")
SLIME_PYTHON = paths.REPO_ROOT / ".venv-slime" / "bin" / "python"  # scripts/setup/35_slime.sh

# 1 intra-op thread per process: on 2 cores, OpenMP threads spinning at barriers cost 4-10x
os.environ.setdefault("OMP_NUM_THREADS", "1")


@cache
def _docker() -> str | None:
    try:
        import docker

        docker.from_env(timeout=10).ping()
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine"
        return f"no Docker engine ({exc.__class__.__name__}); run scripts/setup.sh"


@cache
def _vllm() -> str | None:
    if not paths.vllm_python().exists():
        return f"no vLLM environment at {paths.vllm_python()}; run scripts/setup.sh"
    if not (paths.embedded_model_dir() / "config.json").exists():
        return f"no embedded model at {paths.embedded_model_dir()}; run scripts/setup.sh"
    return None


@cache
def _agent() -> str | None:
    if not (paths.agent_bundle_dir() / "ready").exists():
        return f"no qwen-code runtime bundle at {paths.agent_bundle_dir()}; run scripts/setup.sh"
    return None


def _gpu() -> str | None:
    import torch

    return None if torch.cuda.is_available() else "no CUDA GPU"


def _modal() -> str | None:
    ok = os.environ.get("MODAL_TOKEN_ID") or os.path.exists(os.path.expanduser("~/.modal.toml"))
    return None if ok else "no Modal credentials"


def _slime() -> str | None:
    return None if os.environ.get("SLIME_PATH") else "SLIME_PATH does not point at a slime checkout"


def _slime_env() -> str | None:
    if not SLIME_PYTHON.exists():
        return f"no slime contract environment at {SLIME_PYTHON}; run scripts/setup.sh (35_slime.sh)"
    missing = [r for r in SLIME_RELEASES if not (SLIME_VENDOR / r / "slime").is_dir()]
    if missing:
        return f"{', '.join(missing)} not vendored in {SLIME_VENDOR}; put a copy of shared/ beside the repository"
    return None


def _browser() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    return None if found else "no headless chromium; run scripts/setup.sh (Debian's chromium)"


CHECKS = {
    "docker": _docker,
    "vllm": _vllm,
    "agent": _agent,
    "browser": _browser,
    "gpu": _gpu,
    "modal": _modal,
    "slime": _slime,
    "slime_env": _slime_env,
}
# Resources CI provides itself; the rest (GPU, Modal account, a slime checkout on SLIME_PATH) are skipped there too.
CI_PROVIDES = {"docker", "vllm", "agent", "browser", "slime_env"}


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    # A test command stopped by SIGTERM (a CI time limit, a kill of its process group) unwinds as Ctrl-C does, so each
    # test's ``finally`` stops the runs and containers it started: an unhandled SIGTERM runs none of them.
    signal.signal(signal.SIGTERM, _interrupted)


def pytest_report_header(config: pytest.Config) -> str:
    # a full disk shows up as hundreds of unrelated errors; the header says how much room there was
    free = {where: shutil.disk_usage(where).free / 2**30 for where in (tempfile.gettempdir(), "/var/lib")}
    return "disk free: " + ", ".join(f"{where} {gib:.1f} GiB" for where, gib in free.items())


def pytest_runtest_setup(item: pytest.Item) -> None:
    for name, check in CHECKS.items():
        if item.get_closest_marker(name) is None:
            continue
        reason = check()
        if reason is None:
            continue
        if os.environ.get("CI") == "true" and name in CI_PROVIDES:
            pytest.fail(f"CI must provide '{name}': {reason}")
        pytest.skip(reason)


# --- pytest-xdist (scripts/test.sh: -n 3 --dist loadfile --no-loadscope-reorder) ---------------------------------
# A worker takes a whole file, so a file's tests run in order beside their module fixtures; the files of the one
# shared embedded vLLM server (integration/conftest.py) make one group, so one worker starts it once. Groups holding a
# ``slow`` test are handed out first: the longest tests start at once and the short ones fill in around them.
SHARED_SERVER = "embedded_vllm"


@cache
def _group(file: str) -> str:
    """The scheduling group of a test file (its path relative to the root): the file, or the shared server's."""
    return SHARED_SERVER if SHARED_SERVER in (paths.REPO_ROOT / file).read_text() else file


def _group_of(nodeid: str) -> str:
    return _group(nodeid.split("::", 1)[0])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts the same way: the order xdist hands groups out
        slow = {_group_of(item.nodeid) for item in items if item.get_closest_marker("slow")}
        items.sort(key=lambda item: _group_of(item.nodeid) not in slow)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadfile`` with the shared server's files as one group (xdist's own ``loadgroup`` marks do not
    take on pytest 9.2, whose node ids xdist 3.8 can no longer rename)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group_of(nodeid)

    return FileGroups(config, log)


# --- where the suite's time went -----------------------------------------------------------------------------------
# Each scheduling group's wall time (its first setup's start to its last teardown's end) and the worker that ran it,
# printed at the end of the run: the slowest groups and each worker's busy time show what bounds the suite's time.
_SPANS: dict[str, tuple[float, float, str]] = {}
SLOWEST_SHOWN = 12


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # xdist's controller: the worker the report came from
    worker = node.gateway.id if node is not None else "main"
    group = _group_of(report.nodeid)
    start, stop, _ = _SPANS.get(group, (report.start, report.stop, worker))
    _SPANS[group] = (min(start, report.start), max(stop, report.stop), worker)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _SPANS or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    spans = sorted(_SPANS.items(), key=lambda kv: kv[1][0] - kv[1][1])
    first = min(start for start, _, _ in _SPANS.values())
    terminalreporter.write_sep("-", f"the {min(SLOWEST_SHOWN, len(spans))} slowest of {len(spans)} test groups")
    for group, (start, stop, worker) in spans[:SLOWEST_SHOWN]:
        terminalreporter.write_line(f"{stop - start:8.1f}s  {worker:>4}  from {start - first:7.1f}s  {group}")
    busy: dict[str, float] = {}
    end: dict[str, float] = {}
    for start, stop, worker in _SPANS.values():
        busy[worker] = busy.get(worker, 0.0) + stop - start
        end[worker] = max(end.get(worker, 0.0), stop - first)
    shown = ", ".join(f"{w} {busy[w]:.0f}s busy, done at {end[w]:.0f}s" for w in sorted(busy))
    terminalreporter.write_line(f"per worker: {shown}")


@pytest.fixture(scope="session")
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.fail(f"the shared SWE-bench rows are missing at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def slime_env():
    """(the .venv-slime interpreter, the folder of vendored slime releases): with the ``slime_env`` marker."""
    return SLIME_PYTHON, SLIME_VENDOR


@pytest.fixture
def docker_client():
    import docker

    return docker.from_env(timeout=60)
