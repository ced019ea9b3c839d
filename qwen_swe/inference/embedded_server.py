"""The embedded server: the run's own vLLM for the SmolLM2 the project ships (or MODEL's folder), started when no
VLLM_URL is given and stopped by its process group; on the CPU build by default, on a GPU where there is one."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict, Unpack

from qwen_swe import paths
from qwen_swe.config import settings as config
from qwen_swe.config.hardware import served_dtype
from qwen_swe.errors import EmbeddedModelError
from qwen_swe.inference.embedded_model import ensure_embedded_model
from qwen_swe.inference.serve_config import ServeConfig, worker_extension
from qwen_swe.inference.server import VLLMServer, free_port
from qwen_swe.inference.vllm_build import cuda_server
from qwen_swe.plan.placement import nvidia_gpus, serve_gpus

TEMPLATE = Path(__file__).resolve().parent / "chat_templates" / "hermes_compact.jinja"
EMBEDDED_SERVED_NAME = "smollm2-135m"
EMBEDDED_GPU_MEMORY = 0.3  # the 135M model's share of a GPU, leaving the rest to a trainer beside it


class Profile(TypedDict, total=False):
    """What a caller may change of the embedded profile (``embedded_serve_config``'s keywords)."""

    model_dir: Path | None
    kv_cache_gib: int
    reserved_cpus: int
    lora_rank: int | None
    api_key: str | None


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
    """The measured-good CPU profile for the embedded SmolLM2: bf16 where the CPU has it (else fp32), native
    8192 context, hermes parser with the compact template, 1 GiB KV cache (~46k tokens in bf16, 5.7 full contexts).
    One core is reserved for the API server: with the trainer busy on the other core, a 2-thread engine spins at
    OpenMP barriers on a contended core (measured with benchmarks/bench_inference.py --trainer-load: 1 stream
    3.0-4.6 tok/s and 8 streams 16-55 tok/s with 0 reserved, against 15.6-23.2 and 116-158 tok/s with 1).
    Eager (ENFORCE_EAGER, on CPU): measured with benchmarks/bench_server_start.py on an AVX2-only CPU in fp32, a start
    took 48 s against 84 s compiled (34 s of it the compile's warm-up pass, with a warm cache; 181 s with a cold one),
    decode ran at 0.82x (1 stream) and 0.84x (4 streams) the compiled rate and a 3000-token prefill
    took as long: a run of a few steps, an evaluation or a test pays more for the start than for the calls.
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
        dtype="bfloat16" if on_gpu else served_dtype(),
        chat_template=str(TEMPLATE),
        lora_rank=settings.train.lora_rank if lora_rank is None else lora_rank,
        python=python,
        cpu=not on_gpu,
        kv_cache_gib=kv_cache_gib,
        reserved_cpus=reserved_cpus,
        worker_extension=worker_extension(settings),
        sleep_mode=settings.placement.colocate,
        devices=serve_gpus(settings, gpus) if on_gpu else (),  # as the run placed it
        api_key=api_key,
        eager=settings.inference.enforce_eager and not on_gpu,  # a GPU's CUDA graphs are worth their capture
    )


@contextlib.contextmanager
def embedded_server(
    settings: config.Settings,
    *,
    port: int = 0,
    log_dir: Path | None = None,
    startup_timeout: float = 900.0,
    **profile: Unpack[Profile],
) -> Iterator[str]:
    """Run the embedded CPU vLLM server for the duration of the block; yields its OpenAI base URL
    (``http://127.0.0.1:PORT/v1``). ``profile`` goes to ``embedded_serve_config`` (kv_cache_gib, reserved_cpus,
    model_dir, lora_rank, api_key)."""
    serve = embedded_serve_config(settings, port=port, **profile)
    log_dir = Path(log_dir) if log_dir is not None else paths.cache_home() / "logs"
    with VLLMServer(serve, log_dir / f"vllm-embedded-{serve.port}.log") as server:
        yield server.start(startup_timeout)


@contextlib.contextmanager
def serving(settings: config.Settings, *, log_dir: Path) -> Iterator[config.Settings]:
    """With VLLM_URL: that server. Without: the embedded CPU server (MODEL's folder when given, else the embedded
    SmolLM2), started here and stopped by its process group, requiring VLLM_API_KEY (a fresh random key when unset)
    on every route; yields the settings with its URL and key."""
    if not settings.inference.starts_server:
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
