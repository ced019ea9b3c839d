"""Turn a shipped repository folder into a git repository with one deterministic commit.

The commit's identity, dates, message, file modes and branch are fixed, so ``base_commit`` is the same sha on
every machine and the image's ``/testbed`` can be checked against ``tasks.jsonl``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from qwen_swe.data.taskpack import REPOS_DIR
from qwen_swe.errors import TaskPackError

IDENTITY = {
    "GIT_AUTHOR_NAME": "qwen-swe",
    "GIT_AUTHOR_EMAIL": "tasks@qwen-swe.invalid",
    "GIT_COMMITTER_NAME": "qwen-swe",
    "GIT_COMMITTER_EMAIL": "tasks@qwen-swe.invalid",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00+0000",
}
BRANCH = "main"
IGNORED = {"__pycache__", ".pytest_cache", ".git"}
GIT_TIMEOUT = 60


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    """Run git in ``repo`` with a clean, fixed configuration (no user or system config leaks in)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(repo),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        **IDENTITY,
    }
    cmd = [
        "git",
        "-c",
        "core.autocrlf=false",
        "-c",
        "core.fileMode=true",
        "-c",
        "init.defaultBranch=" + BRANCH,
        "-c",
        "commit.gpgSign=false",
        *args,
    ]
    try:
        proc = subprocess.run(cmd, cwd=repo, env=env, input=stdin, capture_output=True, text=True, timeout=GIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise TaskPackError(f"git {' '.join(args)} timed out in {repo}") from None
    if proc.returncode != 0:
        raise TaskPackError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout


def tree_files(src: Path) -> list[Path]:
    """A source tree's files, not its caches or git folder, sorted."""
    return [
        path
        for path in sorted(src.rglob("*"))
        if path.is_file() and path.suffix != ".pyc" and not IGNORED.intersection(path.relative_to(src).parts)
    ]


def copy_files(src: Path, dest: Path) -> list[str]:
    """Copy a source tree's files (not caches), mode 0644, returning their repository-relative paths."""
    copied = []
    for path in tree_files(src):
        rel = path.relative_to(src)
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        target.chmod(0o644)
        copied.append(rel.as_posix())
    return copied


def make_repo(name: str, dest: Path, src: Path | None = None) -> str:
    """Create ``dest`` as the one-commit repository of ``repos/<name>`` (or of ``src``) and return the commit sha.

    No reflogs, hooks or other refs: the agent sees a repository with no history beyond the base commit.
    """
    src = src or REPOS_DIR / name
    if not src.is_dir():
        raise TaskPackError(f"no repository folder {src}: add it or fix the task's 'repo'")
    if dest.exists() and any(dest.iterdir()):
        raise TaskPackError(f"{dest} is not empty; give make_repo a fresh folder")
    dest.mkdir(parents=True, exist_ok=True)
    if not copy_files(src, dest):
        raise TaskPackError(f"repository folder {src} has no files")
    git(dest, "init", "-q", "--template=")
    git(dest, "symbolic-ref", "HEAD", f"refs/heads/{BRANCH}")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "--no-verify", "-m", f"{name}: base state")
    shutil.rmtree(dest / ".git" / "logs", ignore_errors=True)
    (dest / ".git" / "COMMIT_EDITMSG").unlink(missing_ok=True)
    return git(dest, "rev-parse", "HEAD").strip()
