"""qwen-code inside a rollout sandbox: its settings, its command line, its time budget, its outcome and diff.

The runtime (Node 22 + qwen-code, ``bundle.py``) is mounted read-only at ``AGENT_MOUNT``; the agent's
home, settings, prompt and logs live under /tmp inside the container, never in the repository, so the final
``git diff`` of /testbed is the agent's answer and nothing else. The settings switch off everything that would
send extra model calls or phone home and are written both as user
and as *system* settings, because system settings override a repository's own ``.qwen/settings.json``.

Two profiles: ``full`` (qwen-code's own system prompt, 7 file and shell tools) for real models, and
``compact`` (a 400-character system prompt and the 4 core tools) for the embedded 135M model with an 8k
context. Sampling (max_tokens, temperature, tool_choice) comes from the agent settings section
(``AgentSettings``) in both.
"""

from __future__ import annotations

import json
import re
import secrets
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from qwen_swe.agent.bundle import COMPILE_CACHE
from qwen_swe.agent.settings import AgentSettings
from qwen_swe.data.prompts import SYSTEM_PROMPT_COMPACT
from qwen_swe.inference.settings import InferenceSettings
from qwen_swe.paths import AGENT_MOUNT, TESTBED
from qwen_swe.sandbox.base import Sandbox

Profile = Literal["full", "compact"]
Outcome = Literal["completed", "turn_limit", "timeout", "agent_error"]

REPO_DIR = TESTBED
QWEN_HOME = "/tmp/qwen-home"  # a fixed path: it shows up in the prompt, so every rollout must use the same one
RUN_DIR = "/tmp/qwen-swe-agent"  # prompt, stdout and stderr of the CLI
STDERR_FILE = f"{RUN_DIR}/stderr.txt"
FORWARDER = f"{RUN_DIR}/forward.js"  # the model forwarder (agent/forward.js), written in when a socket is the way out
FORWARD_PORT_FILE = f"{RUN_DIR}/forward.port"
FORWARDER_SOURCE = Path(__file__).resolve().parent / "forward.js"
EXIT_NO_FORWARDER = 98
SYSTEM_SETTINGS = f"{QWEN_HOME}/system-settings.json"
MARKER_ENV = "QWEN_SWE_AGENT_RUN"  # inherited by every process the agent starts; the sweep kills by it
KILL_GRACE = 10  # seconds between the CLI's own wall-time stop, SIGTERM to the group, and SIGKILL
EXEC_SLACK = 30.0  # the in-container timeout always fires before the sandbox's exec timeout
OUTPUT_LANGUAGE_MARKER = "<!-- qwen-code:llm-output-language: auto -->\n"  # keeps qwen-code from writing 1.1k chars

FULL_TOOLS = ("run_shell_command", "read_file", "edit", "write_file", "list_directory", "grep_search", "glob")
COMPACT_TOOLS = ("run_shell_command", "read_file", "edit", "write_file")
# Every tool name qwen-code 0.24.4 registers (its ToolNames table). `tools.core` alone leaves the goal, agent
# and deferred-tool bridges in the request; listing the rest as disabled is what leaves exactly the core set.
ALL_TOOLS = (
    "exec edit write_file read_file zoom_image grep_search glob run_shell_command todo_write save_memory agent "
    "skill exit_plan_mode enter_plan_mode web_fetch web_search image_gen list_directory lsp ask_user_question "
    "cron_create cron_list cron_delete loop_wakeup create_sub_session list_agents task_stop task_create "
    "task_update task_list team_create team_delete team_plan_approval request_shutdown send_message "
    "structured_output monitor notebook_edit tool_call tool_search read_mcp_resource enter_worktree exit_worktree "
    "workflow artifact record_artifact record_source report_findings get_goal update_goal propose_goal "
    "display_image omni_downsample_image omni_downscale_video omni_downsample_audio omni_extract_keyframes "
    "omni_extract_audio omni_clip_video omni_convert_image omni_transcribe_audio omni_clip_image omni_clip_audio "
    "omni_caption_image omni_caption_audio omni_ocr_image omni_understand_video_segments omni_recall_media_memory"
).split()
# Exit codes of qwen-code 0.24.4 and of coreutils `timeout`.
EXIT_TURN_LIMIT, EXIT_BUDGET = 53, 55
EXIT_KILLED = {124, 130, 137, 143}
_GIT = "git -c safe.directory='*'"
_API_ERROR = re.compile(r"\[API Error|Request timeout after|Connection error|ECONNREFUSED|fetch failed", re.I)
_LOOP_GUARD = re.compile(r"Loop detection halted the run", re.I)
# qwen-code waits 500 ms for piped stdin, then runs with no input and exits 1 before any model call: a CPU starved
# for that long (2 busy cores) loses the prompt. The run is started again, in a fresh proxy session, at most this
# many times.
STDIN_RACE = "No input provided via stdin"
STDIN_RETRIES = 2


