"""Trajectory building for a 128-turn, ~64k-token session, against the generation time it represents.

Two costs a long rollout pays that generation does not:

* ``build_sample`` over the recorded turns (once per sample, after the rollout);
* the proxy's per-call prompt planning in token mode (render the conversation with the chat template,
  find the continued turn, splice its ids, tokenise the new text), summed over the 128 calls.

Both are printed as a fraction of the generation time the session represents at ``--tok-per-s`` (target
< 1%), and against a reference measured in the same run: tokenising the final conversation once, which is
what re-tokenising a transcript would cost.

Run: ``.venv/bin/python -m benchmarks.bench_trajectory [--turns 128] [--tok-per-s 50]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from qwen_swe.traffic.sessions import PromptBuilder
from qwen_swe.traffic.toolcalls import parse_completion
from qwen_swe.traffic.trajectory import Turn, build_sample
from tests.scripted_server import fake_logprob, smollm2_tokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_shell_command",
            "description": "Executes a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]


def session_turns(
    builder: PromptBuilder, turns: int, *, output_chars: int, result_chars: int
) -> tuple[list[Turn], float]:
    """A token-mode session as the proxy records it; returns the turns and the total planning time."""
    words = "def compute(value):\n    return value * 2  # doubles the input for the caller\n"
    messages = [
        {"role": "system", "content": "You are a coding agent. " + words * 20},
        {"role": "user", "content": [{"type": "text", "text": "Fix the failing test. " + words * 10}]},
    ]
    recorded: list[Turn] = []
    planning = 0.0
    last_render = None
    for i in range(turns):
        t0 = time.perf_counter()
        plan = builder.plan(messages, TOOLS, recorded, None, last_render)
        planning += time.perf_counter() - t0
        last_render = (i, plan.text)
        thought = (f"Step {i}: " + words * 40)[:output_chars]
        text = thought + (
            '\n<tool_call>\n{"name": "run_shell_command", "arguments": {"command": "sed -n 1,40p a.py"}}\n</tool_call>'
        )
        ids = builder.encode(text) + [builder.end_id]
        message = parse_completion(text, "hermes", TOOLS).message()
        recorded.append(
            Turn(
                index=i,
                session_id="bench",
                request_messages=messages,
                tools=TOOLS,
                message=message,
                prompt_ids=plan.prompt_ids,
                sampled_ids=ids,
                logprobs=[fake_logprob(t, k) for k, t in enumerate(ids)],
                prompt_source=plan.source,
            )
        )
        resent = dict(
            message,
            tool_calls=[
                {
                    **c,
                    "function": {
                        **c["function"],
                        "arguments": json.dumps(json.loads(c["function"]["arguments"]), separators=(",", ":")),
                    },
                }
                for c in message["tool_calls"]
            ],
        )
        messages = messages + [
            resent,
            {
                "role": "tool",
                "tool_call_id": message["tool_calls"][0]["id"],
                "content": [{"type": "text", "text": (words * 200)[:result_chars]}],
            },
        ]
    return recorded, planning


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=128)
    parser.add_argument("--tok-per-s", type=float, default=50.0)
    parser.add_argument("--output-chars", type=int, default=640, help="assistant text per turn (~250 tokens with call)")
    parser.add_argument("--result-chars", type=int, default=1000, help="tool output per turn")
    args = parser.parse_args()
    print(f"command: {' '.join([os.path.relpath(sys.executable), '-m', 'benchmarks.bench_trajectory', *sys.argv[1:]])}")
    builder = PromptBuilder(smollm2_tokenizer())
    turns, planning = session_turns(builder, args.turns, output_chars=args.output_chars, result_chars=args.result_chars)
    sampled = sum(len(t.sampled_ids) for t in turns)
    total = len(turns[-1].prompt_ids) + len(turns[-1].sampled_ids)
    gen_seconds = sampled / args.tok_per_s
    reps = 5
    t0 = time.perf_counter()
    for _ in range(reps):
        traj = build_sample(turns, max_response_len=10**6, mask_truncated=False)
    build = (time.perf_counter() - t0) / reps
    assert traj.metadata["retained_fraction"] == 1.0 and len(traj.tokens) == total
    final_text = builder.tokenizer.decode(traj.tokens, skip_special_tokens=False)
    t0 = time.perf_counter()
    builder.encode(final_text)
    retokenise = time.perf_counter() - t0
    print(
        f"session: {args.turns} turns, {total} tokens, {sampled} sampled; "
        f"generation at {args.tok_per_s:g} tok/s = {gen_seconds:.0f} s; "
        f"splices {sum(t.prompt_source == 'splice' for t in turns)}"
    )
    print(
        f"  build_sample                 {build * 1000:9.1f} ms  = {100 * build / gen_seconds:.4f}% of generation  "
        f"(x{build / retokenise:.2f} of one re-tokenisation of the transcript, {retokenise * 1000:.1f} ms)"
    )
    print(
        f"  proxy planning, all calls    {planning * 1000:9.1f} ms  = "
        f"{100 * planning / gen_seconds:.4f}% of generation  "
        f"({planning / args.turns * 1000:.1f} ms per call, last calls ~{total} tokens)"
    )
    print(f"  target: each < 1% of generation -> {'met' if max(build, planning) < 0.01 * gen_seconds else 'NOT met'}")


if __name__ == "__main__":
    main()
