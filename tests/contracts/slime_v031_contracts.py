"""Our plugins against what only slime v0.3.1 has: its own plugin contract suite, and its ``qwen3_5`` mask type.

slime v0.3.1 ships ``tests/plugin_contracts/``: four files that check a user's plugin, named by path
(``--rollout-function-path``, ``--data-source-path``, ... kept as ``SLIME_CONTRACT_*`` variables by its
``_shared.run_contract_test_for_file``), by calling it with inputs of its own. ``test_run_in_slime_venv.py`` runs
those four files unmodified, from the vendored tree, on slime's own reference plugins (all 36 tests; none needs a
GPU). They cannot be pointed at our plugins as they stand: each call-through check hands the plugin inputs that
cannot carry a SWE-bench run. So this module imports those files' helpers and applies the same checks to ours,
with inputs ours can take. Check by check:

``test_plugin_rollout_contracts.py``
  - ``test_rollout_function_path_contract_supports_user_override``: its signature half
    (``assert_rollout_function_signature_matches_default``) is applied as it is to our ``generate_rollout``, loaded
    by slime's ``load_function`` from the path the launcher passes. Its call half
    (``assert_rollout_function_matches_default_contract``) cannot apply: it calls the function with ``args=None``
    and its ``ContractDataSource``, whose samples hold no SWE-bench instance; ours reads the run's settings from
    ``args`` (put there by the launcher), syncs the newest weights into a vLLM server before a training rollout,
    and runs every sample in a Docker container (qwen-code against that server, then the SWE-bench grader in a
    second container). Applied instead: that half's own output checks, ``assert_train_rollout_contract`` and
    ``assert_eval_rollout_contract``, to slime's ``call_rollout_fn`` over our ``generate_rollout`` with real
    ``args`` and our data source, the Docker/agent/grader stage scripted (``recorded.py``).
  - The other five tests check slime's loader, its default rollout and its legacy-output wrapper on its own
    references; they run unmodified. (Our function returns the legacy shapes; the wrapper's conversion of them is
    what the output checks here go through.)

``test_plugin_path_loading_contracts.py``
  - ``data_source`` case: ``check_data_source_path`` builds the class with its ``make_args()``, which has no
    ``prompt_data``; ours refuses to start without a dataset (a ``DataError`` naming ``--prompt-data``, by design).
    Applied with ``make_args(prompt_data=...)``: the same ``(self, args)`` signature check and the same
    ``cls(args).get_samples(1)`` call, plus that the refusal is that error.
  - ``eval_function`` case: its signature check is applied to our function (slime's ``--eval-function-path`` is the
    same ``generate_rollout``); its call (``args=None``, bare samples) cannot apply, for the reasons above; the
    evaluation output is checked as above.
  - ``dynamic_filter``, ``buffer_filter``, ``rollout_sample_filter``, ``rollout_all_samples_process`` and
    ``custom_rm``: we supply none of these plugins (our rollout function grades with the SWE-bench harness and drops
    infrastructure failures itself), so there is nothing of ours to point them at; they run unmodified.

``test_plugin_generate_contracts.py`` (``--custom-generate-function-path``): a per-sample hook inside slime's
SGLang rollout; ours replaces the whole rollout function, so there is no plugin of ours to check; runs unmodified.

``test_plugin_runtime_hook_contracts.py`` (rollout and eval logging, reward post-processing, sample conversion,
rollout-data post-processing): we supply none; runs unmodified.

And the launcher's Megatron plan (slime 0.3.x): its train.py argv through v0.3.1's own pre-parser, argument
provider and ``slime_validate_args``, and the Megatron flags it leaves through ``_hf_validate_args`` against the
model's config.json (sglang, wandb and Megatron-LM give only their import surface: none runs without a GPU).

Runs in ``.venv-slime`` with SLIME_PATH at v0.3.1 (``test_run_in_slime_venv.py`` does):

    SLIME_PATH=../shared/vendor/slime-v0.3.1 .venv-slime/bin/python -m pytest tests/contracts/slime_v031_contracts.py
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import sys
import types
from pathlib import Path

import pytest

from qwen_swe.errors import DataError
from tests.contracts.recorded import TOOLS, rollout_args, run_generate_rollout, tool_call
from tests.contracts.slime_contracts import CONVERSATIONS_SLIME_RENDERS_EXACTLY

pytestmark = pytest.mark.slime


@pytest.fixture(scope="module")
def contracts(slime_v031):
    """slime's plugin contract modules, imported as its suite imports them (sys.path restored after)."""
    # the real ray and transformers first: slime's install_stubs() puts stand-ins only where they are absent
    importlib.import_module("ray")
    importlib.import_module("transformers")
    saved = list(sys.path)
    sys.path.insert(0, str(slime_v031.root / "tests"))
    try:
        yield types.SimpleNamespace(
            rollout=importlib.import_module("plugin_contracts.test_plugin_rollout_contracts"),
            path_loading=importlib.import_module("plugin_contracts.test_plugin_path_loading_contracts"),
        )
    finally:
        sys.path[:] = saved


