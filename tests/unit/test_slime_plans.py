"""Both slime launch plans against the vendored, unmodified slime trees (``../shared/vendor`` beside the repository;
CI copies ``shared/``; a missing tree fails these tests): the v0.2.2 checkout gets the FSDP plan and v0.3.1 the
Megatron one; every flag of each plan is one that release defines (or, for Megatron's own flags, one slime v0.3.1
passes in its shipped scripts or reads from ``args``); the Megatron model arguments equal the ones slime ships in
``scripts/models`` for the same shapes; the settings slime cannot honour are refused by name.

slime's train.py never runs here (it needs CUDA); slime v0.3.1's own parser and HF-config validator read the
Megatron plan in ``tests/contracts/slime_v031_contracts.py``.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from qwen_swe.backends.slime import launcher as sb
from qwen_swe.backends.slime import megatron
from qwen_swe.backends.slime.batch import remove_zero_variance
from qwen_swe.backends.slime.weights import SlimeWeightSync
from qwen_swe.config.settings import Settings, given_settings
from qwen_swe.data.sample import Sample, Status
from qwen_swe.errors import SETUP_EXIT_CODE, ConfigError, WeightSyncError
from qwen_swe.paths import embedded_model_dir
from qwen_swe.plan.placement import Gpu
from tests.conftest import SLIME_VENDOR
from tests.unit.test_slime_backend import closed_port_url, flag_values, seed_env  # noqa: F401 - the fixture

V022, V031 = SLIME_VENDOR / "slime-v0.2.2", SLIME_VENDOR / "slime-v0.3.1"
SEED_MODEL = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
OK = {"problems": [], "cuda_devices": 8}
EIGHT = tuple(Gpu(i, 81920) for i in range(8))  # an 8-GPU node as nvidia-smi lists it

# Hugging Face config.json values of the models slime v0.3.1 ships scripts/models files for
QWEN3_30B_A3B = {**megatron.model_config(SEED_MODEL), "intermediate_size": 6144, "rope_theta": 1000000}
QWEN3_0_6B = {
    "model_type": "qwen3",
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 28,
    "vocab_size": 151936,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
}
LLAMA3_2_3B = {
    "model_type": "llama",
    "hidden_size": 3072,
    "intermediate_size": 8192,
    "num_attention_heads": 24,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 28,
    "vocab_size": 128256,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "max_position_embeddings": 131072,
    "rope_scaling": {"rope_type": "llama3", "factor": 32.0},
}
QWEN2_5_0_5B = {
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "num_hidden_layers": 24,
    "vocab_size": 151936,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
}


def shipped_model_args(script: str, **env: str) -> list[str]:
    """MODEL_ARGS of one of slime v0.3.1's scripts/models files, as bash expands it."""
    done = subprocess.run(
        ["bash", "-c", 'source "$0" && printf "%s\\n" "${MODEL_ARGS[@]}"', str(V031 / "scripts" / "models" / script)],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.splitlines()


def normal(argv: list[str]) -> dict[str, object]:
    """flag -> value, numbers compared as numbers (the scripts write 1e-6 where we write 1e-06)."""

    def value(v):
        try:
            return float(v)
        except (TypeError, ValueError):
            return v

    return {k: value(v) for k, v in flag_values(argv).items()}


@pytest.mark.parametrize(
    "config,script",
    [
        (QWEN3_30B_A3B, "qwen3-30B-A3B.sh"),
        (QWEN3_0_6B, "qwen3-0.6B.sh"),
        (LLAMA3_2_3B, "llama3.2-3B-Instruct.sh"),
        (QWEN2_5_0_5B, "qwen2.5-0.5B.sh"),
    ],
)
def test_model_args_equal_the_ones_slime_ships_for_the_same_shapes(config, script):
    assert normal(megatron.model_args(config)) == normal(shipped_model_args(script))


def test_the_seed_model_and_the_embedded_model_get_their_own_shapes():
    seed = normal(megatron.model_args(megatron.model_config(SEED_MODEL)))  # the built-in config, no hub
    shipped = normal(shipped_model_args("qwen3-30B-A3B.sh", MODEL_ARGS_ROTARY_BASE="10000000"))
    differ = {k for k in seed.keys() | shipped.keys() if seed.get(k) != shipped.get(k)}
    assert differ == {"--ffn-hidden-size"} and seed["--ffn-hidden-size"] == 5472, "Coder: dense FFN 5472, unused"
    config = embedded_model_dir() / "config.json"
    assert config.is_file(), f"{config} is missing: run scripts/setup.sh (it builds the embedded model)"
    small = normal(megatron.model_args(megatron.model_config(str(embedded_model_dir()))))
    assert {
        k: small[k]
        for k in (
            "--num-layers",
            "--hidden-size",
            "--num-attention-heads",
            "--num-query-groups",
            "--kv-channels",
            "--rotary-base",
            "--vocab-size",
        )
    } == {
        "--num-layers": 30,
        "--hidden-size": 576,
        "--num-attention-heads": 9,
        "--num-query-groups": 3,
        "--kv-channels": 64,
        "--rotary-base": 100000,
        "--vocab-size": 49152,
    }
    assert "--untie-embeddings-and-output-weights" not in small, "SmolLM2 ties its embeddings"
    llama = set(flag_values(shipped_model_args("llama3.2-3B-Instruct.sh")))
    assert set(small) == llama - {"--use-rope-scaling", "--rotary-scaling-factor"}


def test_models_without_megatron_arguments_are_refused_by_name(tmp_path):
    with pytest.raises(sb.SlimeBackendError, match=r"MODEL=org/unknown: no config.json.*local Hugging Face folder"):
        megatron.model_config("org/unknown")
    (tmp_path / "config.json").write_text('{"model_type": "gemma3"}')
    with pytest.raises(sb.SlimeBackendError, match=r"'gemma3'.*llama, qwen2, qwen3, qwen3_moe"):
        megatron.model_args(megatron.model_config(str(tmp_path)))


def dry_run(capsys, monkeypatch, slime_dir: Path, **env: str) -> tuple[list[list[str]], str]:
    """(the commands ``--dry-run`` prints, each as words from ``cd`` on, everything it printed)."""
    for k, v in {"SLIME_DIR": str(slime_dir), **env}.items():
        monkeypatch.setenv(k, v)
    assert sb.main(["--dry-run"]) == 0
    printed = capsys.readouterr().out
    blocks = re.split(r"\n(?=cd )", printed[printed.index("cd ") :].split("\n# would refuse:")[0])
    return [shlex.split(re.sub(r"^#.*$", "", b, flags=re.M).replace("\\\n", " ")) for b in blocks], printed


def test_dry_run_prints_the_fsdp_plan_for_v022(seed_env, capsys, monkeypatch):  # noqa: F811 - the imported fixture
    (train,), printed = dry_run(capsys, monkeypatch, V022)
    assert train[0] == "cd" and Path(train[1]).resolve() == V022.resolve()  # ../shared may be a symlink
    assert train[train.index("train.py") - 1 :][1] == "train.py"
    flags = flag_values(train)
    assert flags["--train-backend"] == "fsdp" and "--tensor-model-parallel-size" not in flags
    assert "tools/convert_hf_to_torch_dist.py" not in printed


def test_dry_run_prints_the_megatron_plan_for_v031(seed_env, capsys, monkeypatch):  # noqa: F811 - the imported fixture
    (convert, train), printed = dry_run(capsys, monkeypatch, V031, SLIME_TP="4", SLIME_EP="8")
    out = seed_env["OUTPUT_DIR"]
    assert convert[0] == "cd" and Path(convert[1]).resolve() == V031.resolve()  # ../shared may be a symlink
    assert "tools/convert_hf_to_torch_dist.py" in convert
    assert (V031 / megatron.CONVERTER).is_file(), "slime's own converter, run from its checkout"
    assert (
        f"# convert MODEL to Megatron's torch_dist format with slime's own tool, once (skipped when {out}/"
        "ref_torch_dist/latest_checkpointed_iteration.txt exists):" in printed
    )
    conv = flag_values(convert)
    assert (conv["--hf-checkpoint"], conv["--save"]) == (SEED_MODEL, f"{out}/ref_torch_dist")
    assert "--nproc-per-node=8" in convert
    assert conv["--num-experts"] == "128" and conv["--rotary-base"] == "10000000"
    assert train[train.index("train.py") - 1 :][1] == "train.py"
    flags = flag_values(train)
    expected = {
        "--train-backend": "megatron",
        "--hf-checkpoint": SEED_MODEL,
        "--ref-load": f"{out}/ref_torch_dist",
        "--load": out,
        "--save": out,
        "--save-interval": "1",
        "--save-hf": f"{out}/hf_export/slime_{{rollout_id}}",
        "--tensor-model-parallel-size": "4",
        "--expert-model-parallel-size": "8",
        "--sequence-parallel": None,
        "--debug-train-only": None,
        "--num-layers": "48",
        "--num-experts": "128",
        "--lr-decay-style": "constant",
    }
    assert {k: flags.get(k, "<absent>") for k in expected} == expected
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in train
    assert "--colocate" not in flags and "--partial-rollout" not in flags and "--train-backend fsdp" not in printed
    assert f"# would refuse: MODEL={SEED_MODEL} is not a local folder" in printed, "--save-hf needs it local"


def defined_flags(*files: Path) -> dict[str, dict]:
    """Every option slime declares in these files (``add_argument``/``reset_arg`` literals, and FSDPArgs' fields
    as v0.2.2's ``parse_fsdp_cli`` turns them into flags): flag -> {"switch": takes no value, "choices": ...}."""
    found: dict[str, dict] = {}
    for path in files:
        with warnings.catch_warnings():  # v0.3.1's arguments.py has an invalid escape in a help string
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "add_argument",
                "reset_arg",
            ):
                names = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
                kw = {k.arg: k.value for k in node.keywords}
                action = ast.unparse(kw["action"]) if "action" in kw else ""
                choices = kw.get("choices")
                flag = {
                    "switch": action in ("'store_true'", "'store_false'", "argparse.BooleanOptionalAction"),
                    "choices": ast.literal_eval(choices) if isinstance(choices, (ast.List, ast.Tuple)) else None,
                }
                found.update(dict.fromkeys(names, flag))
            if isinstance(node, ast.ClassDef) and node.name == "FSDPArgs":
                for item in node.body:
                    if isinstance(item, ast.AnnAssign):
                        found["--" + item.target.id.replace("_", "-")] = {
                            "switch": ast.unparse(item.annotation) == "bool",
                            "choices": None,
                        }
    return found


