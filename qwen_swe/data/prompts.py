"""What the agent is told: the task instruction for one SWE-bench instance, and a compact system prompt.

The instruction is qwen-code's user message (``-p``). The compact system prompt replaces qwen-code's
~21k-character built-in one for the embedded small model (via ``QWEN_SYSTEM_MD``): a 135M model
has an 8k context and needs a literal tool-call example to copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qwen_swe.errors import PromptError
from qwen_swe.paths import TESTBED

REPO_DIR = TESTBED

SYSTEM_PROMPT_COMPACT = f"""\
You are a coding agent working in a git repository at {REPO_DIR} (the current directory). \
You can call the tools run_shell_command, read_file, edit and write_file. Use absolute paths under {REPO_DIR}.
To call a tool, answer with a tool call like this example:
<tool_call>
{{"name": "run_shell_command", "arguments": {{"command": "ls {REPO_DIR}"}}}}
</tool_call>
You will then receive the tool result. Make one tool call at a time. \
When the task is done, answer with a short summary and no tool call.
"""

_TEMPLATE = """\
Resolve the following issue in the {repo} repository, checked out at {repo_dir} (a git repository).

<issue>
{problem_statement}
</issue>

Make the minimal change to non-test files in {repo_dir} so that the issue is resolved.
- Do not modify, add or delete tests.
- Do not commit: your uncommitted changes (`git diff`) are your answer.
- When you are done, reply with a short summary and no tool call.
"""


def build_prompt(instance: Mapping[str, Any], repo_dir: str = REPO_DIR) -> str:
    """The user message for one instance; only the issue text is shown, never the tests or the gold patch."""
    if not isinstance(instance, Mapping):
        raise PromptError(f"build_prompt needs a SWE-bench row (a dict), got {type(instance).__name__}")
    who = instance.get("instance_id", "<no instance_id>")
    statement = instance.get("problem_statement")
    if not isinstance(statement, str) or not statement.strip():
        raise PromptError(
            f"instance {who}: field 'problem_statement' is missing or empty; "
            "give every row the issue text as a non-empty string"
        )
    repo = instance.get("repo")
    repo = repo if isinstance(repo, str) and repo.strip() else "project"
    return _TEMPLATE.format(repo=repo, repo_dir=repo_dir, problem_statement=statement.strip())
