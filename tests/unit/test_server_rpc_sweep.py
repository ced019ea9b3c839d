"""A vLLM server's RPC folder outlives a run killed with SIGKILL; the next server start removes it, and only it."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from qwen_swe.inference.server import RPC_FOLDER_PREFIX, RPC_OWNER, SPAWN_GRACE, sweep_stale_rpc


def _folder(parent: Path, name: str, owner: int | None = None, sockets: int = 0) -> Path:
    folder = parent / name
    folder.mkdir()
    if owner is not None:
        (folder / RPC_OWNER).write_text(f"{owner}\n")
    for i in range(sockets):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind(str(folder / f"ipc-{i}"))  # closed at once: a socket file, as a dead server leaves them
    return folder


def test_only_the_folders_of_gone_servers_are_removed(tmp_path: Path):
    gone = subprocess.Popen(["true"], start_new_session=True)
    gone.wait()
    live = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        dead = _folder(tmp_path, f"{RPC_FOLDER_PREFIX}dead", owner=gone.pid, sockets=2)
        running = _folder(tmp_path, f"{RPC_FOLDER_PREFIX}live", owner=live.pid, sockets=2)
        spawning = _folder(tmp_path, f"{RPC_FOLDER_PREFIX}spawning")  # made, its server not yet spawned
        unknown = _folder(tmp_path, f"{RPC_FOLDER_PREFIX}unknown", sockets=1)  # sockets, no owner: not ours to judge
        writing = _folder(tmp_path, f"{RPC_FOLDER_PREFIX}writing")
        (writing / RPC_OWNER).write_text("")
        other = _folder(tmp_path, "qwen-swe-ep-other", owner=gone.pid)
        assert sweep_stale_rpc(str(tmp_path)) == 1
        assert not dead.exists() and running.is_dir() and spawning.is_dir() and unknown.is_dir() and other.is_dir()
        assert sweep_stale_rpc(str(tmp_path), now=time.time() + SPAWN_GRACE + 1) == 1  # never spawned: gone
        assert not spawning.exists() and running.is_dir() and unknown.is_dir() and writing.is_dir()
    finally:
        live.kill()
        live.wait()
    assert sweep_stale_rpc(str(tmp_path)) == 1 and not running.exists()  # its whole group ended
