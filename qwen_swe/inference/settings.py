"""The inference settings section: which server, which model, how new weights reach it."""

from __future__ import annotations

from dataclasses import dataclass

from qwen_swe.config.fields import opt, validate

DEFAULT_MODEL = "Qwen/Qwen3-Coder-30B-A3B-Instruct"


@dataclass(frozen=True)
class InferenceSettings:
    vllm_url: str | None = opt(None, "OpenAI-compatible server URL; unset = start the embedded CPU server")
    model: str | None = opt(
        None,
        f"HF name or local folder; default the embedded SmolLM2 folder in the embedded default, else {DEFAULT_MODEL}",
    )
    tp: int = opt(1, "tensor parallel size of a locally started vLLM", minimum=1)
    served_model_name: str | None = opt(None, "model name the server exposes; default MODEL")
    max_model_len: int | None = opt(None, "vLLM context length")
    request_timeout: float = opt(600.0, "timeout of one inference request, seconds", minimum=1.0)
    enforce_eager: bool = opt(
        True,
        "the embedded CPU server runs the model eagerly (vLLM's --enforce-eager): no torch.compile and no warm-up "
        "pass, so it starts in 0.57x the time (0.27x a first start's, whose compile cache is cold) and decodes at "
        "about 0.83x the rate, prefill the same; false compiles, for long runs",
        resume="free",
    )
    served_url: str | None = opt(
        None, "URL of the server the launcher started (embedded); not set by users", by_run=True
    )
    vllm_api_key: str | None = opt(
        None,
        "key (Bearer token) of the server at VLLM_URL, sent by the proxies and the "
        "weight sync; a server this project starts requires it on every route but "
        "/health, and gets a fresh random one when unset",
        resume="free",
    )
    served_api_key: str | None = opt(
        None, "key of the server the launcher started (embedded); not set by users", by_run=True
    )
    weight_sync: str = opt(
        "auto",
        "how new weights reach the server: reload a shared path, upload to the Modal "
        "weights Volume, or broadcast them into the vLLM workers (no disk); auto = modal for a "
        "*.modal.run VLLM_URL, else path",
        choices=("auto", "path", "modal", "broadcast"),
    )
    broadcast_host: str = opt(
        "127.0.0.1", "WEIGHT_SYNC=broadcast: the trainer's address as the server's workers reach it"
    )
    broadcast_port: int = opt(
        0, "WEIGHT_SYNC=broadcast: the trainer's port for the group; 0 = a free one", minimum=0, maximum=65535
    )
    broadcast_bucket_mb: int = opt(256, "WEIGHT_SYNC=broadcast: MiB gathered and sent at a time", minimum=1)
    broadcast_dtype: str = opt(
        "bfloat16",
        "WEIGHT_SYNC=broadcast: dtype the weights travel in (the server's)",
        choices=("bfloat16", "float16", "float32"),
    )

    def __post_init__(self) -> None:
        validate(self)

    @property
    def starts_server(self) -> bool:
        """No server given: the run starts the embedded CPU server."""
        return not self.vllm_url

    @property
    def url(self) -> str | None:
        """The server rollouts talk to: VLLM_URL, or the embedded server the run started."""
        return self.vllm_url or self.served_url

    @property
    def api_key(self) -> str | None:
        """The key the server rollouts and weight sync talk to requires: VLLM_API_KEY, or the started server's."""
        return self.vllm_api_key or self.served_api_key

    @property
    def sync_mode(self) -> str:
        if self.weight_sync != "auto":
            return self.weight_sync
        return "modal" if self.vllm_url and ".modal.run" in self.vllm_url else "path"