def megatron_evidence() -> str:
    """Every shipped script and slime's Python sources of v0.3.1: a Megatron flag slime passes or reads."""
    files = [*(V031 / "scripts").rglob("*.sh"), *(V031 / "slime").rglob("*.py")]
    return "\n".join(p.read_text(errors="replace") for p in files)


def seed_model_folder(tmp_path: Path) -> str:
    """A local folder with the seed model's config.json (slime 0.3.x needs --hf-checkpoint local)."""
    folder = tmp_path / "Qwen3-Coder-30B-A3B-Instruct"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(megatron.BUILT_IN["qwen3-coder-30b-a3b"].read_text())
    return str(folder)


def full_plan(slime_dir: Path, tmp_path: Path, **kw) -> sb.LaunchPlan:
    every_option = dict(
        vllm_url=closed_port_url(),
        lr_warmup_steps=3,
        kl_loss_coef=0.01,
        advantage_mode="mean",
        activation_checkpointing=True,
        report_to="tensorboard,wandb",
        model=seed_model_folder(tmp_path),
    )
    environ = kw.pop("environ", {"WANDB_MODE": "offline", "WANDB_ENTITY": "team"})
    gpus = kw.pop("gpus", ())  # nvidia-smi's; none, as on this machine, unless the test places GPUs
    given = kw.pop("given", ())
    s = Settings.build(backend="slime", slime_dir=slime_dir, output_dir=tmp_path / "run", **{**every_option, **kw})
    return sb.build_plan(
        s, python="python", env_report=OK, check_server_routes=False, given=given, environ=environ, node_gpus=gpus
    )


