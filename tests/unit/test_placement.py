"""GPU placement: which GPUs serve and which train, resolved from the settings and refused when they overlap outside
colocated mode, with a stand-in ``nvidia-smi`` on PATH for the GPUs this machine does not have."""

from __future__ import annotations

import pytest

from qwen_swe.config.settings import Settings
from qwen_swe.errors import ConfigError
from qwen_swe.plan.placement import Gpu, devices_env, nvidia_gpus, parse_gpus, resolve, server_is_local
from qwen_swe.run import trainer_command
from tests.gpu_stand_in import nvidia_smi_path

EIGHT = tuple(Gpu(i, 81920) for i in range(8))
LOCAL, REMOTE = "http://127.0.0.1:8000/v1", "http://10.9.8.7:8000/v1"


def test_gpu_lists_parse_and_bad_ones_name_the_setting():
    assert parse_gpus("TRAIN_GPUS", "0-3,6") == (0, 1, 2, 3, 6)
    assert parse_gpus("TRAIN_GPUS", None) == ()
    with pytest.raises(ConfigError, match=r"TRAIN_GPUS='0-x' is not a list of GPU numbers"):
        parse_gpus("TRAIN_GPUS", "0-x")
    with pytest.raises(ConfigError, match=r"INFERENCE_GPUS='1,1' names no GPU or one twice"):
        parse_gpus("INFERENCE_GPUS", "1,1")


def test_nvidia_smi_lists_the_gpus_narrowed_by_cuda_visible_devices(tmp_path):
    env = {"PATH": nvidia_smi_path(tmp_path / "bin", output="0, 81920\\n1, 81920\\n2, 40960\\n")}
    assert nvidia_gpus(env) == (Gpu(0, 81920), Gpu(1, 81920), Gpu(2, 40960))
    assert nvidia_gpus({**env, "CUDA_VISIBLE_DEVICES": "2,0"}) == (Gpu(0, 81920), Gpu(2, 40960))
    assert nvidia_gpus({"PATH": str(tmp_path / "empty")}) == ()  # no nvidia-smi: a CPU machine
    broken = {"PATH": nvidia_smi_path(tmp_path / "broken", output="GPU 0: no numbers\\n")}
    with pytest.raises(ConfigError, match="nvidia-smi is on PATH but does not list the GPUs"):
        nvidia_gpus(broken)


def test_on_cpu_nothing_is_placed_and_gpu_settings_are_refused():
    assert resolve(Settings.build(), ()).train == ()
    with pytest.raises(ConfigError, match=r"TRAIN_GPUS=0-1 names GPUs, but nvidia-smi lists none here"):
        resolve(Settings.build(train_gpus="0-1"), ())


