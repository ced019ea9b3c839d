"""The slime contract suite, run where slime's light modules import: in ``.venv-slime``, once per vendored release.

``.venv`` has transformers 5, and slime v0.2.2's and v0.3.1's light modules need transformers < 5; so this test, the
only one the main suite collects here, runs the contract files in ``.venv-slime`` (scripts/setup/35_slime.sh) as a
subprocess per release, and slime v0.3.1's own ``tests/plugin_contracts/`` unmodified from its vendored tree (on
slime's reference plugins: ``slime_v031_contracts.py`` says why its checks reach ours through its helpers instead).
The contract files have no ``test_`` prefix, so the main run does not also collect them where they would skip.

Each run must exit 0 having passed tests from every one of its files, with nothing skipped and nothing failed; an
xfail is accepted only where it is listed below, with the known bug it pins.
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from qwen_swe.paths import REPO_ROOT

OURS = "tests/contracts/slime_contracts.py"  # every release
RUNS = {  # run id: (release folder, files, run from the release's tree with its own pytest configuration)
    "slime-v0.2.2": ("slime-v0.2.2", [OURS, "tests/contracts/slime_v022_contracts.py"], False),
    "slime-v0.3.1": ("slime-v0.3.1", [OURS, "tests/contracts/slime_v031_contracts.py"], False),
    "slime-v0.3.1-own-plugin-contracts": ("slime-v0.3.1", ["tests/plugin_contracts"], True),
}
# known bugs the suite pins with xfail(strict=True): fixed, they XPASS, which fails their run
EXPECTED_XFAIL: dict[str, set[str]] = {}
TIMEOUT = 600


def _outcomes(report: Path) -> dict[str, list[tuple[str, str]]]:
    """Outcome -> [(file, test name)] from pytest's JUnit XML (an xfail is a <skipped type="pytest.xfail">)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        child = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        outcome = "passed" if child is None else child.tag
        if child is not None and child.tag == "skipped" and child.get("type") == "pytest.xfail":
            outcome = "xfailed"
        found.setdefault(outcome, []).append((case.get("classname", "").rpartition(".")[2], case.get("name", "")))
    return found


@pytest.mark.slime_env
@pytest.mark.parametrize("run", list(RUNS))
def test_contract_suite_passes_in_slime_venv(run, slime_env, tmp_path):
    python, vendor = slime_env
    release, files, own = RUNS[run]
    root = vendor / release
    report = tmp_path / "report.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLIME_CONTRACT_")}  # slime's defaults
    # no bytecode: the vendored trees stay as shipped (and are read-only in CI)
    env.update(SLIME_PATH=str(root), PYTHONDONTWRITEBYTECODE="1")
    command = [str(python), "-m", "pytest", *files, "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    proc = subprocess.run(
        command, cwd=root if own else REPO_ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    inner = f"{python} -m pytest {' '.join(files)} (SLIME_PATH={root}):\n{proc.stdout[-12000:]}\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0 and report.is_file(), inner
    outcomes = _outcomes(report)
    assert set(outcomes) <= {"passed", "xfailed"}, inner
    assert {name for _, name in outcomes.get("xfailed", [])} == EXPECTED_XFAIL.get(run, set()), inner
    per_file = Counter(module for module, _ in outcomes["passed"])
    want = {p.stem for p in (root / files[0]).glob("test_*.py")} if own else {Path(f).stem for f in files}
    assert set(per_file) == want and all(per_file.values()), f"passed per file: {dict(per_file)}\n{inner}"
