"""wandb for a test: offline, its files under the test's folder, no key and no reachable service, so nothing leaves
the test and nothing is left in the home folder (wandb-core writes its logs under WANDB_CACHE_DIR)."""

from __future__ import annotations

from pathlib import Path

import pytest


def offline_wandb(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    for key, value in {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_BASE_URL": "http://127.0.0.1:9",
        "WANDB_CONFIG_DIR": str(folder / "wandb-config"),
        "WANDB_CACHE_DIR": str(folder / "wandb-cache"),
        "WANDB_DATA_DIR": str(folder / "wandb-data"),
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
