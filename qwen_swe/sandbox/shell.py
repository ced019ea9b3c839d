"""What a sandbox runs in a container's shell, whatever the backend: the process-group wrapper around every
``exec``, the git scripts that select a task's commit and hide its future, and the capped output buffer."""

from __future__ import annotations

import shlex

# $0 = pg file, $1 = command.  The inner bash becomes the leader of a new session and process group (setsid -w
# waits for it either way), writes its pid (= the group id) to the pg file and execs the command; afterwards the
# outer shell kills whatever the command left running in that group, so the exec stream can end.
EXEC_WRAPPER = (
    'setsid -w bash -c \'echo $$ > "$0"; exec bash -c "$1"\' "$0" "$1"; rc=$?; '
    'read -r pg < "$0" 2>/dev/null && kill -KILL -- "-$pg" 2>/dev/null; rm -f "$0"; exit $rc'
)
# Builtins only once the pg file exists (the usual case at a timeout), so the kill needs no process but its own.
KILL_GROUP = (
    'i=0; while [ ! -s "$0" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done; '
    'read -r pg < "$0" && kill -KILL -- "-$pg"'
)

# Select the task: a generated task's image holds one commit per task under refs/tasks/ (one image per repository,
# as SWE-smith does); check out base_commit when it is one of them.  Any other image must already be at
# base_commit (the hide-the-future step refuses it otherwise).
CHECKOUT_BASE = r"""
set -eu
cd "$1"; base="$2"
git config --global --add safe.directory '*'
if [ "$(git rev-parse HEAD)" != "$base" ] && [ -n "$(git for-each-ref --points-at "$base" refs/tasks/)" ]; then
  git checkout -q -f -B "$(git symbolic-ref -q --short HEAD || echo main)" "$base"
fi
"""

# Hide the future: keep only HEAD (at base_commit) and its ancestry.  Drops every other ref (branches, tags,
# remotes, notes, stash), expires reflogs, prunes unreachable objects, then proves no other commit is left.
HIDE_FUTURE = r"""
set -eu
cd "$1"; base="$2"
git config --global --add safe.directory '*'
head=$(git rev-parse HEAD)
if [ -n "$base" ] && [ "$head" != "$(git rev-parse "$base^{commit}")" ]; then
  echo "HEAD is $head, not base_commit $base" >&2; exit 3
fi
keep=$(git symbolic-ref -q HEAD || true)
for r in $(git remote); do git remote remove "$r"; done
git for-each-ref --format='%(refname)' | while read -r ref; do
  [ "$ref" = "$keep" ] || git update-ref -d "$ref"
done
git reflog expire --expire=now --all
git gc --prune=now --quiet
reachable=$(git rev-list HEAD | wc -l)
all=$(git rev-list --all --reflog | wc -l)
objects=$(git cat-file --batch-all-objects --batch-check='%(objecttype)' | grep -c '^commit$' || true)
if [ "$all" != "$reachable" ] || [ "$objects" != "$reachable" ]; then
  echo "future still reachable: HEAD ancestry $reachable, all refs $all, commit objects $objects" >&2; exit 4
fi
"""


def sh(script: str, *args: str) -> str:
    """A shell command that runs ``script`` with positional arguments, quoted safely."""
    return "bash -c " + shlex.quote(script) + " qwen-swe " + " ".join(shlex.quote(a) for a in args)


class CappedOutput:
    """Collects a byte stream keeping the first and last ``limit/2`` bytes."""

    def __init__(self, limit: int) -> None:
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            extra = len(self.tail) - self.half
            if extra > 0:
                del self.tail[:extra]
                self.dropped += extra

    def text(self) -> str:
        mid = f"\n[... {self.dropped} bytes truncated ...]\n".encode() if self.dropped else b""
        return bytes(self.head + mid + self.tail).decode("utf-8", errors="replace")
