"""The real rollout driver around a stand-in engine, for unit tests: its constructor would start a proxy and load a
tokenizer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from qwen_swe.config.settings import Settings
from qwen_swe.data.source import SWEBenchDataSource
from qwen_swe.rollout.driver import RolloutDriver


def driver_around(settings: Settings, make_engine: Callable[[], Any]) -> RolloutDriver:
    """A driver with its own event loop thread and ``make_engine()`` made on that loop (its Events belong there)."""
    driver = RolloutDriver.__new__(RolloutDriver)
    driver.settings, driver.data_source = settings, SWEBenchDataSource.from_settings(settings)
    driver._loop = asyncio.new_event_loop()
    driver._thread = threading.Thread(target=driver._loop.run_forever, daemon=True)
    driver._thread.start()
    driver.engine = driver._on_loop(make_engine)
    driver.last_sync, driver._in_flight, driver._evaluated = {}, {}, {}
    return driver
