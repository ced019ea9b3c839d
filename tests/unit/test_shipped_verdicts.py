"""The verdicts the package ships (qwen_swe/data/generate/shipped.py): fresh for the current code, used only under
their exact key, and never by a run that means to judge."""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from pathlib import Path

import pytest

from qwen_swe.data.generate import shipped
from qwen_swe.data.generate import validate as validate_module
from qwen_swe.data.generate.__main__ import main
from qwen_swe.data.generate.tasks import repo_mutations, shipped_repos
from qwen_swe.data.generate.validate import validate
from qwen_swe.paths import PACKAGE_DIR, REPO_ROOT
from tests.tiny_repo import tiny_repo


def test_the_shipped_verdicts_are_those_of_the_current_code():
    """Every shipped repository has a file whose key is the one the generator computes here for its mutations (the
    same for every seed, ``--localized`` or not: 60_tasks.sh's generation and every other)."""
    repos = shipped_repos()
    files = sorted(p.name for p in shipped.SHIPPED_DIR.glob("*.json.gz"))
    assert files == sorted(f"{r.name}.json.gz" for r in repos), f"files and repositories differ; run {shipped.REFRESH}"
    entries = {r.name: shipped.read(r.name) for r in repos}
    unreadable = sorted(name for name, entry in entries.items() if entry is None)
    assert not unreadable, f"unreadable shipped verdicts: {', '.join(unreadable)}; run {shipped.REFRESH}"
    # The assumption: a key digests sys.version (build date included), pytest's and swebench's versions, so a shipped
    # key can only be compared, and only matches, on the interpreter it was judged on: the one scripts/setup.sh's
    # .venv has on the reference machine and CI. Elsewhere the set-up judges every mutation (correct, as slow as
    # before), and this test cannot tell stale from foreign: it says so, and under CI it fails.
    here = shipped.judged_on()
    foreign = sorted({str(e["judged_on"]) for e in entries.values() if e and e["judged_on"] != here})
    if foreign:
        message = (
            f"the shipped verdicts were judged on {', '.join(foreign)}; this machine has {here}: their keys cannot "
            "match here, so a set-up here judges every mutation, and their freshness is checked where they match"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    old = shipped.stale(repos)
    assert not old, (
        f"the shipped verdicts of {', '.join(old)} are stale (the repository, its mutations or the validator changed):"
        f" refresh them with {shipped.REFRESH}"
    )


def test_the_shipped_verdicts_are_package_data():
    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    folder = PACKAGE_DIR / "data" / "generate"
    declared = {p for pattern in data.get("qwen_swe.data.generate", []) for p in folder.glob(pattern)}
    files = set(shipped.SHIPPED_DIR.glob("*.json.gz"))
    assert files and files <= declared
    assert sum(p.stat().st_size for p in files) < 200_000  # they travel in every clone and wheel


def _quiet(_: str) -> None:
    pass


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Count the judge's pytest runs (each still runs for real)."""
    runs: list[list[str]] = []
    real = validate_module.run_tests

    def run_tests(repo: Path, files: list[str]) -> tuple[dict[str, str], str]:
        runs.append(files)
        return real(repo, files)

    monkeypatch.setattr(validate_module, "run_tests", run_tests)
    return runs


def test_a_fresh_cache_takes_the_package_verdicts_of_the_same_key_and_judges_nothing(tmp_path, monkeypatch):
    repo, package, judged = tiny_repo(tmp_path), tmp_path / "package", tmp_path / "judged"
    assert shipped.write([repo], judged, folder=package, log=_quiet) == ["tinyrepo"]  # judges into the cache
    mutations, tests = repo_mutations(repo)
    first = validate(repo, mutations, tests, cache=judged)
    written = (package / "tinyrepo.json.gz").read_bytes()
    monkeypatch.setattr(validate_module, "run_tests", lambda *a: pytest.fail("judged despite shipped verdicts"))
    fresh = tmp_path / "fresh"
    assert shipped.prime([repo], fresh, log=_quiet, folder=package) == ["tinyrepo"]
    assert validate(repo, mutations, tests, cache=fresh) == first
    assert shipped.prime([repo], fresh, log=_quiet, folder=package) == []  # the cache has them now
    assert shipped.stale([repo], package) == [] and shipped.write([repo], judged, folder=package, log=_quiet) == []
    shutil.rmtree(package)
    assert shipped.write([repo], judged, folder=package, log=_quiet) == ["tinyrepo"]  # copied from the cache
    assert (package / "tinyrepo.json.gz").read_bytes() == written  # deterministic: a refresh without change is none
    (package / "tinyrepo.json.gz").write_bytes(written[:-40])  # damaged: that repository is judged
    assert (
        shipped.read("tinyrepo", package) is None and shipped.prime([repo], tmp_path / "other", _quiet, package) == []
    )


def test_another_python_or_a_changed_repository_is_judged_again(tmp_path, monkeypatch):
    repo, package = tiny_repo(tmp_path), tmp_path / "package"
    shipped.write([repo], tmp_path / "judged", folder=package, log=_quiet)
    mutations, tests = repo_mutations(repo)
    runs = _counting(monkeypatch)
    logs: list[str] = []
    with monkeypatch.context() as m:
        m.setattr(sys, "version", "3.11.99 (another build)")
        assert shipped.prime([repo], tmp_path / "other-python", log=logs.append, folder=package) == []
        validate(repo, mutations, tests, cache=tmp_path / "other-python")
    assert "judged on Python " + sys.version in logs[0] and len(runs) == len(mutations) + 1  # the clean run too
    (repo / "tests" / "test_ops.py").write_text((repo / "tests" / "test_ops.py").read_text() + "\n# changed\n")
    assert shipped.stale([repo], package) == ["tinyrepo"]
    assert shipped.prime([repo], tmp_path / "changed", log=logs.append, folder=package) == []
    assert "changed since" in logs[-1]


def test_no_cache_judges_even_what_the_package_ships(tmp_path, monkeypatch):
    repo, package = tiny_repo(tmp_path), tmp_path / "package"
    shipped.write([repo], tmp_path / "judged", folder=package, log=_quiet)
    monkeypatch.setattr(shipped, "SHIPPED_DIR", package)
    monkeypatch.setenv("QWEN_SWE_HOME", str(tmp_path / "home"))
    runs = _counting(monkeypatch)
    args = ["--repo", str(repo), "--no-build", "--count", "2", "--heldout", "0.5", "--out", str(tmp_path / "out")]
    assert main(args) == 0 and runs == []  # the command primed its empty cache: nothing judged
    assert list((tmp_path / "home" / "generated" / "verdicts").glob("tinyrepo-*.json"))
    assert main([*args, "--no-cache"]) == 0 and runs  # judged every mutation again
