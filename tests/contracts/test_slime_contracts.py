"""Our plugins against the real slime v0.2.2 (a checkout outside the repository, on SLIME_PATH).

Only slime's light modules are imported (``slime.utils.types``, ``slime.utils.mask_utils``,
``slime.rollout.data_source``, and ``slime.utils.arguments`` with sglang's argument surface stubbed). They need
ray, httpx and transformers < 5, so these tests run in a separate interpreter (see the README's slime section):

    SLIME_PATH=/path/to/slime-v0.2.2 /path/to/slime-venv/bin/python -m pytest tests/contracts -q
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

from qwen_swe.config.settings import Settings
from qwen_swe.errors import DropReason

pytestmark = pytest.mark.slime

OURS = {"sample": "qwen_swe.data.sample", "data_source": "qwen_swe.data.source",
        "trajectory": "qwen_swe.traffic.trajectory", "rollout": "qwen_swe.rollout.engine",
        "slime_rollout": "qwen_swe.backends.slime.rollout", "slime_backend": "qwen_swe.backends.slime.launcher"}
TOOLS = [{"type": "function", "function": {
    "name": "run_shell_command", "description": "Run a shell command in the repository",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]


def _call(cmd: str, n: int) -> dict:
    return {"id": f"call_{n}", "type": "function", "function": {"name": "run_shell_command",
                                                                 "arguments": {"command": cmd}}}


@pytest.fixture(scope="module")
def slime():
    """slime v0.2.2 importable, and our modules re-imported so they pick slime's types up (restored after)."""
    import importlib.metadata

    if int(importlib.metadata.version("transformers").split(".")[0]) >= 5 or not all(
            importlib.util.find_spec(m) for m in ("ray", "httpx")):
        pytest.skip("slime v0.2.2 needs transformers<5, ray and httpx in this interpreter: run these tests with "
                    "the contract venv (README, slime section)")
    root = Path(os.environ["SLIME_PATH"]).expanduser().resolve()
    if not (root / "slime" / "backends" / "fsdp_utils").is_dir():
        pytest.fail(f"SLIME_PATH={root} is not slime v0.2.2 (no slime/backends/fsdp_utils)")
    # appended, not prepended: slime's own regular ``examples`` package must not hide ours
    sys.path.append(str(root))
    saved = {name: sys.modules.pop(name) for name in OURS.values() if name in sys.modules}
    try:
        ns = types.SimpleNamespace(root=root, types=importlib.import_module("slime.utils.types"),
                                   mask_utils=importlib.import_module("slime.utils.mask_utils"),
                                   slime_data_source=importlib.import_module("slime.rollout.data_source"))
        for attr, name in OURS.items():
            setattr(ns, attr, importlib.import_module(name))
        yield ns
    finally:
        for name in OURS.values():
            sys.modules.pop(name, None)
        sys.modules.update(saved)
        sys.path.remove(str(root))


@pytest.fixture(scope="module")
def qwen3_tokenizer():
    from transformers import AutoTokenizer

    from tests.tiny_model import qwen_tokenizer_dir

    return AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))


def test_checkout_is_the_last_slime_release_with_fsdp(slime):
    assert slime.slime_backend.check_slime_checkout(slime.root) == "0.2.2"


def _stub_sglang_argument_surface(monkeypatch) -> None:
    """slime.utils.arguments imports sglang's and sglang-router's CLI classes; give it their argument surface
    only (the four sglang settings its validator reads), nothing that runs."""
    class ServerArgs:
        @staticmethod
        def add_cli_args(parser):
            parser.add_argument("--data-parallel-size", type=int, default=1)
            parser.add_argument("--pipeline-parallel-size", type=int, default=1)
            parser.add_argument("--expert-parallel-size", type=int, default=1)
            parser.add_argument("--enable-dp-attention", action="store_true")

    class RouterArgs:
        @staticmethod
        def add_cli_args(parser, **_):
            return parser

    modules = {"sglang": {}, "sglang.srt": {}, "sglang.srt.server_args": {"ServerArgs": ServerArgs},
               "sglang_router": {}, "sglang_router.launch_router": {"RouterArgs": RouterArgs},
               "wandb": {}}
    missing = {top for top in ("sglang", "sglang_router", "wandb") if importlib.util.find_spec(top) is None}
    for name, attrs in modules.items():
        if name.split(".")[0] in missing:
            monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(__name__=name, **attrs))


