"""The pure half of grading: which hunks of a model patch are graded, the eval script, the log verdict, the reward.

Everything that decides a verdict comes from swebench 4.1.0 (pinned in requirements.txt): the eval-script builder
(``make_eval_script_list`` with ``MAP_REPO_VERSION_TO_SPECS``) for classic rows, the log parsers, and the grading
functions (``get_eval_tests_report``, ``get_resolution_status``). The one piece mirrored here is
``get_logs_eval``'s marker handling, because 4.1.0's version looks the repo up in its spec tables and so cannot
read a log of a task it does not know (the project's own task pack, 5.x rows with their own ``log_parser``);
``tests/unit/test_rewards_unit.py`` checks the mirror against the original on a known repo.

Test-tampering rule (applied before grading; dropped parts are counted in the grade's details):
  a model patch must not change how tests are found or judged, so these parts of it are dropped -
  1. every file the instance's ``test_patch`` touches (the eval script resets them anyway);
  2. test files: a path with a ``tests``/``test``/``testing`` directory, or named ``test_*.py``, ``*_test.py``,
     ``tests.py``;
  3. files that configure or hook pytest or the interpreter: ``conftest.py``, ``pytest.ini``, ``.pytest.ini``,
     ``pytest.toml``, ``.pytest.toml``, ``tox.ini``, ``sitecustomize.py``, ``usercustomize.py``, ``*.pth``;
  4. in ``setup.cfg`` and ``pyproject.toml``, each hunk that mentions pytest or a pytest ini key (so the
     ``[tool:pytest]`` / ``[tool.pytest.*]`` sections cannot change; other hunks of those files are kept).
  Renames count by both names. This closes the usual routes (a conftest that skips or forces results, addopts,
  edited tests); a patch that monkeypatches the test runner from library code is not detectable by path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from swebench.harness import log_parsers
from swebench.harness.constants import (
    APPLY_PATCH_FAIL,
    END_TEST_OUTPUT,
    FAIL_ONLY_REPOS,
    FAIL_TO_PASS,
    MAP_REPO_TO_EXT,
    MAP_REPO_VERSION_TO_SPECS,
    PASS_TO_PASS,
    RESET_FAILED,
    START_TEST_OUTPUT,
    TESTS_ERROR,
    TESTS_TIMEOUT,
    EvalType,
    ResolvedStatus,
)
from swebench.harness.grading import (
    compute_fail_to_pass,
    compute_pass_to_pass,
    get_eval_tests_report,
    get_resolution_status,
)
from swebench.harness.run_evaluation import GIT_APPLY_CMDS
from swebench.harness.test_spec.create_scripts import make_eval_script_list
from swebench.harness.test_spec.test_spec import TestSpec

from qwen_swe.errors import GradingError
from qwen_swe.paths import TESTBED
from qwen_swe.reward.testfiles import CONFIG_FILES, test_path_reason

__all__ = [
    "GIT_APPLY_CMDS",
    "GradingError",
    "FileDiff",
    "split_patch",
    "patch_files",
    "filter_patch",
    "eval_script",
    "listed_tests",
    "parser_for",
    "test_spec_for",
    "Verdict",
    "judge_log",
    "Components",
    "shaped_reward",
    "fractional_reward",
]

EVAL_HEADER = "#!/bin/bash\nset -uxo pipefail\n"
_PYTEST_HUNK = re.compile(
    r"pytest|^\s*(addopts|testpaths|python_files|python_classes|python_functions|"
    r"norecursedirs|filterwarnings|markers|xfail_strict|usefixtures|required_plugins|"
    r"minversion|confcutdir)\s*=",
    re.IGNORECASE,
)


# --- patches -------------------------------------------------------------------------------------
@dataclass
class FileDiff:
    header: list[str]
    hunks: list[list[str]]
    paths: tuple[str, ...]

    def text(self) -> str:
        return "".join(self.header) + "".join("".join(h) for h in self.hunks)


def _strip_prefix(p: str) -> str:
    p = p.strip().split("\t")[0]
    if p.startswith('"') and p.endswith('"'):
        p = p[1:-1]
    return p[2:] if p[:2] in ("a/", "b/") else p


def _paths_of(header: list[str]) -> tuple[str, ...]:
    found: list[str] = []
    for line in header:
        if line.startswith("diff --git "):
            parts = line[len("diff --git ") :].rstrip("\n").split(" b/", 1)
            found += [_strip_prefix(parts[0])] + ([parts[1]] if len(parts) == 2 else [])
        elif line.startswith(("--- ", "+++ ")):
            found.append(_strip_prefix(line[4:]))
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            found.append(line.rstrip("\n").split(" ", 2)[2])
    return tuple(dict.fromkeys(p for p in found if p and p != "/dev/null"))


def split_patch(patch: str) -> list[FileDiff]:
    """Split a unified diff (``git diff`` or plain ``diff -u``) into one entry per file, hunks separated."""
    lines = patch.splitlines(keepends=True)
    git_style = any(line.startswith("diff --git ") for line in lines)
    starts = [
        i
        for i, line in enumerate(lines)
        if (
            line.startswith("diff --git ")
            if git_style
            else line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")
        )
    ]
    files = []
    for n, start in enumerate(starts):
        chunk = lines[start : starts[n + 1] if n + 1 < len(starts) else len(lines)]
        header, hunks = [], []
        for line in chunk:
            if line.startswith("@@"):
                hunks.append([line])
            elif hunks:
                hunks[-1].append(line)
            else:
                header.append(line)
        files.append(FileDiff(header, hunks, _paths_of(header)))
    return files


def patch_files(patch: str) -> set[str]:
    return {p for f in split_patch(patch) for p in f.paths}


def _drop_reason(paths: tuple[str, ...], test_files: set[str]) -> str | None:
    for p in paths:
        if p in test_files:
            return "touched by the test patch"
        if reason := test_path_reason(p):
            return reason
    return None


def filter_patch(patch: str, test_files: set[str]) -> tuple[str, list[dict[str, Any]]]:
    """Drop the tampering parts of ``patch`` (rule in the module docstring); returns (kept patch, dropped)."""
    kept, dropped = [], []
    for f in split_patch(patch):
        reason = _drop_reason(f.paths, test_files)
        if reason:
            dropped.append({"path": f.paths[-1] if f.paths else "?", "reason": reason, "hunks": max(len(f.hunks), 1)})
            continue
        if any(PurePosixPath(p).name in CONFIG_FILES for p in f.paths) and f.hunks:
            good = [h for h in f.hunks if not any(_PYTEST_HUNK.search(line[1:]) for line in h[1:])]
            if len(good) < len(f.hunks):
                dropped.append(
                    {"path": f.paths[-1], "reason": "pytest configuration", "hunks": len(f.hunks) - len(good)}
                )
            if not good:
                continue
            f = FileDiff(f.header, good, f.paths)
        kept.append(f.text())
    return "".join(kept), dropped


# --- the harness pieces ---------------------------------------------------------------------------
def _tests(instance: Mapping[str, Any], key: str) -> list[str]:
    value = instance.get(key) or []
    return json.loads(value) if isinstance(value, str) else list(value)


def listed_tests(instance: Mapping[str, Any]) -> list[str]:
    """FAIL_TO_PASS then PASS_TO_PASS: the tests whose results decide the grade."""
    return _tests(instance, FAIL_TO_PASS) + _tests(instance, PASS_TO_PASS)


def eval_script(instance: Mapping[str, Any]) -> str:
    """The row's ``eval_script``, else the one swebench 4.1.0 builds for a classic row."""
    if instance.get("eval_script"):
        return str(instance["eval_script"])
    repo, version = instance.get("repo"), str(instance.get("version"))
    specs = MAP_REPO_VERSION_TO_SPECS.get(repo, {}).get(version)
    if specs is None or repo not in MAP_REPO_TO_EXT:
        raise GradingError(
            f"{instance.get('instance_id')}: no eval_script column and swebench 4.1.0 has no spec for "
            f"{repo} version {version}; add the 5.x columns (eval_script, log_parser) to the row"
        )
    lines = make_eval_script_list(
        dict(instance), specs, "testbed", TESTBED, instance["base_commit"], instance["test_patch"]
    )
    return EVAL_HEADER + "\n".join(lines) + "\n"


