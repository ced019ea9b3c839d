"""Start a local vLLM server for the policy (tensor parallel, tool calls, RL endpoints on).

    python examples/qwen_swe/start_vllm.py --port 8000 --tp 8            # MODEL from env, default Qwen3-Coder
    python examples/qwen_swe/start_vllm.py --tp 8 --dry-run              # print env + command, start nothing
    python -m examples.qwen_swe.start_vllm --model embedded --port 8011  # the embedded CPU server

The launcher itself is ``qwen_swe.inference.launcher``.
"""

import sys

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401

from qwen_swe.inference.launcher import main

if __name__ == "__main__":
    sys.exit(main())
