"""The embedded profile: the values the embedded default gives the settings a user left unset.

It applies when no VLLM_URL is given (the run starts its own CPU server), or with PROFILE=embedded against a server
already running, for example one kept warm between evaluations with ``qwen-swe serve --model embedded:FOLDER``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qwen_swe.config.hardware import native_bf16, served_dtype

PROFILES = ("auto", "embedded")  # auto: the embedded profile exactly when no VLLM_URL is given

# The agent profile a small model can act in: free tool choice, up to 5 calls of up to 256 tokens. The warm start's
# demonstrations are recorded in it, and the embedded default trains the warm-started policy in it, so the two agree.
WARM_START_AGENT: dict[str, Any] = {
    "tool_choice": "auto",
    "max_turns": 5,
    "agent_max_tokens": 256,
    "agent_timeout": 180,
}

# The embedded default (no VLLM_URL) is a small run of the same code path on 2 CPU cores, on the generated train
# tasks: the warm-started SmolLM2-135M (``run.py`` builds it once and caches it; MODEL=<folder> trains another), the
# warm start's agent profile, the seed's binary reward, and 2 steps of 4 groups of 4: about half the groups have
# both outcomes (measured), so 8 groups give an update in nearly every run (docs). Recomputed activations: a
# 3000-token rollout's activations and logits are several GB a rank, and two ranks, the server and the containers
# share 24 GiB. bf16 only where native (hardware.py). Each value applies only where the user set nothing.
EMBEDDED_PROFILE: dict[str, Any] = {
    **WARM_START_AGENT,
    "num_rollouts": 2,
    "rollout_batch_size": 4,
    "n_samples": 4,
    "reward_mode": "binary",
    "mixed_precision": native_bf16(),
    "broadcast_dtype": served_dtype(),  # the embedded server's own dtype
    "activation_checkpointing": True,
    "lr": 2e-5,
    "max_response_len": 4096,
    "max_model_len": 8192,
    # Where bf16 is native, a step's 16 rollouts all at once: the server batches them, and the main job's steps took
    # 1.21x their critical path (4 at a time: 1.74x, each rollout waiting for a slot and then for the slowest). In
    # fp32 the server is 2-3x slower, and a rollout, lasting the whole rollout phase at 16 (68-75 s here), would near
    # the agent's 180 s; there 4 at a time.
    "rollout_concurrency": 16 if native_bf16() else 4,
    "boot_concurrency": 4 if native_bf16() else 2,
    "eval_timeout": 300.0,
    "image_namespace": "",
    "shaped_length": 0.2,
    "shaped_token_budget": 1024,
}


def profile_applies(values: Mapping[str, Any]) -> bool:
    """The embedded profile fills the unset settings: PROFILE=embedded, or no VLLM_URL (PROFILE=auto)."""
    return values.get("profile") == "embedded" or not values.get("vllm_url")


def with_profile(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` over the embedded profile's (``EMBEDDED_PROFILE``) where it applies, else ``values`` alone."""
    return {**EMBEDDED_PROFILE, **values} if profile_applies(values) else dict(values)
