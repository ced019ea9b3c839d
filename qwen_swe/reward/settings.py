"""The grader's settings section (EVAL_TIMEOUT, GRADE_NETWORK, REWARD_MODE and the SHAPED_* weights)."""

from __future__ import annotations

from dataclasses import dataclass

from qwen_swe.config.fields import opt, validate
from qwen_swe.sandbox.settings import NETWORK_MODES, NO_NETWORK

REWARD_MODES = ("binary", "fractional", "shaped")


@dataclass(frozen=True)
class RewardSettings:
    eval_timeout: float = opt(1800.0, "timeout of one grading run, seconds", minimum=1.0)
    grade_network: str = opt(
        NO_NETWORK,
        "network mode of grading containers; anything but none lets the code under "
        "test reach out (each such grade logs a warning): only for images whose tests "
        "need the network",
        choices=NETWORK_MODES,
    )
    reward_mode: str = opt(
        "binary",
        "reward: binary +/-1, fractional F2P, or shaped localisation",
        choices=REWARD_MODES,
    )
    shaped_gold_file: float = opt(1.0, "shaped: reward per gold-patch file the patch changes")
    shaped_extra_file: float = opt(-0.25, "shaped: per changed file the gold patch does not touch")
    shaped_missed_file: float = opt(-0.5, "shaped: per gold file the patch misses")
    shaped_token_budget: int = opt(65536, "shaped: response-token budget", minimum=1)
    shaped_over_tokens: float = opt(-0.5, "shaped: penalty when over the token budget")
    shaped_tool_budget: int = opt(100, "shaped: tool-call budget", minimum=1)
    shaped_over_tools: float = opt(-0.5, "shaped: penalty when over the tool-call budget")
    shaped_completion: float = opt(0.5, "shaped: bonus when the agent completed with a non-empty patch")
    shaped_length: float = opt(
        0.0,
        "shaped: weight in [0, 1] of the continuous effort term for unresolved "
        "patches (response tokens / token budget)",
        minimum=0.0,
        maximum=1.0,
    )

    def __post_init__(self) -> None:
        validate(self)
