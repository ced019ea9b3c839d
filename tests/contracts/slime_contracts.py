"""Our plugins against the real slime, every vendored release: its ``Sample``, ``DataSource``,
``call_rollout_fn`` and ``MultiTurnLossMaskGenerator``.

Only slime's light modules are imported (``slime.utils.types``, ``slime.utils.mask_utils``,
``slime.rollout.data_source``, ``slime.rollout.base_types``, ``slime.utils.misc``). They need transformers < 5, ray
and httpx, so this file runs in ``.venv-slime`` (scripts/setup/35_slime.sh), with SLIME_PATH naming the release;
``test_run_in_slime_venv.py`` runs it so for v0.2.2 and v0.3.1:

    SLIME_PATH=../shared/vendor/slime-v0.3.1 .venv-slime/bin/python -m pytest tests/contracts/slime_contracts.py -q

The name has no ``test_`` prefix, so the main suite (``.venv``, transformers 5) does not collect it.
"""

from __future__ import annotations

import argparse

import pytest

from qwen_swe.errors import DropReason
from tests.contracts.recorded import DROPPED_INDEX, TOOLS, rollout_args, run_generate_rollout, session, tool_call

pytestmark = pytest.mark.slime


def test_the_launcher_reads_each_release_and_picks_its_training_backend(slime):
    release = slime.slime_backend.detect_release(slime.root)
    assert (release.version, release.backend) == {"0.2.2": ("0.2.2", "fsdp"), "0.3.1": ("0.3.1", "megatron")}[
        slime.release
    ]
    assert release.tested


def test_data_source_is_a_slime_datasource_emitting_slime_samples(slime, shared_data, tmp_path):
    SlimeSample, DataSource = slime.types.Sample, slime.slime_data_source.DataSource  # noqa: N806
    assert issubclass(slime.data_source.SWEBenchDataSource, DataSource)
    assert slime.sample.Sample is SlimeSample and slime.sample.Status is SlimeSample.Status
    args = argparse.Namespace(
        prompt_data=str(shared_data / "verified_50.jsonl"),
        n_samples_per_prompt=3,
        rollout_shuffle=True,
        rollout_seed=7,
        save=str(tmp_path),
        load=None,
    )
    source = slime.data_source.SWEBenchDataSource(args)
    assert source.load(-1) is False, "a fresh run: slime calls load(start_rollout_id - 1) = load(-1)"
    groups = source.get_samples(4)
    assert len(groups) == 4 and all(len(g) == 3 for g in groups)
    for g in groups:
        assert all(type(x) is SlimeSample and x.status == SlimeSample.Status.PENDING for x in g)
        assert len({x.group_index for x in g}) == 1 and len({x.metadata["instance_id"] for x in g}) == 1
    indices = [x.index for g in groups for x in g]
    assert indices == sorted(set(indices)), "sample indices unique and increasing, groups contiguous"
    source.add_samples([groups[0]])
    with pytest.raises(ValueError):
        source.add_samples([groups[1][:2]])


def test_rollout_samples_meet_slimes_batch_invariants(slime, shared_data, qwen3_tokenizer):
    args = argparse.Namespace(
        prompt_data=str(shared_data / "verified_50.jsonl"),
        n_samples_per_prompt=2,
        rollout_shuffle=False,
        rollout_seed=1,
        save=None,
        load=None,
    )
    groups = slime.data_source.SWEBenchDataSource(args).get_samples(2)
    Status = slime.types.Sample.Status  # noqa: N806
    for g in groups:
        for x in g:
            traj = slime.trajectory.build_sample(
                session(qwen3_tokenizer, x.index),
                max_response_len=4096,
                mask_truncated=False,
                tokenizer=qwen3_tokenizer,
            )
            slime.trajectory.to_sample(traj, x)
            x.reward, x.status = (1.0 if x.index % 2 else -1.0), Status.COMPLETED
    slime.slime_backend.validate_rollout_batch(groups, n_samples_per_prompt=2, rollout_batch_size=2)
    for x in (x for g in groups for x in g):
        assert len(x.loss_mask) == x.response_length == len(x.rollout_log_probs)
        assert x.tokens[-1] == qwen3_tokenizer.convert_tokens_to_ids("<|im_end|>")
        trained = [t for t, m in zip(x.tokens[-x.response_length :], x.loss_mask) if m]
        assert qwen3_tokenizer.decode(trained).count("<tool_call>") == 1, "the sampled tool call is trained"
        assert "def f(): ..." not in qwen3_tokenizer.decode(trained), "tool output is never trained"
        assert all(lp == 0.0 for lp, m in zip(x.rollout_log_probs, x.loss_mask) if not m)
        assert all(lp == -0.5 for lp, m in zip(x.rollout_log_probs, x.loss_mask) if m)

    # aborted samples: status ABORTED and remove_sample, so slime (both releases) zeroes their loss mask
    dropped = slime.rollout.drop(groups[0][0], DropReason.SANDBOX, "test")
    assert dropped.status is Status.ABORTED and dropped.remove_sample is True and isinstance(dropped.reward, float)
    dropped.remove_sample = False
    problems = slime.slime_backend.batch_problems(groups, n_samples_per_prompt=2, rollout_batch_size=2)
    assert any("ABORTED without remove_sample" in p for p in problems)


