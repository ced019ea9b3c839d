"""``python -m qwen_swe.viewer FOLDER``: write FOLDER/viewer.html and FOLDER/viewer_data/ for a run folder or an
evaluation folder (run_eval.sh's output); open the page in any browser, from disk or served over HTTP."""

from __future__ import annotations

import sys
from pathlib import Path

from qwen_swe.viewer.build import write_viewer


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print(
            "usage: python -m qwen_swe.viewer FOLDER  (a run folder: metrics.jsonl, rollouts/; or an evaluation "
            "folder: report.json, rollouts.jsonl or results.jsonl)",
            file=sys.stderr,
        )
        return 2
    print(write_viewer(Path(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
