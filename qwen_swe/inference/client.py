"""One synchronous client for every inference server the run talks to (local vLLM, the embedded CPU server, Modal):
readiness, model list, and weight sync.

Weight sync is vLLM's reload-from-disk protocol (vLLM >= 0.16 with ``VLLM_SERVER_DEV_MODE=1``; request shapes
checked against vLLM 0.32's routers): ``POST /pause?mode=wait`` drains in-flight requests,
``POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": DIR}}`` makes every worker stream the
HF safetensors in DIR into the model, ``POST /reset_prefix_cache`` drops KV computed with the old weights, and
``POST /resume`` always runs, even when the reload failed, so a failed sync never leaves the server paused.
Write every step to a new folder: vLLM has returned stale weights for a reused path (vllm-project/vllm#32718).

``interrupt=True`` (PARTIAL_ROLLOUTS) makes a sync that does not wait for the requests in flight: ``/pause?mode=keep``
freezes them where they are, and ``/reset_prefix_cache?reset_running_requests=true`` preempts them, dropping KV
computed with the old weights; after ``/resume`` they continue from their tokens so far, their prefix recomputed
with the new weights (AReaL's interruptible generation; slime's --partial-rollout, which recycles aborted samples, is
another thing).

Synchronous on purpose (urllib, stdlib only): the trainer calls it from a plain process between steps, and the
module must import in both the project's venv and vLLM's.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_swe.errors import InferenceError


@dataclass(frozen=True)
class WeightVersion:
    """What the server is serving: 0 = the weights it started with, +1 per successful reload or LoRA load."""

    version: int
    path: str | None = None


class InferenceClient:
    """Client for one OpenAI-compatible vLLM server. ``base_url`` may end with ``/v1`` (what users export as
    VLLM_URL) or not; both forms reach the same server."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 60.0,
        reload_timeout: float = 600.0,
        api_key: str | None = None,
        interrupt: bool = False,
    ) -> None:
        root = base_url.strip().rstrip("/")
        if root.endswith("/v1"):
            root = root[: -len("/v1")]
        if not root.startswith(("http://", "https://")):
            raise InferenceError(f"inference server URL {base_url!r} must start with http:// or https://")
        self.root = root
        self.timeout = timeout
        self.reload_timeout = reload_timeout
        self._api_key = api_key
        self._version = WeightVersion(0)
        self.interrupt = interrupt

    @property
    def openai_url(self) -> str:
        """The OpenAI base URL (ends with /v1), for agents and OpenAI clients."""
        return self.root + "/v1"

    @property
    def weight_version(self) -> WeightVersion:
        return self._version

    # --- plain HTTP -------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """One HTTP call; returns the decoded JSON body (text if not JSON, None if empty). Raises InferenceError
        on transport errors and non-2xx answers."""
        url = self.root + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:800]
            hint = " (start vLLM with VLLM_SERVER_DEV_MODE=1 to enable it)" if exc.code == 404 else ""
            raise InferenceError(f"{method} {url} failed: HTTP {exc.code}{hint}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise InferenceError(
                f"{method} {url} failed: {reason}; is the server at {self.root} running and reachable?"
            ) from None
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")  # e.g. /v1/load_lora_adapter answers plain text

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.request("POST", path, body, **kwargs)

    post_json = post

    # --- readiness ---------------------------------------------------------------------------------
    def health(self) -> bool:
        """True when ``GET /health`` answers 200; False when the server is down or still starting (no raise)."""
        try:
            self.get("/health", timeout=min(self.timeout, 10.0))
            return True
        except InferenceError:
            return False

    def wait_ready(self, timeout: float = 600.0, interval: float = 1.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.health():
            if time.monotonic() > deadline:
                raise InferenceError(
                    f"{self.root}/health did not answer 200 within {timeout:.0f} s; check the server log"
                )
            time.sleep(interval)

    def models(self) -> list[str]:
        """Model ids the server accepts (served names plus loaded LoRA adapters)."""
        body = self.get("/v1/models")
        try:
            return [item["id"] for item in body["data"]]
        except (TypeError, KeyError) as exc:
            raise InferenceError(f"GET {self.root}/v1/models returned an unexpected body: {body!r:.300}") from exc

    # --- weight sync ------------------------------------------------------------------------------
    def reload_weights(self, path: str | os.PathLike[str]) -> int:
        """Serve the HF safetensors checkpoint in ``path`` (a path on the server's file system; use a new folder
        every step). Returns the new weight version."""
        where = _server_path(path)
        self._paused(
            lambda: self.post(
                "/collective_rpc",
                {"method": "reload_weights", "kwargs": {"weights_path": where}, "timeout": self.reload_timeout},
                timeout=self.reload_timeout + 30,
            )
        )
        self._version = WeightVersion(self._version.version + 1, where)
        return self._version.version

    def load_lora(self, name: str, path: str | os.PathLike[str]) -> int:
        """Load (or replace in place) the PEFT adapter in ``path`` under model id ``name``; needs a server started
        with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``. Returns the new weight version."""
        where = _server_path(path)
        self._paused(
            lambda: self.post(
                "/v1/load_lora_adapter",
                {"lora_name": name, "lora_path": where, "load_inplace": True},
                timeout=self.reload_timeout,
            )
        )
        self._version = WeightVersion(self._version.version + 1, where)
        return self._version.version

    def update_paused(self, update: Any, label: str) -> int:
        """Change the served weights by any other means (``update()``, e.g. a broadcast into the workers) with the
        same pause, cache reset and resume as a reload; returns the new weight version."""
        self._paused(update)
        self._version = WeightVersion(self._version.version + 1, label)
        return self._version.version

    def _paused(self, update: Any) -> None:
        """Run ``update`` with generation paused (the requests in flight drained, or frozen with ``interrupt``) and
        the prefix cache reset afterwards; always resume."""
        self.post("/pause", query={"mode": "keep" if self.interrupt else "wait"}, timeout=self.reload_timeout)
        try:
            update()
            self._reset_prefix_cache()
        finally:
            self.post("/resume")

    def _reset_prefix_cache(self) -> None:
        # vLLM answers success=false while blocks are still held (e.g. a request finishing); retry briefly.
        # Interrupting, the frozen requests' blocks are released by preempting them (their KV is the old weights').
        query = {"reset_running_requests": "true"} if self.interrupt else None
        for _ in range(20):
            body = self.post("/reset_prefix_cache", query=query)
            if body is None or body.get("success", True):
                return
            time.sleep(0.25)
        raise InferenceError(
            f"POST {self.root}/reset_prefix_cache kept answering success=false; requests may still "
            "hold cache blocks. Retry the sync once the server is idle."
        )


def _server_path(path: str | os.PathLike[str]) -> str:
    """Absolute form of a local path (the server's working directory is not ours); other paths pass through
    unchanged, e.g. a Modal Volume path that only exists inside the serving container."""
    local = Path(path)
    return str(local.resolve()) if local.exists() else os.fspath(path)