def test_rollout_and_eval_function_signatures_match_slimes_default(slime, contracts):
    fn = slime.load_function(slime.slime_backend.ROLLOUT_FUNCTION_PATH)
    assert fn is slime.slime_rollout.generate_rollout
    contracts.rollout.assert_rollout_function_signature_matches_default(fn)


def test_rollout_outputs_meet_slimes_train_and_eval_contracts(slime, contracts, shared_data, tmp_path):
    from tests.tiny_model import qwen_tokenizer_dir

    args = rollout_args(slime.root, qwen_tokenizer_dir(), shared_data / "verified_50.jsonl", tmp_path)
    train, _ = run_generate_rollout(slime, args, evaluation=False)
    contracts.rollout.assert_train_rollout_contract(train, n_samples_per_prompt=args.n_samples_per_prompt)
    evaluation, _ = run_generate_rollout(slime, args, evaluation=True)
    contracts.rollout.assert_eval_rollout_contract(evaluation)


def test_data_source_meets_slimes_path_loading_contract(slime, contracts, shared_data):
    cls = slime.load_function(slime.slime_backend.DATA_SOURCE_PATH)
    assert tuple(inspect.signature(cls.__init__).parameters)[:2] == ("self", "args")
    groups = cls(contracts.path_loading.make_args(prompt_data=str(shared_data / "verified_50.jsonl"))).get_samples(1)
    assert isinstance(groups, list) and len(groups) == 1 and len(groups[0]) == 2
    assert issubclass(cls, slime.slime_data_source.DataSource)
    with pytest.raises(DataError, match="prompt_data"):
        cls(contracts.path_loading.make_args())


@pytest.mark.parametrize("name", sorted(CONVERSATIONS_SLIME_RENDERS_EXACTLY))
def test_masks_equal_slimes_qwen3_5_type_where_it_renders_the_template(slime, qwen3_tokenizer, name):
    """v0.3.1's ``qwen3_5`` generator, on the Qwen3 template: the same ids and the same mask as ours, including
    the untrained ``<think>`` opener that v0.2.2's ``qwen3`` type trains (``slime_contracts.py``)."""
    messages = CONVERSATIONS_SLIME_RENDERS_EXACTLY[name]
    gen = slime.mask_utils.MultiTurnLossMaskGenerator(qwen3_tokenizer, tokenizer_type="qwen3_5")
    slime_ids, slime_mask = gen.get_loss_mask(messages, tools=TOOLS)
    assert qwen3_tokenizer.decode(slime_ids) == qwen3_tokenizer.apply_chat_template(
        messages, tools=TOOLS, tokenize=False
    )
    assert slime.trajectory.mask_from_messages(qwen3_tokenizer, messages, TOOLS) == (slime_ids, slime_mask)


