"""Tool calls parsed from a model's own text, both formats, and the constraint that forces one."""

from __future__ import annotations

import json

import pytest

from qwen_swe.traffic.toolcalls import parse_completion, split_reasoning, structural_tag
from tests.toolcall_text import render_calls

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_shell_command",
            "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}, "flags": {"type": "array"}},
            },
        },
    },
]


def _calls(reply):
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in reply.tool_calls]


def test_hermes_single_call_with_preamble():
    text = 'Let me look.\n<tool_call>\n{"name": "run_shell_command", "arguments": {"command": "ls -la"}}\n</tool_call>'
    reply = parse_completion(text, "hermes", TOOLS)
    assert reply.content == "Let me look."
    assert _calls(reply) == [("run_shell_command", {"command": "ls -la"})]
    assert reply.tool_calls[0]["id"].startswith("call_") and reply.tool_calls[0]["type"] == "function"
    assert reply.errors == []


def test_hermes_parallel_calls_get_distinct_ids():
    text = render_calls(
        [{"name": "read_file", "arguments": {"path": "a.py"}}, {"name": "read_file", "arguments": {"path": "b.py"}}],
        "hermes",
    )
    reply = parse_completion(text, "hermes", TOOLS)
    assert [a["path"] for _, a in _calls(reply)] == ["a.py", "b.py"]
    assert len({c["id"] for c in reply.tool_calls}) == 2
    assert reply.content is None


def test_hermes_non_canonical_json_and_unclosed_block():
    text = '<tool_call>\n{"name" : "run_shell_command",\n "arguments" : {"command" : "echo \\u00e9"}}'
    reply = parse_completion(text, "hermes", TOOLS)  # cut before </tool_call>, as at max_tokens
    assert _calls(reply) == [("run_shell_command", {"command": "echo é"})]


@pytest.mark.parametrize(
    "bad",
    [
        '<tool_call>\n{"name": "run_shell_command", "arguments": {"command": "ls"\n</tool_call>',  # broken JSON
        '<tool_call>\n{"arguments": {"command": "ls"}}\n</tool_call>',  # no name
        '<tool_call>\n{"name": "x", "arguments": [1, 2]}\n</tool_call>',  # arguments not an object
        "<tool_call>\n</tool_call>",
    ],
)
def test_hermes_malformed_stays_content(bad):
    reply = parse_completion("prefix " + bad, "hermes", TOOLS)
    assert reply.tool_calls == []
    assert reply.content == "prefix " + bad
    assert reply.errors


def test_hermes_string_arguments_are_decoded():
    text = '<tool_call>\n{"name": "read_file", "arguments": "{\\"path\\": \\"x\\"}"}\n</tool_call>'
    assert _calls(parse_completion(text, "hermes", TOOLS)) == [("read_file", {"path": "x"})]


def test_qwen3_coder_xml_with_types_from_schema():
    text = (
        "I will read it.\n<tool_call>\n<function=read_file>\n<parameter=path>\nsrc/a b.py\n</parameter>\n"
        '<parameter=limit>\n20\n</parameter>\n<parameter=flags>\n["x"]\n</parameter>\n</function>\n</tool_call>'
    )
    reply = parse_completion(text, "qwen3_coder", TOOLS)
    assert reply.content == "I will read it."
    assert _calls(reply) == [("read_file", {"path": "src/a b.py", "limit": 20, "flags": ["x"]})]


def test_qwen3_coder_multiline_value_and_two_calls():
    calls = [
        {"name": "run_shell_command", "arguments": {"command": "cat <<EOF\nline 1\nline 2\nEOF"}},
        {"name": "read_file", "arguments": {"path": "x", "limit": 3}},
    ]
    reply = parse_completion(render_calls(calls, "qwen3_coder"), "qwen3_coder", TOOLS)
    assert _calls(reply) == [(c["name"], c["arguments"]) for c in calls]


@pytest.mark.parametrize(
    "bad", ["<tool_call>\nno function here\n</tool_call>", "<tool_call>\n<function=>\n</function>\n</tool_call>"]
)
def test_qwen3_coder_malformed_stays_content(bad):
    reply = parse_completion(bad, "qwen3_coder", TOOLS)
    assert reply.tool_calls == [] and reply.content == bad and reply.errors


def test_reasoning_is_split_off():
    text = (
        '<think>\nshould list\n</think>\n\n<tool_call>\n{"name": "run_shell_command", "arguments": {"command": "ls"}}'
        "\n</tool_call>"
    )
    reply = parse_completion(text, "hermes", TOOLS)
    assert reply.reasoning_content == "should list"
    assert _calls(reply) == [("run_shell_command", {"command": "ls"})]
    assert split_reasoning("plain") == (None, "plain")
    assert reply.message()["reasoning_content"] == "should list"


def test_plain_text_has_no_calls():
    reply = parse_completion("All done.", "hermes", TOOLS)
    assert reply.content == "All done." and reply.tool_calls == [] and reply.errors == []
    assert reply.message() == {"role": "assistant", "content": "All done."}


def test_unknown_format_is_rejected():
    with pytest.raises(ValueError, match="hermes"):
        parse_completion("x", "pythonic")


def test_structural_tag_hermes_matches_the_template_prefix():
    tag = structural_tag(TOOLS, "hermes")
    fmt = tag["format"]
    assert tag["type"] == "structural_tag" and fmt["type"] == "tags_with_separator" and fmt["at_least_one"]
    begins = [t["begin"] for t in fmt["tags"]]
    assert begins[0] == '<tool_call>\n{"name": "run_shell_command", "arguments": '
    # what the tag admits is exactly what render_calls writes and the parser reads back
    call = render_calls([{"name": "run_shell_command", "arguments": {"command": "ls"}}], "hermes")
    assert call.startswith(begins[0]) and call.endswith(fmt["tags"][0]["end"])
    # as vLLM does for tool_choice "required": the schema binds only tools marked strict
    assert fmt["tags"][0]["content"]["json_schema"] == {"type": "object"}
    strict_tools = [{"type": "function", "function": {**TOOLS[0]["function"], "strict": True}}, TOOLS[1]]
    mixed = structural_tag(strict_tools, "hermes")["format"]["tags"]
    assert mixed[0]["content"]["json_schema"]["required"] == ["command"]
    assert mixed[1]["content"]["json_schema"] == {"type": "object"}
    forced = structural_tag(TOOLS, "hermes", strict_arguments=True)["format"]["tags"]
    assert forced[1]["content"]["json_schema"]["properties"]["limit"] == {"type": "integer"}


def test_structural_tag_qwen3_coder():
    fmt = structural_tag(TOOLS, "qwen3_coder")["format"]
    assert fmt["tags"][1]["begin"] == "<tool_call>\n<function=read_file>\n"
    assert fmt["tags"][1]["content"]["style"] == "qwen_xml"
    call = render_calls([{"name": "read_file", "arguments": {"path": "x"}}], "qwen3_coder")
    assert call.startswith(fmt["tags"][1]["begin"]) and call.endswith(fmt["tags"][1]["end"])
