"""Turns -> token ids, loss mask and logprobs, with the real SmolLM2 and Qwen3 tokenizers and templates."""

from __future__ import annotations

import json

import pytest

from qwen_swe.data.sample import Sample, Status
from qwen_swe.traffic.sessions import PromptBuilder, for_template
from qwen_swe.traffic.toolcalls import parse_completion
from qwen_swe.traffic.trajectory import Trajectory, TrajectoryError, Turn, build_sample, mask_from_messages, to_sample
from tests.scripted_server import fake_logprob, qwen3_tokenizer, smollm2_tokenizer
from tests.toolcall_text import render_calls

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_shell_command",
            "description": "Executes a shell command. Output is returned.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]
SYSTEM = {"role": "system", "content": "You are a coding agent in a git repository."}
USER = {"role": "user", "content": [{"type": "text", "text": "Fix the failing test in calc.py."}]}


@pytest.fixture(scope="module", params=["smollm2", "qwen3"])
def builder(request) -> PromptBuilder:
    tok = smollm2_tokenizer() if request.param == "smollm2" else qwen3_tokenizer()
    return PromptBuilder(tok)


def model_call(
    builder: PromptBuilder,
    session: list[Turn],
    messages: list[dict],
    reply: str,
    tools=TOOLS,
    max_tokens: int | None = None,
) -> Turn:
    """What the proxy does for one request in token mode, minus HTTP: plan, 'sample' ``reply``, parse, record."""
    plan = builder.plan(messages, tools, session)
    ids = builder.encode(reply)
    if max_tokens is not None and len(ids) >= max_tokens:
        ids, finish = ids[:max_tokens], "length"
    else:
        ids, finish = ids + [builder.end_id], "stop"
    text = builder.decode(ids)
    message = parse_completion(text, "hermes", tools).message() if tools else {"role": "assistant", "content": text}
    turn = Turn(
        index=len(session),
        session_id="s",
        request_messages=[dict(m) for m in messages],
        tools=tools,
        message=message,
        completion_text=text,
        prompt_ids=plan.prompt_ids,
        sampled_ids=ids,
        logprobs=[fake_logprob(t, i) for i, t in enumerate(ids)],
        finish_reason=finish,
        mode="tokens",
        prompt_source=plan.source,
        drift=plan.drift,
        weight_version=3,
    )
    session.append(turn)
    return turn


def resend(message: dict) -> dict:
    """The agent's copy of an assistant reply: arguments re-serialised compactly, as qwen-code does."""
    out = dict(message)
    if out.get("tool_calls"):
        out["tool_calls"] = [
            {
                **c,
                "function": {
                    **c["function"],
                    "arguments": json.dumps(json.loads(c["function"]["arguments"]), separators=(",", ":")),
                },
            }
            for c in out["tool_calls"]
        ]
    return out


def tool_result(turn: Turn, text: str) -> dict:
    return {
        "role": "tool",
        "tool_call_id": turn.message["tool_calls"][0]["id"],
        "content": [{"type": "text", "text": text}],
    }


CALL_LS = '<tool_call>\n{"name": "run_shell_command", "arguments": {"command" : "ls  -la"}}\n</tool_call>'
CALL_CAT = '<tool_call>\n{"name": "run_shell_command", "arguments": {"command": "cat calc.py"}}\n</tool_call>'


def three_turns(builder: PromptBuilder) -> list[Turn]:
    session: list[Turn] = []
    msgs = [SYSTEM, USER]
    t0 = model_call(builder, session, msgs, CALL_LS)
    msgs = msgs + [resend(t0.message), tool_result(t0, "calc.py\ntest_calc.py")]
    t1 = model_call(builder, session, msgs, CALL_CAT)
    msgs = msgs + [resend(t1.message), tool_result(t1, "def add(a, b):\n    return a - b\n")]
    model_call(builder, session, msgs, "The bug is in add: it subtracts.")
    return session


def sampled_positions(traj: Trajectory) -> list[int]:
    return [i for i, m in enumerate(traj.loss_mask) if m]


