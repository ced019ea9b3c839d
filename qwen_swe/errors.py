"""Every error this project raises on purpose, in two families.

- ``SetupError``: something a user must fix before a run can work (a bad setting, a bad data row, a missing
  file, image, bundle or model, a slime checkout that does not fit). Entry points print the message, which names
  the thing and the fix, and exit with code 2.
- ``InfraError``: the infrastructure failed one sample (a container, the inference server, the grader). It
  carries a ``DropReason``; the rollout drops that sample with the reason and goes on. It is never a wrong answer,
  so it is never scored -1.

Anything else raised in the sample path is a bug and propagates: the run fails loudly instead of quietly
dropping samples.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

SETUP_EXIT_CODE = 2


class DropReason(str, Enum):
    """Why a sample was dropped; the values are the ``dropped/<reason>`` metric keys."""

    SANDBOX = "sandbox"
    AGENT_ERROR = "agent_error"
    NO_MODEL_TURNS = "no_model_turns"
    GRADE_ABORTED = "grade_aborted"
    INFERENCE = "inference"
    SAMPLE_TIMEOUT = "sample_timeout"
    ROLLOUT_TIMEOUT = "rollout_timeout"
    STALE = "stale"  # sampled more than MAX_STALENESS weight versions before the trainer's
    WORKER_LOST = "worker_lost"  # the Ray worker (or its node) running the sample died
    DISK_LIMIT = "disk_limit"  # the rollout container wrote past SANDBOX_DISK and was killed


class QwenSweError(Exception):
    """Base of every error raised on purpose."""


class SetupError(QwenSweError):
    """A user must fix something before the run can work; the message names it and the fix."""


class InfraError(QwenSweError):
    """Infrastructure failed one sample; the sample is dropped with ``reason``."""

    reason: DropReason = DropReason.SANDBOX


# --- setup ----------------------------------------------------------------------------------------------


class ConfigError(SetupError, ValueError):
    """A setting is missing or invalid; the message names the variable and the fix."""


class DataError(SetupError, ValueError):
    """The dataset or an instance list cannot be used; the message names the file, row and field."""


class PromptError(SetupError, ValueError):
    """A row cannot become a task prompt."""


class TaskPackError(SetupError):
    """The local task pack cannot be generated, built or proved; the message says which task and why."""


class BundleError(SetupError):
    """The agent runtime bundle cannot be built or is incomplete; the message names the step and the fix."""


class EmbeddedModelError(SetupError):
    """The embedded model cannot be located or converted; the message says what to install or fix."""


class CheckpointError(SetupError):
    """A checkpoint cannot be written or read; the message names the folder and what to do."""


class SlimeBackendError(SetupError):
    """slime cannot be launched as configured; the message says what to install or change."""


# --- infrastructure -------------------------------------------------------------------------------------


class SandboxError(InfraError):
    """A container could not be created, used or removed."""

    reason = DropReason.SANDBOX


class InferenceError(InfraError):
    """The inference server failed a request; the message names the URL, the endpoint and the failure."""

    reason = DropReason.INFERENCE


class UpstreamFailure(InferenceError):
    """The server answered a proxied request with an error; ``status`` and ``body`` go back to the agent."""

    def __init__(self, status: int, body: Any, message: str) -> None:
        super().__init__(message)
        self.status, self.body, self.message = status, body, message


class GradingError(InfraError):
    """The instance cannot be graded as given (no eval script, unknown parser); the message names the fix."""

    reason = DropReason.GRADE_ABORTED


# --- contracts between our own parts (bugs if they fire) --------------------------------------------------


class ProxyError(QwenSweError, RuntimeError):
    """The proxy cannot start or a session cannot be used; the message says what to do."""


class TrajectoryError(QwenSweError, ValueError):
    """Turns cannot become a sample (no ids and no tokenizer, or a template without ChatML markers)."""


class TrainerError(QwenSweError, RuntimeError):
    """The trainer cannot continue: a broken batch contract, or a failure on rank 0 shared with all ranks."""


class WeightSyncError(QwenSweError, RuntimeError):
    """The served weights cannot be brought up to date; the message names the weights and what to do."""
