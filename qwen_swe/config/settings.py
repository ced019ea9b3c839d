"""One frozen settings object for a run, from environment variables and CLI flags (flags win).

Every field ``foo_bar`` is read from the environment variable ``FOO_BAR`` and the flag ``--foo-bar``.
Bad values fail at start with a message naming the variable and the fix, never deep inside a run.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

from qwen_swe.paths import TASK_PACK, embedded_model_dir
from qwen_swe.errors import ConfigError

DEFAULT_MODEL = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
DEFAULT_DATASET = "princeton-nlp/SWE-bench_Verified"


def _opt(default: Any, help: str, choices: Sequence[str] | None = None, minimum: float | None = None,
         maximum: float | None = None) -> Any:
    return field(default=default, metadata={"help": help, "choices": choices, "min": minimum, "max": maximum})


@dataclass(frozen=True)
class Settings:
    # --- the seed's settings -------------------------------------------------------------------
    vllm_url: str | None = _opt(None, "OpenAI-compatible server URL; unset = start the embedded CPU server")
    model: str | None = _opt(None, f"HF name or local folder; default {DEFAULT_MODEL} with VLLM_URL, "
                                   "the embedded SmolLM2 folder without")
    num_rollouts: int = _opt(10, "number of GRPO steps (rollout + train)", minimum=1)
    rollout_batch_size: int = _opt(4, "groups (instances) per rollout", minimum=1)
    n_samples: int = _opt(2, "samples per group (GRPO needs at least 2)", minimum=2)
    output_dir: Path = _opt(Path(tempfile.gettempdir()) / "qwen_swe_grpo", "run folder: checkpoints, metrics, dumps")
    dataset: str | None = _opt(None, f"HF dataset name or local .json/.jsonl/.parquet; default {DEFAULT_DATASET} "
                                     "with VLLM_URL, the local task pack without")
    instance_list: Path | None = _opt(None, "file of instance ids, one a line")
    lr: float = _opt(1e-6, "AdamW learning rate", minimum=0.0)
    max_turns: int = _opt(50, "agent turn limit (model calls)", minimum=1)
    agent_timeout: float = _opt(1800.0, "agent wall-clock budget per sample, seconds", minimum=1.0)
    max_response_len: int = _opt(16384, "response tokens kept per trajectory", minimum=1)
    seed: int = _opt(1234, "data shuffle and sampling seed")

    # --- run ---------------------------------------------------------------------------------
    backend: str = _opt("fsdp", "trainer: built-in FSDP2 or slime's train.py", choices=("fsdp", "slime"))
    slime_dir: Path | None = _opt(None, "slime checkout (BACKEND=slime)")
    slime_python: str | None = _opt(None, "interpreter that runs slime's train.py (BACKEND=slime); "
                                          "default: the current one")
    slime_gpus: int | None = _opt(None, "GPUs for slime's FSDP actor (BACKEND=slime); default: all visible", minimum=1)
    allow_frozen_server: bool = _opt(False, "BACKEND=slime: start even when the server cannot take new weights "
                                            "(trains against a frozen policy)")
    save_interval: int = _opt(1, "checkpoint every N steps", minimum=1)
    keep_checkpoints: int = _opt(3, "checkpoints kept", minimum=1)
    run_id: str | None = _opt(None, "label for containers and logs; default derived from OUTPUT_DIR")

    # --- sandbox -----------------------------------------------------------------------------
    image_namespace: str = _opt("swebench", "registry namespace of instance images ('' = local names)")
    sandbox_cpus: float = _opt(1.0, "CPU limit per container", minimum=0.1)
    sandbox_memory: str = _opt("4g", "memory limit per container (docker syntax)")
    sandbox_network: str = _opt("host", "network mode of rollout containers", choices=("host", "bridge", "none"))
    boot_concurrency: int = _opt(4, "containers starting at once", minimum=1)
    rollout_concurrency: int = _opt(8, "samples running at once", minimum=1)

    # --- grading -----------------------------------------------------------------------------
    eval_timeout: float = _opt(1800.0, "timeout of one grading run, seconds", minimum=1.0)
    reward_mode: str = _opt("binary", "reward: binary +/-1, fractional F2P, or shaped localisation",
                            choices=("binary", "fractional", "shaped"))
    shaped_gold_file: float = _opt(1.0, "shaped: reward per gold-patch file the patch changes")
    shaped_extra_file: float = _opt(-0.25, "shaped: per changed file the gold patch does not touch")
    shaped_missed_file: float = _opt(-0.5, "shaped: per gold file the patch misses")
    shaped_token_budget: int = _opt(65536, "shaped: response-token budget", minimum=1)
    shaped_over_tokens: float = _opt(-0.5, "shaped: penalty when over the token budget")
    shaped_tool_budget: int = _opt(100, "shaped: tool-call budget", minimum=1)
    shaped_over_tools: float = _opt(-0.5, "shaped: penalty when over the tool-call budget")
    shaped_completion: float = _opt(0.5, "shaped: bonus when the agent completed with a non-empty patch")
    shaped_length: float = _opt(0.0, "shaped: weight in [0, 1] of the continuous effort term for unresolved "
                                     "patches (response tokens / token budget)", minimum=0.0, maximum=1.0)

    # --- agent and trajectory ----------------------------------------------------------------
    agent_max_tokens: int = _opt(8192, "max_tokens per model call", minimum=1)
    temperature: float = _opt(1.0, "sampling temperature", minimum=0.0)
    tool_choice: str = _opt("auto", "tool_choice sent by the agent", choices=("auto", "required"))
    mask_truncated: bool = _opt(False, "zero the loss mask of truncated trajectories")

    # --- GRPO and trainer --------------------------------------------------------------------
    advantage_mode: str = _opt("mean", "group baseline", choices=("mean", "std", "loo"))
    drop_zero_variance: bool = _opt(True, "drop groups whose rewards are all equal")
    dropped_policy: str = _opt("drop_group", "what to do with a group that lost samples to infrastructure",
                               choices=("drop_group", "replace"))
    clip_eps: float = _opt(0.2, "PPO clip range (lower)", minimum=0.0)
    clip_eps_high: float | None = _opt(None, "PPO upper clip range; default = CLIP_EPS")
    loss_norm: str = _opt("token", "loss normalisation", choices=("token", "sample"))
    grad_clip: float = _opt(1.0, "gradient-norm clip", minimum=0.0)
    lora_rank: int = _opt(0, "LoRA rank; 0 = full fine-tuning", minimum=0)
    lora_alpha: int = _opt(16, "LoRA alpha", minimum=1)
    activation_checkpointing: bool = _opt(False, "recompute activations in the backward pass")
    rollout_timeout: float = _opt(7200.0, "outer time guard for one whole rollout batch, seconds", minimum=1.0)
    train_procs: int | None = _opt(None, "trainer processes under torchrun; default: the GPU count, or 2 on CPU",
                                   minimum=1)
    micro_batch_size: int = _opt(1, "samples per forward/backward pass on each trainer rank", minimum=1)
    mixed_precision: bool = _opt(False, "bf16 compute with fp32 master weights and gradient reduction (FSDP2)")

    # --- inference ---------------------------------------------------------------------------
    tp: int = _opt(1, "tensor parallel size of a locally started vLLM", minimum=1)
    served_model_name: str | None = _opt(None, "model name the server exposes; default MODEL")
    max_model_len: int | None = _opt(None, "vLLM context length")
    request_timeout: float = _opt(600.0, "timeout of one inference request, seconds", minimum=1.0)
    served_url: str | None = _opt(None, "URL of the server the launcher started (embedded); not set by users")
    weight_sync: str = _opt("auto", "how new weights reach the server: reload a shared path, or upload to the Modal "
                            "weights Volume; auto = modal for a *.modal.run VLLM_URL", choices=("auto", "path", "modal"))

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            lo, hi, choices = f.metadata.get("min"), f.metadata.get("max"), f.metadata.get("choices")
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{_env(f.name)}={value} is not a finite number: {f.metadata['help']}")
            if lo is not None and value is not None and value < lo:
                raise ConfigError(f"{_env(f.name)}={value} is too small: {f.metadata['help']}; use a value >= {lo}")
            if hi is not None and value is not None and value > hi:
                raise ConfigError(f"{_env(f.name)}={value} is too large: {f.metadata['help']}; use a value <= {hi}")
            if choices and value not in choices:
                raise ConfigError(f"{_env(f.name)}={value!r} is not one of {', '.join(choices)}")
        listed = self.instance_list
        if listed is not None and not (Path(listed).is_file() and os.access(listed, os.R_OK)):
            raise ConfigError(f"INSTANCE_LIST={self.instance_list} cannot be read: give a file of instance ids, one a line")
        if self.dataset and _looks_local(self.dataset) and not Path(self.dataset).expanduser().exists():
            raise ConfigError(f"DATASET={self.dataset} does not exist: give a .json, .jsonl or .parquet file, "
                              "a Hugging Face dataset folder, or a Hugging Face dataset name")
        if self.backend == "slime" and self.slime_dir is None:
            raise ConfigError("BACKEND=slime needs SLIME_DIR: point it at a slime v0.2.2 checkout")

    # --- derived values ----------------------------------------------------------------------
    @property
    def embedded(self) -> bool:
        """No server given: run on the embedded CPU server, the local task pack and the tiny model."""
        return not self.vllm_url

    @property
    def dataset_source(self) -> str:
        return self.dataset or (str(TASK_PACK) if self.embedded else DEFAULT_DATASET)

    @property
    def model_name(self) -> str:
        """The model to train and serve: MODEL, else the embedded SmolLM2 folder or the seed's Qwen3-Coder."""
        return self.model or (str(embedded_model_dir()) if self.embedded else DEFAULT_MODEL)

    @property
    def label(self) -> str:
        digest = hashlib.sha1(str(self.output_dir.resolve()).encode()).hexdigest()[:8]
        return self.run_id or f"qwen-swe-{digest}"

    @property
    def sync_mode(self) -> str:
        if self.weight_sync != "auto":
            return self.weight_sync
        return "modal" if self.vllm_url and ".modal.run" in self.vllm_url else "path"

    @property
    def upper_clip(self) -> float:
        return self.clip_eps if self.clip_eps_high is None else self.clip_eps_high

    def replace(self, **changes: Any) -> "Settings":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (str(v) if isinstance(v, Path) else v) for f in fields(self) for v in [getattr(self, f.name)]}

    def to_env(self) -> dict[str, str]:
        """The resolved settings as environment variables, for child processes (trainer ranks, slime)."""
        out = {}
        for name, value in self.to_dict().items():
            if value is not None:
                out[_env(name)] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    def write(self, run_dir: Path) -> Path:
        """Write the resolved settings into the run folder as JSON (atomically)."""
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / "settings.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        tmp.replace(path)
        return path


