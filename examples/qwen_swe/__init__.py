"""GRPO training of the qwen-code agent on SWE-bench (a slime-style example package).

Importable as ``examples.qwen_swe`` from the repository root. Importing it has no side effects.
"""