def test_an_answer_without_reasoning_differs_from_qwen3_5_in_one_merged_token(slime, qwen3_tokenizer):
    """Before a final answer without reasoning the template writes an empty ``<think>\\n\\n</think>\\n\\n``, in
    which ``\\n\\n`` after ``<think>`` is one token: the opener's newline merged with the empty body. ``qwen3_5``
    trains that token, ours does not (it holds the opener's newline, which neither trains anywhere else). Both
    train ``</think>\\n\\n`` and the answer; nothing else differs."""
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [tool_call("ls", 1)]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
        {"role": "assistant", "content": "ok"},
    ]
    gen = slime.mask_utils.MultiTurnLossMaskGenerator(qwen3_tokenizer, tokenizer_type="qwen3_5")
    slime_ids, slime_mask = gen.get_loss_mask(messages, tools=TOOLS)
    ids, mask = slime.trajectory.mask_from_messages(qwen3_tokenizer, messages, TOOLS)
    assert ids == slime_ids
    differ = [i for i, (a, b) in enumerate(zip(mask, slime_mask)) if a != b]
    assert len(differ) == 1 and slime_mask[differ[0]] == 1 and mask[differ[0]] == 0
    assert qwen3_tokenizer.decode(ids[differ[0] - 1 : differ[0] + 2]) == "<think>\n\n</think>"


# ------------------------------------------------------------------------------------------------
# the launcher's Megatron plan through v0.3.1's own parser and HF-config validator
# ------------------------------------------------------------------------------------------------


def _stub_argument_surfaces(monkeypatch) -> None:
    """slime.utils.arguments imports sglang's, sglang-router's and wandb's modules, and the Megatron argument
    module imports Megatron-LM: none of them runs here (absent from ``.venv-slime``), so each gets its import
    surface only. Phase 1 (sglang's parser) and Megatron's own parser are never called."""

    class CliArgs:
        @staticmethod
        def add_cli_args(parser, **_):
            return parser

    modules = {
        "sglang": {},
        "sglang.srt": {},
        "sglang.srt.server_args": {"ServerArgs": CliArgs},
        "sglang_router": {},
        "sglang_router.launch_router": {"RouterArgs": CliArgs},
        "wandb": {},
        "megatron": {},
        "megatron.training": {},
        "megatron.training.arguments": {"parse_args": None, "validate_args": None},
        "megatron.training.tokenizer": {},
        "megatron.training.tokenizer.tokenizer": {"_vocab_size_with_padding": None},
    }
    missing = {name.split(".")[0] for name in modules if _absent(name.split(".")[0])}
    for name, attrs in modules.items():
        if name.split(".")[0] in missing:
            monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(__name__=name, **attrs))


def _absent(top: str) -> bool:
    try:
        return importlib.util.find_spec(top) is None
    except ValueError:  # a stand-in without a spec already in sys.modules (slime's own test stubs): replaced too
        return True


def _megatron_namespace(rest: list[str]) -> argparse.Namespace:
    """What Megatron's parser would make of the flags slime's leaves it: ``--foo-bar V`` -> foo_bar=V (numbers as
    numbers), a bare flag -> True; a model that ties its embeddings passes no --untie flag (Megatron's default)."""
    ns = argparse.Namespace(untie_embeddings_and_output_weights=False)
    i = 0
    while i < len(rest):
        name = rest[i][2:].replace("-", "_")
        if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            value = rest[i + 1]
            for kind in (int, float):
                try:
                    value = kind(value)
                    break
                except ValueError:
                    continue
            setattr(ns, name, value)
            i += 2
        else:
            setattr(ns, name, True)
            i += 1
    return ns