@pytest.mark.parametrize("release", ["slime-v0.2.2", "slime-v0.3.1"])
def test_every_flag_of_each_plan_is_one_that_release_defines(release, tmp_path):
    root = SLIME_VENDOR / release
    plan = full_plan(root, tmp_path, slime_tp=2, slime_ep=4)
    assert not plan.problems, plan.problems
    defined = defined_flags(
        root / "slime" / "utils" / "arguments.py", *(root / "slime" / "backends" / "fsdp_utils").glob("arguments.py")
    )
    evidence = megatron_evidence() if plan.backend == "megatron" else ""
    flags = flag_values(plan.argv)
    for step in plan.steps:
        flags.update(flag_values(step.argv[step.argv.index(megatron.CONVERTER) :]))
    unknown = []
    for flag, value in flags.items():
        spec = defined.get(flag)
        if spec is None:
            known = re.search(rf"{re.escape(flag)}\b", evidence) or f"args.{flag[2:].replace('-', '_')}" in evidence
            unknown += [] if (plan.backend == "megatron" and known) else [flag]
            continue
        assert spec["switch"] == (value is None), f"{flag} {value!r} in {release}"
        assert spec["choices"] is None or value in spec["choices"], f"{flag} {value!r} not in {spec['choices']}"
    assert unknown == [], f"flags {release} neither defines nor passes to Megatron"
    assert defined["--train-backend"]["choices"] == (["megatron", "fsdp"] if plan.backend == "fsdp" else ["megatron"])


