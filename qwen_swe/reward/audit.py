"""The tamper check that does not read the patch's text: a witness inside the test process.

``tamper.scan`` recognises tricks it has rules for. This check instead watches what the patch's code *does* while
the tests run: ``audit_site/sitecustomize.py`` is put on PYTHONPATH of the eval, so Python loads it before any
repository code, and it installs a PEP 578 audit hook, wrappers and a watchdog (its docstring lists what they see).
What they see is blamed on a line only when that line is one the patch added, so the repository's own code (and
the tests, and pytest) may introspect as they like.

The records travel in the eval's own output stream, each tagged with ``MARK``: once written they are outside the
container, so nothing the tests do afterwards can remove them. ``split`` takes them out again, byte for byte, so
the log swebench's parser reads is the one the tests printed.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from qwen_swe.paths import TESTBED
from qwen_swe.reward.tamper import SELF_TESTING_REPOS

FILE = "sitecustomize.py"  # the name Python imports at start-up, before any repository code
SITE = Path(__file__).with_name("audit_site") / FILE
OBJECTS = SITE.with_name("pytest_objects.py")  # its checks of pytest's objects, carried in its settings
WILDCARDS = SITE.with_name("wildcards.py")  # its check of what the tests compare, carried the same way
MARK = "\x1eqwen-swe-audit"
MACHINERY = ("_pytest", "pytest", "pluggy", "unittest", "py._")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_RECORD = re.compile(re.escape(MARK) + r"[^\n]*\n?")


def applies(instance: Mapping[str, Any]) -> bool:
    """The witness blames the patch's lines; in the test machinery's own repository those lines are pytest."""
    return instance.get("repo") not in SELF_TESTING_REPOS


def added_line_numbers(patch: str, root: str = TESTBED) -> dict[str, list[int]]:
    """Absolute path in the container -> the line numbers (after the patch) of the lines the patch adds."""
    found: dict[str, list[int]] = {}
    path, line_no = None, 0
    for line in patch.splitlines():
        if line.startswith("+++ "):
            target = line[4:].strip().split("\t")[0]
            path = None if target == "/dev/null" else f"{root}/{target[2:] if target.startswith('b/') else target}"
        elif (hunk := _HUNK.match(line)) is not None:
            line_no = int(hunk.group(1))
        elif path is None or line.startswith(("--- ", "diff ", "\\")):
            continue
        elif line.startswith("+"):
            found.setdefault(path, []).append(line_no)
            line_no += 1
        elif not line.startswith("-"):
            line_no += 1
    return found


def setup(patch: str, site_dir: str, report: str | None, root: str = TESTBED) -> tuple[str, str]:
    """(the text of ``site_dir/FILE``, a shell prefix for the eval command) for witnessing ``patch``: the witness
    with its settings (the added lines, the report's path) written into it.

    The prefix puts ``site_dir`` first on PYTHONPATH and records which pipe is the log, so only a process that
    writes to the log itself (not a child whose output a test captures) emits records.
    """
    config = {
        "mark": MARK,
        "added": added_line_numbers(patch, root),
        "machinery": MACHINERY,
        "report": report,
        "objects": OBJECTS.read_text(),
        "wildcards": WILDCARDS.read_text(),
    }
    site = SITE.read_text().replace("\nCONFIG = None ", f"\nCONFIG = {json.dumps(config)!r} ", 1)
    q = shlex.quote(site_dir)
    prefix = (
        f"export PYTHONPATH={q}${{PYTHONPATH:+:$PYTHONPATH}} QWEN_SWE_AUDIT_LOG=$(stat -L -c %d:%i /proc/$$/fd/1); "
    )
    return site, prefix


def split(output: str) -> tuple[str, list[str]]:
    """(the log without the witness's records, the records): each record is removed with its newline."""
    records = _RECORD.findall(output)
    return _RECORD.sub("", output) if records else output, [r.rstrip("\n") for r in records]


def coverage(records: Iterable[str]) -> dict[str, Any]:
    """What the witness could watch, for the grade's details: the Pythons of the processes that started it, and
    whether each had PEP 578 audit hooks (before 3.8 only the wrappers, the watchdog, END, the static scan and the
    JUnit cross-check stand; no START at all: no Python process wrote to the log, so only the last two did)."""
    starts = []
    for record in records:
        parts = record.split(" ", 4)
        if len(parts) == 5 and parts[0] == MARK and parts[3] == "START":
            try:
                starts.append(json.loads(parts[4]))
            except ValueError:
                continue
    return {
        "processes": len(starts),
        "python": sorted({str(s.get("python")) for s in starts}),
        "audit_hook": bool(starts) and all(s.get("hook") for s in starts),
    }


def findings(records: Iterable[str]) -> list[str]:
    """What the records say the patch's code did, plus processes that ran it and ended without their END."""
    found: list[str] = []
    processes: dict[tuple[str, str], set[str]] = {}
    for record in records:
        parts = record.split(" ", 4)
        if len(parts) < 4 or parts[0] != MARK:
            found.append(f"a malformed audit record: {record[:120]!r}")
            continue
        _, nonce, pid, kind = parts[:4]
        processes.setdefault((nonce, pid), set()).add(kind)
        if kind == "FINDING":
            try:
                detail = json.loads(parts[4])
                found.append(
                    f"{detail['what']} at {detail['where']}"
                    + (f" ({detail['detail']})" if detail.get("detail") else "")
                )
            except (IndexError, ValueError, KeyError, TypeError):
                found.append(f"a malformed audit record: {record[:120]!r}")
    for (_, pid), kinds in processes.items():
        if "START" in kinds and "LOADED" in kinds and "END" not in kinds:
            found.append(
                f"process {pid} ran the patch's code and ended without its audit record "
                f"(os._exit, a signal, or a closed descriptor)"
            )
        elif "START" not in kinds and kinds & {"END", "LOADED"}:
            found.append(f"audit records of process {pid} without its START (forged)")
    return found
