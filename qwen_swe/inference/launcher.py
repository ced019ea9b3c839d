"""Start vLLM's OpenAI server for the policy model, with tool calls and the RL endpoints on.

    python examples/qwen_swe/start_vllm.py --port 8000 --tp 8            # MODEL from env, default Qwen3-Coder
    python examples/qwen_swe/start_vllm.py --tp 8 --dry-run              # print env + command, start nothing
    python -m qwen_swe.inference.launcher --model embedded --port 8011  # the embedded CPU server
    qwen-swe serve --model embedded:FOLDER   # the same for FOLDER (a warm start, weights/vN), kept warm between runs

This module is the command: its flags become a ``ServeConfig`` (``serve_config.py``), which ``VLLMServer``
(``server.py``) runs in its own process group, stopped by that group's id on Ctrl-C/SIGTERM, never by name.
Where nvidia-smi lists GPUs, the server runs on them (INFERENCE_GPUS, default the first TP; ``plan/placement.py``)
from the CUDA ``vllm`` of VLLM_PYTHON or .venv-vllm (``vllm_build.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import secrets
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from qwen_swe import paths
from qwen_swe.config import settings as config
from qwen_swe.inference.client import InferenceError
from qwen_swe.inference.embedded_server import embedded_serve_config
from qwen_swe.inference.serve_config import ServeConfig, worker_extension
from qwen_swe.inference.server import VLLMServer
from qwen_swe.inference.server_auth import KEY_ENV
from qwen_swe.inference.settings import DEFAULT_MODEL
from qwen_swe.inference.vllm_build import cuda_server, default_python
from qwen_swe.plan.placement import nvidia_gpus, serve_gpus
from qwen_swe.supervise import Interrupted
from qwen_swe.supervise import install as install_supervisor

EMBEDDED = "embedded"


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Start vLLM's OpenAI server with tool calls and the RL endpoints on.",
        epilog="Arguments after -- go to vLLM unchanged.",
    )
    p.add_argument(
        "--model",
        help=f"HF name or folder, or '{EMBEDDED}[:FOLDER]': the embedded CPU server of the shipped SmolLM2 or of "
        f"FOLDER, for runs with PROFILE=embedded (env MODEL; default {DEFAULT_MODEL})",
    )
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
) -> tuple[ServeConfig, bool]:
    """The server's configuration, and whether it is the embedded CPU profile (``--model embedded[:FOLDER]``)."""
    settings = config.load_settings([], env=env, profile=False)  # the embedded run profile is not a GPU default
    model = args.model or settings.inference.model or DEFAULT_MODEL
    lora_rank = settings.train.lora_rank if args.lora_rank is None else args.lora_rank
    if model == EMBEDDED or model.startswith(EMBEDDED + ":"):
        folder = model.partition(":")[2]
        model_dir = Path(folder).expanduser().resolve() if folder else None
        if model_dir is not None and not (model_dir / "config.json").is_file():
            raise config.ConfigError(
                f"--model {model}: {folder} has no config.json; give a model folder (a warm start, a run's weights/vN)"
            )
        base = embedded_serve_config(
            settings.replace(model=str(model_dir)) if model_dir else settings,  # served under FOLDER's path alone
            port=args.port,
            lora_rank=lora_rank,
            model_dir=model_dir or (paths.embedded_model_dir() if args.dry_run else None),
            api_key=settings.inference.vllm_api_key or secrets.token_urlsafe(32),
        )
        serve = dataclasses.replace(
            base, host=args.host or base.host, extra_args=tuple(extra), python=args.python or base.python
        )
        return serve, True
    served = args.served_model_name or settings.inference.served_model_name
    python = args.python or default_python()
    gpus = nvidia_gpus(env)
    tp = args.tp or settings.inference.tp
    devices = serve_gpus(settings.replace(tp=tp * args.dp), gpus) if cuda_server(python, gpus) else ()
    serve = ServeConfig(
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
        worker_extension=worker_extension(settings),
        devices=devices,
        sleep_mode=settings.placement.colocate,
        api_key=settings.inference.vllm_api_key or secrets.token_urlsafe(32),
        extra_args=tuple(extra),
    )
    return serve, False


def ready_exports(serve: ServeConfig, url: str, embedded: bool) -> list[str]:
    """What a run in another shell exports to use the started server."""
    exports = [
        f"export VLLM_URL={url}",
        f"export MODEL={shlex.quote(serve.model)}",
        f"export {KEY_ENV}={shlex.quote(serve.api_key or '')}",
    ]  # every route but /health needs it
    if serve.served_model_names:
        exports.append(f"export SERVED_MODEL_NAME={shlex.quote(serve.served_model_names[0])}")
    if embedded:  # a run against it takes the embedded default's tasks, agent prompt and settings
        exports.append("export PROFILE=embedded")
    if serve.devices:  # the run on this node keeps its trainer off these GPUs
        exports.append(f"export INFERENCE_GPUS={','.join(map(str, serve.devices))} TP={serve.tp}")
    return exports


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = build_arg_parser().parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    try:
        serve, embedded = serve_config_from_args(args, extra)
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
        print(
            f"vLLM is ready (pid {server.pid}). In another shell:\n  "
            + "\n  ".join(ready_exports(serve, url, embedded))
            + "\nCtrl-C stops it.",
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