def test_clean_session_masks_exactly_the_sampled_ids(builder):
    turns = three_turns(builder)
    assert [t.prompt_source for t in turns] == ["render", "splice", "splice"]
    traj = build_sample(turns, max_response_len=100_000, mask_truncated=False)
    last = turns[-1]
    assert traj.tokens == last.prompt_ids + last.sampled_ids
    assert traj.prompt_length == len(turns[0].prompt_ids)
    assert len(traj.loss_mask) == len(traj.rollout_log_probs) == traj.response_length
    response = traj.tokens[traj.prompt_length :]
    trained = [response[i] for i in sampled_positions(traj)]
    assert trained == [i for t in turns for i in t.sampled_ids]
    assert [traj.rollout_log_probs[i] for i in sampled_positions(traj)] == [lp for t in turns for lp in t.logprobs]
    assert all(lp == 0.0 for lp, m in zip(traj.rollout_log_probs, traj.loss_mask) if not m)
    meta = traj.metadata
    assert meta["drift_count"] == 0 and meta["retained_fraction"] == 1.0
    assert meta["sampled_tokens"] == sum(len(t.sampled_ids) for t in turns) == sum(traj.loss_mask)
    assert meta["weight_versions"] == ["3"] and meta["truncated"] is False


def test_every_later_prompt_extends_the_earlier_prompt_and_sample(builder):
    turns = three_turns(builder)
    for prev, cur in zip(turns, turns[1:]):
        held = prev.prompt_ids + prev.sampled_ids
        assert cur.prompt_ids[: len(held)] == held


def test_splice_equals_full_render_when_the_model_wrote_the_template_text(builder):
    """No drift: if the sampled text is what the template renders, the spliced prompt is the full render's ids."""
    session: list[Turn] = []
    msgs = [SYSTEM, USER]
    plan0 = builder.plan(msgs, TOOLS, session)
    assert plan0.prompt_ids == builder.encode(builder.render(msgs, TOOLS))
    rendered_call = render_calls([{"name": "run_shell_command", "arguments": {"command": "ls"}}], "hermes")
    message = parse_completion(rendered_call, "hermes", TOOLS).message()
    nxt = msgs + [message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "a.py"}]
    full = builder.render(nxt, TOOLS)
    before = builder.render(msgs, TOOLS)
    body = full[len(before) : full.index("<|im_end|>", len(before))]  # exactly what the template shows
    session.append(
        Turn(
            index=0,
            session_id="s",
            request_messages=msgs,
            tools=TOOLS,
            message=message,
            prompt_ids=plan0.prompt_ids,
            sampled_ids=builder.encode(body) + [builder.end_id],
        )
    )
    plan1 = builder.plan(nxt, TOOLS, session)
    assert plan1.source == "splice"
    assert plan1.prompt_ids == builder.encode(full)


def test_rewritten_history_is_rendered_and_counted_as_drift(builder):
    turns = three_turns(builder)
    session = turns[:2]
    rewritten = [SYSTEM, {"role": "user", "content": "Summary of earlier work: listed files, read calc.py."}]
    t = model_call(builder, session, rewritten, "Continuing.", tools=TOOLS)
    assert t.prompt_source == "render"
    assert t.drift["reason"] == "history_rewritten" and t.drift["message_index"] == 1
    traj = build_sample(session, max_response_len=100_000, mask_truncated=False)
    meta = traj.metadata
    assert meta["drift_count"] == 1 and meta["proxy_drift_count"] == 1
    lost = len(session[0].sampled_ids) + len(session[1].sampled_ids)
    assert meta["dropped_sampled_tokens"] == lost
    assert meta["retained_sampled_tokens"] == len(t.sampled_ids) == sum(traj.loss_mask)
    assert traj.tokens == t.prompt_ids + t.sampled_ids
    # the retained sampled ids are the last call's, at the very end
    assert traj.tokens[-len(t.sampled_ids) :] == t.sampled_ids and traj.loss_mask[-len(t.sampled_ids) :] == [1] * len(
        t.sampled_ids
    )
    assert meta["retained_fraction"] == pytest.approx(len(t.sampled_ids) / (lost + len(t.sampled_ids)))


