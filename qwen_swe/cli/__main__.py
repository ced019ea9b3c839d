"""``python -m qwen_swe.cli``: the same as the ``qwen-swe`` console command."""

import sys

from qwen_swe.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
