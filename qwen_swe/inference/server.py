"""A vLLM server as a child process: started in its own process group, waited for until /health answers, and
stopped by that group's id (the API server and its engine workers), never by name."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

from qwen_swe.inference.client import InferenceClient, InferenceError
from qwen_swe.inference.serve_config import ServeConfig
from qwen_swe.supervise import SUPERVISOR

RPC_FOLDER_PREFIX = "qwen-swe-vllm-rpc-"  # a server's own folder for vLLM's ZMQ sockets, removed at stop
RPC_OWNER = "server.pgid"  # in that folder: the server's process group, so a later start can tell it is gone
SPAWN_GRACE = 60.0  # seconds a folder may exist before its owner is written (it is made just before the spawn)


class VLLMServer:
    """A vLLM server subprocess in its own process group, its output in a log file. ``start`` waits for /health;
    ``stop`` terminates the group (SIGTERM, then SIGKILL). Use as a context manager so it always stops."""

    def __init__(self, serve: ServeConfig, log_path: Path) -> None:
        self.serve = serve
        self.log_path = Path(log_path)
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.rpc_dir: Path | None = None

    @property
    def base_url(self) -> str:
        return self.serve.base_url

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self, timeout: float = 900.0) -> str:
        """Start the server and wait until it answers /health; returns the OpenAI base URL (ends with /v1)."""
        if self.process is not None:
            raise InferenceError(f"server {self.base_url} was already started (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - the server writes it until stop() closes it
        env = {**os.environ, **self.serve.env()}
        if "VLLM_RPC_BASE_PATH" not in env:
            # vLLM's engine and API server talk over ZMQ sockets made under this folder (default: the temp folder)
            # and never removed; a private folder, removed at stop, keeps them from piling up in /tmp.
            sweep_stale_rpc()
            self.rpc_dir = Path(tempfile.mkdtemp(prefix=RPC_FOLDER_PREFIX))
            env["VLLM_RPC_BASE_PATH"] = str(self.rpc_dir)
            # Its other temporary files too (the workers' rendezvous file, vllm_dist_*, also never removed); the
            # compiled kernels' cache stays where it was, shared by every start.
            env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"torchinductor_{_user()}"))
            env["TMPDIR"] = str(self.rpc_dir)
        try:
            self.process = SUPERVISOR.spawn(
                self.serve.argv(), env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
            )
            if self.rpc_dir is not None:  # its own session: the group's id is its pid
                (self.rpc_dir / RPC_OWNER).write_text(f"{self.process.pid}\n")
            client = InferenceClient(self.base_url, timeout=5.0, api_key=self.serve.api_key)
            deadline = time.monotonic() + timeout
            while not client.health():
                if self.process.poll() is not None:
                    raise InferenceError(
                        f"vLLM exited with code {self.process.returncode} before {self.base_url} "
                        f"was ready; last log lines of {self.log_path}:\n{self.log_tail()}"
                    )
                if time.monotonic() > deadline:
                    raise InferenceError(
                        f"vLLM at {self.base_url} was not ready within {timeout:.0f} s; see "
                        f"{self.log_path}:\n{self.log_tail()}"
                    )
                time.sleep(1.0)
        except BaseException:
            self.stop()
            raise
        return self.base_url

    def stop(self, grace: float = 30.0) -> None:
        """Terminate the server's process group (the API server and its engine workers); idempotent."""
        proc, self.process = self.process, None
        try:
            if proc is not None:
                SUPERVISOR.stop(proc, grace)  # the API server and its engine workers share its group
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None
            if self.rpc_dir is not None:
                shutil.rmtree(self.rpc_dir, ignore_errors=True)
                self.rpc_dir = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> VLLMServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _user() -> str:
    """The name in torch inductor's default cache folder (``torchinductor_<user>`` in the temp folder), as torch
    makes it."""
    try:
        return getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        return f"uid_{os.getuid()}"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def sweep_stale_rpc(parent: str | None = None, *, now: float | None = None) -> int:
    """Remove the RPC folders under ``parent`` (default: the temp folder) of servers that are gone: no process is
    left in the group ``RPC_OWNER`` names (a run killed with SIGKILL never ran ``stop``). A folder without an owner
    is kept while young (``SPAWN_GRACE``) or while it holds sockets (a server this check cannot judge). Returns how
    many folders were removed."""
    now = time.time() if now is None else now
    removed = 0
    for folder in Path(parent or tempfile.gettempdir()).glob(f"{RPC_FOLDER_PREFIX}*"):
        try:
            owner = int((folder / RPC_OWNER).read_text())
        except ValueError:
            continue  # being written
        except OSError:
            try:
                stale = now - folder.stat().st_mtime > SPAWN_GRACE and not any(p.is_socket() for p in folder.iterdir())
            except OSError:
                continue  # removed meanwhile, or not a folder
        else:
            stale = not _group_alive(owner)
        if stale:
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's group, or not ours to judge: keep it
    return True
