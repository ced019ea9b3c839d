"""A task pack row by its id, as the tests and benchmarks take one (tests/task_pack.py): the first by default, a clear
error for an unknown id."""

from __future__ import annotations

import json

import pytest

from qwen_swe.data.taskpack import TASKS_JSONL
from qwen_swe.errors import TaskPackError
from tests.task_pack import pack_task


def test_a_pack_task_by_id_and_by_default():
    rows = [json.loads(line) for line in TASKS_JSONL.read_text().splitlines() if line.strip()]
    assert pack_task() == rows[0]
    assert pack_task(rows[-1]["instance_id"]) == rows[-1]


def test_an_unknown_id_names_the_ids_there_are():
    with pytest.raises(TaskPackError, match="qwenswe__nope is not in .*its ids: qwenswe__"):
        pack_task("qwenswe__nope")