@pytest.mark.parametrize("release", ["slime-v0.2.2", "slime-v0.3.1"])
def test_colocate_and_partial_rollout_exist_but_are_slimes_own_rollout_features(release, tmp_path):
    defined = defined_flags(SLIME_VENDOR / release / "slime" / "utils" / "arguments.py")
    assert defined["--colocate"]["switch"] and defined["--partial-rollout"]["switch"]
    assert {"--colocate", "--partial-rollout"}.isdisjoint(full_plan(SLIME_VENDOR / release, tmp_path).argv)


@pytest.mark.parametrize("release", ["slime-v0.2.2", "slime-v0.3.1"])
def test_off_policy_runs_slimes_async_loop_and_deeper_is_refused(release, tmp_path):
    root = SLIME_VENDOR / release
    assert full_plan(root, tmp_path).argv[1] == "train.py"
    plan = full_plan(root, tmp_path, max_staleness=1)
    assert plan.argv[1] == "train_async.py" and (root / "train_async.py").is_file()
    with pytest.raises(sb.SlimeBackendError, match=r"MAX_STALENESS=2: .*exactly one rollout in flight"):
        full_plan(root, tmp_path, max_staleness=2)


@pytest.mark.parametrize(
    "setting,needle",
    [
        ({"lora_rank": 8}, "LORA_RANK=8"),
        ({"advantage_mode": "loo"}, "ADVANTAGE_MODE=loo"),
        ({"max_staleness": 3}, "MAX_STALENESS=3"),
        ({"save_interval": 2}, "SAVE_INTERVAL=2"),
        ({"eval_interval": 5}, "EVAL_INTERVAL=5"),
        ({"rollout_backend": "ray"}, "ROLLOUT_BACKEND=ray"),
        ({"train_mode": "sft", "kl_loss_coef": 0.0}, "TRAIN_MODE=sft"),
        ({"load_rollout_data": "/r"}, "LOAD_ROLLOUT_DATA"),
        ({"colocate": True}, "COLOCATE=1"),
        ({"train_procs": 4}, "TRAIN_PROCS=4"),
        ({"weight_loading": "meta"}, "WEIGHT_LOADING=meta"),
    ],
)
def test_settings_slime_cannot_honour_are_refused_by_name(setting, needle, tmp_path):
    for root in (V022, V031):
        with pytest.raises(sb.SlimeBackendError, match=rf"cannot honour these settings: {re.escape(needle)}"):
            full_plan(root, tmp_path, **setting)