@dataclass(frozen=True)
class AgentResult:
    """What one agent run produced. ``infra`` marks failures that are not the model's doing: drop the sample."""

    outcome: Outcome
    final_message: str
    exit_code: int | None
    seconds: float
    tool_calls: int
    log_tail: str
    infra: bool = False
    turns: int | None = None
    stray_processes: int = 0
    exec_started: float = 0.0  # time.monotonic() when the (last) run of the CLI started, and when it ended
    exec_ended: float = 0.0


@dataclass(frozen=True)
class StreamSummary:
    """The parts of qwen-code's ``-o stream-json`` output that decide the outcome."""

    tool_calls: int
    final_message: str
    result: dict | None


# --- what the CLI gets --------------------------------------------------------------------------------------
def agent_settings(agent: AgentSettings, inference: InferenceSettings, profile: Profile) -> dict[str, Any]:
    """qwen-code's settings.json: the endpoint comes from the environment, everything else from here."""
    core = COMPACT_TOOLS if profile == "compact" else FULL_TOOLS
    generation: dict[str, Any] = {
        "timeout": int(inference.request_timeout * 1000),
        "maxRetries": 0,  # the CLI's own 7-attempt loop still retries 5xx; no silent doubling on top
        "samplingParams": {"temperature": agent.temperature, "top_p": 1.0, "max_tokens": agent.agent_max_tokens},
    }
    window = inference.max_model_len or (8192 if profile == "compact" else None)
    if window:
        generation["contextWindowSize"] = window
    if agent.tool_choice == "required":
        generation["extra_body"] = {"tool_choice": "required"}
    return {
        "$version": 4,  # without it the CLI migrates and rewrites the file
        "security": {"auth": {"selectedType": "openai"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {
            "enableAutoUpdate": False,
            "checkpointing": {"enabled": False},
            "chatRecording": False,
            "gitCoAuthor": {"commit": False, "pr": False},
        },
        "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
        "model": {
            "maxSessionTurns": agent.max_turns,
            "skipStartupContext": True,
            "skipNextSpeakerCheck": True,
            "skipLoopDetection": True,
            "chatCompression": {"contextPercentageThreshold": 0},
            "generationConfig": generation,
        },
        "tools": {
            "shell": {"enableInteractiveShell": False},
            "core": list(core),
            "toolSearch": {"enabled": False},
            "disabled": [t for t in ALL_TOOLS if t not in core],
        },
        "skills": {"disabledLevels": ["project", "user", "extension", "bundled"]},
        "permissions": {"deny": ["WebFetch", "WebSearch", "Agent", "Skill"]},
    }


def agent_env(base_url: str, model: str, profile: Profile, marker: str) -> dict[str, str]:
    env = {
        "QWEN_HOME": QWEN_HOME,
        "QWEN_CODE_SYSTEM_SETTINGS_PATH": SYSTEM_SETTINGS,
        "QWEN_CODE_NO_RELAUNCH": "true",
        "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
        "QWEN_CODE_DISABLE_PRECONNECT": "1",
        "QWEN_SANDBOX": "false",
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "qwen-swe",  # the proxy ignores it; the CLI infers its auth type from it
        "OPENAI_MODEL": model,
        "NO_COLOR": "1",
        "NODE_COMPILE_CACHE": f"{AGENT_MOUNT}/{COMPILE_CACHE}",  # read-only: compiled once (compile_cache.py)
        MARKER_ENV: marker,
    }
    if profile == "compact":
        env["QWEN_SYSTEM_MD"] = f"{QWEN_HOME}/system.md"
    return env


def cli_files(agent: AgentSettings, inference: InferenceSettings, profile: Profile, prompt: str) -> dict[str, str]:
    """What the CLI reads, by path in the container: its settings (also as system settings), the output-language
    marker, the compact profile's system prompt, and the prompt."""
    config = json.dumps(agent_settings(agent, inference, profile), indent=1)
    files = {
        f"{QWEN_HOME}/settings.json": config,
        SYSTEM_SETTINGS: config,
        f"{QWEN_HOME}/output-language.md": OUTPUT_LANGUAGE_MARKER,
    }
    if profile == "compact":
        files[f"{QWEN_HOME}/system.md"] = SYSTEM_PROMPT_COMPACT
    files[f"{RUN_DIR}/prompt.txt"] = escape_at(prompt)
    return files


def escape_at(prompt: str) -> str:
    """The prompt with every ``@`` escaped as ``\\@``, the one form the CLI's ``@path`` expansion passes unchanged.

    Unescaped, the CLI reads ``@word`` as a file reference, in every mode and also in stream-json messages: it puts a
    space before each ``@`` and appends the contents of any path that exists (a statement's ``see @pkg/mod.py``
    would hand the agent the file). One SWE-bench statement in ten holds an ``@`` (decorators, mentions, e-mail).
    """
    return prompt.replace("@", "\\@")


def agent_command(agent: AgentSettings, bundle: str = AGENT_MOUNT) -> str:
    """The shell line: ``node cli.js`` directly (no relaunch child to orphan), its group killed past the budget.

    The prompt arrives on stdin from a file, so its length is not bound by the kernel's per-argument limit.
    ``timeout`` (not ``--foreground``) signals its whole process group: the CLI and every shell it spawned.
    """
    budget = max(1, int(agent.agent_timeout))
    cli = [
        f"{bundle}/node/bin/node",
        "--expose-gc",
        f"{bundle}/qwen-code/package/cli.js",
        "--yolo",
        "--output-format",
        "stream-json",
        "--max-session-turns",
        str(agent.max_turns),
        "--max-wall-time",
        str(budget),
    ]
    guard = ["timeout", "-s", "TERM", "-k", str(KILL_GRACE), str(budget + KILL_GRACE)]
    return f"{shlex.join(guard + cli)} < {RUN_DIR}/prompt.txt > {RUN_DIR}/stdout.jsonl 2> {STDERR_FILE}"


def forwarder_command(socket: str, bundle: str = AGENT_MOUNT) -> str:
    """Start the model forwarder in the background and point ``OPENAI_BASE_URL`` at its loopback port; put in front
    of ``agent_command``. The forwarder is in the exec's process group, so it ends with the agent's exec."""
    node, port = f"{bundle}/node/bin/node", FORWARD_PORT_FILE
    return (
        f"rm -f {port}; {shlex.join([node, FORWARDER, socket, port])} 2>> {RUN_DIR}/forward.log & "
        f"for i in $(seq 100); do [ -s {port} ] && break; sleep 0.1; done; "
        f"if [ ! -s {port} ]; then cat {RUN_DIR}/forward.log > {STDERR_FILE} 2>&1; "
        f"echo 'the model forwarder did not start' >> {STDERR_FILE}; exit {EXIT_NO_FORWARDER}; fi; "
        f'export OPENAI_BASE_URL="http://127.0.0.1:$(cat {port})/v1"; '
    )


def sweep_command(marker: str) -> str:
    """Kill every process still carrying this run's marker (background jobs may have left the process group)."""
    needle = shlex.quote(f"{MARKER_ENV}={marker}")
    return (
        'n=0; for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = $$ ] && continue; '
        f"if tr '\\0' '\\n' < $d/environ 2>/dev/null | grep -qxF {needle}; then "
        'kill -9 "$p" 2>/dev/null && n=$((n+1)); fi; done; echo "swept=$n"'
    )


# --- what the CLI said ----------------------------------------------------------------------------------------
def parse_stream(stdout: str) -> StreamSummary:
    """Count tool calls and find the final text in JSONL events; a line cut by a kill is skipped."""
    tool_calls, last_text, result = 0, "", None
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("type") == "assistant":
            texts = []
            for block in (event.get("message") or {}).get("content") or []:
                if block.get("type") == "tool_use":
                    tool_calls += 1
                elif block.get("type") == "text" and block.get("text"):
                    texts.append(block["text"])
            if texts:
                last_text = "\n".join(texts)
        elif event.get("type") == "result":
            result = event
    final = result.get("result") if result and isinstance(result.get("result"), str) else None
    return StreamSummary(tool_calls=tool_calls, final_message=final or last_text, result=result)


def classify(exit_code: int | None, timed_out: bool, summary: StreamSummary, stderr: str) -> tuple[Outcome, bool]:
    """(outcome, infra). API failures and CLI crashes are infrastructure; limits and the loop guard are not."""
    result = summary.result or {}
    message = " ".join(str(x) for x in (result.get("result"), result.get("error"), stderr) if x)
    if timed_out or exit_code in EXIT_KILLED or exit_code == EXIT_BUDGET:
        return "timeout", False
    if exit_code == EXIT_TURN_LIMIT:
        return "turn_limit", False
    api_failed = bool(_API_ERROR.search(str(result.get("result") or ""))) or (
        (exit_code != 0 or result.get("is_error")) and bool(_API_ERROR.search(message))
    )
    if api_failed:
        return "agent_error", True
    if exit_code == 0 and not result.get("is_error"):
        return "completed", False
    if _LOOP_GUARD.search(message):
        return "agent_error", False  # the model repeated itself: a rollout outcome, not a broken machine
    return "agent_error", True


# --- the run ----------------------------------------------------------------------------------------------------
async def run_agent(
    sandbox: Sandbox,
    *,
    base_url: str,
    model: str,
    prompt: str,
    agent: AgentSettings,
    inference: InferenceSettings,
    profile: Profile = "full",
    bundle: str = AGENT_MOUNT,
    fresh_session: Callable[[], str] | None = None,
    model_socket: str | None = None,
) -> AgentResult:
    """Run qwen-code once on the task in ``sandbox`` (/testbed) and collect its outcome (``take_diff`` then reads
    its change).

    A run that lost its prompt (``STDIN_RACE``) is run again only where ``fresh_session`` is given: it returns the
    base URL of a new, empty proxy session, so nothing the discarded run sent or received stays in the rollout.
    The discarded run's processes are killed first, so none of them can reach the model afterwards.

    ``model_socket`` (a path in the container): the way out of a container with no network. The forwarder
    (``forward.js``) serves it on the container's loopback and the agent's base URL is that port; ``base_url`` is then
    unused.

    Never raises for the agent's own failures: they come back as an outcome. Sandbox failures (the container
    died, exec broke) propagate as the sandbox's exception, for the caller to drop the sample.
    """
    if profile not in ("full", "compact"):
        raise ValueError(f"profile must be 'full' or 'compact', got {profile!r}")
    marker = secrets.token_hex(8)
    started = await sandbox.exec(
        f"mkdir -p {QWEN_HOME} {RUN_DIR} && {_GIT} rev-parse HEAD", timeout=60, workdir=REPO_DIR
    )
    base = started.output.strip().splitlines()[-1] if started.exit_code == 0 and started.output.strip() else ""
    for path, text in cli_files(agent, inference, profile, prompt).items():
        await sandbox.write_file(path, text)
    command = agent_command(agent, bundle)
    if model_socket:
        await sandbox.write_file(FORWARDER, FORWARDER_SOURCE.read_text())
        command = forwarder_command(model_socket, bundle) + command

    start = time.monotonic()
    budget = max(1, int(agent.agent_timeout))
    for attempt in range(1 + STDIN_RETRIES):
        if attempt:
            assert fresh_session is not None  # the loop below goes on only with one
            await sandbox.exec(sweep_command(marker), timeout=120)
            base_url = fresh_session()
        exec_started = time.monotonic()
        done = await sandbox.exec(
            command,
            timeout=budget + 2 * KILL_GRACE + EXEC_SLACK,
            workdir=REPO_DIR,
            env=agent_env(base_url, model, profile, marker),
        )
        if (
            fresh_session is None
            or done.timed_out
            or done.exit_code != 1
            or STDIN_RACE not in await _read_text(sandbox, STDERR_FILE)
        ):
            break
    exec_ended = time.monotonic()
    seconds = exec_ended - start
    # then undo any commit or staging of the agent's, so the diff below is against the starting commit
    reset = f"; {_GIT} reset -q {base} >/dev/null 2>&1" if re.fullmatch(r"[0-9a-f]{40}", base) else ""
    swept = await sandbox.exec(sweep_command(marker) + reset, timeout=120, workdir=REPO_DIR)
    stray = int(m.group(1)) if (m := re.search(r"swept=(\d+)", swept.output or "")) else 0

    stdout = await _read_text(sandbox, f"{RUN_DIR}/stdout.jsonl")
    stderr = await _read_text(sandbox, STDERR_FILE)
    summary = parse_stream(stdout)
    exit_code = None if done.timed_out else done.exit_code
    outcome, infra = classify(exit_code, done.timed_out, summary, stderr)
    if exit_code in (126, 127):
        outcome, infra = "agent_error", True  # the bundle is not mounted or Node cannot start in this image
    tail = (stderr[-3000:] + ("\n" + json.dumps(summary.result)[-1000:] if summary.result else "")).strip()
    return AgentResult(
        outcome=outcome,
        final_message=summary.final_message,
        exit_code=exit_code,
        seconds=round(seconds, 3),
        tool_calls=summary.tool_calls,
        log_tail=tail,
        infra=infra,
        turns=(summary.result or {}).get("num_turns"),
        stray_processes=stray,
        exec_started=exec_started,
        exec_ended=exec_ended,
    )


async def take_diff(sandbox: Sandbox) -> str:
    """The agent's change: ``git diff`` of the repository against the starting commit, without agent state."""
    return await sandbox.git_diff(REPO_DIR, exclude=(".qwen",))


async def _read_text(sandbox: Sandbox, path: str) -> str:
    try:
        data = await sandbox.read_file(path)
    except Exception:  # noqa: BLE001 - a missing log is an empty log; the exit code still decides
        return ""
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data or "")
