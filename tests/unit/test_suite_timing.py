"""The test command's closing summary (tests/conftest.py): each scheduling group's wall time and worker, slowest
first, and each worker's busy time, from the reports' start and stop stamps."""

from __future__ import annotations

import pytest

from tests import conftest as suite


class Terminal:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_sep(self, sep: str, title: str) -> None:
        self.lines.append(title)

    def write_line(self, line: str) -> None:
        self.lines.append(line)


class Worker:
    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()


def report(nodeid: str, when: str, start: float, stop: float, worker: str) -> pytest.TestReport:
    rep = pytest.TestReport(nodeid, (nodeid, 0, ""), {}, "passed", None, when, start=start, stop=stop)
    rep.node = Worker(worker)  # what xdist's controller sets on a worker's report
    return rep


def test_the_summary_puts_the_slowest_group_first_with_its_worker(monkeypatch):
    monkeypatch.setattr(suite, "_SPANS", {})
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    slow, quick = "tests/unit/test_hardware.py", "tests/unit/test_stats.py"
    for rep in (
        report(f"{slow}::a", "setup", 100.0, 130.0, "gw0"),  # a module fixture's set-up counts
        report(f"{slow}::a", "call", 130.0, 140.0, "gw0"),
        report(f"{quick}::b", "call", 101.0, 106.0, "gw1"),
        report(f"{slow}::c", "teardown", 150.0, 160.0, "gw0"),
        report(f"{quick}::d", "call", 110.0, 111.0, "gw1"),
    ):
        suite.pytest_runtest_logreport(rep)
    term = Terminal()
    suite.pytest_terminal_summary(term)
    assert term.lines[0] == "the 2 slowest of 2 test groups"
    assert term.lines[1].split() == ["60.0s", "gw0", "from", "0.0s", slow]
    assert term.lines[2].split() == ["10.0s", "gw1", "from", "1.0s", quick]
    assert term.lines[3] == "per worker: gw0 60s busy, done at 60s, gw1 10s busy, done at 11s"


def test_a_worker_prints_no_summary(monkeypatch):
    monkeypatch.setattr(suite, "_SPANS", {"tests/unit/test_stats.py": (0.0, 1.0, "gw0")})
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    term = Terminal()
    suite.pytest_terminal_summary(term)
    assert term.lines == []