def test_re_tokenised_history_drift_masks_only_the_unprovable_tail(builder):
    """Forward mode: the server re-renders the resent history, and the non-canonical call text is lost."""
    turns = three_turns(builder)
    t0, t1 = turns[0], turns[1]
    msgs = t1.request_messages
    forward_prompt = builder.encode(builder.render(msgs, TOOLS))  # what vLLM's chat endpoint would see
    t1_fwd = Turn(
        index=1,
        session_id="s",
        request_messages=msgs,
        tools=TOOLS,
        message=t1.message,
        prompt_ids=forward_prompt,
        sampled_ids=t1.sampled_ids,
        logprobs=t1.logprobs,
    )
    traj = build_sample([t0, t1_fwd], max_response_len=100_000, mask_truncated=False)
    meta = traj.metadata
    assert meta["drift_count"] == 1
    event = meta["drift_events"][0]
    assert len(t0.prompt_ids) <= event["at"] < len(t0.prompt_ids) + len(t0.sampled_ids)
    kept = event["at"] - len(t0.prompt_ids)  # the sampled ids before the first re-rendered difference survive
    assert meta["retained_sampled_tokens"] == kept + len(t1.sampled_ids)
    assert meta["dropped_sampled_tokens"] == len(t0.sampled_ids) - kept
    assert traj.tokens == forward_prompt + t1.sampled_ids
    assert sum(traj.loss_mask) == kept + len(t1.sampled_ids)


def test_retried_request_splices_from_the_turn_it_continues(builder):
    turns = three_turns(builder)
    session = turns[:2]
    again = model_call(builder, session, turns[1].request_messages, CALL_CAT)  # the agent retried turn 1
    assert again.prompt_source == "splice" and again.prompt_ids == turns[1].prompt_ids
    traj = build_sample(session, max_response_len=100_000, mask_truncated=False)
    assert traj.metadata["drift_count"] == 1  # the abandoned answer is replaced by the retried one
    assert traj.tokens == again.prompt_ids + again.sampled_ids


def test_length_cut_turn_gets_a_closing_end_token(builder):
    session: list[Turn] = []
    msgs = [SYSTEM, USER]
    t0 = model_call(
        builder, session, msgs, "I will start by looking at the repository layout carefully", tools=None, max_tokens=5
    )
    assert t0.finish_reason == "length" and t0.sampled_ids[-1] != builder.end_id
    t1 = model_call(
        builder, session, msgs + [resend(t0.message), {"role": "user", "content": "go on"}], "ok", tools=None
    )
    assert t1.prompt_source == "splice"
    held = t0.prompt_ids + t0.sampled_ids
    assert t1.prompt_ids[: len(held)] == held and t1.prompt_ids[len(held)] == builder.end_id