def test_launcher_command_line_is_accepted_by_slime_v022s_parser(slime, tmp_path, monkeypatch, shared_data):
    """The exact argv the launcher execs goes through v0.2.2's own parse_args (FSDP branch) and validation."""
    if importlib.util.find_spec("sglang") is None or importlib.util.find_spec("wandb") is None:
        _stub_sglang_argument_surface(monkeypatch)
    instances = tmp_path / "ids.txt"
    instances.write_text("psf__requests-1142\n")
    s = Settings.build(backend="slime", slime_dir=slime.root, vllm_url="http://127.0.0.1:8000/v1",
                 model=str(tmp_path / "model"), dataset=str(shared_data / "verified_50.jsonl"),
                 instance_list=instances, output_dir=tmp_path / "run", num_rollouts=3)
    plan = slime.slime_backend.build_plan(s, python="python", env_report={"problems": [], "cuda_devices": 8},
                                          check_server_routes=False)
    for path, text in plan.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    monkeypatch.setattr(sys, "argv", plan.argv[1:])
    # the FSDP branch imports slime.backends.fsdp_utils.arguments; the package __init__ would import the CUDA
    # actor, so the package is entered without it (arguments.py itself is the real file)
    importlib.import_module("slime.backends")
    fsdp_pkg = types.ModuleType("slime.backends.fsdp_utils")
    fsdp_pkg.__path__ = [str(slime.root / "slime" / "backends" / "fsdp_utils")]
    monkeypatch.setitem(sys.modules, "slime.backends.fsdp_utils", fsdp_pkg)
    arguments = importlib.import_module("slime.utils.arguments")
    args = arguments.parse_args()

    assert (args.train_backend, args.debug_train_only, args.advantage_estimator) == ("fsdp", True, "grpo")
    assert (args.n_samples_per_prompt, args.rollout_batch_size, args.global_batch_size) == (2, 4, 8)
    assert (args.num_rollout, args.save_interval, args.save) == (3, 1, str(tmp_path / "run"))
    assert args.rollout_num_gpus is None and not args.colocate, "no slime-managed rollout engine"
    assert args.data_source_path == "qwen_swe.data.source.SWEBenchDataSource"
    assert args.rollout_function_path == args.eval_function_path == "examples.qwen_swe.rollout.generate_rollout"
    assert args.rollout_global_dataset and args.rollout_shuffle, "slime must call data_source.save/load"
    assert args.grpo_std_normalization is False and args.start_rollout_id == 0
    # --custom-config-path carried our settings onto args, which travel with every Ray actor
    assert args.instance_list == str(instances)
    again = slime.slime_backend.settings_from_slime_args(args)
    assert again.inference.vllm_url == s.inference.vllm_url and again.instance_list == instances and again.n_samples == 2

    source = slime.data_source.SWEBenchDataSource(args)
    assert [r["instance_id"] for r in source.dataset] == ["psf__requests-1142"]


def test_data_source_is_a_slime_datasource_emitting_slime_samples(slime, shared_data, tmp_path):
    SlimeSample, DataSource = slime.types.Sample, slime.slime_data_source.DataSource  # noqa: N806
    assert issubclass(slime.data_source.SWEBenchDataSource, DataSource)
    assert slime.sample.Sample is SlimeSample and slime.sample.Status is SlimeSample.Status
    args = argparse.Namespace(prompt_data=str(shared_data / "verified_50.jsonl"), n_samples_per_prompt=3,
                              rollout_shuffle=True, rollout_seed=7, save=str(tmp_path), load=None)
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


