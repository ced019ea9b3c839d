"""The task instruction and the compact system prompt, on real SWE-bench rows."""

from __future__ import annotations

import json

import pytest

from qwen_swe.data.prompts import REPO_DIR, SYSTEM_PROMPT_COMPACT, PromptError, build_prompt


@pytest.fixture(scope="module")
def row(shared_data):
    with open(shared_data / "verified_50.jsonl") as fh:
        return json.loads(fh.readline())


def test_prompt_carries_problem_statement_repo_and_rules(row):
    prompt = build_prompt(row)
    assert row["problem_statement"].strip() in prompt
    assert "/testbed" in prompt and REPO_DIR == "/testbed"
    assert row["repo"] in prompt
    assert "minimal change" in prompt
    assert "Do not modify" in prompt and "tests" in prompt
    assert "Do not commit" in prompt


def test_prompt_never_leaks_the_answer_or_the_tests(row):
    prompt = build_prompt(row)
    assert row["patch"] not in prompt
    assert row["test_patch"] not in prompt
    for test in json.loads(row["FAIL_TO_PASS"]):
        assert test not in prompt


def test_prompt_is_deterministic_and_takes_another_repo_dir(row):
    assert build_prompt(row) == build_prompt(dict(row))
    assert "/work/repo" in build_prompt(row, repo_dir="/work/repo")


def test_missing_problem_statement_is_a_clear_error(row):
    bad = {k: v for k, v in row.items() if k != "problem_statement"}
    with pytest.raises(PromptError, match=rf"instance {row['instance_id']}: field 'problem_statement' is missing"):
        build_prompt(bad)


def test_blank_problem_statement_is_an_error(row):
    with pytest.raises(PromptError, match="problem_statement"):
        build_prompt({**row, "problem_statement": "  \n"})


def test_non_mapping_is_an_error():
    with pytest.raises(PromptError, match="needs a SWE-bench row"):
        build_prompt("fix the bug")  # type: ignore[arg-type]


def test_compact_system_prompt_is_short_and_names_tools_and_workdir():
    assert len(SYSTEM_PROMPT_COMPACT) < 1200  # a few hundred tokens at most
    for tool in ("run_shell_command", "read_file", "edit", "write_file"):
        assert tool in SYSTEM_PROMPT_COMPACT
    assert "/testbed" in SYSTEM_PROMPT_COMPACT
    start = SYSTEM_PROMPT_COMPACT.index("<tool_call>") + len("<tool_call>")
    example = SYSTEM_PROMPT_COMPACT[start : SYSTEM_PROMPT_COMPACT.index("</tool_call>")]
    call = json.loads(example)  # the example a small model copies must be valid JSON
    assert call["name"] == "run_shell_command" and "command" in call["arguments"]
