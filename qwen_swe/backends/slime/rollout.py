"""slime's rollout-function contract over the same engine the built-in trainer uses."""

from __future__ import annotations

import asyncio
from typing import Any

from qwen_swe.backends.slime.batch import remove_zero_variance, trim_trailing_pad, validate_rollout_batch
from qwen_swe.backends.slime.carry import settings_from_slime_args
from qwen_swe.backends.slime.weights import SlimeWeightSync
from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import Sample, Status
from qwen_swe.inference.client import InferenceClient
from qwen_swe.inference.weight_sync import make_weight_sync
from qwen_swe.rollout.engine import RolloutEngine
from qwen_swe.rollout.progress import BatchStats
from qwen_swe.rollout.sampling import fill_batch

REFILL_ROUNDS = 3  # draws of fresh groups for the ones lost to infrastructure, before the rollout fails


def weight_sync_for(settings: Settings, args: Any) -> SlimeWeightSync:
    """slime's checkpoints (``--save``, ``--hf-checkpoint``, or Megatron's ``--save-hf`` folders) pushed into the
    run's server the run's way."""
    assert settings.inference.url is not None  # slime's run has its server
    client = InferenceClient(
        settings.inference.url, timeout=settings.inference.request_timeout, api_key=settings.inference.api_key
    )
    return SlimeWeightSync(
        getattr(args, "save", None) or settings.output_dir,
        getattr(args, "hf_checkpoint", None) or settings.model_name,
        make_weight_sync(settings.inference, client),
        keep_checkpoints=settings.train.keep_checkpoints,
        allow_frozen=settings.allow_frozen_server,
        max_staleness=settings.train.max_staleness,
        hf_exports=getattr(args, "save_hf", None),
    )


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    """slime's rollout-function contract: exactly ``rollout_batch_size`` groups of ``n_samples_per_prompt``.

    Settings come from the run's serialized settings carried on ``args`` (see ``settings_from_slime_args``), with
    slime's own sizes. Before a training rollout, the newest slime checkpoint is converted and reloaded into the
    vLLM server so the rollout is on-policy; groups that lost samples are replaced by fresh groups from the data
    source.
    """
    return asyncio.run(_slime_rollout(settings_from_slime_args(args), args, rollout_id, data_source, evaluation))


async def _slime_rollout(settings: Settings, args: Any, rollout_id: int, data_source: Any, evaluation: bool) -> Any:
    upstream = settings.inference.url
    assert upstream is not None  # slime's run has its server
    version = 0
    if not evaluation:
        version = await asyncio.to_thread(weight_sync_for(settings, args).before_rollout, rollout_id)
    engine = RolloutEngine(
        settings, upstream=upstream, model=settings.model_name, served_model=settings.inference.served_model_name
    )
    await engine.start()
    try:
        engine.set_weight_version(version)
        want, stats, loop = settings.rollout_batch_size, BatchStats(), asyncio.get_running_loop()

        def run(groups: list[list[Sample]]) -> list[list[Sample]]:  # from fill_batch's thread, on this loop
            return asyncio.run_coroutine_threadsafe(engine.run_groups(groups, stats), loop).result()

        batch = await asyncio.to_thread(
            fill_batch, data_source.get_samples, run, want, dynamic=False, rounds=REFILL_ROUNDS
        )
        kept = batch.complete
        if len(kept) < want:
            raise RuntimeError(
                f"rollout {rollout_id}: only {len(kept)} of {want} groups survived {REFILL_ROUNDS} "
                f"attempts; dropped samples by reason: {stats.reasons}"
            )
        kept = sorted(kept[:want], key=lambda g: g[0].index)
        for x in (x for g in kept for x in g):
            trim_trailing_pad(x)
        validate_rollout_batch(kept, n_samples_per_prompt=settings.n_samples, rollout_batch_size=want)
        if not evaluation and settings.train.drop_zero_variance:
            remove_zero_variance(kept)
        if evaluation:
            flat = [x for g in kept for x in g]
            return {
                "swebench": {
                    "rewards": [x.reward for x in flat],
                    "truncated": [x.status == Status.TRUNCATED for x in flat],
                    "samples": flat,
                }
            }
        return kept
    finally:
        await engine.stop()
