"""Run as a script (``python examples/qwen_swe/start_vllm.py``, ``modal deploy examples/qwen_swe/...``): put the
repository root on ``sys.path`` so ``qwen_swe`` imports."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
