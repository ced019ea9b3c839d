"""Recorded turns -> one training sample: token ids, loss mask, rollout logprobs.

Built from the ids the server returned, never from re-tokenised text: the first turn's prompt ids are
the prompt; each later turn's prompt must start with everything held so far (earlier prompt + sampled
ids). Where it does not (the agent rewrote its history, a template re-rendered a past turn), the held
tokens past the common prefix are replaced by the new prompt with mask 0 - their sampled origin can no
longer be proven - and the drift is counted, as slime's TrajectoryManager does. A session whose server
gave no ids falls back to chat-template masking (``mask_from_messages``), with the semantics of slime's
``MultiTurnLossMaskGenerator`` for Qwen/ChatML templates.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from qwen_swe.data.sample import stamp
from qwen_swe.errors import TrajectoryError

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
ASSISTANT_HEADER = f"{IM_START}assistant\n"


def _text(content: Any) -> str:
    """Message content as the server flattens it: text parts joined by newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and part.get("text") is not None:
            parts.append(str(part["text"]))
    return "\n".join(parts)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw if raw is not None else {}


def for_template(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as vLLM hands them to the chat template: flattened text (None -> ""), tool-call arguments as objects."""
    out = []
    for msg in messages:
        m = dict(msg)
        if isinstance(m.get("content"), list) or m.get("content") is None:
            m["content"] = _text(m.get("content"))
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {
                    **c,
                    "function": {
                        **c.get("function", {}),
                        "arguments": _arguments(c.get("function", {}).get("arguments")),
                    },
                }
                for c in m["tool_calls"]
            ]
        out.append(m)
    return out


@dataclass
class Turn:
    """One model call of a session, as the proxy saw it."""

    index: int
    session_id: str
    request_messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    params: dict[str, Any] = field(default_factory=dict)  # temperature, top_p, max_tokens, tool_choice, stream
    message: dict[str, Any] | None = None  # the assistant message the agent received
    completion_text: str | None = None  # raw sampled text (token mode)
    prompt_ids: list[int] | None = None
    sampled_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    latency: float = 0.0  # seconds the agent waited
    upstream_latency: float = 0.0  # of which the inference server took
    weight_version: Any = None
    weight_version_end: Any = None  # PARTIAL_ROLLOUTS: a sync to this version began while the call was in flight
    status: int = 200
    error: str | None = None
    mode: str = "forward"
    prompt_source: str = "upstream"  # upstream | render | splice
    drift: dict[str, Any] | None = None  # the proxy could not splice: why and where
    parse_errors: list[str] = field(default_factory=list)
    started_at: float = 0.0
    started_mono: float = 0.0  # time.monotonic() when the request arrived; the call ends ``latency`` later
    cached_tokens: int | None = None  # prompt tokens the server found in its prefix cache, where it reports them
    server_timing: dict[str, float] | None = None  # the server's queue / prefill / decode milliseconds, where reported

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def weight_versions(turns: list[Turn]) -> list[str]:
    """Every weight version whose tokens the turns may hold: each call's at its start, and the one a sync moved to
    while it was in flight."""
    found = {v for t in turns for v in (t.weight_version, t.weight_version_end) if v is not None}
    return sorted(str(v) for v in found)


@dataclass
class Trajectory:
    """A sample's token view: ``tokens`` = prompt ids + response ids; masks and logprobs over the response."""

    tokens: list[int]
    response_length: int
    loss_mask: list[int]
    rollout_log_probs: list[float] | None
    metadata: dict[str, Any]

    @property
    def prompt_length(self) -> int:
        return len(self.tokens) - self.response_length


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] holds, a[:hi] == b[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def build_sample(
    turns: Iterable[Turn], *, max_response_len: int, mask_truncated: bool, tokenizer: Any = None
) -> Trajectory:
    """Linearise a session's turns into one sample (see the module docstring for the drift rule)."""
    turns = list(turns)
    good = [t for t in turns if t.ok and t.prompt_ids is not None and t.sampled_ids is not None]
    failed = sum(not t.ok for t in turns)
    usable = [t for t in turns if t.ok]
    if usable and len(good) < len(usable):  # some successful turns carry no ids: the token path cannot be exact
        if tokenizer is None:
            raise TrajectoryError(
                f"{len(usable) - len(good)} of {len(usable)} turns carry no token ids; pass the "
                "model's tokenizer to fall back to chat-template masking"
            )
        return _from_messages(usable, tokenizer, max_response_len, mask_truncated, failed)
    seq = _splice(good)
    tokens, mask, logps, prompt_len, drift = seq.tokens, seq.mask, seq.logps, seq.prompt_len, seq.drift
    sampled, missing_logprobs = seq.sampled, seq.missing_logprobs
    retained = sum(mask)
    meta = {
        "source": "token_ids",
        "turns": len(turns),
        "model_turns": len(good),
        "error_turns": failed,
        "sampled_tokens": sampled,
        "retained_sampled_tokens": retained,
        "retained_fraction": retained / sampled if sampled else 1.0,
        "drift_count": len(drift),
        "drift_events": drift,
        "dropped_sampled_tokens": sum(d["dropped_sampled"] for d in drift),
        "proxy_drift_count": sum(t.drift is not None for t in good),
        "missing_logprobs": missing_logprobs,
        "weight_versions": weight_versions(good),
    }
    return _finish(tokens, prompt_len, mask, logps, meta, max_response_len, mask_truncated)


@dataclass
class _Spliced:
    """One token sequence from a session's turns, with its mask and logprobs aligned."""

    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    prompt_len: int = 0
    sampled: int = 0
    missing_logprobs: int = 0
    drift: list[dict[str, Any]] = field(default_factory=list)

    def add_prompt(self, turn: Turn, first: bool) -> None:
        """Extend by the turn's prompt; where it does not extend the sequence, cut back and record the drift."""
        assert turn.prompt_ids is not None  # token mode records them
        prompt = list(turn.prompt_ids)
        keep = 0 if first else _common_prefix(self.tokens, prompt)
        if not first and keep < len(self.tokens):
            self.drift.append(
                {
                    "turn": turn.index,
                    "at": keep,
                    "held": len(self.tokens),
                    "dropped_sampled": sum(self.mask[keep:]),
                    "proxy_drift": turn.drift,
                }
            )
            del self.tokens[keep:], self.mask[keep:], self.logps[keep:]
            self.prompt_len = min(self.prompt_len, keep)
        self.tokens.extend(prompt[keep:])
        self.mask.extend([0] * (len(prompt) - keep))
        self.logps.extend([0.0] * (len(prompt) - keep))
        if first:
            self.prompt_len = len(prompt)

    def add_sampled(self, turn: Turn) -> None:
        assert turn.sampled_ids is not None  # token mode records them
        ids = list(turn.sampled_ids)
        lp = list(turn.logprobs) if turn.logprobs is not None and len(turn.logprobs) == len(ids) else None
        if lp is None:
            self.missing_logprobs += len(ids)
        self.tokens.extend(ids)
        self.mask.extend([1] * len(ids))
        self.logps.extend(lp if lp is not None else [0.0] * len(ids))
        self.sampled += len(ids)


def _splice(good: list[Turn]) -> _Spliced:
    seq = _Spliced()
    for n, turn in enumerate(good):
        seq.add_prompt(turn, first=n == 0)
        seq.add_sampled(turn)
    return seq


def _finish(
    tokens: list[int],
    prompt_len: int,
    mask: list[int],
    logps: list[float] | None,
    meta: dict[str, Any],
    max_response_len: int,
    mask_truncated: bool,
) -> Trajectory:
    response_mask = mask[prompt_len:]
    response_lp = logps[prompt_len:] if logps is not None else None
    excess = len(response_mask) - max_response_len
    truncated = excess > 0
    if truncated:
        tokens = tokens[: prompt_len + max_response_len]
        response_mask = response_mask[:max_response_len]
        response_lp = response_lp[:max_response_len] if response_lp is not None else None
    if truncated and mask_truncated:
        response_mask = [0] * len(response_mask)
    meta.update(truncated=truncated, truncated_tokens=max(excess, 0), trained_tokens=sum(response_mask))
    if response_lp is not None:
        response_lp = [lp if m else 0.0 for lp, m in zip(response_lp, response_mask)]
    return Trajectory(
        tokens=tokens,
        response_length=len(response_mask),
        loss_mask=response_mask,
        rollout_log_probs=response_lp,
        metadata=meta,
    )


def _from_messages(
    turns: list[Turn], tokenizer: Any, max_response_len: int, mask_truncated: bool, failed: int
) -> Trajectory:
    last = turns[-1]
    messages = list(last.request_messages) + ([last.message] if last.message else [])
    ids, mask = mask_from_messages(tokenizer, messages, last.tools)
    prompt_len = mask.index(1) if 1 in mask else len(mask)
    trained = sum(mask)
    meta = {
        "source": "chat_template",
        "turns": len(turns) + failed,
        "model_turns": len(turns),
        "error_turns": failed,
        "sampled_tokens": trained,
        "retained_sampled_tokens": trained,
        "retained_fraction": 1.0 if trained else 0.0,
        "drift_count": 0,
        "drift_events": [],
        "dropped_sampled_tokens": 0,
        "proxy_drift_count": 0,
        "missing_logprobs": trained,
        "weight_versions": weight_versions(turns),
    }
    return _finish(ids, prompt_len, mask, None, meta, max_response_len, mask_truncated)


def _render(tokenizer: Any, messages: list[dict], tools: list[dict] | None, **kw: Any) -> str:
    return tokenizer.apply_chat_template(for_template(messages), tools=tools or None, tokenize=False, **kw)


def mask_from_messages(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> tuple[list[int], list[int]]:
    """Render the whole conversation once and mask assistant turns, like slime's ``qwen3_5`` generator.

    Trained (1): each assistant turn's body after ``<|im_start|>assistant\\n`` (reasoning, content, tool
    calls) through its closing ``<|im_end|>`` and the newline after it; a leading ``<think>\\n`` is not.
    Everything else - system, user, tool messages, the assistant header - is 0, as is any assistant
    message with ``step_loss_mask`` other than 1. A token counts as trained when its first character is.
    """
    text = _render(tokenizer, messages, tools)
    trained = _assistant_char_spans(text, messages)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(enc["input_ids"])
    offsets = enc["offset_mapping"]
    mask = []
    span = 0
    for start, _end in offsets:
        while span < len(trained) and trained[span][1] <= start:
            span += 1
        inside = span < len(trained) and trained[span][0] <= start < trained[span][1]
        mask.append(1 if inside else 0)
    return ids, mask


def _assistant_char_spans(text: str, messages: list[dict[str, Any]]) -> list[tuple[int, int]]:
    wanted = [m.get("step_loss_mask", 1) == 1 for m in messages if m.get("role") == "assistant"]
    spans: list[tuple[int, int]] = []
    pos = 0
    for train in wanted:
        head = text.find(ASSISTANT_HEADER, pos)
        if head < 0:
            raise TrajectoryError(
                "the chat template did not render an assistant turn with ChatML markers "
                f"('{ASSISTANT_HEADER!r}'); mask_from_messages supports Qwen/ChatML templates only"
            )
        body = head + len(ASSISTANT_HEADER)
        close = text.find(IM_END, body)
        end = len(text) if close < 0 else close + len(IM_END)
        if text.startswith("\n", end):
            end += 1
        start = body + len("<think>\n") if text.startswith("<think>\n", body) else body
        if train:
            spans.append((start, end))
        pos = end
    return spans


def to_sample(traj: Trajectory, sample: Any) -> Any:
    """Fill a ``Sample`` (slime's or ours) with the trajectory; its other fields stay as the caller set them."""
    sample.tokens = list(traj.tokens)
    sample.response_length = traj.response_length
    sample.loss_mask = list(traj.loss_mask)
    sample.rollout_log_probs = list(traj.rollout_log_probs) if traj.rollout_log_probs is not None else None
    sample.weight_versions = list(traj.metadata.get("weight_versions", []))
    stamp(sample, trajectory=dict(traj.metadata))
    if traj.metadata.get("truncated"):
        sample.status = type(sample).Status.TRUNCATED
    return sample
