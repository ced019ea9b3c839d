"""Grade a patch with the official SWE-bench harness logic in a fresh container: +1 resolved, -1 not."""

from qwen_swe.reward.harness import Grade, grade, grade_async  # noqa: F401
