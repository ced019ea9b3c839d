"""The agent's settings, command line and outcome mapping, without running the agent (that is in integration)."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess

import pytest

from qwen_swe.agent import qwen as qa
from qwen_swe.config.settings import Settings, load_settings
from qwen_swe.paths import AGENT_MOUNT


def _embedded() -> Settings:
    return load_settings([], env={})


def _full() -> Settings:
    return load_settings([], env={"VLLM_URL": "http://vllm:8000", "MAX_TURNS": "30", "AGENT_TIMEOUT": "900"})


# --- settings.json ----------------------------------------------------------------------------------------------
def test_compact_settings_leave_exactly_four_tools_and_force_tool_calls_only_when_asked():
    s = _embedded()
    cfg = qa.agent_settings(s.agent, s.inference, "compact")
    tools = cfg["tools"]
    assert tools["core"] == ["run_shell_command", "read_file", "edit", "write_file"]
    assert not set(tools["core"]) & set(tools["disabled"])
    assert {"agent", "tool_search", "tool_call", "get_goal", "web_fetch", "glob", "todo_write"} <= set(
        tools["disabled"]
    )
    assert set(tools["core"]) | set(tools["disabled"]) == set(qa.ALL_TOOLS)
    gen = cfg["model"]["generationConfig"]
    assert gen["samplingParams"]["max_tokens"] == s.agent.agent_max_tokens == 256
    assert "extra_body" not in gen  # the embedded default's warm-started policy chooses its own tools
    forced = qa.agent_settings(dataclasses.replace(s.agent, tool_choice="required"), s.inference, "compact")
    assert forced["model"]["generationConfig"]["extra_body"] == {"tool_choice": "required"}
    assert gen["contextWindowSize"] == 8192
    assert cfg["skills"]["disabledLevels"] == ["project", "user", "extension", "bundled"]


def test_full_settings_turn_off_hidden_calls_and_phoning_home():
    s = _full()
    cfg = qa.agent_settings(s.agent, s.inference, "full")
    assert cfg["$version"] == 4
    assert cfg["privacy"]["usageStatisticsEnabled"] is False
    assert cfg["telemetry"]["enabled"] is False
    assert cfg["memory"] == {"enableManagedAutoMemory": False, "enableManagedAutoDream": False}
    assert cfg["model"]["chatCompression"]["contextPercentageThreshold"] == 0
    assert cfg["model"]["maxSessionTurns"] == 30
    assert cfg["model"]["skipNextSpeakerCheck"] and cfg["model"]["skipLoopDetection"]
    assert cfg["general"]["checkpointing"]["enabled"] is False and cfg["general"]["chatRecording"] is False
    assert cfg["security"]["auth"]["selectedType"] == "openai"
    gen = cfg["model"]["generationConfig"]
    assert gen["samplingParams"] == {
        "temperature": s.agent.temperature,
        "top_p": 1.0,
        "max_tokens": s.agent.agent_max_tokens,
    }
    assert gen["timeout"] == int(s.inference.request_timeout * 1000)
    assert "extra_body" not in gen  # tool_choice auto: the server's default, nothing sent
    assert len(cfg["tools"]["core"]) == 7 and "list_directory" in cfg["tools"]["core"]
    json.dumps(cfg)  # written as JSON into the container


def test_required_tool_choice_follows_settings_not_profile():
    s = _full().replace(tool_choice="required", temperature=0.3)
    cfg = qa.agent_settings(s.agent, s.inference, "full")
    assert cfg["model"]["generationConfig"]["extra_body"] == {"tool_choice": "required"}
    assert cfg["model"]["generationConfig"]["samplingParams"]["temperature"] == 0.3


# --- environment and command line ------------------------------------------------------------------------------
def test_env_points_at_the_proxy_and_keeps_state_outside_the_repo():
    env = qa.agent_env("http://127.0.0.1:9000/s/abc/v1", "smol", "compact", "m1")
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:9000/s/abc/v1" and env["OPENAI_MODEL"] == "smol"
    assert env["QWEN_CODE_NO_RELAUNCH"] == "true" and env[qa.MARKER_ENV] == "m1"
    assert env["QWEN_CODE_SYSTEM_SETTINGS_PATH"].startswith(qa.QWEN_HOME)
    assert env["QWEN_SYSTEM_MD"] == f"{qa.QWEN_HOME}/system.md"
    for path in (env["QWEN_HOME"], env["QWEN_CODE_SYSTEM_SETTINGS_PATH"], qa.RUN_DIR):
        assert not path.startswith(qa.REPO_DIR)
    assert "QWEN_SYSTEM_MD" not in qa.agent_env("http://x/v1", "m", "full", "m2")


def test_command_runs_cli_js_directly_under_a_group_timeout():
    s = _full()
    line = qa.agent_command(s.agent)
    argv = shlex.split(line.split(" < ")[0])
    assert argv[:6] == ["timeout", "-s", "TERM", "-k", str(qa.KILL_GRACE), str(900 + qa.KILL_GRACE)]
    assert argv[6:9] == [f"{AGENT_MOUNT}/node/bin/node", "--expose-gc", f"{AGENT_MOUNT}/qwen-code/package/cli.js"]
    assert "cli-entry.js" not in line  # the wrapper would spawn a child that outlives a SIGTERM
    for flag, value in (("--output-format", "stream-json"), ("--max-session-turns", "30"), ("--max-wall-time", "900")):
        assert argv[argv.index(flag) + 1] == value
    assert "--yolo" in argv and "-p" not in argv and "--bare" not in argv
    assert f"< {qa.RUN_DIR}/prompt.txt" in line and f"> {qa.RUN_DIR}/stdout.jsonl" in line


def test_sweep_kills_processes_carrying_the_marker_even_in_another_session():
    marker = f"unit-{os.getpid()}"
    keep = subprocess.Popen(["sleep", "60"], start_new_session=True)
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True, env={**os.environ, qa.MARKER_ENV: marker})
    try:
        out = subprocess.run(["bash", "-c", qa.sweep_command(marker)], capture_output=True, text=True, timeout=60)
        assert "swept=1" in out.stdout
        assert victim.wait(timeout=10) == -9
        assert keep.poll() is None
    finally:
        for p in (keep, victim):
            if p.poll() is None:
                p.kill()
                p.wait()


# --- stream-json and outcomes ----------------------------------------------------------------------------------
def _line(obj: dict) -> str:
    return json.dumps(obj)


def _assistant(*blocks: dict) -> str:
    return _line({"type": "assistant", "message": {"role": "assistant", "content": list(blocks)}})


TOOL = {"type": "tool_use", "id": "call_0", "name": "run_shell_command", "input": {"command": "ls"}}


def test_parse_stream_counts_tool_calls_and_takes_the_result_text():
    stdout = "\n".join(
        [
            _line({"type": "system", "subtype": "init", "tools": ["read_file"]}),
            _assistant(TOOL),
            _assistant(TOOL, dict(TOOL, id="call_1")),
            _line({"type": "user", "message": {"content": [{"type": "tool_result", "is_error": False}]}}),
            _assistant({"type": "text", "text": "Done."}),
            _line(
                {"type": "result", "subtype": "success", "is_error": False, "num_turns": 4, "result": "Done, fixed."}
            ),
        ]
    )
    summary = qa.parse_stream(stdout)
    assert summary.tool_calls == 3
    assert summary.final_message == "Done, fixed."
    assert summary.result["num_turns"] == 4


def test_parse_stream_survives_a_line_cut_by_a_kill():
    summary = qa.parse_stream(_assistant({"type": "text", "text": "partial"}) + "\n" + '{"type":"assistant","mess')
    assert summary.result is None and summary.final_message == "partial" and summary.tool_calls == 0


OK = qa.StreamSummary(1, "done", {"type": "result", "is_error": False, "result": "done"})
NONE = qa.StreamSummary(0, "", None)
API_ERR = qa.StreamSummary(0, "", {"type": "result", "is_error": True, "result": "[API Error: 500 scripted failure]"})


@pytest.mark.parametrize(
    "exit_code,timed_out,summary,stderr,expected",
    [
        (0, False, OK, "", ("completed", False)),
        (53, False, NONE, "Reached max session turns", ("turn_limit", False)),
        (55, False, NONE, "Run aborted: wall-clock budget of 8s exceeded (--max-wall-time).", ("timeout", False)),
        (124, False, NONE, "", ("timeout", False)),
        (137, False, NONE, "", ("timeout", False)),
        (None, True, NONE, "", ("timeout", False)),
        (1, False, API_ERR, "", ("agent_error", True)),
        (0, False, API_ERR, "", ("agent_error", True)),  # 0.15-style exit 0 with an API error in the result text
        (1, False, NONE, "[API Error: Connection error.]", ("agent_error", True)),
        (
            1,
            False,
            qa.StreamSummary(6, "", {"is_error": True, "result": "Loop detection halted the run"}),
            "",
            ("agent_error", False),
        ),
        (44, False, NONE, "FatalSandboxError", ("agent_error", True)),
    ],
)
def test_classify(exit_code, timed_out, summary, stderr, expected):
    assert qa.classify(exit_code, timed_out, summary, stderr) == expected


# --- the bundle's readiness check -------------------------------------------------------------------------------
def test_bundle_info_refuses_missing_stale_and_incomplete_bundles(tmp_path):
    from qwen_swe.agent.bundle import QWEN_CODE_VERSION, AgentBundle, BundleError

    bundle = AgentBundle(tmp_path / "agent")
    with pytest.raises(BundleError, match="40_agent.sh"):
        bundle.info()
    bundle.cli.parent.mkdir(parents=True)
    bundle.node.parent.mkdir(parents=True)
    bundle.cli.write_text("")
    bundle.node.write_text("")
    bundle.ready_file.write_text(json.dumps({"node": "v22.20.0", "qwen_code": "0.15.10"}))
    with pytest.raises(BundleError, match="stale"):
        bundle.info()
    bundle.ready_file.write_text(json.dumps({"node": "v22.20.0", "qwen_code": QWEN_CODE_VERSION}))
    assert bundle.info()["qwen_code"] == QWEN_CODE_VERSION
    bundle.node.unlink()
    with pytest.raises(BundleError):
        bundle.info()
