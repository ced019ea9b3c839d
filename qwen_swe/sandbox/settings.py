"""The sandbox's settings section (env vars unchanged: IMAGE_NAMESPACE, SANDBOX_CPUS, ...)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from qwen_swe.config.fields import opt, validate
from qwen_swe.errors import ConfigError

NO_NETWORK = "none"  # a machine with no route out: the default of rollout and grading containers
NETWORK_MODES = (NO_NETWORK, "host", "bridge")  # Docker network modes a setting may choose
UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


@dataclass(frozen=True)
class SandboxSettings:
    image_namespace: str = opt("swebench", "registry namespace of instance images ('' = local names)")
    sandbox_cpus: float = opt(1.0, "CPU limit per container", minimum=0.1)
    sandbox_memory: str = opt("4g", "memory limit per container (docker syntax)")
    sandbox_network: str = opt(
        NO_NETWORK,
        "network mode of rollout containers: none leaves them only their session's "
        "model socket; host or bridge let the agent reach out (logged as a warning): "
        "only for images whose tests need the network",
        choices=NETWORK_MODES,
    )
    sandbox_disk: str = opt(
        "10g",
        "what a rollout container may write (docker size syntax; 0 = no budget), measured "
        "every few seconds: past it the container is killed and the sample dropped "
        "(disk_limit); Docker's own size limit needs overlay2 on xfs",
    )
    boot_concurrency: int = opt(4, "containers starting at once", minimum=1)

    def __post_init__(self) -> None:
        validate(self)
        parse_size(self.sandbox_disk)


def parse_size(text: str, name: str = "SANDBOX_DISK") -> int:
    """Bytes of a docker-style size (``512m``, ``10g``; ``0`` = no budget), with an error naming the setting."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)b?\s*", str(text).lower())
    if not match:
        raise ConfigError(f"{name}={text!r} is not a size: use a number with k, m, g or t (e.g. 10g), or 0")
    return int(float(match.group(1)) * UNITS[match.group(2)])