def _session(tokenizer, sample_index: int, final_token: str = "<|im_end|>") -> list:
    """Recorded turns of one agent session: prompts rendered by the chat template, sampled ids and logprobs as a
    server returns them (the model's choices are scripted; everything else is the real code path)."""
    from qwen_swe.traffic.trajectory import Turn

    history = [{"role": "system", "content": "You are a coding agent."},
               {"role": "user", "content": f"Fix the failing test ({sample_index})."}]
    outputs = [("<think>\nLook first.\n</think>\n\n<tool_call>\n{\"name\": \"run_shell_command\", \"arguments\": "
                "{\"command\": \"cat utils.py\"}}\n</tool_call>", _call("cat utils.py", 1)),
               ("<think>\nDone.\n</think>\n\nFixed" + ("!" if final_token != "<|im_end|>" else "."), None)]
    turns = []
    for n, (text, call) in enumerate(outputs):
        prompt = tokenizer.apply_chat_template(history, tools=TOOLS, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        sampled = tokenizer(text, add_special_tokens=False)["input_ids"]
        if n == 0 or final_token == "<|im_end|>":
            sampled = sampled + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
        message = {"role": "assistant", "content": text.split("</think>\n\n")[-1] if call is None else "",
                   "reasoning_content": text.split("\n</think>")[0].removeprefix("<think>\n")}
        if call:
            message["tool_calls"] = [call]
        turns.append(Turn(index=n, session_id=f"s{sample_index}", request_messages=list(history), tools=TOOLS,
                          prompt_ids=prompt_ids, sampled_ids=sampled, logprobs=[-0.5] * len(sampled),
                          message=message, finish_reason="stop" if final_token == "<|im_end|>" else "length",
                          weight_version=1))
        history = history + [message] + ([{"role": "tool", "tool_call_id": "call_1", "content": "def f(): ..."}]
                                         if call else [])
    return turns


def test_rollout_samples_meet_slime_v022_invariants(slime, shared_data, qwen3_tokenizer):
    args = argparse.Namespace(prompt_data=str(shared_data / "verified_50.jsonl"), n_samples_per_prompt=2,
                              rollout_shuffle=False, rollout_seed=1, save=None, load=None)
    groups = slime.data_source.SWEBenchDataSource(args).get_samples(2)
    Status = slime.types.Sample.Status  # noqa: N806
    for g in groups:
        for x in g:
            traj = slime.trajectory.build_sample(_session(qwen3_tokenizer, x.index), max_response_len=4096,
                                                 mask_truncated=False, tokenizer=qwen3_tokenizer)
            slime.trajectory.to_sample(traj, x)
            x.reward, x.status = (1.0 if x.index % 2 else -1.0), Status.COMPLETED
    slime.slime_backend.validate_rollout_batch(groups, n_samples_per_prompt=2, rollout_batch_size=2)
    for x in (x for g in groups for x in g):
        assert len(x.loss_mask) == x.response_length == len(x.rollout_log_probs)
        assert x.tokens[-1] == qwen3_tokenizer.convert_tokens_to_ids("<|im_end|>")
        trained = [t for t, m in zip(x.tokens[-x.response_length:], x.loss_mask) if m]
        assert qwen3_tokenizer.decode(trained).count("<tool_call>") == 1, "the sampled tool call is trained"
        assert "def f(): ..." not in qwen3_tokenizer.decode(trained), "tool output is never trained"
        assert all(lp == 0.0 for lp, m in zip(x.rollout_log_probs, x.loss_mask) if not m)
        assert all(lp == -0.5 for lp, m in zip(x.rollout_log_probs, x.loss_mask) if m)

    # aborted samples: status ABORTED and remove_sample, so slime v0.2.2 zeroes their loss mask
    dropped = slime.rollout.drop(groups[0][0], DropReason.SANDBOX, "test")
    assert dropped.status is Status.ABORTED and dropped.remove_sample is True and isinstance(dropped.reward, float)
    dropped.remove_sample = False
    problems = slime.slime_backend.batch_problems(groups, n_samples_per_prompt=2, rollout_batch_size=2)
    assert any("ABORTED without remove_sample" in p for p in problems)


def _unpack_sequences(slime):
    """v0.2.2's FSDP ``unpack_sequences``, loaded from its file (its package __init__ needs CUDA and sglang)."""
    path = slime.root / "slime" / "backends" / "fsdp_utils" / "data_packing.py"
    spec = importlib.util.spec_from_file_location("slime_v022_data_packing", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.unpack_sequences


def test_a_trailing_token_0_shifts_slimes_logprob_slices_and_trim_trailing_pad_prevents_it(slime,
                                                                                            qwen3_tokenizer):
    """slime's FSDP unpacking counts trailing id-0 tokens as padding; id 0 is '!' in Qwen's vocabulary."""
    import torch

    assert qwen3_tokenizer.convert_tokens_to_ids("!") == 0
    Sample = slime.types.Sample  # noqa: N806

    def sample_from(session):
        traj = slime.trajectory.build_sample(session, max_response_len=4096, mask_truncated=False)
        return slime.trajectory.to_sample(traj, Sample(reward=1.0, status=Sample.Status.TRUNCATED))

    def slices_ok(samples) -> bool:
        tokens = [t for x in samples for t in x.tokens]
        cu = [0]
        for x in samples:
            cu.append(cu[-1] + len(x.tokens))
        # log_probs[p] stands for the prediction of token p + 1: each sample must get its response positions
        packed = {"tokens": torch.tensor(tokens), "cu_seqlens": torch.tensor(cu),
                  "response_lengths": [x.response_length for x in samples],
                  "log_probs": torch.arange(len(tokens) - 1, dtype=torch.float32)}
        got = _unpack_sequences(slime)(packed)
        return all(g["log_probs"].tolist() == [float(p) for p in range(end - 1 - x.response_length, end - 1)]
                   for g, x, end in zip(got, samples, cu[1:]))

    good = sample_from(_session(qwen3_tokenizer, 1))
    bad = sample_from(_session(qwen3_tokenizer, 2, final_token="!"))
    assert bad.tokens[-1] == 0 and slices_ok([good, good]) and not slices_ok([good, bad])
    assert any("last token is id 0" in p for p in
               slime.slime_backend.batch_problems([[good, bad]], n_samples_per_prompt=2, rollout_batch_size=1))
    assert slime.slime_backend.trim_trailing_pad(bad) and bad.tokens[-1] != 0
    assert len(bad.loss_mask) == bad.response_length == len(bad.rollout_log_probs)
    assert slices_ok([good, bad])


CONVERSATIONS_SLIME_RENDERS_EXACTLY = {
    "one answer": [{"role": "system", "content": "You are a coding agent."},
                   {"role": "user", "content": "What does utils.f return?"},
                   {"role": "assistant", "content": "It returns 1.", "reasoning_content": "Read it."}],
    "tool loop with reasoning": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the bug in utils.py."},
        {"role": "assistant", "content": "", "reasoning_content": "Look first.",
         "tool_calls": [_call("cat utils.py", 1)]},
        {"role": "tool", "tool_call_id": "call_1", "content": "def f():\n    return 1"},
        {"role": "assistant", "content": "Patching.", "reasoning_content": "Edit it.",
         "tool_calls": [_call("sed -i s/1/2/ utils.py", 2)]},
        {"role": "tool", "tool_call_id": "call_2", "content": ""},
        {"role": "assistant", "content": "Fixed.", "reasoning_content": "Done."}],
    "two tool calls in one turn, one result": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "List and print."},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "Both at once.",
         "tool_calls": [_call("ls", 1), _call("pwd", 2)]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py\n/repo"},
        {"role": "assistant", "content": "Done.", "reasoning_content": "ok"}],
}


