"""The seed's entry points, kept where slime imports them (``examples.qwen_swe.<name>``).

Each file here is thin: the library is the top-level ``qwen_swe`` package (docs/concepts/how-it-works.md, Layout).
Importing this package has no side effects.
"""