def test_a_local_server_takes_the_first_tp_gpus_and_the_trainer_the_rest():
    place = resolve(Settings.build(vllm_url=LOCAL, tp=2), EIGHT)
    assert (place.serve, place.train) == ((0, 1), (2, 3, 4, 5, 6, 7))
    assert devices_env(place.train) == {"CUDA_VISIBLE_DEVICES": "2,3,4,5,6,7", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert devices_env(()) == {}
    place = resolve(Settings.build(vllm_url=LOCAL, tp=4, inference_gpus="4-7"), EIGHT)
    assert (place.serve, place.train) == ((4, 5, 6, 7), (0, 1, 2, 3))
    assert resolve(Settings.build(), EIGHT).serve == (0,)  # the embedded server is local too


def test_a_server_on_another_node_leaves_every_gpu_to_the_trainer():
    assert not server_is_local(Settings.build(vllm_url=REMOTE))
    assert resolve(Settings.build(vllm_url=REMOTE), EIGHT).train == tuple(range(8))
    with pytest.raises(
        ConfigError,
        match=r"INFERENCE_GPUS=0-1 places a server on this node, but VLLM_URL=.* is "
        r"another host's: unset INFERENCE_GPUS",
    ):
        resolve(Settings.build(vllm_url=REMOTE, inference_gpus="0-1"), EIGHT)


def test_overlapping_placements_are_refused_with_the_fix():
    settings = Settings.build(vllm_url=LOCAL, tp=4, inference_gpus="0-3", train_gpus="2-7")
    with pytest.raises(
        ConfigError,
        match=r"share GPU 2-3: outside COLOCATE each needs its own\. Give them disjoint "
        r"sets \(e\.g\. INFERENCE_GPUS=0-3 TRAIN_GPUS=4-7\), or serve on another",
    ):
        resolve(settings, EIGHT)
    with pytest.raises(ConfigError, match=r"takes all of this node's GPUs \(0-7\) and leaves none for the trainer"):
        resolve(Settings.build(vllm_url=LOCAL, tp=8), EIGHT)
    with pytest.raises(ConfigError, match=r"TP=8 needs 8 GPUs but INFERENCE_GPUS=0-1 gives 2: set TP=2"):
        resolve(Settings.build(vllm_url=LOCAL, tp=8, inference_gpus="0-1"), EIGHT)
    with pytest.raises(
        ConfigError,
        match=r"TRAIN_GPUS names GPU 8-9, which this node does not have: its GPUs are "
        r"0-7",
    ):
        resolve(Settings.build(vllm_url=REMOTE, train_gpus="6-9"), EIGHT)
    with pytest.raises(ConfigError, match=r"TRAIN_PROCS=8 but the trainer has 7 GPUs \(1-7\)"):
        resolve(Settings.build(vllm_url=LOCAL, train_procs=8), EIGHT)


def test_colocated_mode_shares_the_servers_gpus_with_the_trainer():
    place = resolve(Settings.build(vllm_url=LOCAL, tp=8, colocate=True), EIGHT)
    assert (place.serve, place.train) == (tuple(range(8)), tuple(range(8)))
    place = resolve(Settings.build(colocate=True), EIGHT)  # the embedded server (TP 1) beside rank 0
    assert (place.serve, place.train) == ((0,), tuple(range(8)))
    place = resolve(Settings.build(vllm_url=LOCAL, tp=2, inference_gpus="2-3", train_gpus="0-3", colocate=True), EIGHT)
    assert (place.serve, place.train) == ((2, 3), (0, 1, 2, 3))
    assert resolve(Settings.build(colocate=True), ()).train == ()  # CPU: the turns run, nothing to place


def test_colocated_mode_refuses_what_cannot_take_turns():
    with pytest.raises(
        ConfigError,
        match=r"server's GPU 4-5 \(INFERENCE_GPUS=4-5\) is not the trainer's \(TRAIN_GPUS="
        r"0-3\).*e\.g\. INFERENCE_GPUS=0-1",
    ):
        resolve(Settings.build(vllm_url=LOCAL, tp=2, inference_gpus="4-5", train_gpus="0-3", colocate=True), EIGHT)
    with pytest.raises(
        ConfigError,
        match=r"COLOCATE=true shares this node's GPUs .* VLLM_URL=http://10\.9\.8\.7:8000/v1 "
        r"is another host's: unset COLOCATE",
    ):
        resolve(Settings.build(vllm_url=REMOTE, colocate=True), EIGHT)
    with pytest.raises(ConfigError, match=r"no rollout can run while a step trains, but MAX_STALENESS=1"):
        resolve(Settings.build(colocate=True, max_staleness=1), EIGHT)
    with pytest.raises(ConfigError, match=r"no server to take turns with"):
        resolve(Settings.build(colocate=True, load_rollout_data="/r"), ())
    with pytest.raises(ConfigError, match=r"TRAIN_PROCS=4 but the trainer has 8 GPUs"):
        resolve(Settings.build(colocate=True, train_procs=4), EIGHT)
    with pytest.raises(ConfigError, match=r"TRAIN_GPUS=0-1 names GPUs, but nvidia-smi lists none here"):
        resolve(Settings.build(colocate=True, train_gpus="0-1"), ())


def test_the_trainer_starts_one_rank_per_placed_gpu(tmp_path):
    cmd = trainer_command(Settings.build(vllm_url=LOCAL), tmp_path / "settings.json", (2, 3, 4))
    assert "--nproc-per-node=3" in cmd
    assert "--nproc-per-node=5" in trainer_command(Settings.build(train_procs=5), tmp_path / "settings.json")


def test_torchrun_keeps_its_folder_in_the_run_not_in_tmp(tmp_path):
    cmd = trainer_command(Settings.build(output_dir=str(tmp_path / "run")), tmp_path / "settings.json")
    assert f"--log-dir={tmp_path / 'run' / 'logs' / 'torchrun'}" in cmd