def test_generate_rollout_through_slimes_call_rollout_fn(slime, shared_data, tmp_path):
    """Our ``generate_rollout``, loaded by slime's ``load_function`` from the path the launcher passes, called by
    slime's ``call_rollout_fn``: a training rollout becomes ``RolloutFnTrainOutput`` with exactly
    ``rollout_batch_size`` complete groups (the group whose container failed is replaced, never scored), an
    evaluation ``RolloutFnEvalOutput`` keyed by dataset."""
    from tests.tiny_model import qwen_tokenizer_dir

    Sample = slime.types.Sample  # noqa: N806
    args = rollout_args(slime.root, qwen_tokenizer_dir(), shared_data / "verified_50.jsonl", tmp_path)
    train, source = run_generate_rollout(slime, args, evaluation=False)
    assert type(train) is slime.base_types.RolloutFnTrainOutput
    groups = train.samples
    assert len(groups) == args.rollout_batch_size and all(len(g) == args.n_samples_per_prompt for g in groups)
    assert DROPPED_INDEX not in {x.index for g in groups for x in g} and source.next_group_index == 3
    for x in (x for g in groups for x in g):
        assert type(x) is Sample and x.status is Sample.Status.COMPLETED and x.reward in (1.0, -1.0)
        assert len(x.loss_mask) == x.response_length == len(x.rollout_log_probs) > 0
        assert x.metadata["weight_version"] == 0 and x.weight_versions == ["0"]

    evaluation, _ = run_generate_rollout(slime, args, evaluation=True)
    assert type(evaluation) is slime.base_types.RolloutFnEvalOutput
    data = evaluation.data["swebench"]
    assert len(data["samples"]) == len(data["rewards"]) == len(data["truncated"]) == 4
    assert data["rewards"] == [x.reward for x in data["samples"]] and not any(data["truncated"])


CONVERSATIONS_SLIME_RENDERS_EXACTLY = {
    "one answer": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "What does utils.f return?"},
        {"role": "assistant", "content": "It returns 1.", "reasoning_content": "Read it."},
    ],
    "tool loop with reasoning": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the bug in utils.py."},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Look first.",
            "tool_calls": [tool_call("cat utils.py", 1)],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "def f():\n    return 1"},
        {
            "role": "assistant",
            "content": "Patching.",
            "reasoning_content": "Edit it.",
            "tool_calls": [tool_call("sed -i s/1/2/ utils.py", 2)],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": ""},
        {"role": "assistant", "content": "Fixed.", "reasoning_content": "Done."},
    ],
    "two tool calls in one turn, one result": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "List and print."},
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "Both at once.",
            "tool_calls": [tool_call("ls", 1), tool_call("pwd", 2)],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py\n/repo"},
        {"role": "assistant", "content": "Done.", "reasoning_content": "ok"},
    ],
}


@pytest.mark.parametrize("name", sorted(CONVERSATIONS_SLIME_RENDERS_EXACTLY))
def test_masks_agree_with_slime_multiturn_loss_mask_generator(slime, qwen3_tokenizer, name):
    """Where slime's ``qwen3`` generator renders the real chat template, the ids are identical and so is the
    mask, except the ``<think>`` + newline opening an assistant body, which slime trains and ours (like slime's
    later ``qwen3_5`` type) does not. Both train ``<|im_end|>`` and the newline after it; headers, system,
    user and tool tokens are 0 in both."""
    messages = CONVERSATIONS_SLIME_RENDERS_EXACTLY[name]
    gen = slime.mask_utils.MultiTurnLossMaskGenerator(qwen3_tokenizer, tokenizer_type="qwen3")
    slime_ids, slime_mask = gen.get_loss_mask(messages, tools=TOOLS)
    ids, mask = slime.trajectory.mask_from_messages(qwen3_tokenizer, messages, TOOLS)
    full = qwen3_tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False)
    assert qwen3_tokenizer.decode(slime_ids) == full, "precondition: slime renders this conversation exactly"
    assert ids == slime_ids and len(mask) == len(ids)
    think, newline = qwen3_tokenizer.convert_tokens_to_ids("<think>"), qwen3_tokenizer.encode("\n")[0]
    opener = {i for i, t in enumerate(ids) if t == think} | {
        i + 1 for i, t in enumerate(ids) if t == think and ids[i + 1] == newline
    }
    differ = {i for i, (a, b) in enumerate(zip(mask, slime_mask)) if a != b}
    assert differ == opener and all(slime_mask[i] == 1 and mask[i] == 0 for i in differ)
    assert sum(1 for i in range(1, len(mask)) if mask[i] and not mask[i - 1]) == sum(
        m["role"] == "assistant" for m in messages
    ), "one trained span per assistant turn"
    im_end = qwen3_tokenizer.convert_tokens_to_ids("<|im_end|>")
    ends = [i for i, t in enumerate(ids) if t == im_end and mask[i]]
    assert len(ends) == sum(m["role"] == "assistant" for m in messages) and all(mask[i + 1] for i in ends)


def test_outside_that_domain_slime_misrenders_and_ours_follows_the_template(slime, qwen3_tokenizer):
    """slime's ``qwen3`` type fabricates empty think blocks in earlier turns and wraps each of several
    consecutive tool results in its own user turn; ``mask_from_messages`` renders what the model saw."""
    gen = slime.mask_utils.MultiTurnLossMaskGenerator(qwen3_tokenizer, tokenizer_type="qwen3")
    cases = [
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [tool_call("ls", 1)]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
            {"role": "assistant", "content": "ok"},
        ],
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "r",
                "tool_calls": [tool_call("ls", 1), tool_call("pwd", 2)],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
            {"role": "tool", "tool_call_id": "call_2", "content": "/repo"},
            {"role": "assistant", "content": "ok", "reasoning_content": "r2"},
        ],
    ]
    for messages in cases:
        full = qwen3_tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False)
        slime_ids, _ = gen.get_loss_mask(messages, tools=TOOLS)
        ids, mask = slime.trajectory.mask_from_messages(qwen3_tokenizer, messages, TOOLS)
        assert qwen3_tokenizer.decode(slime_ids) != full
        assert qwen3_tokenizer.decode(ids) == full and len(mask) == len(ids)
