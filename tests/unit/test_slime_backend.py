"""The slime launcher without slime: its command line for the seed's settings (the --dry-run output), the version
and package checks, the frozen-server refusal, the examples/qwen_swe link, and the batch-contract checker."""

from __future__ import annotations

import os
import shlex
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import yaml

from qwen_swe.backends.slime import launcher as sb
from qwen_swe.config.settings import ConfigError, Settings, all_fields
from qwen_swe.data.sample import Sample, Status
from qwen_swe.inference.server import free_port
from qwen_swe.paths import REPO_ROOT

SEED = {  # the seed README's settings (its defaults, plus its dataset and instance list)
    "VLLM_URL": "http://localhost:8000",
    "MODEL": "Qwen/Qwen3-Coder-30B-A3B-Instruct",
    "NUM_ROLLOUTS": "10",
    "ROLLOUT_BATCH_SIZE": "4",
    "N_SAMPLES": "2",
    "OUTPUT_DIR": "/tmp/qwen_swe_grpo",
    "LR": "1e-6",
    "DATASET": "princeton-nlp/SWE-bench_Verified",
    "BACKEND": "slime",
    "SLIME_GPUS": "8",
}


def fake_slime(root: Path, version: str = "0.2.2", fsdp: bool = True) -> Path:
    """A directory shaped like a slime checkout (setup.py version, train.py, Megatron's package, FSDP's or not)."""
    (root / "slime" / "backends" / "megatron_utils").mkdir(parents=True)
    (root / "examples").mkdir()
    (root / "examples" / "__init__.py").write_text("")
    (root / "train.py").write_text("")
    (root / "setup.py").write_text(f'setup(\n    name="slime",\n    version="{version}",\n)\n')
    if fsdp:
        (root / "slime" / "backends" / "fsdp_utils").mkdir()
    return root


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


@pytest.fixture
def seed_env(tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.upper() in {f.name.upper() for f in all_fields()}]:
        monkeypatch.delenv(key)
    ids = tmp_path / "train_201_django.txt"
    ids.write_text("django__django-11099\n")
    env = {**SEED, "SLIME_DIR": str(fake_slime(tmp_path / "slime")), "INSTANCE_LIST": str(ids)}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def flag_values(argv: list[str]) -> dict[str, str | None]:
    out, i = {}, 0
    while i < len(argv):
        if argv[i].startswith("--"):
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
            out[argv[i]] = value
            i += 2 if value is not None else 1
        else:
            i += 1
    return out


