"""A scripted expert behind the real agent and proxy: demonstrations for the supervised warm start.

The expert stands where vLLM stands (the proxy's upstream, ``/v1/completions`` with token ids), so qwen-code, the
proxy, the chat template and the loss mask are exactly those of a reinforcement-learning rollout; only the choice of
the next completion is scripted. For a task whose gold patch changes one line it (1) finds the file to fix: the
statement's traceback names it, or else it searches the repository for the definitions of the names the statement
imports, (2) reads that file, (3) replaces the buggy line by the fixed one (without their indentation, as a
traceback prints the line), (4) answers that it is done. Every step
copies something the model can see (a path from the traceback, a name from the statement, a path from the search's
output, a line from the file), so a policy can learn it for tasks it has not seen; when neither shows the file to
fix, the expert gives up and the rollout, unresolved, is no demonstration. It recognises the task by its problem
statement in the prompt, and the turn by the assistant turns already in it. Its completions are the tokenizer's ids
of the text plus the end-of-turn id, with log-probability 0 (the supervised loss does not read them).

With ``recover`` > 0, that fraction of the tasks (chosen from a digest of the statement) gets a *stumble* first, one
of the two edit errors a warm-started policy makes most on the train side and never recovers from: an edit that
changes nothing (``noop``: qwen-code answers "No changes to apply") after which it stops, and an edit whose
``old_string`` is not in the file (``swap``: old and new exchanged; "0 occurrences found") after which it reads the
file again and again. The expert then recovers: after a ``noop`` it writes the real fix, after a ``swap`` it reads
the file and writes it. The stumble's own completion (``mistake_ids``) is kept out of the loss by ``collect``, so a
policy learns what to do after such an error and never to make it.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from qwen_swe.agent.qwen import escape_at
from qwen_swe.errors import DataError
from qwen_swe.paths import TESTBED
from qwen_swe.traffic.completion_stream import respond

# The warm start's cache key holds this, not a hash of this file: bump it whenever a change here changes what the
# expert writes (a turn, a completion's text, which tasks it plays or gives up on); a cosmetic edit must not rebuild.
EXPERT_VERSION = 1
DONE = "I fixed the bug."
GIVE_UP = "I could not find the code."
NOOP, SWAP = "noop", "swap"  # the stumbles
END_OF_TURN = "<|im_end|>"
ASSISTANT = "<|im_start|>assistant"


@dataclass(frozen=True)
class Fix:
    path: str
    buggy: str
    fixed: str


def one_line_fix(patch: str) -> Fix | None:
    """The (path, removed line, added line) of a gold patch that changes exactly one line, else None."""
    paths = re.findall(r"^\+\+\+ b/(\S+)", patch, flags=re.M)
    removed = [line[1:] for line in patch.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")]
    if len(paths) != 1 or len(removed) != 1 or len(added) != 1:
        return None
    return Fix(paths[0], removed[0], added[0])


def tool_call(name: str, **arguments: Any) -> str:
    """A completion in the Hermes format the embedded model's template and the proxy's parser use."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def imported_names(statement: str) -> list[str]:
    """The names a problem statement's code imports (``from pkg.mod import a, b``), in order, without repeats."""
    names: list[str] = []
    for group in re.findall(r"^\s*from\s+[\w.]+\s+import\s+\(?([\w, ]+)\)?\s*$", statement, flags=re.M):
        names += [n.strip() for n in group.split(",") if n.strip() and n.strip() not in names]
    return names


def traceback_paths(statement: str) -> list[str]:
    """The repository-relative files of a statement's traceback frames (``File "pkg/mod.py", line 3, in f``)."""
    return re.findall(r'^\s*File "([^"]+)", line \d+', statement, flags=re.M)


def search_command(names: Sequence[str]) -> str:
    """Where the imported names are defined: one grep a policy can write by copying the names."""
    return f'grep -rnE "(def|class) ({"|".join(names)})\\b" {TESTBED} --include=*.py'


def stumble_for(statement: str, recover: float) -> str | None:
    """The stumble a task gets (None for most when ``recover`` is small): a fixed choice from the statement's digest,
    the same on every machine and every run."""
    digest = hashlib.sha256(statement.strip().encode()).digest()
    if int.from_bytes(digest[:8], "big") / 2**64 >= recover:
        return None
    return (NOOP, SWAP)[digest[8] % 2]


def mistake(fix: Fix, stumble: str) -> str:
    """The stumble's completion: an edit that changes nothing, or one with old and new exchanged."""
    target = f"{TESTBED}/{fix.path}"
    if stumble == NOOP:
        return tool_call("edit", file_path=target, old_string=fix.buggy.strip(), new_string=fix.buggy.strip())
    return tool_call("edit", file_path=target, old_string=fix.fixed.strip(), new_string=fix.buggy.strip())