def _model_folder(tmp_path, config: dict) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_megatron_plan_goes_through_slime_v031s_own_parser_and_hf_validator(slime, tmp_path, monkeypatch, shared_data):
    """The exact train.py argv of the Megatron plan: slime's pre-parser takes the backend, slime's own argument
    provider takes every slime flag (values typed and checked by its parser) and leaves exactly the flags the
    launcher means for Megatron; ``slime_validate_args`` accepts the whole namespace; ``_hf_validate_args`` finds
    the Megatron flags equal to the model's config.json, for the seed's Qwen3-Coder-30B-A3B and the embedded
    SmolLM2, and catches a wrong one."""
    from transformers import AutoConfig

    from qwen_swe.backends.slime import megatron
    from qwen_swe.config.settings import Settings
    from qwen_swe.paths import embedded_model_dir

    _stub_argument_surfaces(monkeypatch)
    arguments = importlib.import_module("slime.utils.arguments")
    importlib.import_module("slime.backends")
    package = types.ModuleType("slime.backends.megatron_utils")  # entered without its __init__ (the CUDA actor)
    package.__path__ = [str(slime.root / "slime" / "backends" / "megatron_utils")]
    monkeypatch.setitem(sys.modules, "slime.backends.megatron_utils", package)
    hf_validate = importlib.import_module("slime.backends.megatron_utils.arguments")._hf_validate_args
    coder = json.loads(megatron.BUILT_IN["qwen3-coder-30b-a3b"].read_text())
    smol = json.loads((embedded_model_dir() / "config.json").read_text())
    for name, config, tp, ep in (("coder", coder, 4, 8), ("smollm2", smol, 1, 1)):
        s = Settings.build(
            backend="slime",
            slime_dir=slime.root,
            vllm_url="http://127.0.0.1:8000/v1",
            model=_model_folder(tmp_path / name, config),
            output_dir=tmp_path / "run",
            dataset=str(shared_data / "verified_50.jsonl"),
            slime_gpus=8,
            slime_tp=tp,
            slime_ep=ep,
            lr_warmup_steps=3,
            kl_loss_coef=0.01,
            tis_cap=2.0,
            activation_checkpointing=True,
        )
        plan = slime.slime_backend.build_plan(
            s, python="python", env_report={"problems": [], "cuda_devices": 8}, check_server_routes=False
        )
        assert plan.backend == "megatron" and not plan.problems, plan.problems
        monkeypatch.setattr(sys, "argv", plan.argv[1:])
        pre = arguments._pre_parse_mode()
        assert (pre.train_backend, pre.debug_train_only) == ("megatron", True)
        parser = arguments.get_slime_extra_args_provider()(argparse.ArgumentParser(allow_abbrev=False))
        args, rest = parser.parse_known_args(plan.argv[2:])
        assert (args.n_samples_per_prompt, args.global_batch_size, args.save_interval) == (2, 8, 1)
        assert args.save_hf == str(tmp_path / "run" / "hf_export" / "slime_{rollout_id}")
        assert args.ref_load == str(tmp_path / "run" / "ref_torch_dist") and args.use_kl_loss
        assert args.use_tis and (args.tis_clip, args.tis_clip_low) == (2.0, 0.0)
        assert args.rollout_function_path == "examples.qwen_swe.rollout.generate_rollout"
        parallel, _ = megatron.parallel_args(s, config, 8)
        meant = (
            megatron.model_args(config)
            + parallel
            + [
                "--train-backend",
                "--debug-train-only",
                "--lr-decay-style",
                "--lr-warmup-iters",
                "--lr-warmup-init",
                "--recompute-granularity",
                "--recompute-method",
                "--recompute-num-layers",
            ]
        )
        assert {a for a in rest if a.startswith("--")} == {a for a in meant if a.startswith("--")}, name
        megatron_args = _megatron_namespace(rest)
        # slime's own validation of the whole namespace, as parse_args runs it (the converted start exists)
        (tmp_path / "run" / "ref_torch_dist").mkdir(parents=True, exist_ok=True)
        (tmp_path / "run" / "ref_torch_dist" / "latest_checkpointed_iteration.txt").write_text("release")
        for path, text in plan.files.items():  # the --custom-config-path file the launcher writes
            Path(path).write_text(text)
        merged = argparse.Namespace(**{**vars(megatron_args), **vars(args), **vars(pre)})
        arguments.slime_validate_args(merged)
        assert merged.load == merged.ref_load and merged.start_rollout_id == 0, "a fresh run starts from MODEL"
        hf_config = AutoConfig.for_model(**config)
        hf_validate(megatron_args, hf_config)  # raises AssertionError naming every mismatch
        megatron_args.hidden_size += 64
        with pytest.raises(AssertionError, match="hidden_size"):
            hf_validate(megatron_args, hf_config)
