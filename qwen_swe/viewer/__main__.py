"""``python -m qwen_swe.viewer RUN_DIR``: write RUN_DIR/viewer.html (open it in any browser, from disk)."""

from __future__ import annotations

import sys
from pathlib import Path

from qwen_swe.viewer.build import write_viewer


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python -m qwen_swe.viewer RUN_DIR  (a run folder: metrics.jsonl, rollouts/)", file=sys.stderr)
        return 2
    print(write_viewer(Path(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
