"""Tool calls in the model's own text: parse a completion, render calls, constrain sampling to a call.

In token mode the proxy calls the server's completions API, so the server's tool parser never runs: the
proxy turns the sampled text into OpenAI ``tool_calls`` itself. Two formats, the ones of vLLM's
``hermes`` and ``qwen3_coder`` parsers:

* hermes:      ``<tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>``
* qwen3_coder: ``<tool_call>\\n<function=f>\\n<parameter=p>\\nvalue\\n</parameter>\\n</function>\\n</tool_call>``

``structural_tag`` builds the constraint sent with ``tool_choice: "required"``, so the sampled text *is* a
call in the template's format and the ids the model produced stay the ids it is trained on.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from qwen_swe.errors import ConfigError
from qwen_swe.paths import base_model_of

FORMATS = ("hermes", "qwen3_coder")
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.DOTALL)


@dataclass
class ParsedReply:
    """The assistant message recovered from a completion's text."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    reasoning_content: str | None = None
    errors: list[str] = field(default_factory=list)  # malformed call blocks, kept as content

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
        if self.reasoning_content:
            msg["reasoning_content"] = self.reasoning_content
        return msg


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def split_reasoning(text: str) -> tuple[str | None, str]:
    """``<think>...</think>`` (the opening tag may be in the prompt) -> (reasoning, rest)."""
    if THINK_CLOSE not in text:
        return None, text
    head, _, rest = text.partition(THINK_CLOSE)
    return head.replace(THINK_OPEN, "", 1).strip("\n") or None, rest.lstrip("\n")