def expert_turn(
    fix: Fix, turn: int, names: Sequence[str] | None = None, last_output: str = "", stumble: str | None = None
) -> str:
    """The completion for ``turn``; ``names`` (the statement's imports) turns on the search step, an empty list
    means there is nothing to search for; ``names=None`` reads the file at once (the traceback shows it);
    ``stumble`` puts a mistaken edit and the recovery from it before the fix."""
    target = f"{TESTBED}/{fix.path}"
    if names is not None:
        if not names:
            return GIVE_UP
        if turn == 0:
            return tool_call("run_shell_command", command=search_command(names))
        turn -= 1
        if turn == 0 and target not in last_output:
            return GIVE_UP  # the search did not show the file: not a demonstration a policy could follow
    if turn == 0:
        return tool_call("read_file", file_path=target)  # qwen-code refuses to edit a file it has not read
    if stumble is not None:
        if turn == 1:
            return mistake(fix, stumble)
        if stumble == SWAP and turn == 2:
            return tool_call("read_file", file_path=target)  # what the error asks for
        turn -= 2 if stumble == SWAP else 1
    if turn == 1:
        # the line without its indentation: what a traceback prints, and fewer spaces to count; the edit keeps the
        # file's indentation because it replaces only the text after it
        return tool_call("edit", file_path=target, old_string=fix.buggy.strip(), new_string=fix.fixed.strip())
    return DONE


class ExpertServer:
    """An OpenAI-compatible ``/v1/completions`` upstream that plays the expert for the given rows."""

    def __init__(
        self,
        rows: Sequence[dict[str, Any]],
        tokenizer: Any,
        model: str = "expert",
        search: bool = True,
        recover: float = 0.0,
    ) -> None:
        if not 0.0 <= recover <= 1.0:
            raise DataError(f"recover={recover}: the fraction of tasks with a stumble must be in [0, 1]")
        self.tokenizer, self.model, self.search, self.recover = tokenizer, model, search, recover
        self.fixes: dict[str, Fix] = {}
        self.ids: dict[str, str] = {}
        # the rollouts the expert gave up on, with the output it could not follow, so an unresolved one is explained
        self.gave_up: list[dict[str, Any]] = []
        for row in rows:
            fix = one_line_fix(row.get("patch", ""))
            if fix is None:
                raise DataError(f"{row.get('instance_id')}: the expert needs a gold patch that changes one line")
            statement = row["problem_statement"].strip()
            if statement in self.fixes and self.fixes[statement] != fix:
                raise DataError(
                    f"{row['instance_id']}: another task has the same problem statement and a different "
                    "fix; give the expert tasks with distinct statements"
                )
            self.fixes[statement] = fix
            self.ids[statement] = str(row.get("instance_id"))
        self.end_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
        self._runner: web.AppRunner | None = None
        self.url = ""

    def reply(self, prompt_text: str) -> str:
        found = next(((s, f) for s, f in self.fixes.items() if escape_at(s) in prompt_text), None)
        if found is None:
            raise web.HTTPBadRequest(text="the expert does not know this task")
        statement, fix = found
        traced = fix.path in traceback_paths(statement)
        names = imported_names(statement) if self.search and not traced else None
        last_output = prompt_text.rsplit(ASSISTANT, 1)[0].rsplit("<tool_response>", 1)[-1]
        turn = max(prompt_text.count(ASSISTANT) - 1, 0)
        out = expert_turn(fix, turn, names, last_output, stumble_for(statement, self.recover))
        if out == GIVE_UP:
            self.gave_up.append({"instance_id": self.ids[statement], "turn": turn, "output": last_output[-500:]})
        return out

    def mistake_ids(self, row: dict[str, Any]) -> tuple[str | None, list[int]]:
        """A task's stumble and the token ids of its completion (to keep out of the loss); (None, []) without."""
        statement = row["problem_statement"].strip()
        stumble = stumble_for(statement, self.recover)
        if stumble is None:
            return None, []
        return stumble, self.completion_ids(mistake(self.fixes[statement], stumble))

    def completion_ids(self, text: str) -> list[int]:
        """The token ids the expert serves for ``text``: its tokens and the end of the turn."""
        return list(self.tokenizer.encode(text, add_special_tokens=False)) + [self.end_id]

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = body["prompt"]
        text = prompt if isinstance(prompt, str) else self.tokenizer.decode(prompt, skip_special_tokens=False)
        out = self.reply(text)
        ids = self.completion_ids(out)
        prompt_ids = prompt if isinstance(prompt, list) else self.tokenizer.encode(prompt, add_special_tokens=False)
        pieces = [self.tokenizer.decode([t], skip_special_tokens=False) for t in ids]
        return await respond(
            request,
            body,
            {
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "text": out,
                        "finish_reason": "stop",
                        "token_ids": ids,
                        "prompt_token_ids": prompt_ids,
                        "logprobs": {
                            "tokens": pieces,
                            "token_logprobs": [0.0] * len(ids),
                            "top_logprobs": None,
                            "text_offset": [],
                        },
                    }
                ],
                "usage": {
                    "prompt_tokens": len(prompt_ids),
                    "completion_tokens": len(ids),
                    "total_tokens": len(prompt_ids) + len(ids),
                },
            },
        )

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/v1"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
