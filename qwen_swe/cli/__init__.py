"""The ``qwen-swe`` console command (``pip install -e .``): one subcommand per ``python -m`` entry point."""
