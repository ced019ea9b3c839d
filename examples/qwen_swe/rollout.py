"""slime's rollout function (``--rollout-function-path examples.qwen_swe.rollout.generate_rollout``)."""

from qwen_swe.backends.slime.rollout import generate_rollout  # noqa: F401
