"""Our plugins against what only slime v0.2.2 has: the FSDP training backend our launcher drives.

- The launcher's exact command line goes through v0.2.2's own ``parse_args`` (its FSDP branch) and validation, with
  sglang's argument surface stubbed where sglang is absent (it is, in ``.venv-slime``: nothing of it runs).
- v0.2.2's FSDP ``unpack_sequences`` counts trailing token-id 0 as padding; ``trim_trailing_pad`` prevents the shift.

Neither applies to v0.3.1, which has no FSDP backend (the launcher gives it the Megatron plan, which
``slime_v031_contracts.py`` puts through v0.3.1's own parser). Runs in
``.venv-slime`` with SLIME_PATH at v0.2.2 (``test_run_in_slime_venv.py`` does):

    SLIME_PATH=../shared/vendor/slime-v0.2.2 .venv-slime/bin/python -m pytest tests/contracts/slime_v022_contracts.py
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from qwen_swe.config.settings import Settings
from tests.contracts.recorded import session
from tests.offline_wandb import offline_wandb

pytestmark = pytest.mark.slime


@pytest.fixture(scope="module", autouse=True)
def _v022_only(slime_v022):
    """SLIME_PATH must be v0.2.2 here: another release fails the module, it does not skip it."""


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

    modules = {
        "sglang": {},
        "sglang.srt": {},
        "sglang.srt.server_args": {"ServerArgs": ServerArgs},
        "sglang_router": {},
        "sglang_router.launch_router": {"RouterArgs": RouterArgs},
        "wandb": {},
    }
    missing = {top for top in ("sglang", "sglang_router", "wandb") if importlib.util.find_spec(top) is None}
    for name, attrs in modules.items():
        if name.split(".")[0] in missing:
            monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(__name__=name, **attrs))


def _parse_launcher_argv(slime, tmp_path, monkeypatch, shared_data, **settings):
    """(our settings, slime's args, the plan): the exact argv the launcher execs, through v0.2.2's own parse_args."""
    if importlib.util.find_spec("sglang") is None or importlib.util.find_spec("wandb") is None:
        _stub_sglang_argument_surface(monkeypatch)
    instances = tmp_path / "ids.txt"
    instances.write_text("psf__requests-1142\n")
    s = Settings.build(
        backend="slime",
        slime_dir=slime.root,
        vllm_url="http://127.0.0.1:8000/v1",
        model=str(tmp_path / "model"),
        dataset=str(shared_data / "verified_50.jsonl"),
        instance_list=instances,
        output_dir=tmp_path / "run",
        num_rollouts=3,
        **settings,
    )
    plan = slime.slime_backend.build_plan(
        s,
        python="python",
        env_report={"problems": [], "cuda_devices": 8},
        check_server_routes=False,
        environ={"WANDB_MODE": "offline"},
    )
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
    return s, importlib.import_module("slime.utils.arguments").parse_args(), plan


def test_launcher_command_line_is_accepted_by_slime_v022s_parser(slime, tmp_path, monkeypatch, shared_data):
    """The exact argv the launcher execs goes through v0.2.2's own parse_args (FSDP branch) and validation."""
    _, args, _ = _parse_launcher_argv(slime, tmp_path, monkeypatch, shared_data)
    assert (args.train_backend, args.debug_train_only, args.advantage_estimator) == ("fsdp", True, "grpo")
    assert (args.n_samples_per_prompt, args.rollout_batch_size, args.global_batch_size) == (2, 4, 8)
    assert (args.num_rollout, args.save_interval, args.save) == (3, 1, str(tmp_path / "run"))
    assert args.rollout_num_gpus is None and not args.colocate, "no slime-managed rollout engine"
    assert args.data_source_path == "examples.qwen_swe.data_source.SWEBenchDataSource"
    assert slime.load_function(args.data_source_path) is slime.data_source.SWEBenchDataSource
    assert args.rollout_function_path == args.eval_function_path == "examples.qwen_swe.rollout.generate_rollout"
    assert slime.load_function(args.rollout_function_path) is slime.slime_rollout.generate_rollout
    assert args.rollout_global_dataset and args.rollout_shuffle, "slime must call data_source.save/load"
    assert args.grpo_std_normalization is False and args.start_rollout_id == 0
    # --custom-config-path carried our settings onto args, which travel with every Ray actor
    assert args.instance_list == str(tmp_path / "ids.txt") and isinstance(args.qwen_swe_settings, dict)
    source = slime.data_source.SWEBenchDataSource(args)
    assert [r["instance_id"] for r in source.dataset] == ["psf__requests-1142"]


def test_our_settings_come_back_from_slimes_custom_config_loader(slime, tmp_path, monkeypatch, shared_data):
    """What generate_rollout does first inside slime: our settings, read back from the args slime built (slime reads
    the file with yaml.safe_load; written as JSON, YAML 1.1 read lr 1e-06 back as a string)."""
    s, args, _ = _parse_launcher_argv(slime, tmp_path, monkeypatch, shared_data)
    again = slime.slime_backend.settings_from_slime_args(args)
    assert (
        again.to_dict()
        == s.replace(n_samples=args.n_samples_per_prompt, rollout_batch_size=args.rollout_batch_size).to_dict()
    )


def test_report_to_drives_slimes_own_trackers_into_the_run_folder(slime, tmp_path, monkeypatch, shared_data):
    """REPORT_TO=tensorboard,wandb: with the args parse_args built and the plan's environment, v0.2.2's own
    init_tracking and log write a step's scalars under OUTPUT_DIR/tb and OUTPUT_DIR/wandb (wandb offline)."""
    if importlib.util.find_spec("wandb") is None or importlib.util.find_spec("tensorboard") is None:
        pytest.fail("slime's requirements (wandb, tensorboard) are missing: bash scripts/setup/35_slime.sh")
    _, args, plan = _parse_launcher_argv(slime, tmp_path, monkeypatch, shared_data, report_to="tensorboard,wandb")
    run = tmp_path / "run"
    monkeypatch.setenv("TENSORBOARD_DIR", plan.env["TENSORBOARD_DIR"])
    offline_wandb(monkeypatch, tmp_path)  # WANDB_MODE too, which slime sets from --wandb-mode: restored afterwards
    import wandb
    from slime.utils import logging_utils
    from slime.utils.misc import SingletonMeta
    from slime.utils.tensorboard_utils import _TensorboardAdapter

    monkeypatch.setattr(SingletonMeta, "_instances", {})  # slime's one writer per process: this test's own
    logging_utils.init_tracking(args)
    try:
        assert (wandb.run.name, wandb.run.project) == ("run", "qwen-swe")
        assert Path(wandb.run.dir).is_relative_to(run / "wandb")
        logging_utils.log(args, {"train/step": 1, "train/loss": 0.5}, step_key="train/step")
        _TensorboardAdapter(args).finish()
    finally:
        wandb.finish()  # v0.2.2 has no finish_tracking; v0.3.x's calls the same
        wandb.teardown()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(1, 0.5)]
    assert list((run / "wandb" / "wandb").glob("offline-run-*/run-*.wandb"))