def test_changed_tools_force_a_full_render(builder):
    session: list[Turn] = []
    t0 = model_call(builder, session, [SYSTEM, USER], CALL_LS)
    other = TOOLS + [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    t1 = model_call(builder, session, [SYSTEM, USER, resend(t0.message), tool_result(t0, "x")], CALL_CAT, tools=other)
    assert t1.prompt_source == "render" and t1.drift["reason"] == "tools_changed"


def test_truncation_keeps_the_first_response_tokens(builder):
    turns = three_turns(builder)
    full = build_sample(turns, max_response_len=100_000, mask_truncated=False)
    cut = build_sample(turns, max_response_len=40, mask_truncated=False)
    assert cut.response_length == 40 and cut.metadata["truncated"] is True
    assert cut.metadata["truncated_tokens"] == full.response_length - 40
    assert cut.tokens == full.tokens[: full.prompt_length + 40]
    assert cut.loss_mask == full.loss_mask[:40] and cut.rollout_log_probs == full.rollout_log_probs[:40]
    masked = build_sample(turns, max_response_len=40, mask_truncated=True)
    assert masked.loss_mask == [0] * 40 and masked.rollout_log_probs == [0.0] * 40
    assert masked.metadata["trained_tokens"] == 0 and full.metadata["truncated"] is False


def test_error_turns_are_skipped_and_counted(builder):
    turns = three_turns(builder)
    failed = Turn(index=99, session_id="s", request_messages=turns[1].request_messages, status=500, error="boom")
    traj = build_sample([turns[0], failed, turns[1], turns[2]], max_response_len=100_000, mask_truncated=False)
    assert traj.metadata["error_turns"] == 1 and traj.metadata["drift_count"] == 0
    assert traj.tokens == turns[2].prompt_ids + turns[2].sampled_ids


def test_turns_without_ids_fall_back_to_template_masking():
    tok = qwen3_tokenizer()
    builder = PromptBuilder(tok)
    turns = three_turns(builder)
    bare = [Turn.from_dict({**t.to_dict(), "prompt_ids": None, "sampled_ids": None, "logprobs": None}) for t in turns]
    with pytest.raises(TrajectoryError, match="tokenizer"):
        build_sample(bare, max_response_len=100_000, mask_truncated=False)
    traj = build_sample(bare, max_response_len=100_000, mask_truncated=False, tokenizer=tok)
    ids, mask = mask_from_messages(tok, turns[-1].request_messages + [turns[-1].message], TOOLS)
    first = mask.index(1)
    assert traj.metadata["source"] == "chat_template"
    assert traj.tokens == ids and traj.loss_mask == mask[first:] and traj.rollout_log_probs is None
    assert traj.response_length == len(ids) - first


def spans(tok, ids, mask) -> list[str]:
    out, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            out.append(tok.decode(cur))
            cur = []  # noqa: E702
    if cur:
        out.append(tok.decode(cur))
    return out


def test_mask_from_messages_qwen3_matches_slime_semantics():
    tok = qwen3_tokenizer()
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "run_shell_command", "arguments": '{"command": "ls"}'},
    }
    messages = [
        SYSTEM,
        {"role": "user", "content": "Fix it."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
        {"role": "tool", "tool_call_id": "call_2", "content": "b.py"},
        {"role": "assistant", "content": "Done."},
    ]
    ids, mask = mask_from_messages(tok, messages, TOOLS)
    assert len(ids) == len(mask)
    assert ids == tok.encode(
        tok.apply_chat_template(for_template(messages), tools=TOOLS, tokenize=False), add_special_tokens=False
    )
    assert spans(tok, ids, mask) == [
        '<tool_call>\n{"name": "run_shell_command", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>\n',
        # last turn: `<think>\n` is 0 and the rest trained; the `\n\n` token straddling both starts untrained
        "</think>\n\nDone.<|im_end|>\n",
    ]
    im_end, nl = tok.convert_tokens_to_ids("<|im_end|>"), tok.encode("\n")[0]
    ends = [i for i, t in enumerate(ids) if t == im_end]
    # system, user, tool(s) turns end untrained; each assistant turn's <|im_end|> and its newline are trained
    assert [mask[i] for i in ends] == [0, 0, 1, 0, 1]
    assert all(ids[i + 1] == nl and mask[i + 1] == mask[i] for i in ends)
    header = tok.encode("<|im_start|>assistant\n")
    for start in [i for i in range(len(ids)) if ids[i : i + 3] == header]:
        assert mask[start : start + 3] == [0, 0, 0]


def test_mask_from_messages_step_loss_mask_and_smollm2():
    tok = smollm2_tokenizer()
    messages = [
        SYSTEM,
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello!", "step_loss_mask": 0},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "Hello again!"},
    ]
    ids, mask = mask_from_messages(tok, messages)
    assert spans(tok, ids, mask) == ["Hello again!<|im_end|>\n"]


def test_to_sample_fills_a_sample(builder):
    traj = build_sample(three_turns(builder), max_response_len=30, mask_truncated=False)
    sample = to_sample(traj, Sample(index=4, metadata={"instance_id": "x"}))
    assert sample.tokens == traj.tokens and sample.response_length == 30 and len(sample.loss_mask) == 30
    assert sample.rollout_log_probs == traj.rollout_log_probs and sample.metadata["instance_id"] == "x"
    assert sample.metadata["trajectory"]["truncated"] is True and sample.status == Status.TRUNCATED
    assert sample.weight_versions == ["3"]


def test_turn_round_trips_through_a_dict(builder):
    turn = three_turns(builder)[1]
    assert Turn.from_dict(json.loads(json.dumps(turn.to_dict()))) == turn


def test_reusing_the_last_render_gives_the_same_prompt(builder):
    turns = three_turns(builder)
    msgs = turns[2].request_messages
    fresh = builder.plan(msgs, TOOLS, turns[:2])
    previous = builder.plan(turns[1].request_messages, TOOLS, turns[:1])
    reused = builder.plan(msgs, TOOLS, turns[:2], None, (1, previous.text))
    stale = builder.plan(msgs, TOOLS, turns[:2], None, (1, "not a prefix"))
    assert fresh.prompt_ids == reused.prompt_ids == stale.prompt_ids == turns[2].prompt_ids
    assert fresh.source == reused.source == "splice"
