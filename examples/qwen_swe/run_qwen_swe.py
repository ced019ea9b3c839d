"""The run's entry point (``bash examples/qwen_swe/run_grpo.sh`` calls it): see ``qwen_swe.run``."""

import sys

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401

from qwen_swe.run import main

if __name__ == "__main__":
    sys.exit(main())