def test_fp32_training_is_named_as_what_slime_does_not_do(tmp_path, capsys):
    # unset, the built-in trainer's fp32 default: slime's bf16 is a warning, so the default settings still launch
    assert any(
        w.startswith("MIXED_PRECISION is unset: slime trains in bf16") for w in full_plan(V031, tmp_path).warnings
    )
    assert not full_plan(V022, tmp_path, mixed_precision=True).warnings
    # asked for by the user: refused, by build_plan and by the launcher's own entry point
    s = Settings.build(
        backend="slime",
        slime_dir=V022,
        vllm_url=closed_port_url(),
        output_dir=tmp_path / "run",
        model=seed_model_folder(tmp_path),
    )
    with pytest.raises(sb.SlimeBackendError, match="cannot honour these settings: MIXED_PRECISION=0"):
        sb.build_plan(s, python="python", env_report=OK, check_server_routes=False, given={"mixed_precision"})
    assert sb.launch(s, dry_run=True, given={"mixed_precision"}) == SETUP_EXIT_CODE
    assert (
        "MIXED_PRECISION=0: slime trains in bf16 on both its backends, fp32 is not available there"
        in capsys.readouterr().err
    )


def test_trainer_restarts_asked_for_under_slime_is_refused(tmp_path):
    # slime's ranks are its Ray actors: no fault notes tell a native crash from a repeatable error, so nothing restarts
    def plan(env: dict[str, str]) -> sb.LaunchPlan:
        given = given_settings([], env)
        return full_plan(V022, tmp_path, mixed_precision=True, given=frozenset(given), **given)

    with pytest.raises(sb.SlimeBackendError, match=r"TRAINER_RESTARTS=2: slime's trainer ranks are its Ray actors"):
        plan({"TRAINER_RESTARTS": "2"})
    assert not plan({"TRAINER_RESTARTS": "0"}).problems  # asked for none: what slime does
    assert not plan({}).problems  # the built-in trainer's default, not asked for: the launch goes on


def test_report_to_becomes_slimes_own_trackers_writing_into_the_run_folder(tmp_path):
    run = tmp_path / "run"
    for root in (V022, V031):
        plan = full_plan(root, tmp_path, environ={"WANDB_MODE": "offline", "WANDB_PROJECT": "p", "WANDB_ENTITY": "t"})
        flags = flag_values(plan.argv)
        assert "--use-tensorboard" in plan.argv and plan.env["TENSORBOARD_DIR"] == str(run / "tb")
        assert (flags["--tb-project-name"], flags["--tb-experiment-name"]) == ("qwen-swe", "run")
        assert "--use-wandb" in plan.argv and "--disable-wandb-random-suffix" in plan.argv
        assert flags["--wandb-dir"] == str(run / "wandb") and flags["--wandb-group"] == "run"
        assert (flags["--wandb-project"], flags["--wandb-team"], flags["--wandb-mode"]) == ("p", "t", "offline")
        assert not plan.problems
    # the built-in sink's project when WANDB_PROJECT is unset; no mode nor team flag when theirs are unset
    flags = flag_values(full_plan(V022, tmp_path, environ={}).argv)
    assert flags["--wandb-project"] == "qwen-swe" and not {"--wandb-mode", "--wandb-team"} & set(flags)
    bad = full_plan(V022, tmp_path, environ={"WANDB_MODE": "dryrun"}).problems
    assert any(p.startswith("WANDB_MODE=dryrun: slime's --wandb-mode takes online, offline, disabled") for p in bad)
    # only what REPORT_TO names
    plan = full_plan(V022, tmp_path, report_to="wandb")
    assert "--use-tensorboard" not in plan.argv and "TENSORBOARD_DIR" not in plan.env and "--use-wandb" in plan.argv
    plan = full_plan(V031, tmp_path, report_to="")
    assert not {"--use-tensorboard", "--use-wandb"} & set(plan.argv) and "TENSORBOARD_DIR" not in plan.env