def _parser_registry() -> dict[str, Callable[..., dict[str, str]]]:
    found = {}
    for mod in (
        log_parsers.python,
        log_parsers.javascript,
        log_parsers.go,
        log_parsers.java,
        log_parsers.php,
        log_parsers.ruby,
        log_parsers.rust,
        log_parsers.c,
    ):
        found.update({n: f for n, f in vars(mod).items() if n.startswith("parse_log") and callable(f)})
    found.update({f.__name__: f for f in log_parsers.MAP_REPO_TO_PARSER.values()})
    return found


def parser_for(instance: Mapping[str, Any]) -> Callable[..., dict[str, str]]:
    """The row's ``log_parser`` (a swebench parser function name), else swebench's parser for its repo."""
    name = instance.get("log_parser")
    if name:
        registry = _parser_registry()
        if name not in registry:
            raise GradingError(
                f"{instance.get('instance_id')}: log_parser {name!r} is not a swebench 4.1.0 parser; "
                f"use one of {', '.join(sorted(registry)[:8])}, ..."
            )
        return registry[name]
    parser = log_parsers.MAP_REPO_TO_PARSER.get(instance.get("repo"))
    if parser is None:
        raise GradingError(
            f"{instance.get('instance_id')}: no log_parser column and swebench has no parser for "
            f"repo {instance.get('repo')}; add log_parser to the row"
        )
    return parser