def _env(name: str) -> str:
    return name.upper()


def _looks_local(source: str) -> bool:
    return source.endswith((".json", ".jsonl", ".parquet")) or source.startswith((".", "/", "~"))


def _convert(f: dataclasses.Field, raw: str) -> Any:
    """Turn one raw string into the field's type, with an error naming the variable."""
    kind = str(f.type)
    if raw == "" and "None" in kind:
        return None
    try:
        if kind.startswith("bool"):
            low = raw.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if kind.startswith("int"):
            return int(raw)
        if kind.startswith("float"):
            return float(raw)
        if kind.startswith("Path"):
            return Path(raw).expanduser()
        return raw
    except ValueError:
        want = kind.split(" ")[0].split("|")[0]
        raise ConfigError(f"{_env(f.name)}={raw!r} is not a valid {want}: {f.metadata['help']}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="qwen-swe GRPO run; every flag also reads the env var in capitals")
    for f in fields(Settings):
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None,
                            help=f"{f.metadata['help']} (env {_env(f.name)})")
    return parser


# The embedded default (no VLLM_URL) is a smoke-scale run of the same code path on 2 CPU cores: a 135M model
# that only calls tools when forced (notes/qwen_vllm_cpu.md), short rollouts, and the shaped reward so that
# advantages are not all zero. Each value applies only where the user set nothing.
EMBEDDED_PROFILE: dict[str, Any] = {
    "num_rollouts": 2, "rollout_batch_size": 2, "n_samples": 2, "max_turns": 4, "agent_timeout": 240.0,
    "agent_max_tokens": 192, "tool_choice": "required", "reward_mode": "shaped", "lr": 1e-5,
    "max_response_len": 4096, "max_model_len": 8192, "rollout_concurrency": 4, "boot_concurrency": 2,
    "eval_timeout": 300.0, "image_namespace": "", "shaped_length": 0.2, "shaped_token_budget": 1024,
}


def load_settings(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None,
                  profile: bool = True) -> Settings:
    """Settings from ``env`` (default ``os.environ``) overridden by ``argv`` flags.

    With ``profile`` and no VLLM_URL, unset fields take the embedded profile's values (``EMBEDDED_PROFILE``).
    """
    env = os.environ if env is None else env
    flags = vars(build_parser().parse_args(list(argv or [])))
    values: dict[str, Any] = {}
    for f in fields(Settings):
        raw = flags.get(f.name)
        if raw is None:
            raw = env.get(_env(f.name))
        if raw is not None:
            values[f.name] = _convert(f, raw)
    if profile and not values.get("vllm_url"):
        values = {**EMBEDDED_PROFILE, **values}
    return Settings(**values)
