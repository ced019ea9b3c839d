"""The qwen-code CLI agent inside a sandbox, against an OpenAI-compatible server."""

from qwen_swe.agent.qwen import AgentResult, run_agent  # noqa: F401
