"""Node's compile cache of the agent: made in a container where rollouts see the bundle, then read, not written, by
a rollout's CLI through the read-only mount (Node's own debug log says which entries it accepted)."""

from __future__ import annotations

import re

import pytest

from qwen_swe.agent.bundle import AgentBundle
from qwen_swe.agent.compile_cache import COMPLETE, FILL_AGENT, fill, fill_script, run_cli
from qwen_swe.agent.qwen import RUN_DIR, agent_command
from qwen_swe.data.taskpack.images import PY_IMAGE
from qwen_swe.paths import AGENT_MOUNT, agent_bundle_dir

pytestmark = [pytest.mark.docker, pytest.mark.agent]


def test_the_cache_is_made_once_and_a_rollouts_cli_reads_it_read_only(tmp_path):
    bundle, cache = AgentBundle(agent_bundle_dir()), tmp_path / "cache"
    info = fill(bundle, cache=cache)
    assert info["files"] > 100 and info["bytes"] > 1_000_000 and info["image"] == PY_IMAGE
    assert (cache / COMPLETE).is_file() and fill(bundle, cache=cache) == info  # complete: kept, not made again

    # a rollout's CLI (its command line, its output to the container's log): the agent's own environment
    # (NODE_COMPILE_CACHE among it), the cache read-only
    cli = agent_command(FILL_AGENT).split(" < ")[0] + f" < {RUN_DIR}/prompt.txt 2>&1 >/dev/null"
    status, log = run_cli(
        bundle, PY_IMAGE, cache, writable=False, script=fill_script(cli), NODE_DEBUG_NATIVE="COMPILE_CACHE"
    )
    assert status == 0, log
    accepted = re.findall(r"cache for (\S+) was accepted", log)
    cli_files = f"file://{AGENT_MOUNT}/qwen-code/package/"
    assert len([path for path in accepted if path.startswith(cli_files)]) > 100, log[-3000:]
    assert "was rejected" not in log and "mismatch" not in log, log[-3000:]
