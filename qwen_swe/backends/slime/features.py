"""Our training settings against slime's features: each becomes one of slime's flags (``train_args.py``), is
honoured by our own rollout function inside slime, or is refused here by name; none is silently dropped.

Honoured by our rollout function (slime calls it for every rollout; it reads the whole settings from ``args``):
the reward (REWARD_MODE, SHAPED_*: the SWE-bench grader sets ``Sample.reward``, so slime's ``--rm-type`` and
``--custom-rm-path`` are not used), DROPPED_POLICY, MAX_RESPONSE_LEN, MASK_TRUNCATED and DROP_ZERO_VARIANCE (a
group of equal rewards gets ``remove_sample``, which slime documents as "whether a sample participates in loss
calculation").

Placement: TRAIN_GPUS becomes the CUDA_VISIBLE_DEVICES of slime's actors (and their count). COLOCATE=1 is refused:
slime's ``--colocate`` puts slime's own SGLang engines on the training GPUs, and ``--partial-rollout`` recycles
aborted samples in slime's own SGLang rollout; the launcher passes ``--debug-train-only``, so slime starts no
engine, and our rollout function, which replaces slime's, drives the external vLLM server.

Off-policy: MAX_STALENESS=1 runs slime's ``train_async.py`` (the next rollout runs while a step trains, one in
flight); MAX_STALENESS=0 runs ``train.py``. Precision: both slime backends compute in bf16 (v0.2.2's FSDP
mixed-precision policy, v0.3.x's ``args.bf16``), as MIXED_PRECISION=1 does. MIXED_PRECISION=0 given by the user is
refused; left unset (the built-in trainer's fp32 default) it gets a warning, so the default settings still launch.
"""

from __future__ import annotations

from collections.abc import Collection

from qwen_swe.config.settings import Settings

ASYNC_SCRIPT, SYNC_SCRIPT = "train_async.py", "train.py"


def script(s: Settings) -> str:
    """slime's entry point: the fully-async loop for one-step off-policy, else the synchronous one."""
    return ASYNC_SCRIPT if s.train.max_staleness == 1 else SYNC_SCRIPT


def refusals(s: Settings, given: Collection[str] = ()) -> list[str]:
    """Every setting of ``s`` slime cannot honour, each naming the setting and what to set instead; ``given``: the
    settings the user set (``given_settings``), for those refused only when asked for."""
    out = []
    if "mixed_precision" in given and not s.train.mixed_precision:
        out.append(
            "MIXED_PRECISION=0: slime trains in bf16 on both its backends, fp32 is not available there; unset "
            "MIXED_PRECISION (or set 1), or use BACKEND=fsdp for fp32"
        )
    if "trainer_restarts" in given and s.train.trainer_restarts:
        out.append(
            f"TRAINER_RESTARTS={s.train.trainer_restarts}: slime's trainer ranks are its Ray actors, where this "
            "run cannot tell a native crash from an error that starting again would repeat; a crash ends the run, "
            "and running the same command again resumes from slime's newest checkpoint; unset TRAINER_RESTARTS "
            "(or set 0), or use BACKEND=fsdp"
        )
    if s.train.lora_rank:
        out.append(
            f"LORA_RANK={s.train.lora_rank}: slime trains every parameter (no LoRA in v0.2.2's FSDP actor "
            "nor in v0.3.x's Megatron actor); set LORA_RANK=0 or use BACKEND=fsdp"
        )
    if s.train.advantage_mode == "loo":
        out.append(
            "ADVANTAGE_MODE=loo: slime's GRPO has no leave-one-out baseline; set ADVANTAGE_MODE=mean or std, "
            "or use BACKEND=fsdp"
        )
    if s.train.max_staleness > 1:
        out.append(
            f"MAX_STALENESS={s.train.max_staleness}: slime's fully-async loop (train_async.py) keeps exactly "
            "one rollout in flight; set MAX_STALENESS=1 (train_async.py) or 0 (train.py), or use "
            "BACKEND=fsdp"
        )
    if s.train.partial_rollouts:
        out.append(
            "PARTIAL_ROLLOUTS=1: slime's weight sync drains the server's requests before it reloads; set "
            "PARTIAL_ROLLOUTS=0 or use BACKEND=fsdp"
        )
    if s.train.train_mode != "grpo":
        out.append(
            f"TRAIN_MODE={s.train.train_mode}: the slime backend runs GRPO only; run the warm start with BACKEND=fsdp"
        )
    if s.train.load_rollout_data:
        out.append(
            "LOAD_ROLLOUT_DATA: slime's --load-debug-rollout-data reads slime's own dump format, not ours; "
            "unset it or use BACKEND=fsdp"
        )
    if s.train.save_interval != 1:
        out.append(
            f"SAVE_INTERVAL={s.train.save_interval}: under slime each step's checkpoint is how the new "
            "weights reach the vLLM server, so it must save every step; set SAVE_INTERVAL=1"
        )
    if s.eval_interval:
        out.append(
            f"EVAL_INTERVAL={s.eval_interval}: slime's --eval-interval is not wired to EVAL_DATASET here; "
            "set EVAL_INTERVAL=0 (evaluate with python -m qwen_swe.evaluate) or "
            "use BACKEND=fsdp"
        )
    if s.placement.colocate:
        out.append(
            "COLOCATE=1: slime's --colocate puts slime's own SGLang engines on the training GPUs, and under "
            "this backend no slime engine runs (our rollouts use the vLLM server at VLLM_URL); set COLOCATE=0 "
            "and place the server with INFERENCE_GPUS or on another node"
        )
    if s.train.train_procs:
        out.append(
            f"TRAIN_PROCS={s.train.train_procs}: slime starts one actor per GPU; set SLIME_GPUS or TRAIN_GPUS instead"
        )
    if s.train.weight_loading != "full":
        out.append(
            f"WEIGHT_LOADING={s.train.weight_loading}: slime loads the weights its own way (FSDP: the HF "
            "folder; Megatron: the converted torch_dist checkpoint); set WEIGHT_LOADING=full"
        )
    if s.rollout.rollout_backend != "local":
        out.append(
            f"ROLLOUT_BACKEND={s.rollout.rollout_backend}: inside slime our rollout function runs its "
            "samples in slime's rollout actor, one process; set ROLLOUT_BACKEND=local"
        )
    return out


def warnings(s: Settings, given: Collection[str] = ()) -> list[str]:
    """Settings slime runs differently from the built-in trainer without changing what is learned from."""
    if not s.train.mixed_precision and "mixed_precision" not in given:
        return [
            "MIXED_PRECISION is unset: slime trains in bf16 on both its backends (as MIXED_PRECISION=1 does), "
            "not in the built-in trainer's default fp32"
        ]
    return []
