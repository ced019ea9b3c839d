"""Which GPUs of this node serve and which train, resolved once from the settings and checked before anything
starts: a trainer and a vLLM server on the same GPU run each other out of memory minutes into a run.

Split mode (the default): a server started on this node (the embedded one, or ``start_vllm.py`` with a
loopback ``VLLM_URL``) takes INFERENCE_GPUS, by default the first TP; the trainer takes TRAIN_GPUS, by default
every other visible GPU. A server on another node leaves this node's GPUs to the trainer. GPU numbers are
nvidia-smi's; the trainer and the server see only theirs (``CUDA_VISIBLE_DEVICES``).

Colocated mode (COLOCATE=true): the server on this node and the trainer share GPUs, taking turns
(``train/colocate.py``): the trainer takes TRAIN_GPUS, by default every visible GPU, and the server's GPUs must be
among them.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import shutil
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlparse

from qwen_swe.config.settings import Settings
from qwen_swe.errors import ConfigError

NVIDIA_SMI_TIMEOUT = 20.0  # seconds; a wedged driver must not hang the start

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Gpu:
    index: int
    memory_mib: int


@dataclass(frozen=True)
class Placement:
    gpus: tuple[Gpu, ...]  # this node's visible GPUs
    train: tuple[int, ...]  # () = the trainer runs on CPU
    serve: tuple[int, ...]  # GPUs of a server on this node; () = none here

    @property
    def train_memory_gib(self) -> float:
        """Memory of the smallest training GPU, GiB (what one rank may use)."""
        return min(g.memory_mib for g in self.gpus if g.index in self.train) / 1024


def nvidia_gpus(env: Mapping[str, str] | None = None) -> tuple[Gpu, ...]:
    """The NVIDIA GPUs nvidia-smi lists, narrowed to a numeric CUDA_VISIBLE_DEVICES; () without nvidia-smi."""
    env = os.environ if env is None else env
    exe = shutil.which("nvidia-smi", path=env.get("PATH"))
    if exe is None:
        return ()
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT,
            check=True,
        ).stdout
        gpus = tuple(Gpu(int(i), int(float(m))) for i, m in (line.split(",") for line in out.splitlines() if line))
    except subprocess.CalledProcessError as exc:  # "No devices were found" exits 6: a driver and no GPU
        log.warning("nvidia-smi exited %s (%s): running without GPUs", exc.returncode, (exc.stdout or "").strip())
        return ()
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise ConfigError(
            f"nvidia-smi is on PATH but does not list the GPUs ({exc}); fix the driver, or take "
            "nvidia-smi off PATH to run on CPU"
        ) from None
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and all(p.strip().isdigit() for p in visible.split(",") if p.strip()):
        wanted = {int(p) for p in visible.split(",") if p.strip()}
        gpus = tuple(g for g in gpus if g.index in wanted)
    return gpus


def parse_gpus(name: str, text: str | None) -> tuple[int, ...]:
    """``"0-3,6"`` -> (0, 1, 2, 3, 6); the error names the setting."""
    if not text:
        return ()
    out: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            out += range(int(lo), int(hi or lo) + 1)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not a list of GPU numbers: write them like 0-3 or 0,1,2,3") from None
    if not out or len(set(out)) != len(out):
        raise ConfigError(f"{name}={text!r} names no GPU or one twice: write each once, like 0-3 or 0,1,2,3")
    return tuple(out)


def server_is_local(settings: Settings) -> bool:
    """The embedded server, or a VLLM_URL on this host (loopback or this machine's name)."""
    if settings.inference.starts_server:
        return True
    host = urlparse(settings.inference.vllm_url or "").hostname or ""
    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def serve_gpus(settings: Settings, gpus: tuple[Gpu, ...]) -> tuple[int, ...]:
    """The GPUs a server started on this node takes: INFERENCE_GPUS, else the first TP visible ones."""
    known = [g.index for g in gpus]
    given = parse_gpus("INFERENCE_GPUS", settings.placement.inference_gpus)
    _check_known("INFERENCE_GPUS", given, known)
    tp = settings.inference.tp
    if given and len(given) < tp:
        raise ConfigError(
            f"TP={tp} needs {tp} GPUs but INFERENCE_GPUS={settings.placement.inference_gpus} gives "
            f"{len(given)}: set TP={len(given)} or name {tp} GPUs"
        )
    if not given and tp > len(known):
        raise ConfigError(f"TP={tp} needs {tp} GPUs and this node has {len(known)}: lower TP")
    return given or tuple(known[:tp])


def resolve(settings: Settings, gpus: tuple[Gpu, ...]) -> Placement:
    """This node's placement for ``settings``, or a ConfigError naming the setting and the fix."""
    p = settings.placement
    if p.colocate:
        return _colocated(settings, gpus)
    if not gpus:
        return _on_cpu(settings)
    known = [g.index for g in gpus]
    local = server_is_local(settings)
    if p.inference_gpus and not local:
        raise ConfigError(
            f"INFERENCE_GPUS={p.inference_gpus} places a server on this node, but VLLM_URL="
            f"{settings.inference.vllm_url} is another host's: unset INFERENCE_GPUS"
        )
    serve = serve_gpus(settings, gpus) if local else ()
    train = parse_gpus("TRAIN_GPUS", p.train_gpus)
    _check_known("TRAIN_GPUS", train, known)
    train = train or tuple(g for g in known if g not in serve)
    shared = sorted(set(train) & set(serve))
    if shared:
        raise ConfigError(
            f"the trainer (TRAIN_GPUS={span(train)}) and the local vLLM server (INFERENCE_GPUS="
            f"{span(serve)}) share GPU {span(shared)}: outside COLOCATE each needs its own. Give "
            f"them disjoint sets (e.g. INFERENCE_GPUS={span(serve)} TRAIN_GPUS="
            f"{span([g for g in known if g not in serve]) or 'none left'}), or serve on another node"
        )
    if not train:
        raise ConfigError(
            f"the local vLLM server takes all of this node's GPUs ({span(serve)}) and leaves none "
            "for the trainer: lower TP or INFERENCE_GPUS, or serve on another node "
            "(VLLM_URL=http://HOST:8000/v1)"
        )
    _check_procs(settings, train)
    return Placement(gpus, train, serve)


def _colocated(settings: Settings, gpus: tuple[Gpu, ...]) -> Placement:
    """COLOCATE: the server on this node sleeps while the trainer steps on the same GPUs (on CPU: the same turns,
    nothing to place)."""
    if settings.offline:
        raise ConfigError(
            "COLOCATE=true but this run has no server to take turns with (TRAIN_MODE=sft or "
            "LOAD_ROLLOUT_DATA): unset COLOCATE"
        )
    if not server_is_local(settings):
        raise ConfigError(
            f"COLOCATE=true shares this node's GPUs with a server on this node, but VLLM_URL="
            f"{settings.inference.vllm_url} is another host's: unset COLOCATE (the trainer then takes "
            "every GPU here), or serve on this node (start_vllm.py with COLOCATE=true)"
        )
    if settings.train.max_staleness:
        raise ConfigError(
            f"COLOCATE=true takes turns, so no rollout can run while a step trains, but MAX_STALENESS="
            f"{settings.train.max_staleness} overlaps them: set MAX_STALENESS=0, or split the GPUs "
            "(unset COLOCATE)"
        )
    p = settings.placement
    if not gpus:
        return _on_cpu(settings)
    known = [g.index for g in gpus]
    serve = serve_gpus(settings, gpus)
    train = parse_gpus("TRAIN_GPUS", p.train_gpus)
    _check_known("TRAIN_GPUS", train, known)
    train = train or tuple(known)
    outside = [g for g in serve if g not in train]
    if outside:
        raise ConfigError(
            f"COLOCATE=true: the server's GPU {span(outside)} (INFERENCE_GPUS={span(serve)}) is not "
            f"the trainer's (TRAIN_GPUS={span(train)}), so it would idle while the trainer steps: "
            f"serve on the trainer's GPUs (e.g. INFERENCE_GPUS={span(train[: len(serve)])}), or unset "
            "COLOCATE to split them"
        )
    _check_procs(settings, train)
    return Placement(gpus, train, serve)


def _on_cpu(settings: Settings) -> Placement:
    p = settings.placement
    for name, value in (("TRAIN_GPUS", p.train_gpus), ("INFERENCE_GPUS", p.inference_gpus)):
        if value:
            raise ConfigError(
                f"{name}={value} names GPUs, but nvidia-smi lists none here: unset it (the trainer runs on CPU)"
            )
    return Placement((), (), ())


def _check_procs(settings: Settings, train: tuple[int, ...]) -> None:
    procs = settings.train.train_procs
    if procs is not None and procs != len(train):
        raise ConfigError(
            f"TRAIN_PROCS={procs} but the trainer has {len(train)} GPUs ({span(train)}), one rank "
            "each: unset TRAIN_PROCS, or set TRAIN_GPUS to that many GPUs"
        )


def devices_env(gpus: tuple[int, ...]) -> dict[str, str]:
    """What a process placed on ``gpus`` gets in its environment (nothing on CPU). CUDA numbers its devices
    fastest first unless told to follow the bus order, which is nvidia-smi's."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"} if gpus else {}


def _check_known(name: str, given: tuple[int, ...], known: list[int]) -> None:
    missing = [g for g in given if g not in known]
    if missing:
        raise ConfigError(
            f"{name} names GPU {span(missing)}, which this node does not have: its GPUs are {span(known)}"
        )


def span(gpus: list[int] | tuple[int, ...]) -> str:
    """(0, 1, 2, 5) -> "0-2,5": the form the settings take."""
    runs: list[list[int]] = []
    for g in sorted(gpus):
        if runs and runs[-1][-1] == g - 1:
            runs[-1].append(g)
        else:
            runs.append([g])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
