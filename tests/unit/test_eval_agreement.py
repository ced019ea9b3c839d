"""The evaluation's resolution agrees with swebench's own ``get_eval_report`` on the shared SWE-bench rows: for
every row whose log format we can write (pytest-style and Django-style parsers), a log where every listed test
passes and one where a FAIL_TO_PASS test fails give the same verdict through both."""

from __future__ import annotations

import json
import tempfile

from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT
from swebench.harness.grading import get_eval_report

from qwen_swe.reward import scoring

PYTEST_PARSERS = {"parse_log_pytest", "parse_log_pytest_options", "parse_log_pytest_v2"}


def _line(parser: str, test: str, ok: bool) -> str:
    if parser == "parse_log_django":
        name, _, rest = test.partition(" (")
        return f"{test} ... {'ok' if ok else 'FAIL'}" if rest else f"{name} ... {'ok' if ok else 'FAIL'}"
    return f"{'PASSED' if ok else 'FAILED'} {test}"


def _log(lines: list[str]) -> str:
    return "\n".join(["+ git apply -v -", f"+ : '{START_TEST_OUTPUT}'", *lines, f"+ : '{END_TEST_OUTPUT}'", ""])


def test_resolution_agrees_with_swebench_get_eval_report(shared_data):
    rows = [
        json.loads(line)
        for path in sorted(shared_data.glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    checked = 0
    for row in rows:
        parser = scoring.parser_for(row).__name__
        if parser not in PYTEST_PARSERS | {"parse_log_django"}:
            continue
        f2p, p2p = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
        if not f2p or any(" " in t and parser != "parse_log_django" for t in f2p + p2p):
            continue  # a parametrised id with spaces cannot be written as one pytest result line
        script = scoring.eval_script(row)
        spec = scoring.test_spec_for(row, script)
        for broken in (None, f2p[0]):
            text = _log([_line(parser, t, t != broken) for t in f2p + p2p])
            with tempfile.NamedTemporaryFile("w", suffix=".log") as fh:
                fh.write(text)
                fh.flush()
                official = get_eval_report(
                    spec,
                    {"instance_id": row["instance_id"], "model_name_or_path": "m", "model_patch": "diff"},
                    fh.name,
                    include_tests_status=False,
                )
            ours = scoring.judge_log(row, text, script)
            assert ours.resolved == official[row["instance_id"]]["resolved"], (row["instance_id"], broken)
            assert ours.resolved == (broken is None), (row["instance_id"], ours.resolution)
            checked += 1
    assert checked >= 200, checked
