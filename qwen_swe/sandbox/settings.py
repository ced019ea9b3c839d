"""The sandbox's settings section (env vars unchanged: IMAGE_NAMESPACE, SANDBOX_CPUS, ...)."""

from __future__ import annotations

from dataclasses import dataclass

from qwen_swe.config.fields import opt, validate


@dataclass(frozen=True)
class SandboxSettings:
    image_namespace: str = opt("swebench", "registry namespace of instance images ('' = local names)")
    sandbox_cpus: float = opt(1.0, "CPU limit per container", minimum=0.1)
    sandbox_memory: str = opt("4g", "memory limit per container (docker syntax)")
    sandbox_network: str = opt("none", "network mode of rollout containers: none leaves them only their session's "
                                       "model socket; host or bridge let the agent reach out (logged as a warning): "
                                       "only for images whose tests need the network",
                               choices=("host", "bridge", "none"))
    boot_concurrency: int = opt(4, "containers starting at once", minimum=1)

    def __post_init__(self) -> None:
        validate(self)
