"""The agent's settings section (MAX_TURNS, AGENT_TIMEOUT, AGENT_MAX_TOKENS, TEMPERATURE, TOOL_CHOICE)."""

from __future__ import annotations

from dataclasses import dataclass

from qwen_swe.config.fields import opt, validate


@dataclass(frozen=True)
class AgentSettings:
    max_turns: int = opt(50, "agent turn limit (model calls)", minimum=1)
    agent_timeout: float = opt(1800.0, "agent wall-clock budget per sample, seconds", minimum=1.0)
    agent_max_tokens: int = opt(8192, "max_tokens per model call", minimum=1)
    temperature: float = opt(1.0, "sampling temperature", minimum=0.0)
    tool_choice: str = opt("auto", "tool_choice sent by the agent", choices=("auto", "required"))

    def __post_init__(self) -> None:
        validate(self)