def test_the_megatron_layout_is_checked_against_the_gpus_and_the_model(tmp_path):
    assert not full_plan(V031, tmp_path, slime_tp=4, slime_ep=8, slime_gpus=8).problems
    bad = full_plan(V031, tmp_path, slime_tp=3, slime_ep=256, slime_gpus=8).problems
    assert any("SLIME_TP=3 must divide the 8 training GPUs" in p for p in bad)
    assert any("SLIME_EP=256 must divide the 8 training GPUs and the model's 128 experts" in p for p in bad)
    odd = full_plan(V031, tmp_path, slime_tp=1, slime_gpus=8, rollout_batch_size=3)
    assert any(
        "ROLLOUT_BATCH_SIZE*N_SAMPLES=6 is not a multiple of Megatron's data-parallel size 8" in p for p in odd.problems
    )
    dense = Settings.build(
        backend="slime",
        slime_dir=V031,
        vllm_url=closed_port_url(),
        slime_ep=2,
        model=str(embedded_model_dir()),
        output_dir=tmp_path / "d",
    )
    problems = sb.build_plan(dense, python="python", env_report=OK, check_server_routes=False).problems
    assert any("SLIME_EP=2 but MODEL is dense" in p for p in problems)


def test_train_gpus_place_slimes_actors(tmp_path):
    plan = full_plan(V031, tmp_path, train_gpus="2-5", slime_tp=2, slime_ep=4, gpus=EIGHT)
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "2,3,4,5" and not plan.problems
    assert flag_values(plan.argv)["--actor-num-gpus-per-node"] == "4"
    assert "--nproc-per-node=4" in plan.steps[0].argv
    clash = full_plan(V022, tmp_path, train_gpus="1,2", slime_gpus=4, gpus=EIGHT).problems
    assert any("SLIME_GPUS=4 but TRAIN_GPUS=1,2 places 2" in p for p in clash)
    with pytest.raises(ConfigError, match="TRAIN_GPUS=.x."):
        full_plan(V022, tmp_path, train_gpus="x")
    with pytest.raises(ConfigError, match="INFERENCE_GPUS=.x."):
        full_plan(V022, tmp_path, inference_gpus="x")


def test_slimes_actors_keep_off_the_gpus_of_a_server_on_this_node(tmp_path):
    def placed(**kw) -> tuple[str | None, str | None, list[str]]:
        plan = full_plan(V022, tmp_path, gpus=EIGHT, **kw)
        return plan.env.get("CUDA_VISIBLE_DEVICES"), flag_values(plan.argv)["--actor-num-gpus-per-node"], plan.problems

    # a loopback VLLM_URL: start_vllm.py's server holds INFERENCE_GPUS, else the first TP; the actors take the rest
    assert placed(inference_gpus="4-7", tp=4) == ("0,1,2,3", "4", [])
    assert placed(tp=4) == ("4,5,6,7", "4", [])
    assert placed(slime_gpus=4) == ("1,2,3,4", "4", [])  # TP=1: GPU 0 serves
    _, _, problems = placed(slime_gpus=8)
    assert any(p.startswith("SLIME_GPUS=8 but the server on this node holds GPU 0") for p in problems)
    _, _, problems = placed(train_gpus="0-3", inference_gpus="2,3")
    assert any("share GPU 2-3" in p for p in problems)
    # a server on another node leaves every GPU here to slime, as before
    assert placed(vllm_url="http://10.1.2.3:8000/v1") == (None, "8", [])
    # no GPU here: INFERENCE_GPUS names what is not there
    problems = full_plan(V022, tmp_path, inference_gpus="0").problems
    assert any(p.startswith("INFERENCE_GPUS=0 names GPUs, but nvidia-smi lists none here") for p in problems)


