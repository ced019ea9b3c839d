"""What a model writes for tool calls in each format the proxy parses: the tests' way to script a model's reply
(the library only parses these texts, never writes them)."""

from __future__ import annotations

import json
from typing import Any

from qwen_swe.traffic.toolcalls import CALL_CLOSE, CALL_OPEN


def render_calls(calls: list[dict[str, Any]], fmt: str = "hermes") -> str:
    """The text a model writes for these calls (OpenAI shape or ``{"name", "arguments"}``), joined by newlines."""
    blocks = []
    for call in calls:
        fn = call.get("function", call)
        args = fn.get("arguments", {})
        args = json.loads(args) if isinstance(args, str) else args
        if fmt == "hermes":
            payload = json.dumps({"name": fn["name"], "arguments": args}, ensure_ascii=False)
            blocks.append(f"{CALL_OPEN}\n{payload}\n{CALL_CLOSE}")
        else:
            params = "".join(
                f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}\n</parameter>\n"
                for k, v in args.items()
            )
            blocks.append(f"{CALL_OPEN}\n<function={fn['name']}>\n{params}</function>\n{CALL_CLOSE}")
    return "\n".join(blocks)


def hermes_call(name: str, **arguments: Any) -> str:
    """One call in the Hermes format the proxy parses (what the embedded model is asked to write)."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"
