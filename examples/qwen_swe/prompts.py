"""The task instruction given to the agent."""

from qwen_swe.data.prompts import build_prompt  # noqa: F401
