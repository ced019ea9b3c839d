"""The task generator without Docker: mutations, validation with the real pytest and swebench parser, the split."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest

from qwen_swe.data.generate import validate as validate_module
from qwen_swe.data.generate.mutations import apply_mutation, mutations_of
from qwen_swe.data.generate.tasks import NOT_LOCALIZED, generate, instance_id, problem_statement, split_sites
from qwen_swe.data.generate.validate import TIMED_OUT, failure_of, validate
from qwen_swe.data.taskpack import REPOS_DIR
from qwen_swe.errors import TaskPackError
from tests.tiny_repo import tiny_repo

SOURCE = textwrap.dedent('''\
    """A module."""


    def clamp(value, low, high):
        """Docstring lines are never mutated: 1 + 1."""
        if value < low:
            return low
        if value > high and high >= 0:
            return high
        return value


    def label(name):
        return name.strip().lower() + "-" + str(len(name) * 2)


    def pair(a, b):
        return divmod(a, b)
    ''')


def test_every_operator_makes_a_parsing_one_line_change():
    found = mutations_of(SOURCE, "mod.py")
    kinds = {m.kind for m in found}
    assert kinds >= {
        "compare_swap",
        "boolop_swap",
        "binop_swap",
        "off_by_one",
        "invert_condition",
        "drop_call",
        "drop_return",
        "swap_args",
    }
    lines = SOURCE.splitlines(keepends=True)
    for m in found:
        mutated = apply_mutation(SOURCE, m)
        assert ast.dump(ast.parse(mutated)) != ast.dump(ast.parse(SOURCE))
        changed = [i for i, (a, b) in enumerate(zip(lines, mutated.splitlines(keepends=True))) if a != b]
        assert changed == [m.lineno - 1] and lines[m.lineno - 1] == m.old
        assert m.lineno != 5, "a docstring line was mutated"
    assert {m.function for m in found} == {"clamp", "label", "pair"}
    swapped = [m.new.strip() for m in found if m.kind == "swap_args"]
    assert swapped == ["return divmod(b, a)"]
    assert 'return name.lower() + "-" + str(len(name) * 2)' in [m.new.strip() for m in found]


def test_apply_refuses_a_stale_mutation():
    m = mutations_of(SOURCE, "mod.py")[0]
    with pytest.raises(ValueError, match="no longer reads"):
        apply_mutation(SOURCE.replace(m.old, "    pass\n"), m)


def test_split_is_seeded_and_keeps_sites_apart():
    sites = [f"f{i}.py::g{j}" for i in range(5) for j in range(4)]
    held = split_sites(sites, seed=3, heldout_fraction=0.25)
    assert held == split_sites(list(reversed(sites)), seed=3, heldout_fraction=0.25)
    assert len(held) == 5 and held < set(sites)
    assert held != split_sites(sites, seed=4, heldout_fraction=0.25)


def test_validate_computes_fail_to_pass_with_real_pytest(tmp_path):
    repo = tiny_repo(tmp_path)
    mutations = mutations_of((repo / "tiny/ops.py").read_text(), "tiny/ops.py")
    verdicts = {m.new.strip(): v for m, v in zip(mutations, validate(repo, mutations, ["tests/test_ops.py"]))}
    minus = verdicts["return a - b"]
    assert not minus.reject
    assert minus.fail_to_pass == ("tests/test_ops.py::test_add",)
    assert minus.pass_to_pass == ("tests/test_ops.py::test_add_zero",)
    assert minus.failure.splitlines()[:2] == ["assert add(2, 3) == 5", "assert -1 == 5"]
    assert verdicts["return x * 4"].reject == "no test fails with the bug"  # `unused` has no test


def test_an_exception_in_the_project_brings_its_traceback_into_the_statement(tmp_path):
    repo = tiny_repo(tmp_path)
    (repo / "tiny" / "ops.py").write_text(
        'def greet(name):\n    return "hi " + name\n\n\ndef welcome(name):\n    return greet(name).upper()\n'
    )
    (repo / "tests" / "test_ops.py").write_text(
        'from tiny.ops import welcome\n\n\ndef test_welcome():\n    assert welcome("ann") == "HI ANN"\n'
    )
    bug = next(m for m in mutations_of((repo / "tiny/ops.py").read_text(), "tiny/ops.py") if m.kind == "binop_swap")
    (verdict,) = validate(repo, [bug], ["tests/test_ops.py"])
    assert verdict.frames == (
        '  File "tiny/ops.py", line 6, in welcome',
        "    return greet(name).upper()",
        '  File "tiny/ops.py", line 2, in greet',
        '    return "hi " - name',
    )
    statement = problem_statement("tiny", verdict, (repo / "tests" / "test_ops.py").read_text())
    assert "Traceback (most recent call last):\n" + "\n".join(verdict.frames) + "\nTypeError" in statement
    assert "tests/test_ops.py" not in statement  # the test's own line is the reproduction above it


def test_verdicts_are_reused_only_for_the_same_inputs_and_never_after_a_timeout(tmp_path, monkeypatch):
    repo = tiny_repo(tmp_path)
    mutations = mutations_of((repo / "tiny/ops.py").read_text(), "tiny/ops.py")
    cache, tests = tmp_path / "verdicts", ["tests/test_ops.py"]
    first = validate(repo, mutations, tests, cache=cache)
    assert len(list(cache.glob("tinyrepo-*.json"))) == 1
    real = validate_module.run_tests
    with monkeypatch.context() as m:
        m.setattr(validate_module, "run_tests", lambda *a: pytest.fail("pytest ran despite a cached verdict"))
        assert validate(repo, mutations, tests, cache=cache) == first
    (repo / "tests" / "test_ops.py").write_text((repo / "tests" / "test_ops.py").read_text() + "\n# changed\n")
    (entry,) = cache.glob("tinyrepo-*.json")
    assert validate(repo, mutations, tests, cache=cache) == first  # judged again: same verdicts, a new entry
    (new,) = cache.glob("tinyrepo-*.json")
    assert new != entry  # which replaces the old one

    def slow(copy: Path, files: list[str]) -> tuple[dict[str, str], str]:
        if "a - b" in (copy / "tiny" / "ops.py").read_text():
            return {}, "timed out after 120 s"
        return real(copy, files)

    monkeypatch.setattr(validate_module, "run_tests", slow)
    (repo / "tiny" / "ops.py").write_text((repo / "tiny" / "ops.py").read_text() + "\n")
    verdicts = validate(repo, mutations_of((repo / "tiny/ops.py").read_text(), "tiny/ops.py"), tests, cache=cache)
    assert TIMED_OUT in {v.reject for v in verdicts}
    assert list(cache.glob("tinyrepo-*.json")) == [new]  # a verdict that may differ on an idle machine: not kept


def test_a_failure_message_drops_memory_addresses_so_generation_is_deterministic():
    log = (
        "_____ test_x _____\n    assert f().endswith('.')\nE   AssertionError: assert False\n"
        "E    +  where False = <built-in method endswith of str object at 0x7f7db1c16e20>('.')\n"
        "===== short test summary info =====\n"
    )
    failure, frames = failure_of(log, "tests/test_a.py::test_x")
    assert (
        failure
        == (
            "assert f().endswith('.')\nAssertionError: assert False\n"
            " +  where False = <built-in method endswith of str object at 0x...>('.')"
        )
        and not frames
    )


def test_validate_refuses_a_repository_whose_tests_fail(tmp_path):
    repo = tiny_repo(tmp_path)
    (repo / "tests" / "test_ops.py").write_text("def test_broken():\n    assert False\n")
    with pytest.raises(TaskPackError, match="fails tests"):
        validate(repo, [], ["tests/test_ops.py"])


def test_generation_is_deterministic_and_honest(tmp_path):
    repos = [REPOS_DIR / "textkit"]
    first = generate(repos, seed=7, count=12, heldout_fraction=0.3, workdir=tmp_path / "a")
    again = generate(repos, seed=7, count=12, heldout_fraction=0.3, workdir=tmp_path / "b")
    assert [t.row for t in first.tasks] == [t.row for t in again.tasks]
    assert len(first.tasks) == 12
    train = {t.row["bug_site"] for t in first.tasks if t.split == "train"}
    held = {t.row["bug_site"] for t in first.tasks if t.split == "heldout"}
    assert held and train and not train & held
    for task in first.tasks:
        row, m = task.row, task.mutation
        assert row["instance_id"] == instance_id("textkit", m)
        assert json.loads(row["FAIL_TO_PASS"]) and row["test_patch"] == ""
        assert f"-{m.new}" in row["patch"] and f"+{m.old}" in row["patch"]  # gold: bug -> original
        # the fix never shows; the buggy line only inside a traceback, as an issue's pasted error shows it
        assert m.old.strip() not in row["problem_statement"]
        assert m.new.strip() not in row["problem_statement"].split("Traceback (most recent call last):")[0]
        assert row["eval_script"].count(f"git checkout {row['base_commit']} -- tests/") == 2
    assert problem_statement("textkit", type("V", (), {"failure": "", "fail_to_pass": ("t",), "frames": ()})())


def test_localized_keeps_only_bugs_whose_traceback_shows_the_faulty_line(tmp_path):
    repos = [REPOS_DIR / "textkit"]
    # one judging of the mutations for both (the verdict cache): the filter is what differs
    every = generate(repos, seed=7, count=1000, heldout_fraction=0.3, workdir=tmp_path / "a", cache=tmp_path / "v")
    local = generate(
        repos, seed=7, count=1000, heldout_fraction=0.3, workdir=tmp_path / "b", localized=True, cache=tmp_path / "v"
    )
    assert 0 < len(local.tasks) < len(every.tasks)
    assert local.rejects[NOT_LOCALIZED] == len(every.tasks) - len(local.tasks)
    for task in local.tasks:
        m = task.mutation
        frames = task.row["problem_statement"].split("Traceback (most recent call last):\n")[1]
        assert f'File "{m.path}", line {m.lineno},' in frames and "    " + m.new.strip() in frames
    kept = {t.row["instance_id"] for t in local.tasks}
    for task in every.tasks:  # the ones left out never show their faulty line's frame
        m = task.mutation
        shown = f'File "{m.path}", line {m.lineno},' in task.row["problem_statement"]
        assert shown == (task.row["instance_id"] in kept), task.row["instance_id"]
