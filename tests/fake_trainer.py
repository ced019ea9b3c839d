"""torchrun entry for the trainer tests: the library's trainer (``qwen_swe.train.trainer.main``) with a test's
rollout source in place of the run's, so the library carries no hook for test doubles.

    python -m torch.distributed.run ... -m tests.fake_trainer {fsdp|broadcast} --settings OUTPUT_DIR/settings.json
"""

from __future__ import annotations

import sys

from qwen_swe.config.settings import Settings
from qwen_swe.rollout.contract import RolloutSource
from qwen_swe.supervise import run_rank
from qwen_swe.train.trainer import SourceFactory, main


def _fsdp(settings: Settings) -> RolloutSource:
    from tests.integration.test_trainer_fsdp import make_driver  # late: the test module is also the torchrun script

    return make_driver(settings)


def _broadcast(settings: Settings) -> RolloutSource:
    from tests.integration.test_broadcast_sync import make_broadcast_driver  # late: as above

    return make_broadcast_driver(settings)


FACTORIES: dict[str, SourceFactory] = {"fsdp": _fsdp, "broadcast": _broadcast}

if __name__ == "__main__":
    kind, rest = sys.argv[1], sys.argv[2:]
    if kind not in FACTORIES:
        sys.exit(f"tests.fake_trainer: the first argument must be one of {sorted(FACTORIES)}, got {kind!r}")
    run_rank(lambda: main(rest, factory=FACTORIES[kind]))
