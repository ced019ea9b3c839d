"""The policy's vLLM server on Modal GPUs: the same command as ``start_vllm.py``, plus a weight-reload entry point.

    modal deploy examples/qwen_swe/modal_inference.py            # then VLLM_URL=https://<workspace>--qwen-swe-vllm.modal.run/v1
    modal run examples/qwen_swe/modal_inference.py --path step_000003            # full weights from the Volume
    modal run examples/qwen_swe/modal_inference.py --path lora_000003 --lora-name policy
    modal app stop qwen-swe-vllm                                  # when done (GPUs bill while a container is up)

Deploy-time settings (env vars, read where this file is imported and copied into the container's environment so
both sides build the same command): MODEL, SERVED_MODEL_NAME, MAX_MODEL_LEN, LORA_RANK, MODAL_GPU (default
A100-80GB), MODAL_GPU_COUNT (8), TP (default MODAL_GPU_COUNT), MODAL_APP_NAME, MODAL_HF_SECRET (name of a Modal
secret with HF_TOKEN, for gated models), VLLM_API_KEY (required: the server asks it on every route but /health; it
reaches the container as a Modal secret, and the run sends it from the same variable).

Weights travel through the ``qwen-swe-weights`` Volume (``modal volume put qwen-swe-weights ./step_3 /step_3``);
``Server.reload`` calls ``Volume.reload()`` first (committed files are invisible to a running container until then),
then vLLM's /pause -> /collective_rpc reload_weights -> /reset_prefix_cache -> /resume through the same
``InferenceClient`` the local run uses. A LoRA adapter is a few MB to upload; a full 30B checkpoint is ~61 GB.

Modal ends any web request whose answer has not started after 150 s (it answers 303, which OpenAI clients do not
follow): the proxy streams its calls (token mode always, forward mode when the agent does, as qwen-code does), so
the headers go out at once. Importing this module needs no credentials and does no network I/O.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path, PurePosixPath

import modal

from qwen_swe.config import settings as config
from qwen_swe.errors import ConfigError
from qwen_swe.inference.client import InferenceClient
from qwen_swe.inference.serve_config import ServeConfig
from qwen_swe.inference.server_auth import KEY_ENV
from qwen_swe.inference.settings import DEFAULT_MODEL

APP_NAME = os.environ.get("MODAL_APP_NAME", "qwen-swe-vllm")
GPU_TYPE = os.environ.get("MODAL_GPU", "A100-80GB")
GPU_COUNT = int(os.environ.get("MODAL_GPU_COUNT", "8"))
GPU_SPEC = f"{GPU_TYPE}:{GPU_COUNT}"
PORT = 8000
VLLM_PIN = "vllm==0.32.0"  # the version whose RL routes and request shapes the project verified
HF_CACHE, VLLM_CACHE, WEIGHTS = "/root/.cache/huggingface", "/root/.cache/vllm", "/weights"
MINUTES = 60
STARTUP_TIMEOUT = 30 * MINUTES  # first start downloads ~61 GB and compiles CUDA graphs
FUNCTION_TIMEOUT = 60 * MINUTES  # above the longest request (web requests themselves stop at 150 s)
SCALEDOWN_WINDOW = 20 * MINUTES  # keep the GPUs warm between GRPO steps
MAX_INPUTS = 256  # concurrent requests per container; vLLM batches them
WEB_REQUEST_LIMIT = 150  # Modal's HTTP limit, seconds (documented; not configurable)
# Copied into the container so the command built there equals the one built at deploy time.
DEPLOY_ENV_KEYS = (
    "MODEL",
    "SERVED_MODEL_NAME",
    "MAX_MODEL_LEN",
    "LORA_RANK",
    "TP",
    "MODAL_GPU",
    "MODAL_GPU_COUNT",
    "MODAL_APP_NAME",
)


def serve_config() -> ServeConfig:
    """The vLLM command served on Modal (``python`` is the image's interpreter). The settings are parsed here, the
    app's entry point, with the same parser and messages as every other entry point (no embedded profile: this
    is a GPU server); the deploy-time variables are copied into the container, so both sides build one command."""
    settings = config.load_settings([], profile=False)
    inference = settings.inference
    served = inference.served_model_name
    tp = inference.tp if os.environ.get("TP") else GPU_COUNT
    if not inference.vllm_api_key:  # a public URL with weight-reload routes must not answer strangers
        raise ConfigError(f"{KEY_ENV} is unset: deploy with {KEY_ENV}=<a long random key> and give the run the same")
    return ServeConfig(
        model=inference.model or DEFAULT_MODEL,
        served_model_names=(served,) if served else (),
        host="0.0.0.0",
        port=PORT,
        tp=tp,
        max_model_len=inference.max_model_len or 65536,
        gpu_memory_utilization=0.90,
        lora_rank=settings.train.lora_rank,
        python="python",
        api_key=inference.vllm_api_key,
    )


def weights_path(path: str) -> str:
    """A path inside the weights Volume as the container sees it; relative paths are taken from the Volume root."""
    full = path if path.startswith("/") else f"{WEIGHTS}/{path}"
    if not (full == WEIGHTS or full.startswith(WEIGHTS + "/")) or "/../" in full + "/":
        raise ValueError(
            f"{path!r} is outside the weights Volume mounted at {WEIGHTS}; upload it with "
            f"`modal volume put qwen-swe-weights LOCAL_DIR /NAME` and pass NAME"
        )
    return full


def reload_server(path: str, lora_name: str | None = None, base_url: str = f"http://127.0.0.1:{PORT}") -> dict:
    """What the reload entry point does after ``Volume.reload()``: the same client calls as the local run."""
    client = InferenceClient(
        base_url, timeout=60.0, reload_timeout=FUNCTION_TIMEOUT - 5 * MINUTES, api_key=os.environ.get(KEY_ENV)
    )
    where = weights_path(path)
    version = client.load_lora(lora_name, where) if lora_name else client.reload_weights(where)
    return {"path": where, "lora_name": lora_name, "version": version}


def _deploy_env() -> dict[str, str | None]:
    return {k: os.environ[k] for k in DEPLOY_ENV_KEYS if os.environ.get(k)}


image = (
    modal.Image.from_registry("nvidia/cuda:12.8.1-devel-ubuntu22.04", add_python="3.12")
    .entrypoint([])
    .uv_pip_install(VLLM_PIN, "huggingface-hub[hf_xet]")
    .env({"HF_XET_HIGH_PERFORMANCE": "1", "VLLM_SERVER_DEV_MODE": "1"})
    .add_local_python_source("qwen_swe")
)
hf_cache_volume = modal.Volume.from_name("qwen-swe-hf-cache", create_if_missing=True)
vllm_cache_volume = modal.Volume.from_name("qwen-swe-vllm-cache", create_if_missing=True)
weights_volume = modal.Volume.from_name("qwen-swe-weights", create_if_missing=True)
VOLUMES: dict[str | PurePosixPath, modal.Volume | modal.CloudBucketMount] = {
    HF_CACHE: hf_cache_volume,
    VLLM_CACHE: vllm_cache_volume,
    WEIGHTS: weights_volume,
}
SECRETS = [modal.Secret.from_name(os.environ["MODAL_HF_SECRET"])] if os.environ.get("MODAL_HF_SECRET") else []
if os.environ.get(KEY_ENV):  # its own secret, apart from the deploy variables (DEPLOY_ENV_KEYS)
    SECRETS.append(modal.Secret.from_dict({KEY_ENV: os.environ[KEY_ENV]}))

app = modal.App(APP_NAME)


@app.cls(
    image=image,
    gpu=GPU_SPEC,
    volumes=VOLUMES,
    secrets=SECRETS,
    env=_deploy_env(),
    timeout=FUNCTION_TIMEOUT,
    scaledown_window=SCALEDOWN_WINDOW,
    max_containers=1,
)  # one replica: every request sees the same weights
@modal.concurrent(max_inputs=MAX_INPUTS)
class Server:
    @modal.enter()
    def start(self) -> None:
        """Start vLLM when the container starts, so a reload call that wakes the container also gets a server."""
        cfg = serve_config()
        print("starting:", cfg.shell(), flush=True)
        self.process = subprocess.Popen(cfg.argv(), env={**os.environ, **cfg.env()}, start_new_session=True)

    @modal.web_server(port=PORT, startup_timeout=STARTUP_TIMEOUT, label=APP_NAME)
    def serve(self) -> None:
        """Modal forwards the public URL to PORT once vLLM listens there (started in ``start``)."""

    @modal.method()
    def reload(self, path: str, lora_name: str | None = None) -> dict:
        """Serve new weights from the Volume: full HF safetensors folder, or a PEFT adapter with ``lora_name``."""
        InferenceClient(f"http://127.0.0.1:{PORT}").wait_ready(STARTUP_TIMEOUT)
        weights_volume.reload()
        return reload_server(path, lora_name)

    @modal.exit()
    def stop(self) -> None:
        process = getattr(self, "process", None)
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def reload_remote(path: str, lora_name: str | None = None) -> dict:
    """From the trainer's machine (needs Modal credentials): reload the deployed server's weights."""
    server_cls = modal.Cls.from_name(APP_NAME, "Server")
    return server_cls().reload.remote(path, lora_name)


def push_and_reload(local_dir: str | Path, name: str) -> dict:
    """The built-in trainer's per-step sync with a Modal server (``WEIGHT_SYNC=modal``): upload the exported HF
    folder into the weights Volume as ``/name``, then reload it through ``Server.reload``."""
    with weights_volume.batch_upload(force=True) as batch:
        batch.put_directory(str(local_dir), f"/{name}")
    return reload_remote(name)


@app.local_entrypoint()
def main(path: str, lora_name: str = "") -> None:
    print(reload_remote(path, lora_name or None))