def _unpack_sequences(slime):
    """v0.2.2's FSDP ``unpack_sequences``, loaded from its file (its package __init__ needs CUDA and sglang)."""
    path = slime.root / "slime" / "backends" / "fsdp_utils" / "data_packing.py"
    spec = importlib.util.spec_from_file_location("slime_v022_data_packing", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.unpack_sequences


def test_a_trailing_token_0_shifts_slimes_logprob_slices_and_trim_trailing_pad_prevents_it(slime, qwen3_tokenizer):
    """slime's FSDP unpacking counts trailing id-0 tokens as padding; id 0 is '!' in Qwen's vocabulary."""
    import torch

    assert qwen3_tokenizer.convert_tokens_to_ids("!") == 0
    Sample = slime.types.Sample  # noqa: N806

    def sample_from(turns):
        traj = slime.trajectory.build_sample(turns, max_response_len=4096, mask_truncated=False)
        return slime.trajectory.to_sample(traj, Sample(reward=1.0, status=Sample.Status.TRUNCATED))

    def slices_ok(samples) -> bool:
        tokens = [t for x in samples for t in x.tokens]
        cu = [0]
        for x in samples:
            cu.append(cu[-1] + len(x.tokens))
        # log_probs[p] stands for the prediction of token p + 1: each sample must get its response positions
        packed = {
            "tokens": torch.tensor(tokens),
            "cu_seqlens": torch.tensor(cu),
            "response_lengths": [x.response_length for x in samples],
            "log_probs": torch.arange(len(tokens) - 1, dtype=torch.float32),
        }
        got = _unpack_sequences(slime)(packed)
        return all(
            g["log_probs"].tolist() == [float(p) for p in range(end - 1 - x.response_length, end - 1)]
            for g, x, end in zip(got, samples, cu[1:])
        )

    good = sample_from(session(qwen3_tokenizer, 1))
    bad = sample_from(session(qwen3_tokenizer, 2, final_token="!"))
    assert bad.tokens[-1] == 0 and slices_ok([good, good]) and not slices_ok([good, bad])
    assert any(
        "last token is id 0" in p
        for p in slime.slime_backend.batch_problems([[good, bad]], n_samples_per_prompt=2, rollout_batch_size=1)
    )
    assert slime.slime_backend.trim_trailing_pad(bad) and bad.tokens[-1] != 0
    assert len(bad.loss_mask) == bad.response_length == len(bad.rollout_log_probs)
    assert slices_ok([good, bad])
