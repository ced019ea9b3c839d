"""The project's own task pack: small SWE-bench-format tasks over tiny repositories shipped in this folder.

The embedded default trains on these when no SWE-bench dataset is given. Sources live in ``src/<instance_id>/``
and ``repos/<name>/``; ``python -m qwen_swe.data.taskpack generate`` turns them into ``tasks.jsonl``,
``build`` makes one Docker image per task without Docker Hub, ``check`` proves every task in containers.
"""

from __future__ import annotations

from pathlib import Path

PACK_DIR = Path(__file__).resolve().parent
TASKS_JSONL = PACK_DIR / "tasks.jsonl"
SRC_DIR = PACK_DIR / "src"
REPOS_DIR = PACK_DIR / "repos"