class Recorder:
    """The push side of a weight sync: which folder went to the server, as which version."""

    def __init__(self) -> None:
        self.pushed: list[tuple[Path, int]] = []

    def push(self, folder, version):
        self.pushed.append((Path(folder), version))


def test_megatron_hf_exports_are_served_as_they_are_and_staleness_is_bounded(tmp_path):
    pattern = str(tmp_path / "hf_export" / "slime_{rollout_id}")
    for r in (0, 1, 2):
        (tmp_path / "hf_export" / f"slime_{r}").mkdir(parents=True)
        (tmp_path / "hf_export" / f"slime_{r}" / "config.json").write_text("{}")  # slime copies it first
        if r < 2:  # slime_2 is still being written: no index yet
            (tmp_path / "hf_export" / f"slime_{r}" / "model.safetensors.index.json").write_text("{}")
    sync = Recorder()
    on_policy = SlimeWeightSync(tmp_path, SEED_MODEL, sync, hf_exports=pattern)
    assert on_policy.before_rollout(0) == 0 and on_policy.before_rollout(2) == 2
    assert sync.pushed == [(tmp_path / "hf_export" / "slime_1", 2)]
    with pytest.raises(WeightSyncError, match=r"rollout 3 .*slime_2 is missing \(the newest is .*slime_1\).*--save-hf"):
        on_policy.before_rollout(3)
    one_behind = SlimeWeightSync(tmp_path, SEED_MODEL, sync, hf_exports=pattern, max_staleness=1)
    assert one_behind.before_rollout(3) == 2, "train_async.py: the rollout overlapping step 2 uses step 1's weights"
    with pytest.raises(WeightSyncError, match="rollout 4 must run"):
        one_behind.before_rollout(4)


def test_megatron_checkpoints_and_exports_are_pruned_to_keep_checkpoints(tmp_path):
    """Megatron writes iter_{rollout_id:07d} (model and optimizer) and an HF copy every step: KEEP_CHECKPOINTS of the
    first that the tracker confirms stay, and the newest two HF copies."""
    pattern = str(tmp_path / "hf_export" / "slime_{rollout_id}")
    for r in range(5):
        (tmp_path / f"iter_{r:07d}").mkdir()
        (tmp_path / "hf_export" / f"slime_{r}").mkdir(parents=True)
        (tmp_path / "hf_export" / f"slime_{r}" / "model.safetensors.index.json").write_text("{}")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")  # iter_0000004 is still being written
    sync = SlimeWeightSync(tmp_path, SEED_MODEL, Recorder(), hf_exports=pattern, keep_checkpoints=2)
    assert sync.before_rollout(4) == 4
    assert sorted(p.name for p in tmp_path.glob("iter_*")) == ["iter_0000002", "iter_0000003", "iter_0000004"]
    assert sorted(p.name for p in (tmp_path / "hf_export").iterdir()) == ["slime_3", "slime_4"]


def test_zero_variance_groups_leave_the_loss_through_remove_sample():
    def group(*rewards):
        return [
            Sample(
                group_index=0,
                index=i,
                tokens=[1, 2],
                response_length=1,
                loss_mask=[1],
                reward=r,
                status=Status.COMPLETED,
            )
            for i, r in enumerate(rewards)
        ]

    flat, mixed = group(-1.0, -1.0), group(1.0, -1.0)
    assert remove_zero_variance([flat, mixed]) == 1
    assert [x.remove_sample for x in flat + mixed] == [True, True, False, False]


def test_the_megatron_environment_check_runs_in_slimes_interpreter_and_names_megatron_lm():
    report = sb.check_packages_in(str(Path(sys.executable).parent / "python3"), "megatron")  # a subprocess
    text = "\n".join(report["problems"])
    assert "Megatron-LM is missing" in text and "put Megatron-LM on PYTHONPATH" in text
    assert "slime's megatron backend needs CUDA" in text and "flash-attn" not in text