def test_spec_for(instance: Mapping[str, Any], script: str) -> TestSpec:
    """The minimal 4.1.0 TestSpec the parsers read (built directly: make_test_spec needs known repos and network)."""
    repo = str(instance.get("repo", ""))
    return TestSpec(
        instance_id=instance["instance_id"],
        repo=repo,
        version=str(instance.get("version", "")),
        repo_script_list=[],
        eval_script_list=script.splitlines(),
        env_script_list=[],
        arch="x86_64",
        FAIL_TO_PASS=_tests(instance, FAIL_TO_PASS),
        PASS_TO_PASS=_tests(instance, PASS_TO_PASS),
        language=MAP_REPO_TO_EXT.get(repo, "py"),
        docker_specs={},
        namespace=None,
    )


def eval_type_of(instance: Mapping[str, Any]) -> EvalType:
    if instance.get("eval_type"):
        return EvalType(instance["eval_type"])
    return EvalType.FAIL_ONLY if instance.get("repo") in FAIL_ONLY_REPOS else EvalType.PASS_AND_FAIL


@dataclass
class Verdict:
    found: bool  # the log had the markers and no harness failure string
    problem: str | None  # why not found
    markers_missing: bool
    resolved: bool = False
    resolution: str = ResolvedStatus.NO.value
    f2p: float = 0.0
    p2p: float = 0.0
    status_map: dict[str, str] = field(default_factory=dict)
    tests_status: dict[str, Any] = field(default_factory=dict)


def logs_eval(log: str, spec: TestSpec, parser: Callable[..., dict[str, str]]) -> tuple[dict[str, str], str | None]:
    """swebench 4.1.0 ``get_logs_eval`` with the parser passed in: (status map, problem or None)."""
    bad = [code for code in (APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT) if code in log]
    if bad:
        return {}, f"log contains {', '.join(bad)}"
    if not (START_TEST_OUTPUT in log and END_TEST_OUTPUT in log):
        return {}, "log lacks the test output markers"
    body = log.split(START_TEST_OUTPUT)[1].split(END_TEST_OUTPUT)[0]
    return parser(body, spec) or parser(log, spec), None


