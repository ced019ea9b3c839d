"""Pure parts of grading: image names, eval scripts, parsers, the tampering filter, the log verdict, reward maths."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import pytest
from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT, TESTS_TIMEOUT
from swebench.harness.grading import get_logs_eval
from swebench.harness.test_spec.test_spec import TestSpec as SwebSpec

from qwen_swe.reward import scoring as grading
from qwen_swe.reward.harness import grade
from qwen_swe.reward.settings import RewardSettings
from qwen_swe.sandbox.docker_host import image_for, labels_for
from qwen_swe.sandbox.shell import CappedOutput

V5_COLUMNS = ("image", "eval_script", "log_parser", "eval_type")


def _rows(shared_data: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (shared_data / name).read_text().splitlines() if line.strip()]


def _classic(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in V5_COLUMNS}


# --- image names ---------------------------------------------------------------------------------
def test_image_for_matches_swebench_names(shared_data):
    for row in _rows(shared_data, "verified_django5_v5columns.jsonl"):
        classic = _classic(row)
        assert image_for(classic) == row["image"]
        assert image_for(row, namespace="elsewhere") == row["image"]  # the row's column wins
        spec = SwebSpec(
            instance_id=row["instance_id"],
            repo=row["repo"],
            version=row["version"],
            repo_script_list=[],
            eval_script_list=[],
            env_script_list=[],
            arch="x86_64",
            FAIL_TO_PASS=[],
            PASS_TO_PASS=[],
            language="py",
            docker_specs={},
            namespace=None,
        )
        assert image_for(classic, namespace="") == spec.instance_image_key
        spec.namespace = "myreg"
        assert image_for(classic, namespace="myreg") == spec.instance_image_key


def test_image_for_local_namespace():
    row = {"instance_id": "Local__Calc-1"}
    assert image_for(row, "") == "sweb.eval.x86_64.local__calc-1:latest"
    assert image_for(row, "qwen-swe") == "qwen-swe/sweb.eval.x86_64.local_1776_calc-1:latest"


def test_labels():
    assert labels_for("r1", "grade") == {"qwen-swe": "1", "qwen-swe.run": "r1", "qwen-swe.role": "grade"}


# --- eval scripts and parsers --------------------------------------------------------------------
def test_eval_script_of_classic_row_is_swebench_4_1_builder(shared_data):
    for row in _rows(shared_data, "verified_django5_v5columns.jsonl"):
        built = grading.eval_script(_classic(row))
        assert built.rstrip("\n") == row["eval_script"].rstrip("\n")
        assert START_TEST_OUTPUT in built and row["base_commit"] in built
    for row in _rows(shared_data, "lite_300.jsonl"):
        assert grading.eval_script(row).startswith(grading.EVAL_HEADER)


def test_eval_script_column_wins_and_unknown_repo_fails():
    assert grading.eval_script({"eval_script": "echo hi\n", "repo": "x/y"}) == "echo hi\n"
    with pytest.raises(grading.GradingError, match="add the 5.x columns"):
        grading.eval_script({"instance_id": "x__y-1", "repo": "x/y", "version": "1.0"})


def test_parser_lookup(shared_data):
    row = _rows(shared_data, "verified_django5_v5columns.jsonl")[0]
    assert grading.parser_for(row).__name__ == "parse_log_django"
    assert grading.parser_for(_classic(row)).__name__ == "parse_log_django"
    assert grading.parser_for({"log_parser": "parse_log_pytest"}).__name__ == "parse_log_pytest"
    with pytest.raises(grading.GradingError, match="not a swebench 4.1.0 parser"):
        grading.parser_for({"instance_id": "a", "log_parser": "parse_log_nothing"})
    with pytest.raises(grading.GradingError, match="add log_parser"):
        grading.parser_for({"instance_id": "a", "repo": "nobody/nothing"})


# --- the tampering filter ------------------------------------------------------------------------
def _file(path: str, body: str = "-a\n+b\n", new: bool = False) -> str:
    head = f"diff --git a/{path} b/{path}\n"
    if new:
        return head + f"new file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x\n"
    return head + f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n{body}"


def test_filter_drops_tests_hooks_and_pytest_config():
    cfg = (
        "diff --git a/setup.cfg b/setup.cfg\n--- a/setup.cfg\n+++ b/setup.cfg\n"
        "@@ -1,2 +1,2 @@\n [metadata]\n-name = a\n+name = b\n"
        "@@ -10,2 +10,2 @@\n [tool:pytest]\n-addopts = -q\n+addopts = -p no:cacheprovider -k nothing\n"
    )
    patch = "".join(
        [
            _file("src/calc.py"),
            _file("pkg/tests/test_calc.py"),
            _file("conftest.py", new=True),
            _file("sub/conftest.py", new=True),
            _file("test_top.py"),
            _file("tox.ini"),
            cfg,
            _file("pkg/mod.py"),
            _file("tests.patch.touched/x.py"),
            _file("a/b/util_test.py"),
            _file("lib/sitecustomize.py", new=True),
            _file("x.pth", new=True),
        ]
    )
    kept, dropped = grading.filter_patch(patch, {"tests.patch.touched/x.py"})
    assert grading.patch_files(kept) == {"src/calc.py", "setup.cfg", "pkg/mod.py"}
    assert "name = b" in kept and "addopts" not in kept
    reasons = {d["path"]: d["reason"] for d in dropped}
    assert reasons["tests.patch.touched/x.py"] == "touched by the test patch"
    assert reasons["conftest.py"] == reasons["sub/conftest.py"] == "test hook or config file"
    assert reasons["pkg/tests/test_calc.py"] == "test directory"
    assert reasons["test_top.py"] == reasons["a/b/util_test.py"] == "test file"
    assert reasons["setup.cfg"] == "pytest configuration"
    assert sum(d["hunks"] for d in dropped) == 10


def test_filter_handles_renames_and_plain_diffs():
    rename = "diff --git a/src/x.py b/tests/x.py\nsimilarity index 100%\nrename from src/x.py\nrename to tests/x.py\n"
    kept, dropped = grading.filter_patch(rename + _file("src/y.py"), set())
    assert grading.patch_files(kept) == {"src/y.py"} and dropped[0]["reason"] == "test directory"
    plain = "--- a/conftest.py\n+++ b/conftest.py\n@@ -1 +1 @@\n-a\n+b\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-a\n+b\n"
    kept, dropped = grading.filter_patch(plain, set())
    assert grading.patch_files(kept) == {"m.py"} and len(dropped) == 1


def test_gold_patches_survive_and_test_patches_vanish(shared_data):
    for row in _rows(shared_data, "lite_300.jsonl") + _rows(shared_data, "verified_50.jsonl"):
        tests = grading.patch_files(row["test_patch"])
        kept, dropped = grading.filter_patch(row["patch"], tests)
        assert kept == row["patch"] and dropped == [], row["instance_id"]
        assert "".join(f.text() for f in grading.split_patch(row["patch"])) == row["patch"]
        assert grading.filter_patch(row["test_patch"], tests)[0] == ""


# --- the log verdict -----------------------------------------------------------------------------
def _pytest_row(f2p: list[str], p2p: list[str]) -> dict:
    return {
        "instance_id": "demo__calc-1",
        "repo": "demo/calc",
        "version": "0.1",
        "log_parser": "parse_log_pytest",
        "eval_type": "pass_and_fail",
        "FAIL_TO_PASS": json.dumps(f2p),
        "PASS_TO_PASS": p2p,
    }


def _log(*lines: str) -> str:
    return "\n".join(["+ git apply -v -", f"+ : '{START_TEST_OUTPUT}'", *lines, f"+ : '{END_TEST_OUTPUT}'", ""])


def test_judge_log_official_semantics():
    row = _pytest_row(["t.py::test_a", "t.py::test_b"], ["t.py::test_c"])
    full = grading.judge_log(row, _log("PASSED t.py::test_a", "PASSED t.py::test_b", "SKIPPED t.py::test_c"), "")
    assert full.resolved and full.f2p == 1.0 and full.p2p == 1.0 and full.resolution == "RESOLVED_FULL"
    partial = grading.judge_log(row, _log("PASSED t.py::test_a", "FAILED t.py::test_b - x", "PASSED t.py::test_c"), "")
    assert not partial.resolved and partial.f2p == 0.5 and partial.resolution == "RESOLVED_PARTIAL"
    broke = grading.judge_log(row, _log("PASSED t.py::test_a", "PASSED t.py::test_b"), "")  # P2P missing = failed
    assert not broke.resolved and broke.p2p == 0.0
    missing = grading.judge_log(row, "PASSED t.py::test_a\n", "")
    assert not missing.found and missing.markers_missing
    timeout = grading.judge_log(row, _log("PASSED t.py::test_a") + TESTS_TIMEOUT, "")
    assert not timeout.found and not timeout.markers_missing


def test_logs_eval_mirror_agrees_with_swebench(shared_data):
    row = _rows(shared_data, "verified_django5_v5columns.jsonl")[0]
    f2p = json.loads(row["FAIL_TO_PASS"])[0]
    spec = grading.test_spec_for(row, row["eval_script"])
    logs = [
        _log(f"{f2p} ... ok", "test_other (a.B) ... FAIL"),
        "no markers",
        _log("x") + TESTS_TIMEOUT,
        "header\n" + _log("nothing parsed here") + f"\n{f2p} ... ok\n",
    ]
    for text in logs:
        with tempfile.NamedTemporaryFile("w", suffix=".log") as fh:
            fh.write(text)
            fh.flush()
            official = get_logs_eval(spec, fh.name)
        mine, problem = grading.logs_eval(text, spec, grading.parser_for(row))
        assert (mine, problem is None) == official


# --- reward maths --------------------------------------------------------------------------------
def test_fractional():
    assert grading.fractional_reward(0.0) == -1.0
    assert grading.fractional_reward(0.5) == 0.0
    assert grading.fractional_reward(1.0) == 1.0


def test_shaped_components_and_bounds():
    s = RewardSettings()
    r, c = grading.shaped_reward(
        False, {"a.py", "x.py"}, {"a.py", "b.py"}, {"response_tokens": 10, "tool_calls": 1, "completed": True}, s
    )
    assert c.gold_file == 1.0 and c.extra_file == -0.25 and c.missed_file == -0.5 and c.completion == 0.5
    assert c.over_tokens == 0.0 and c.over_tools == 0.0
    assert r == pytest.approx(-1 + 1 - 0.25 - 0.5 + 0.5)
    r, c = grading.shaped_reward(
        False, {"x.py"}, {"a.py"}, {"response_tokens": s.shaped_token_budget + 1, "tool_calls": 10**6}, s
    )
    assert c.over_tokens == -0.5 and c.over_tools == -0.5 and c.completion == 0.0 and r == -1.0
    r_best_unresolved, _ = grading.shaped_reward(False, {"a.py"}, {"a.py"}, {"completed": True}, s)
    r_worst_resolved, _ = grading.shaped_reward(
        True, {"x.py"}, {"a.py"}, {"response_tokens": 10**9, "tool_calls": 10**9}, s
    )
    assert r_best_unresolved <= 0.5 <= r_worst_resolved <= 1.0
    assert grading.shaped_reward(True, {"a.py"}, {"a.py"}, None, s)[0] == 1.0
    custom = dataclasses.replace(s, shaped_gold_file=0.1, shaped_missed_file=0.0, shaped_completion=0.0)
    assert grading.shaped_reward(False, {"a.py"}, {"a.py", "b.py"}, None, custom)[0] == pytest.approx(-0.9)


def test_empty_patch_is_minus_one_without_docker(tmp_path):
    g = grade({"instance_id": "demo__calc-1", "repo": "demo/calc", "eval_script": "x"}, "  \n", log_dir=tmp_path)
    assert (g.reward, g.status, g.resolved, g.reason) == (-1.0, "graded", False, "empty patch")
    assert "image" not in g.details and not list(tmp_path.iterdir())


def test_capped_output_keeps_head_and_tail():
    buf = CappedOutput(10)
    for chunk in (b"0123", b"456789abcd", b"efghij"):
        buf.add(chunk)
    assert buf.dropped == 10
    assert buf.text() == "01234\n[... 10 bytes truncated ...]\nfghij"
    small = CappedOutput(100)
    small.add(b"abc")
    assert small.text() == "abc" and small.dropped == 0


def test_shaped_length_term_orders_clipped_unresolved_attempts():
    s = RewardSettings(shaped_length=0.2, shaped_token_budget=1000)
    short, c_short = grading.shaped_reward(False, set(), {"a.py"}, {"response_tokens": 100}, s)
    long, c_long = grading.shaped_reward(False, set(), {"a.py"}, {"response_tokens": 900}, s)
    # both clip to -1 before the term; the term separates them, and the result stays within [-1, 0.5)
    assert c_short.length == pytest.approx(-0.02) and c_long.length == pytest.approx(-0.18)
    assert short == pytest.approx(0.8 * -1.0 - 0.02) and long == pytest.approx(0.8 * -1.0 - 0.18)
    assert -1.0 <= long < short < 0.5
    capped, _ = grading.shaped_reward(False, set(), {"a.py"}, {"response_tokens": 10**6}, s)
    assert capped == pytest.approx(-1.0)
    resolved, c = grading.shaped_reward(True, {"a.py"}, {"a.py"}, {"response_tokens": 900}, s)
    assert resolved == 1.0 and c.length == 0.0


def test_one_definition_of_a_test_file_serves_the_grader_and_the_task_pack():
    from qwen_swe.data.taskpack import source
    from qwen_swe.reward import testfiles

    assert source.is_test_path is testfiles.is_test_path
    for path in (
        "tests/test_x.py",
        "pkg/tests/helpers.py",
        "test_mod.py",
        "a/mod_test.py",
        "conftest.py",
        "pkg/conftest.py",
        "tox.ini",
        "x/evil.pth",
        "sitecustomize.py",
    ):
        assert testfiles.is_test_path(path), path
    for path in ("pkg/mod.py", "testing_utils.py", "pkg/contest.py", "setup.cfg", "README.md"):
        assert not testfiles.is_test_path(path), path
