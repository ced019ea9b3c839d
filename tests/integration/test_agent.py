"""The real qwen-code (from the runtime bundle) in a real container of a local task, through the real recording
proxy, against a scripted OpenAI-compatible server that stands in for the model's choices only.

Checked: the edit happens and the diff is captured without agent state; the proxy's turns and the trajectory's loss
mask cover exactly the scripted-sampled tokens; a statement's `@`s reach the model whole, with no file appended; a
repository's own .qwen/settings.json cannot override ours; the turn limit maps to ``turn_limit``; a hung server hits
the time budget and leaves no process and no container; a 500 ends as an infrastructure ``agent_error``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from types import SimpleNamespace
from typing import Any

import docker
import pytest

from qwen_swe.agent import qwen as qa
from qwen_swe.agent.bundle import QWEN_CODE_VERSION, AgentBundle
from qwen_swe.config.settings import load_settings
from qwen_swe.data.prompts import SYSTEM_PROMPT_COMPACT, build_prompt
from qwen_swe.paths import AGENT_MOUNT, agent_bundle_dir
from qwen_swe.sandbox.docker import DockerSandbox
from qwen_swe.sandbox.docker_host import containers_of
from qwen_swe.traffic.proxy import RecordingProxy
from qwen_swe.traffic.trajectory import build_sample
from tests.scripted_server import Reply, ScriptedServer, fake_logprob, qwen3_tokenizer, smollm2_tokenizer
from tests.task_pack import gold_edit, replayable_task
from tests.toolcall_text import hermes_call


@pytest.fixture(scope="module")
def task() -> dict[str, Any]:
    return replayable_task()


def _box(task: dict, run_id: str) -> DockerSandbox:
    return DockerSandbox(
        task["image"],
        run_id=run_id,
        cpus=1.0,
        memory="2g",
        network="host",
        mounts={str(agent_bundle_dir()): AGENT_MOUNT},
        base_commit=task.get("base_commit"),
        hide_future=False,
    )


async def _processes(box: DockerSandbox) -> list[str]:
    """Command lines of every process in the container except PID 1 and this listing itself."""
    res = await box.exec(
        "for d in /proc/[0-9]*; do p=${d#/proc/}; [ $p = 1 ] && continue; "
        "c=$(tr '\\0' ' ' < $d/cmdline 2>/dev/null); echo \"$p $c\"; done",
        timeout=60,
    )
    return [
        line for line in res.output.splitlines() if line.strip() and "/proc/[0-9]*" not in line and "tr \\0" not in line
    ]


def _containers(run_id: str) -> list:
    client = docker.from_env(timeout=60)
    try:
        return containers_of(client, run_id)
    finally:
        client.close()


async def _rollout(
    task: dict,
    run_id: str,
    script: list,
    settings,
    *,
    before=None,
    after=None,
    profile="compact",
    tokenizer=None,
    max_model_len=8192,
    bundle=AGENT_MOUNT,
):
    tokenizer = tokenizer or smollm2_tokenizer()
    async with (
        ScriptedServer(script, tokenizer=tokenizer, max_model_len=max_model_len) as server,
        RecordingProxy(server.url, model="scripted", tokenizer=tokenizer, mode="tokens") as proxy,
    ):
        session = proxy.open_session({"test": run_id})

        def fresh_session() -> str:  # as the rollout engine does
            nonlocal session
            session = proxy.restart_session(session.id)
            return session.base_url

        async with _box(task, run_id) as box:
            if before:
                await before(box)
            result = await qa.run_agent(
                box,
                base_url=session.base_url,
                model="smollm2-135m",
                prompt=build_prompt(task),
                agent=settings.agent,
                inference=settings.inference,
                profile=profile,
                bundle=bundle,
                fresh_session=fresh_session,
            )
            result = SimpleNamespace(**dataclasses.asdict(result), patch=await qa.take_diff(box))
            extra = await after(box) if after else None
        turns = proxy.close_session(session.id)
    return result, turns, tokenizer, server, extra


# --- the bundle -------------------------------------------------------------------------------------------------
@pytest.mark.agent
def test_bundle_is_complete_and_knows_every_tool_we_disable():
    bundle = AgentBundle(agent_bundle_dir())
    assert bundle.info()["qwen_code"] == QWEN_CODE_VERSION
    names: set[str] = set()
    for chunk in (bundle.cli.parent / "chunks").glob("*.js"):
        text = chunk.read_text(errors="replace")
        block = re.search(r"var ToolNames = \{(.*?)\n\};", text, re.S)
        if block:
            names = set(re.findall(r':\s*"([a-z_]+)"', block.group(1)))
            break
    assert names, "qwen-code's ToolNames table was not found in the bundle"
    assert names <= set(qa.ALL_TOOLS), f"tools qwen-code has that our disabled list misses: {names - set(qa.ALL_TOOLS)}"


# --- a scripted rollout ---------------------------------------------------------------------------------------
@pytest.mark.docker
@pytest.mark.agent
def test_scripted_rollout_edits_records_and_masks(task, run_id):
    path, old, new = gold_edit(task["patch"])
    target = f"/testbed/{path}"
    script = [
        hermes_call("run_shell_command", command=f"cat {target}"),
        hermes_call("read_file", file_path=target),  # qwen-code refuses to edit a file it has not read
        hermes_call("edit", file_path=target, old_string=old, new_string=new),
        # agents commit although told not to; the patch must still be the change since the start
        hermes_call("run_shell_command", command="git -c user.email=a@b.c -c user.name=agent commit -qam wip"),
        "Fixed the bug.",
    ]
    settings = load_settings([], env={}).replace(max_turns=8, agent_timeout=300.0, tool_choice="required")

    async def plant_repo_settings(box):  # a repository's own settings must not win over ours
        await box.write_file(
            "/testbed/.qwen/settings.json",
            json.dumps(
                {"model": {"generationConfig": {"samplingParams": {"max_tokens": 7}}}, "tools": {"core": ["glob"]}}
            ),
        )

    async def reflog(box):
        return (await box.exec("git -c safe.directory='*' reflog --format=%gs", timeout=60)).output

    result, turns, tok, server, log = asyncio.run(
        _rollout(task, run_id, script, settings, before=plant_repo_settings, after=reflog)
    )

    assert result.outcome == "completed" and not result.infra and result.exit_code == 0, result.log_tail
    assert result.tool_calls == 4
    assert result.final_message == "Fixed the bug."
    # the diff: exactly the edit, no agent state, no planted settings
    assert re.findall(r"^diff --git a/(\S+)", result.patch, re.M) == [path], result.patch
    assert f"\n-{old}\n+{new}\n" in result.patch
    assert ".qwen" not in result.patch and "qwen-home" not in result.patch
    assert "commit: wip" in log and "reset: moving to " + task["base_commit"] in log, log
    # what the agent sent, as the proxy recorded it
    assert [t.status for t in turns] == [200] * 5 and all(t.ok for t in turns)
    for t in turns:
        assert t.params["max_tokens"] == settings.agent.agent_max_tokens and t.params["tool_choice"] == "required"
        assert sorted(tool["function"]["name"] for tool in t.tools) == sorted(qa.COMPACT_TOOLS)
    system = turns[0].request_messages[0]
    assert system["role"] == "system" and system["content"].startswith(SYSTEM_PROMPT_COMPACT.strip()[:200])
    assert [c["role"] for c in turns[-1].request_messages].count("tool") == 4
    # the trajectory: mask 1 exactly on the tokens the scripted server sampled, with their logprobs
    sampled = []
    for text, t in zip(script, turns):
        ids = tok.encode(text, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]
        assert t.sampled_ids == ids
        assert t.logprobs == [fake_logprob(x, i) for i, x in enumerate(ids)]
        sampled.append((ids, t.logprobs))
    traj = build_sample(turns, max_response_len=settings.rollout.max_response_len, mask_truncated=False, tokenizer=tok)
    response = traj.tokens[traj.prompt_length :]
    assert [x for x, m in zip(response, traj.loss_mask) if m] == [x for ids, _ in sampled for x in ids]
    assert [lp for lp, m in zip(traj.rollout_log_probs, traj.loss_mask) if m] == [v for _, lps in sampled for v in lps]
    assert traj.metadata["retained_fraction"] == 1.0 and traj.metadata["drift_count"] == 0
    assert 0 in traj.loss_mask  # tool results sit between the turns, untrained
    assert traj.tokens[: traj.prompt_length] == turns[0].prompt_ids


@pytest.mark.docker
@pytest.mark.agent
def test_full_profile_with_qwen3_tokens(task, run_id):
    """The real-model path: qwen-code's own system prompt, 7 tools, no forced tool choice, Qwen3's template."""
    path, old, new = gold_edit(task["patch"])
    target = f"/testbed/{path}"
    script = [
        hermes_call("read_file", file_path=target),
        hermes_call("edit", file_path=target, old_string=old, new_string=new),
        "Done.",
    ]
    settings = load_settings([], env={"VLLM_URL": "http://unused:8000", "AGENT_MAX_TOKENS": "4096"}).replace(
        max_turns=10, agent_timeout=300.0
    )
    result, turns, tok, *_ = asyncio.run(
        _rollout(task, run_id, script, settings, profile="full", tokenizer=qwen3_tokenizer(), max_model_len=65536)
    )
    assert result.outcome == "completed" and result.tool_calls == 2, result.log_tail
    assert f"\n-{old}\n+{new}\n" in result.patch
    assert len(turns) == 3 and all(t.ok for t in turns)
    for t in turns:
        assert t.params["max_tokens"] == 4096 and "tool_choice" not in t.params
        assert sorted(tool["function"]["name"] for tool in t.tools) == sorted(qa.FULL_TOOLS)
    assert len(turns[0].request_messages[0]["content"]) > 5000  # qwen-code's own system prompt, not the compact one
    traj = build_sample(turns, max_response_len=settings.rollout.max_response_len, mask_truncated=False, tokenizer=tok)
    assert traj.metadata["retained_fraction"] == 1.0
    assert sum(traj.loss_mask) == sum(len(t.sampled_ids) for t in turns)


@pytest.mark.docker
@pytest.mark.agent
def test_turn_limit(task, run_id):
    settings = load_settings([], env={}).replace(max_turns=2, agent_timeout=300.0)
    script = [hermes_call("run_shell_command", command="true")]
    result, turns, *_ = asyncio.run(_rollout(task, run_id, script, settings))
    assert result.outcome == "turn_limit" and result.exit_code == qa.EXIT_TURN_LIMIT and not result.infra
    assert len(turns) == 2 and result.tool_calls == 2
    assert result.patch == ""


# --- failures ---------------------------------------------------------------------------------------------------
@pytest.mark.docker
@pytest.mark.agent
def test_hung_server_hits_the_budget_and_leaves_nothing_behind(task, run_id):
    script = [
        hermes_call(
            "run_shell_command",
            command="echo started > /tmp/bg-started; exec sleep 300",
            is_background=True,
            description="a background job that would outlive a careless kill",
        ),
        # silent for twice the budget: to the agent a hung server; it still answers in the end, so the
        # proxy and the scripted server shut down at once instead of waiting out aiohttp's grace period
        Reply(text="late", delay=40.0),
    ]
    settings = load_settings([], env={}).replace(max_turns=8, agent_timeout=20.0)

    async def after(box):
        return await _processes(box), await box.read_file("/tmp/bg-started")

    result, turns, _, _, (left, started) = asyncio.run(_rollout(task, run_id, script, settings, after=after))
    assert result.outcome == "timeout" and not result.infra, result.log_tail
    assert result.tool_calls == 1 and started == b"started\n"  # the background job did run
    assert not [p for p in left if "node" in p or "sleep 300" in p], left
    assert turns[0].ok and len(turns) <= 2  # the second call, if recorded yet, was answered after the agent was gone
    assert _containers(run_id) == []


@pytest.mark.docker
@pytest.mark.agent
def test_server_error_is_an_infrastructure_failure(task, run_id):
    settings = load_settings([], env={}).replace(max_turns=8, agent_timeout=300.0, tool_choice="required")
    result, turns, *_ = asyncio.run(_rollout(task, run_id, [Reply(status=500)], settings))
    assert result.outcome == "agent_error" and result.infra, result.log_tail
    assert "API Error" in result.log_tail
    assert turns and all(t.status == 500 for t in turns)
    assert result.patch == ""


# The lost-prompt condition, forced without racing a clock: the first run talks to the model (as a discarded run may
# have before it died), then the real qwen-code starts with its stdin already at EOF, which it answers with
# "No input provided via stdin" and exit 1, the same as a prompt that arrived after its 500 ms wait.
_DISCARDED_CALL = (
    "fetch(process.env.OPENAI_BASE_URL + '/chat/completions', {method: 'POST', "
    "headers: {'content-type': 'application/json'}, body: JSON.stringify({model: "
    "process.env.OPENAI_MODEL, messages: [{role: 'user', content: 'from the discarded run'}]})})"
    ".then(r => r.text()).then(t => console.error('discarded run got: ' + t.slice(0, 60)))"
)
_LOST_PROMPT = f"""#!/bin/sh
if [ ! -e /tmp/late/first ]; then
  : > /tmp/late/first
  {AGENT_MOUNT}/node/bin/node -e "{_DISCARDED_CALL}" >&2
  exec {AGENT_MOUNT}/node/bin/node "$@" < /dev/null