def judge_log(instance: Mapping[str, Any], log: str, script: str) -> Verdict:
    """Official verdict for one eval log: all FAIL_TO_PASS and all PASS_TO_PASS tests pass."""
    spec = test_spec_for(instance, script)
    status_map, problem = logs_eval(log, spec, parser_for(instance))
    if problem is not None:
        return Verdict(found=False, problem=problem, markers_missing=problem.startswith("log lacks"))
    gold = {FAIL_TO_PASS: spec.FAIL_TO_PASS, PASS_TO_PASS: spec.PASS_TO_PASS}
    report = get_eval_tests_report(status_map, gold, eval_type=eval_type_of(instance))
    resolution = get_resolution_status(report)
    return Verdict(
        found=True,
        problem=None,
        markers_missing=False,
        resolved=resolution == ResolvedStatus.FULL.value,
        resolution=resolution,
        f2p=float(compute_fail_to_pass(report)),
        p2p=float(compute_pass_to_pass(report)),
        status_map=status_map,
        tests_status=report,
    )


# --- reward maths -----------------------------------------------------------------------------------
def fractional_reward(f2p: float) -> float:
    """Fraction of FAIL_TO_PASS tests passing mapped to [-1, 1] (PASS_TO_PASS does not enter)."""
    return 2.0 * f2p - 1.0


@dataclass
class Components:
    gold_file: float = 0.0
    extra_file: float = 0.0
    missed_file: float = 0.0
    over_tokens: float = 0.0
    over_tools: float = 0.0
    completion: float = 0.0
    length: float = 0.0

    def total(self) -> float:
        return sum(v for k, v in vars(self).items() if k != "length")


def shaped_reward(
    resolved: bool, patch_paths: set[str], gold_paths: set[str], agent_stats: Mapping[str, Any] | None, weights: Any
) -> tuple[float, Components]:
    """Localisation-shaped reward (SWE-Grep style); ``weights`` is the Settings object (its ``shaped_*`` fields).

    Components: +shaped_gold_file per gold-patch file changed, shaped_extra_file per other file changed,
    shaped_missed_file per gold file missed, shaped_over_tokens / shaped_over_tools when
    ``agent_stats["response_tokens"]`` / ``["tool_calls"]`` exceed their budgets, +shaped_completion when
    ``agent_stats["completed"]`` and the patch is not empty.
    Reward: unresolved -> clip(-1 + sum of components, -1, 0.5); resolved -> clip(1 + budget penalties, 0.5, 1).
    So a resolved patch never scores below an unresolved one, and the result stays in [-1, 1].
    With ``shaped_length`` = L > 0, an unresolved reward becomes (1 - L) * that + L * (-min(tokens / token budget, 1)):
    a continuous effort term that still orders unresolved attempts when every one of them clips to -1 (a tiny
    model's empty patches), so their group is not zero-variance. It stays in [-1, 0.5) and never touches resolved.
    """
    stats = agent_stats or {}
    c = Components(
        gold_file=weights.shaped_gold_file * len(patch_paths & gold_paths),
        extra_file=weights.shaped_extra_file * len(patch_paths - gold_paths),
        missed_file=weights.shaped_missed_file * len(gold_paths - patch_paths),
        over_tokens=weights.shaped_over_tokens
        if stats.get("response_tokens", 0) > weights.shaped_token_budget
        else 0.0,
        over_tools=weights.shaped_over_tools if stats.get("tool_calls", 0) > weights.shaped_tool_budget else 0.0,
        completion=weights.shaped_completion if stats.get("completed") and patch_paths else 0.0,
    )
    if resolved:
        return min(max(1.0 + c.over_tokens + c.over_tools, 0.5), 1.0), c
    base = min(max(-1.0 + c.total(), -1.0), 0.5)
    weight = weights.shaped_length
    c.length = -weight * min(stats.get("response_tokens", 0) / weights.shaped_token_budget, 1.0)
    return (1.0 - weight) * base + c.length, c