@pytest.mark.parametrize("name", sorted(CONVERSATIONS_SLIME_RENDERS_EXACTLY))
def test_masks_agree_with_slime_multiturn_loss_mask_generator(slime, qwen3_tokenizer, name):
    """Where v0.2.2's ``qwen3`` generator renders the real chat template, the ids are identical and so is the
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
    opener = {i for i, t in enumerate(ids) if t == think} | {i + 1 for i, t in enumerate(ids)
                                                              if t == think and ids[i + 1] == newline}
    differ = {i for i, (a, b) in enumerate(zip(mask, slime_mask)) if a != b}
    assert differ == opener and all(slime_mask[i] == 1 and mask[i] == 0 for i in differ)
    assert sum(1 for i in range(1, len(mask)) if mask[i] and not mask[i - 1]) == \
        sum(m["role"] == "assistant" for m in messages), "one trained span per assistant turn"
    im_end = qwen3_tokenizer.convert_tokens_to_ids("<|im_end|>")
    ends = [i for i, t in enumerate(ids) if t == im_end and mask[i]]
    assert len(ends) == sum(m["role"] == "assistant" for m in messages) and all(mask[i + 1] for i in ends)


def test_outside_that_domain_v022_misrenders_and_ours_follows_the_template(slime, qwen3_tokenizer):
    """v0.2.2's ``qwen3`` type fabricates empty think blocks in earlier turns and wraps each of several
    consecutive tool results in its own user turn; ``mask_from_messages`` renders what the model saw."""
    gen = slime.mask_utils.MultiTurnLossMaskGenerator(qwen3_tokenizer, tokenizer_type="qwen3")
    cases = [
        [{"role": "system", "content": "s"}, {"role": "user", "content": "go"},
         {"role": "assistant", "content": "", "tool_calls": [_call("ls", 1)]},
         {"role": "tool", "tool_call_id": "call_1", "content": "a.py"}, {"role": "assistant", "content": "ok"}],
        [{"role": "system", "content": "s"}, {"role": "user", "content": "go"},
         {"role": "assistant", "content": "", "reasoning_content": "r", "tool_calls": [_call("ls", 1),
                                                                                      _call("pwd", 2)]},
         {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
         {"role": "tool", "tool_call_id": "call_2", "content": "/repo"},
         {"role": "assistant", "content": "ok", "reasoning_content": "r2"}],
    ]
    for messages in cases:
        full = qwen3_tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False)
        slime_ids, _ = gen.get_loss_mask(messages, tools=TOOLS)
        ids, mask = slime.trajectory.mask_from_messages(qwen3_tokenizer, messages, TOOLS)
        assert qwen3_tokenizer.decode(slime_ids) != full
        assert qwen3_tokenizer.decode(ids) == full and len(mask) == len(ids)
