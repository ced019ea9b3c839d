"""vLLM's sleep mode as COLOCATE uses it: the server releases its GPU memory while the trainer steps on the same GPUs.

vLLM (``VLLM_SERVER_DEV_MODE=1``; request shapes checked against vLLM 0.32's ``entrypoints/serve/dev/sleep``):
``POST /sleep?level=1`` aborts what is in flight, pauses scheduling, moves the weights to host memory and discards the
KV cache; ``POST /wake_up?tags=weights`` brings the weights back (the new ones are pushed into them next), then
``POST /wake_up?tags=kv_cache`` the cache, after which scheduling resumes; ``GET /is_sleeping`` says which state it
is in. Memory is released only on a CUDA server started with ``--enable-sleep-mode`` (the launcher adds it under
COLOCATE). vLLM's CPU build refuses that flag ("Sleep mode is not supported on current platform") but still answers
the routes, as a pause that releases nothing: the CPU tests exercise the calls and the states, not the memory.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from qwen_swe.errors import InferenceError
from qwen_swe.inference.client import InferenceClient

SLEEP_LEVEL = 1  # weights kept in host memory; level 2 would drop them and need a full reload from disk
WEIGHTS, KV_CACHE = "weights", "kv_cache"


class ServerSleep:
    """The three sleep-mode routes of one server, each with its timeout, each checked against ``/is_sleeping``."""

    def __init__(self, client: InferenceClient, *, timeout: float = 600.0) -> None:
        self.client, self.timeout = client, timeout

    def sleep(self) -> float:
        """Release the server's weights and KV cache; returns the seconds it took."""
        t0 = time.monotonic()
        self.client.post("/sleep", query={"level": str(SLEEP_LEVEL)}, timeout=self.timeout)
        if not self.is_sleeping():
            raise InferenceError(f"POST {self.client.root}/sleep answered, but /is_sleeping says the server is awake")
        return time.monotonic() - t0

    def wake_up(self, tags: Sequence[str] = ()) -> float:
        """Bring back ``tags`` (all when empty); returns the seconds it took. Serving resumes once all are back."""
        t0 = time.monotonic()
        query = "?" + "&".join(f"tags={t}" for t in tags) if tags else ""  # a repeated key: vLLM reads a list
        self.client.post("/wake_up" + query, timeout=self.timeout)
        if (not tags or KV_CACHE in tags) and self.is_sleeping():
            raise InferenceError(
                f"POST {self.client.root}/wake_up{query} answered, but /is_sleeping says the server "
                "still sleeps: nothing would be served"
            )
        return time.monotonic() - t0

    def is_sleeping(self) -> bool:
        body = self.client.get("/is_sleeping", timeout=min(self.timeout, 60.0))
        try:
            return bool(body["is_sleeping"])
        except (TypeError, KeyError) as exc:
            raise InferenceError(
                f"GET {self.client.root}/is_sleeping returned {body!r:.200}: not vLLM's sleep "
                "route (start it with VLLM_SERVER_DEV_MODE=1)"
            ) from exc


def sleep_mode_of(server_info: Any) -> bool | None:
    """From vLLM's ``GET /server_info?config_format=json``: whether ``/sleep`` releases the server's GPU memory (it
    was started with ``--enable-sleep-mode``); None on a CPU server, which has no such memory to release."""
    try:
        config = server_info["vllm_config"]
        device = config["device_config"].get("device_type") or config["device_config"].get("device")
        return None if str(device) == "cpu" else bool(config["model_config"].get("enable_sleep_mode"))
    except (TypeError, KeyError, AttributeError) as exc:
        raise InferenceError(
            f"/server_info returned no vLLM config ({exc!r}): cannot tell whether the server "
            "sleeps; start it with VLLM_SERVER_DEV_MODE=1"
        ) from None