def test_the_run_gets_ours_then_slime_then_the_parents_pythonpath(seed_env):
    plan = sb.build_plan(
        sb.load_settings([], profile=False), env_report={"problems": [], "cuda_devices": 8}, check_server_routes=False
    )
    env = plan.child_env({"PYTHONPATH": "/parents", "HOME": "/home/x"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(REPO_ROOT), str(plan.cwd), "/parents"]
    assert env["HOME"] == "/home/x"
    assert plan.child_env({})["PYTHONPATH"] == plan.env["PYTHONPATH"]  # no parent's: the plan's, as printed


def test_dry_run_prints_slimes_train_command_for_the_seed_settings(seed_env, capsys):
    assert sb.main(["--dry-run"]) == 0
    printed = capsys.readouterr().out
    command = printed[printed.index("cd ") :].split("\n# would refuse:")[0]
    words = shlex.split(command.replace("\\\n", " "))
    assert words[:3] == ["cd", str(Path(seed_env["SLIME_DIR"]).resolve()), "&&"]
    env = dict(w.split("=", 1) for w in words[4:] if "=" in w and not w.startswith("-"))
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(REPO_ROOT)
    assert "VLLM_URL" not in env, "settings travel in one serialized form (the extra-args file), not the environment"
    plan = sb.build_plan(
        sb.load_settings([], profile=False), env_report={"problems": [], "cuda_devices": 8}, check_server_routes=False
    )
    (extra,) = [yaml.safe_load(text) for text in plan.files.values()]  # as slime reads it
    carried = sb.Settings.from_dict(extra["qwen_swe_settings"])
    assert carried.inference.vllm_url == "http://localhost:8000" and extra["instance_list"] == seed_env["INSTANCE_LIST"]
    argv = words[words.index("train.py") - 1 :]
    assert argv[0] == sys.executable
    flags = flag_values(argv)
    expected = {
        "--train-backend": "fsdp",
        "--advantage-estimator": "grpo",
        "--n-samples-per-prompt": "2",
        "--rollout-batch-size": "4",
        "--global-batch-size": "8",
        "--num-rollout": "10",
        "--lr": "1e-06",
        "--hf-checkpoint": "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "--save": "/tmp/qwen_swe_grpo",
        "--load": "/tmp/qwen_swe_grpo",
        "--save-interval": "1",
        "--prompt-data": "princeton-nlp/SWE-bench_Verified",
        "--data-source-path": "examples.qwen_swe.data_source.SWEBenchDataSource",
        "--rollout-function-path": "examples.qwen_swe.rollout.generate_rollout",
        "--actor-num-nodes": "1",
        "--actor-num-gpus-per-node": "8",
        "--debug-train-only": None,
        "--custom-config-path": "/tmp/qwen_swe_grpo/slime_extra_args.yaml",
    }
    assert {k: flags.get(k, "<absent>") for k in expected} == expected
    assert "--colocate" not in flags and "--rollout-num-gpus" not in flags, "slime must start no SGLang engine"
    assert "# writes /tmp/qwen_swe_grpo/slime_extra_args.yaml" in printed
    # this machine has no CUDA and .venv has transformers 5: the dry run says what a real launch would refuse
    assert "# would refuse: transformers" in printed and "pip install 'transformers<5'" in printed


def test_real_launch_refuses_with_what_to_install_and_never_execs(seed_env, capsys):
    assert sb.main([]) == 2
    err = capsys.readouterr().err
    assert "refusing to start" in err and "no CUDA GPU" in err and "transformers<5" in err
    assert not (Path(seed_env["SLIME_DIR"]) / "examples" / "qwen_swe").exists(), "nothing written on refusal"


def test_the_release_picks_the_backend_and_others_are_refused_naming_the_supported(tmp_path):
    assert sb.detect_release(fake_slime(tmp_path / "ok")) == sb.Release("0.2.2", "fsdp")
    assert sb.detect_release(fake_slime(tmp_path / "new", version="0.3.4", fsdp=False)).backend == "megatron"
    for name, version in (("gap", "0.2.5"), ("next", "0.4.0")):
        with pytest.raises(sb.SlimeBackendError, match=rf"slime {version}.*Supported: v0\.2\.2 .*v0\.3\.x"):
            sb.detect_release(fake_slime(tmp_path / name, version=version, fsdp=False))
    with pytest.raises(sb.SlimeBackendError, match=r"no FSDP backend.*checkout v0\.2\.2"):
        sb.detect_release(fake_slime(tmp_path / "gap2", version="0.2.3", fsdp=False))
    with pytest.raises(sb.SlimeBackendError, match="not a slime checkout"):
        sb.detect_release(tmp_path)
    plan = sb.build_plan(
        Settings.build(backend="slime", slime_dir=tmp_path / "gap", vllm_url=closed_port_url()),
        env_report={"problems": [], "cuda_devices": 8},
        check_server_routes=False,
    )
    assert any("slime 0.2.5" in p for p in plan.problems)


def test_package_check_names_transformers_5_and_missing_packages_in_this_interpreter():
    report = sb.check_packages("fsdp")
    text = "\n".join(report["problems"])
    assert report["python"] == sys.executable
    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5:
        assert f"transformers {transformers.__version__} is installed" in text and "'transformers<5'" in text
    for dist, module, _, fix in sb.PACKAGES["fsdp"]:
        present = __import__("importlib").util.find_spec(module) is not None
        assert (f"{dist} is missing" in text) == (not present), dist
        if not present:
            assert f"{dist} is missing (" in text and fix in text


def test_package_check_runs_in_the_interpreter_that_will_run_train_py(tmp_path):
    report = sb.check_packages_in(sys.executable)
    assert report["python"] == sys.executable
    broken = sb.check_packages_in(str(tmp_path / "no-python"))
    assert broken["problems"] and "SLIME_PYTHON" in broken["problems"][0]
    via_subprocess = sb.check_packages_in(str(Path(sys.executable).parent / "python3"))
    assert sorted(via_subprocess["problems"]) == sorted(report["problems"])


def test_a_server_that_cannot_take_new_weights_blocks_the_start_unless_allowed(tmp_path):
    base = dict(backend="slime", slime_dir=fake_slime(tmp_path / "s"), output_dir=tmp_path / "run")
    ok = {"problems": [], "cuda_devices": 8}
    no_url = sb.build_plan(Settings.build(**base), env_report=ok)
    assert any("needs VLLM_URL" in p for p in no_url.problems)
    down = sb.build_plan(Settings.build(**base, vllm_url=closed_port_url()), env_report=ok)
    assert any("cannot list the routes" in p and "ALLOW_FROZEN_SERVER=1" in p for p in down.problems)
    allowed = sb.build_plan(Settings.build(**base, vllm_url=closed_port_url(), allow_frozen_server=True), env_report=ok)
    assert not allowed.problems and any("frozen server" in w for w in allowed.warnings)


def test_batch_divisibility_lora_and_loo_are_refused(tmp_path):
    base = dict(backend="slime", slime_dir=fake_slime(tmp_path / "s"), vllm_url="http://127.0.0.1:1/v1")
    plan = sb.build_plan(
        Settings.build(**base, slime_gpus=3), env_report={"problems": [], "cuda_devices": 8}, check_server_routes=False
    )
    assert any("not a multiple of the 3 training GPUs" in p for p in plan.problems)
    with pytest.raises(sb.SlimeBackendError, match="no LoRA"):
        sb.train_args(Settings.build(**base, lora_rank=8), gpus=1, model="m")
    with pytest.raises(sb.SlimeBackendError, match="leave-one-out"):
        sb.train_args(Settings.build(**base, advantage_mode="loo"), gpus=1, model="m")
    std = flag_values(sb.train_args(Settings.build(**base, advantage_mode="std"), gpus=1, model="m"))
    assert "--disable-grpo-std-normalization" not in std
    with pytest.raises(ConfigError, match="SLIME_DIR"):
        Settings.build(backend="slime")


def test_kl_penalty_becomes_slimes_kl_loss_against_the_start_weights(tmp_path):
    base = dict(backend="slime", slime_dir=fake_slime(tmp_path / "s"), vllm_url="http://127.0.0.1:1/v1")
    assert "--use-kl-loss" not in sb.train_args(Settings.build(**base), gpus=1, model="/m")
    argv = sb.train_args(Settings.build(**base, kl_loss_coef=0.04, kl_loss_type="k2"), gpus=1, model="/m")
    values = flag_values(argv)
    assert "--use-kl-loss" in argv and values["--kl-loss-coef"] == "0.04" and values["--kl-loss-type"] == "k2"
    assert values["--ref-load"] == values["--hf-checkpoint"] == "/m"


def test_tis_cap_becomes_slimes_use_tis_and_is_refused_where_the_actor_has_none(tmp_path):
    base = dict(backend="slime", slime_dir=fake_slime(tmp_path / "s"), vllm_url="http://127.0.0.1:1/v1")
    assert "--use-tis" not in sb.train_args(Settings.build(**base), gpus=1, model="/m")
    argv = sb.train_args(Settings.build(**base, tis_cap=2.0), gpus=1, model="/m")
    assert (
        "--use-tis" in argv
        and flag_values(argv)["--tis-clip"] == "2.0"
        and flag_values(argv)["--tis-clip-low"] == "0.0"
    )
    plan = sb.build_plan(
        Settings.build(**base, tis_cap=2.0), env_report={"problems": [], "cuda_devices": 8}, check_server_routes=False
    )
    assert plan.backend == "fsdp" and any(p.startswith("TIS_CAP=2.0: slime v0.2.2's FSDP actor") for p in plan.problems)
    with pytest.raises(sb.SlimeBackendError, match="PARTIAL_ROLLOUTS=1: slime's weight sync drains"):
        sb.train_args(Settings.build(**base, max_staleness=1, partial_rollouts=True), gpus=1, model="m")


def test_the_package_is_linked_into_slimes_examples_and_a_foreign_copy_is_refused(tmp_path):
    root = fake_slime(tmp_path / "s")
    link = sb.ensure_link(root)
    assert link.is_symlink() and link.resolve() == sb.PACKAGE_DIR
    assert sb.ensure_link(root) == link and sb.link_problem(root) is None
    other = fake_slime(tmp_path / "seed")
    (other / "examples" / "qwen_swe").mkdir()
    assert "not this repository's package" in sb.link_problem(other)
    with pytest.raises(sb.SlimeBackendError, match="move it away"):
        sb.ensure_link(other)


def test_settings_travel_on_slimes_args(tmp_path):
    s = Settings.build(
        backend="slime", slime_dir=tmp_path, vllm_url="http://h:1/v1", output_dir=tmp_path / "run", max_turns=7
    )
    ((path, text),) = sb.extra_args_files(s).items()
    extra = yaml.safe_load(text)  # as slime v0.2.2 reads --custom-config-path
    args = Namespace(save=str(tmp_path / "run"), n_samples_per_prompt=4, rollout_batch_size=3, **extra)
    again = sb.settings_from_slime_args(args)
    assert (again.inference.vllm_url, again.agent.max_turns, again.n_samples, again.rollout_batch_size) == (
        "http://h:1/v1",
        7,
        4,
        3,
    )
    s.write(tmp_path / "run")
    from_file = sb.settings_from_slime_args(Namespace(save=str(tmp_path / "run")))
    assert from_file.agent.max_turns == 7 and from_file.inference.vllm_url == "http://h:1/v1"


def sample(index: int, group: int, tokens: list[int], response_length: int, **kw) -> Sample:
    x = Sample(
        group_index=group,
        index=index,
        tokens=tokens,
        response_length=response_length,
        loss_mask=[1] * response_length,
        rollout_log_probs=[-0.1] * response_length,
        reward=1.0,
        status=Status.COMPLETED,
    )
    for k, v in kw.items():
        setattr(x, k, v)
    return x


def test_batch_checker_finds_every_broken_invariant():
    good = [[sample(0, 0, [5, 6, 7], 2), sample(1, 0, [5, 6, 8], 2)]]
    sb.validate_rollout_batch(good, n_samples_per_prompt=2, rollout_batch_size=1)
    bad = [
        [
            sample(0, 0, [5, 6, 0], 2, loss_mask=[1]),
            sample(1, 1, [5], 2, reward=None, rollout_log_probs=None),
            sample(2, 0, [5, 9], 1, status=Status.ABORTED, remove_sample=False),
        ]
    ]
    problems = sb.batch_problems(bad, n_samples_per_prompt=2, rollout_batch_size=2)
    for needle in (
        "1 groups, slime needs exactly rollout_batch_size=2",
        "some samples only",
        "has 3 samples",
        "mixes group_index",
        "loss_mask length 1 != response_length 2",
        "last token is id 0",
        "reward None is not a number",
        "response_length 2 outside",
        "ABORTED without remove_sample",
    ):
        assert any(needle in p for p in problems), needle
    with pytest.raises(sb.SlimeBackendError, match="breaks slime's contract"):
        sb.validate_rollout_batch(bad, n_samples_per_prompt=2, rollout_batch_size=2)


def test_trim_trailing_pad_keeps_mask_and_logprobs_aligned():
    x = sample(0, 0, [9, 8, 7, 0, 0], 3, loss_mask=[1, 0, 1], rollout_log_probs=[-1.0, 0.0, -3.0])
    assert sb.trim_trailing_pad(x)
    assert (x.tokens, x.response_length, x.loss_mask, x.rollout_log_probs) == ([9, 8, 7], 1, [1], [-1.0])
    assert not sb.trim_trailing_pad(x)
