"""The conversation kept in rollout dumps: the whole history a person needs, tool outputs capped with the cap
recorded, and per model call what was sampled."""

from __future__ import annotations

from qwen_swe.traffic.trajectory import Turn
from qwen_swe.traffic.transcript import transcript


def test_the_last_request_plus_the_reply_is_the_whole_conversation_with_long_outputs_capped():
    history = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "fix it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "run_shell_command", "arguments": '{"command": "cat a.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "x" * 5000},
    ]
    turns = [
        Turn(
            index=0,
            session_id="s",
            request_messages=history[:2],
            sampled_ids=[1, 2, 3],
            latency=0.5,
            message=history[2],
        ),
        Turn(
            index=1,
            session_id="s",
            request_messages=history,
            sampled_ids=[4, 5],
            message={"role": "assistant", "content": "done"},
            finish_reason="stop",
        ),
    ]
    t = transcript(turns, cap=100)
    roles = [m["role"] for m in t["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    tool = t["messages"][3]
    assert len(tool["content"]) == 100 and tool["truncated_chars"] == 4900 and t["capped_messages"] == 1
    assert t["messages"][2]["tool_calls"][0]["function"]["name"] == "run_shell_command"
    assert [c["sampled_tokens"] for c in t["calls"]] == [3, 2] and t["output_cap"] == 100


def test_a_session_without_calls_has_an_empty_transcript():
    assert transcript([]) == {"messages": [], "output_cap": 4000, "capped_messages": 0, "calls": []}