fi
exec {AGENT_MOUNT}/node/bin/node "$@"
"""


@pytest.mark.docker
@pytest.mark.agent
def test_a_run_that_lost_its_prompt_is_run_again_from_a_clean_session(task, run_id):
    settings = load_settings([], env={}).replace(max_turns=8, agent_timeout=300.0, tool_choice="required")

    async def wrapped_bundle(box):  # the real bundle, its node reached through the wrapper above
        await box.write_file("/tmp/late/node/bin/node", _LOST_PROMPT, mode=0o755)
        await box.exec(f"ln -s {AGENT_MOUNT}/qwen-code /tmp/late/qwen-code", timeout=60)

    async def first_run_happened(box):
        return (await box.exec("test -e /tmp/late/first", timeout=60)).exit_code == 0

    result, turns, tok, server, raced = asyncio.run(
        _rollout(
            task,
            run_id,
            ["Nothing to change."],
            settings,
            before=wrapped_bundle,
            after=first_run_happened,
            bundle="/tmp/late",
        )
    )
    assert raced, "the wrapper's first run did not happen"
    assert result.outcome == "completed" and not result.infra and result.exit_code == 0, result.log_tail
    assert result.final_message == "Nothing to change."
    sent = [tok.decode(body["prompt"]) for _, body in server.requests]  # the proxy sends token ids upstream
    assert len(sent) == 2 and "from the discarded run" in sent[0], sent  # the discarded run did reach the model
    # ...and nothing of it is in the rollout: one turn, the real prompt, a trajectory without drift
    assert len(turns) == 1 and "Resolve the following issue" in json.dumps(turns[0].request_messages)
    assert "from the discarded run" not in json.dumps([t.request_messages for t in turns])
    traj = build_sample(turns, max_response_len=settings.rollout.max_response_len, mask_truncated=False, tokenizer=tok)
    assert traj.metadata["drift_count"] == 0 and traj.metadata["retained_fraction"] == 1.0


@pytest.mark.docker
@pytest.mark.agent
def test_a_statement_with_at_signs_reaches_the_model_whole_and_alone(task, run_id):
    """SWE-bench statements hold decorators, e-mail addresses and mentions. Unescaped, qwen-code's ``@path``
    expansion put a space before each ``@`` and appended the contents of any path that exists."""
    path, _, _ = gold_edit(task["patch"])
    statement = (
        f'`parse("https://bob:secret@host/p@th")` fails; see @{path} and @property, reported by @someone (a@b.c).'
    )
    row = {**task, "problem_statement": statement}
    settings = load_settings([], env={}).replace(max_turns=4, agent_timeout=300.0)
    result, turns, _, _, _ = asyncio.run(_rollout(row, run_id, ["Nothing to change."], settings))
    assert result.outcome == "completed" and not result.infra, result.log_tail
    [user] = [m for m in turns[0].request_messages if m["role"] == "user"]
    content = (
        user["content"]
        if isinstance(user["content"], str)
        else "".join(part.get("text", "") for part in user["content"])
    )
    assert qa.escape_at(build_prompt(row)) in content  # every @ where it was, none with a space put before it
    assert "Content from" not in content and "def " not in content  # no file appended
