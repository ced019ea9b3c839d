"""Recorded agent sessions, and our ``generate_rollout`` run on them, for the slime contract tests.

The model's choices are scripted: every prompt is rendered by the real Qwen3 chat template, the sampled ids are the
tokenizer's ids of scripted text, as a server returns them. Everything after that is the real code path. The one
stage of a rollout that needs Docker, qwen-code and a model server (sandbox -> agent -> diff -> grade, which is
``RolloutEngine._run_sample``) is replaced by ``_scripted_stage``; it fills each sample from a recorded session
through the engine's own trajectory builder and ``_fill``, as the real stage does after grading.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from qwen_swe.config.settings import Settings
from qwen_swe.errors import SandboxError

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_shell_command",
            "description": "Run a shell command in the repository",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]
DROPPED_INDEX = 1  # the sample whose container fails to start (its whole group is dropped, never scored -1)


def tool_call(cmd: str, n: int) -> dict:
    return {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": "run_shell_command", "arguments": {"command": cmd}},
    }


def session(tokenizer: Any, sample_index: int, final_token: str = "<|im_end|>", weight_version: int = 1) -> list:
    """The recorded turns of one agent session: a tool call, its result, a final answer."""
    from qwen_swe.traffic.trajectory import Turn

    history = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Fix the failing test ({sample_index})."},
    ]
    outputs = [
        (
            '<think>\nLook first.\n</think>\n\n<tool_call>\n{"name": "run_shell_command", "arguments": '
            '{"command": "cat utils.py"}}\n</tool_call>',
            tool_call("cat utils.py", 1),
        ),
        ("<think>\nDone.\n</think>\n\nFixed" + ("!" if final_token != "<|im_end|>" else "."), None),
    ]
    turns = []
    for n, (text, call) in enumerate(outputs):
        prompt = tokenizer.apply_chat_template(history, tools=TOOLS, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        sampled = tokenizer(text, add_special_tokens=False)["input_ids"]
        if n == 0 or final_token == "<|im_end|>":
            sampled = sampled + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
        message = {
            "role": "assistant",
            "content": text.split("</think>\n\n")[-1] if call is None else "",
            "reasoning_content": text.split("\n</think>")[0].removeprefix("<think>\n"),
        }
        if call:
            message["tool_calls"] = [call]
        turns.append(
            Turn(
                index=n,
                session_id=f"s{sample_index}",
                request_messages=list(history),
                tools=TOOLS,
                prompt_ids=prompt_ids,
                sampled_ids=sampled,
                logprobs=[-0.5] * len(sampled),
                message=message,
                finish_reason="stop" if final_token == "<|im_end|>" else "length",
                weight_version=weight_version,
            )
        )
        history = (
            history
            + [message]
            + ([{"role": "tool", "tool_call_id": "call_1", "content": "def f(): ..."}] if call else [])
        )
    return turns


async def _scripted_stage(engine: Any, sample: Any) -> Any:
    from qwen_swe.reward.harness import Grade, GradeStatus

    sample.metadata["weight_version"] = engine.weight_version
    if sample.index == DROPPED_INDEX:
        raise SandboxError("scripted: the container did not start")
    turns = session(engine.tokenizer, sample.index, weight_version=engine.weight_version)
    resolved = sample.index % 2 == 0
    grade = Grade(
        reward=1.0 if resolved else -1.0,
        resolved=resolved,
        status=GradeStatus.GRADED,
        reason=None,
        f2p_passed=float(resolved),
        p2p_passed=1.0,
    )
    return engine._fill(sample, engine._build_trajectory(turns), grade, turns, grade_seconds=0.0)


def rollout_args(slime_dir: Path, tokenizer_dir: Path, dataset: Path, folder: Path) -> argparse.Namespace:
    """slime's ``args`` as our launcher leaves them: slime's sizes, and our settings carried on them."""
    model, run_dir = folder / "Qwen3-tokenizer", folder / "run"  # the name tells the proxy the tool-call format
    if not model.exists():
        model.symlink_to(tokenizer_dir, target_is_directory=True)
    # nothing listens on the server's URL: rollout 0 serves the base weights, so the weight sync asks nothing of it
    settings = Settings.build(
        backend="slime",
        slime_dir=slime_dir,
        vllm_url="http://127.0.0.1:9/v1",
        model=str(model),
        dataset=str(dataset),
        output_dir=run_dir,
        n_samples=2,
    )
    return argparse.Namespace(
        qwen_swe_settings=settings.to_dict(),
        n_samples_per_prompt=2,
        rollout_batch_size=2,
        prompt_data=str(dataset),
        rollout_shuffle=False,
        rollout_seed=1,
        save=str(run_dir),
        load=None,
        hf_checkpoint=None,
    )


def run_generate_rollout(slime: Any, args: argparse.Namespace, evaluation: bool) -> tuple[Any, Any]:
    """(slime's ``call_rollout_fn`` output of our ``generate_rollout``, the data source it drew from), loaded by
    the path our launcher gives slime, with the Docker stage scripted."""
    source = slime.load_function(slime.slime_backend.DATA_SOURCE_PATH)(args)
    rollout_fn = slime.load_function(slime.slime_backend.ROLLOUT_FUNCTION_PATH)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(slime.rollout.RolloutEngine, "_run_sample", _scripted_stage)
        output = slime.base_types.call_rollout_fn(rollout_fn, args, 0, source, evaluation=evaluation)
    return output, source
