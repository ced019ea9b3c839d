"""A session's token history: the prompt ids for the next model call, built from what the model saw.

The agent resends its whole conversation as text on every call, and re-tokenising that text does not
give back the ids the model sampled (canonicalised JSON, different BPE splits). So the next prompt is
built as slime's adapter does: the prompt + sampled ids of the recorded turn the conversation continues,
then the ids of the newly rendered text after that assistant turn. Where the conversation does not
continue any recorded turn (the agent rewrote its history), the whole prompt is rendered afresh and the
drift is recorded.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwen_swe.traffic.trajectory import IM_END, Turn, _arguments, _text, for_template


@dataclass
class PromptPlan:
    """The ids to send, and how they were obtained."""

    prompt_ids: list[int]
    source: str  # "splice" (continues a recorded turn) or "render" (whole prompt rendered)
    matched_turn: int | None = None
    drift: dict[str, Any] | None = None
    text: str = ""  # the rendered prompt; the next call reuses it instead of rendering the same prefix again


@dataclass
class Session:
    """One rollout's view of the proxy: the agent gets ``base_url``; the rollout takes ``turns`` at close."""

    id: str
    base_url: str
    meta: dict[str, Any] = field(default_factory=dict)
    turns: list[Turn] = field(default_factory=list)
    next_index: int = 0
    last_render: tuple[int, str] | None = None  # (turn index, its rendered prompt)
    bug: BaseException | None = None  # a proxy bug met while serving this session; the rollout re-raises it
    seed: int | None = None  # sampling seed of the attempt: each turn's request gets one derived from it

    def take_index(self) -> int:
        self.next_index += 1
        return self.next_index - 1

    def turn_seed(self, index: int) -> int | None:
        return None if self.seed is None else derive_seed(self.seed, index)


def derive_seed(*parts: Any) -> int:
    """A 31-bit seed from its parts, the same in every process (unlike ``hash``)."""
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:4], "big") >> 1


def _key(msg: dict[str, Any]) -> tuple:
    """What identifies a message when the agent resends it (formatting of arguments and reasoning ignored)."""
    role = msg.get("role")
    if role == "assistant":
        calls = tuple(
            (
                c.get("id"),
                c.get("function", {}).get("name"),
                json.dumps(_arguments(c.get("function", {}).get("arguments")), sort_keys=True),
            )
            for c in msg.get("tool_calls") or ()
        )
        return role, _text(msg.get("content")).strip(), calls
    return role, _text(msg.get("content")), msg.get("tool_call_id"), msg.get("name")


def _continues(reply: dict[str, Any], resent: dict[str, Any]) -> bool:
    """Is ``resent`` (from the agent's history) the assistant reply we gave? Call ids are unique; else content."""
    if resent.get("role") != "assistant":
        return False
    ours = [c.get("id") for c in reply.get("tool_calls") or ()]
    theirs = [c.get("id") for c in resent.get("tool_calls") or ()]
    if ours or theirs:
        return ours == theirs
    return _text(reply.get("content")).strip() == _text(resent.get("content")).strip()


class PromptBuilder:
    """Renders conversations with the served chat template and splices in recorded ids."""

    def __init__(self, tokenizer: Any, chat_template: str | None = None) -> None:
        if chat_template and "{" not in chat_template and Path(chat_template).is_file():
            chat_template = Path(chat_template).read_text()
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        vocab = tokenizer.get_vocab()
        self.end_text = IM_END if IM_END in vocab else tokenizer.eos_token
        self.end_id = vocab[self.end_text]
        self.stop_ids = {self.end_id} | {i for i in [tokenizer.eos_token_id] if i is not None}

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        generation_prompt: bool = True,
        template_kwargs: dict[str, Any] | None = None,
    ) -> str:
        kwargs = dict(template_kwargs or {})
        if self.chat_template:
            kwargs["chat_template"] = self.chat_template
        return self.tokenizer.apply_chat_template(
            for_template(messages),
            tools=tools or None,
            tokenize=False,
            add_generation_prompt=generation_prompt,
            **kwargs,
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        """The sampled text, without the stop token that ended it."""
        if ids and ids[-1] in self.stop_ids:
            ids = ids[:-1]
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def plan(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        history: list[Turn],
        template_kwargs: dict[str, Any] | None = None,
        last_render: tuple[int, str] | None = None,
    ) -> PromptPlan:
        """The prompt ids for ``messages``; ``last_render`` = (turn index, its rendered prompt) saves a render."""
        full = self.render(messages, tools, True, template_kwargs)
        plan = self._plan(full, messages, tools, history, template_kwargs, last_render)
        plan.text = full
        return plan

    def _plan(
        self,
        full: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        history: list[Turn],
        template_kwargs: dict[str, Any] | None,
        last_render: tuple[int, str] | None,
    ) -> PromptPlan:
        recorded = [
            t
            for t in history
            if t.ok and t.prompt_ids is not None and t.sampled_ids is not None and t.message is not None
        ]
        if not recorded:
            return PromptPlan(self.encode(full), "render")
        keys = [_key(m) for m in messages]
        for turn in reversed(recorded):
            assert turn.message is not None and turn.prompt_ids is not None and turn.sampled_ids is not None
            n = len(turn.request_messages)
            if len(messages) <= n or not _continues(turn.message, messages[n]):
                continue
            if keys[:n] != [_key(m) for m in turn.request_messages]:
                continue
            if (turn.tools or None) != (tools or None):
                return PromptPlan(
                    self.encode(full),
                    "render",
                    None,
                    {"reason": "tools_changed", "turn": turn.index, "message_index": n},
                )
            before = last_render[1] if last_render and last_render[0] == turn.index else None
            if before is None or not full.startswith(before):
                before = self.render(messages[:n], tools, True, template_kwargs)
            if not full.startswith(before):
                return PromptPlan(
                    self.encode(full),
                    "render",
                    None,
                    {"reason": "render_not_prefix", "turn": turn.index, "message_index": n},
                )
            tail = full[len(before) :]
            cut = tail.find(self.end_text)
            if cut < 0:
                return PromptPlan(
                    self.encode(full),
                    "render",
                    None,
                    {"reason": "no_end_of_turn", "turn": turn.index, "message_index": n},
                )
            delta = self.encode(tail[cut + len(self.end_text) :])
            closing = [] if turn.sampled_ids and turn.sampled_ids[-1] == self.end_id else [self.end_id]
            ids = list(turn.prompt_ids) + list(turn.sampled_ids) + closing + delta
            return PromptPlan(ids, "splice", turn.index)
        last = recorded[-1]
        n = len(last.request_messages)
        differs = next(
            (i for i, (a, b) in enumerate(zip(keys, (_key(m) for m in last.request_messages))) if a != b),
            min(n, len(messages)),
        )
        return PromptPlan(
            self.encode(full),
            "render",
            None,
            {"reason": "history_rewritten", "turn": last.index, "message_index": differs},
        )