def parse_completion(text: str, fmt: str = "hermes", tools: list[dict] | None = None) -> ParsedReply:
    """Split a completion into reasoning, content and tool calls.

    A call block that does not parse stays in the content (as vLLM's parsers do) and is named in
    ``errors``, so the agent sees what the model wrote and the turn records that it was ill-formed.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown tool-call format {fmt!r}; use one of {', '.join(FORMATS)}")
    reasoning, text = split_reasoning(text)
    start = text.find(CALL_OPEN)
    if start < 0:
        return ParsedReply(content=text or None, reasoning_content=reasoning)
    calls: list[dict[str, Any]] = []
    errors: list[str] = []
    for match in _BLOCK.finditer(text, start):
        body = match.group(1)
        try:
            parsed = _parse_hermes(body) if fmt == "hermes" else _parse_xml(body, tools)
        except ValueError as exc:
            errors.append(f"{exc}: {match.group(0)[:200]!r}")
            continue
        calls.extend(parsed)
    if errors or not calls:
        return ParsedReply(content=text or None, reasoning_content=reasoning, errors=errors or ["no call parsed"])
    content = text[:start].rstrip("\n")
    return ParsedReply(content=content or None, tool_calls=calls, reasoning_content=reasoning)


def _openai_call(name: str, arguments: Any) -> dict[str, Any]:
    return {
        "id": new_call_id(),
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }


def _parse_hermes(body: str) -> list[dict[str, Any]]:
    try:
        obj = json.loads(body.strip())
    except json.JSONDecodeError as exc:
        raise ValueError(f"tool call is not JSON ({exc.msg})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        raise ValueError("tool call JSON has no string 'name'")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models double-encode; keep the object the agent expects
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            raise ValueError("tool call 'arguments' is a string that is not JSON") from None
    if not isinstance(args, dict):
        raise ValueError("tool call 'arguments' is not an object")
    return [_openai_call(obj["name"], args)]


def _param_types(tools: list[dict] | None, name: str) -> dict[str, Any]:
    for tool in tools or []:
        fn = tool.get("function", tool)
        if fn.get("name") == name:
            return (fn.get("parameters") or {}).get("properties") or {}
    return {}


def _convert(value: str, spec: Any) -> Any:
    """XML parameters arrive as text; give them the JSON type the tool schema declares."""
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind in (None, "string") or (isinstance(kind, list) and "string" in kind):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _parse_xml(body: str, tools: list[dict] | None) -> list[dict[str, Any]]:
    functions = list(_FUNCTION.finditer(body))
    if not functions:
        raise ValueError("tool call has no <function=...> element")
    calls = []
    for fn in functions:
        name = fn.group(1).strip()
        if not name:
            raise ValueError("tool call has an empty function name")
        types = _param_types(tools, name)
        args = {}
        for p in _PARAMETER.finditer(fn.group(2)):
            raw = p.group(2)
            raw = raw[1:] if raw.startswith("\n") else raw
            raw = raw[:-1] if raw.endswith("\n") else raw
            key = p.group(1).strip()
            args[key] = _convert(raw, types.get(key))
        calls.append(_openai_call(name, args))
    return calls


def _arguments_schema(tool: dict) -> dict[str, Any]:
    params = tool.get("function", tool).get("parameters")
    if not isinstance(params, dict) or params.get("type", "object") != "object":
        return {"type": "object"}
    return params


def structural_tag(tools: list[dict], fmt: str = "hermes", *, strict_arguments: bool | None = None) -> dict[str, Any]:
    """A vLLM ``structured_outputs.structural_tag`` (xgrammar format) that admits only tool calls.

    One tag per tool, the calls separated by a newline as the templates render them; after the last call
    the grammar ends, so the model can only stop. The arguments follow the tool's schema when the tool is
    marked ``strict`` (vLLM's own rule for ``tool_choice: "required"``), else need only be a JSON object;
    ``strict_arguments`` True/False applies the schema to every tool / to none.
    """
    tags = []
    for tool in tools:
        fn = tool.get("function", tool)
        name = fn["name"]
        strict = fn.get("strict") is True if strict_arguments is None else strict_arguments
        schema = _arguments_schema(tool) if strict else {"type": "object"}
        if fmt == "hermes":
            tags.append(
                {
                    "type": "tag",
                    "begin": f'{CALL_OPEN}\n{{"name": {json.dumps(name)}, "arguments": ',
                    "content": {"type": "json_schema", "json_schema": schema},
                    "end": f"}}\n{CALL_CLOSE}",
                }
            )
        elif fmt == "qwen3_coder":
            tags.append(
                {
                    "type": "tag",
                    "begin": f"{CALL_OPEN}\n<function={name}>\n",
                    "content": {"type": "json_schema", "json_schema": schema, "style": "qwen_xml"},
                    "end": f"\n</function>\n{CALL_CLOSE}",
                }
            )
        else:
            raise ValueError(f"unknown tool-call format {fmt!r}; use one of {', '.join(FORMATS)}")
    return {
        "type": "structural_tag",
        "format": {"type": "tags_with_separator", "tags": tags, "separator": "\n", "at_least_one": True},
    }


# Model family -> vLLM tool-call parser; first match on the lower-cased model name or path wins. Qwen3-Coder writes
# XML tool calls (<function=...><parameter=...>) that only qwen3_coder parses; Qwen2.5/Qwen3 and the embedded
# SmolLM2 (with the compact Hermes template) write <tool_call>{json}</tool_call>, which hermes parses.
TOOL_CALL_PARSERS: tuple[tuple[str, str], ...] = (
    ("qwen3-coder", "qwen3_coder"),
    ("qwen3_coder", "qwen3_coder"),
    ("qwen3coder", "qwen3_coder"),
    ("qwen2.5", "hermes"),
    ("qwen2_5", "hermes"),
    ("qwen3", "hermes"),
    ("smollm2", "hermes"),
    ("embedded", "hermes"),
)


def tool_call_parser_for(model: str) -> str:
    name = base_model_of(model).lower()  # a checkpoint folder writes tool calls as its base model does
    for needle, parser in TOOL_CALL_PARSERS:
        if needle in name:
            return parser
    families = ", ".join(f"{needle} -> {parser}" for needle, parser in TOOL_CALL_PARSERS)
    raise ConfigError(
        f"no tool-call parser known for model {model!r} (known families: {families}); pass "
        "--tool-call-parser NAME (e.g. hermes, qwen3_coder, llama3_json) matching the format "
        "the model writes tool calls in"
    )
