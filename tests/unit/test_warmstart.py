"""The warm start's parts without containers: the expert's script, the demonstrations driver, the SFT batch."""

from __future__ import annotations

import json

import pytest

from qwen_swe.agent.qwen import escape_at
from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import Sample, Status
from qwen_swe.errors import DataError
from qwen_swe.train.update import prepare_batch
from qwen_swe.warmstart.collect import drops, usable
from qwen_swe.warmstart.demos import DemoDriver, mask_out
from qwen_swe.warmstart.expert import (
    DONE,
    GIVE_UP,
    NOOP,
    SWAP,
    ExpertServer,
    expert_turn,
    imported_names,
    one_line_fix,
    search_command,
    stumble_for,
    traceback_paths,
)

PATCH = (
    "diff --git a/pkg/mod.py b/pkg/mod.py\nindex 1..2 100644\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n"
    "@@ -3,3 +3,3 @@ def f(x):\n     a = 1\n-    return x - a\n+    return x + a\n \n"
)


class _Tok:
    """Enough of a tokenizer for the expert's bookkeeping (the real one is exercised in the protocol test)."""

    def convert_tokens_to_ids(self, token: str) -> int:
        return 2


def _row(iid: str, statement: str, patch: str = PATCH) -> dict:
    return {"instance_id": iid, "problem_statement": statement, "patch": patch}


def test_expert_reads_edits_then_stops():
    fix = one_line_fix(PATCH)
    assert fix is not None and (fix.path, fix.buggy, fix.fixed) == (
        "pkg/mod.py",
        "    return x - a",
        "    return x + a",
    )
    first = json.loads(expert_turn(fix, 0).split("\n")[1])
    second = json.loads(expert_turn(fix, 1).split("\n")[1])
    assert first == {"name": "read_file", "arguments": {"file_path": "/testbed/pkg/mod.py"}}
    assert second["name"] == "edit" and second["arguments"]["old_string"] == "return x - a"
    assert second["arguments"]["new_string"] == "return x + a"
    assert expert_turn(fix, 2) == expert_turn(fix, 5) == DONE
    two_lines = PATCH.replace("+    return x + a\n", "+    return x + a\n+    pass\n")
    assert one_line_fix(two_lines) is None


def test_expert_searches_for_the_imported_names_and_reads_only_a_file_the_search_showed():
    fix = one_line_fix(PATCH)
    statement = "`f(1)` fails\n```python\nimport pytest\nfrom pkg import f, g\nfrom pkg.mod import (h, f)\nf(1)\n```"
    names = imported_names(statement)
    assert names == ["f", "g", "h"]
    search = json.loads(expert_turn(fix, 0, names).split("\n")[1])
    assert search == {"name": "run_shell_command", "arguments": {"command": search_command(names)}}
    assert search_command(names) == 'grep -rnE "(def|class) (f|g|h)\\b" /testbed --include=*.py'
    found = "Output: /testbed/pkg/mod.py:3:def f(x):"
    assert json.loads(expert_turn(fix, 1, names, found).split("\n")[1])["name"] == "read_file"
    assert expert_turn(fix, 1, names, "Output: /testbed/pkg/other.py:3:def f(x):") == GIVE_UP
    assert json.loads(expert_turn(fix, 2, names, "edited").split("\n")[1])["name"] == "edit"
    assert expert_turn(fix, 3, names) == DONE
    assert expert_turn(fix, 0, []) == GIVE_UP  # nothing to search for: no demonstration


def test_expert_finds_the_task_and_turn_from_the_prompt():
    rows = [_row("a", "bug A"), _row("b", "bug B", PATCH.replace("mod.py", "other.py"))]
    searching = ExpertServer(rows, _Tok())
    assert searching.reply("<|im_start|>user\nbug B<|im_end|>\n<|im_start|>assistant\n") == GIVE_UP
    assert [(g["instance_id"], g["turn"]) for g in searching.gave_up] == [("b", 0)]  # why it is unresolved
    server = ExpertServer(rows, _Tok(), search=False)
    prompt = "<|im_start|>user\nbug B<|im_end|>\n<|im_start|>assistant\n"
    assert "other.py" in server.reply(prompt) and "read_file" in server.reply(prompt)
    assert "edit" in server.reply(
        prompt.replace("<|im_start|>assistant\n", "<|im_start|>assistant\nx\n" * 1) + "<|im_start|>assistant\n"
    )
    at = ExpertServer([_row("c", "bug at user@host")], _Tok(), search=False)  # the agent sees @ escaped
    seen = f"<|im_start|>user\n{escape_at('bug at user@host')}<|im_end|>\n<|im_start|>assistant\n"
    assert "read_file" in at.reply(seen)
    with pytest.raises(DataError, match="same problem statement"):
        ExpertServer([_row("a", "same"), _row("b", "same", PATCH.replace("mod.py", "x.py"))], _Tok())
    other_fix = PATCH.replace("x + a", "x * a")
    kept, skipped = usable(
        [
            _row("a", "same"),
            _row("b", "same"),
            _row("c", "one"),
            _row("d", "two", "no patch"),
            _row("e", "split"),
            _row("f", "split", other_fix),
        ]
    )
    assert [r["instance_id"] for r in kept] == ["a", "c"] and skipped == 4  # b repeats a; e and f disagree


def test_expert_reads_the_file_a_traceback_names_without_searching():
    traced = (
        "`f(1)` fails\n```python\nfrom pkg import f\nf(1)\n```\nIt fails with:\n```\n"
        'Traceback (most recent call last):\n  File "pkg/mod.py", line 4, in f\n    return x - a\n'
        "TypeError: no\n```\n"
    )
    assert traceback_paths(traced) == ["pkg/mod.py"]
    server = ExpertServer([_row("a", traced)], _Tok())
    prompt = f"<|im_start|>user\n{traced}<|im_end|>\n<|im_start|>assistant\n"
    assert json.loads(server.reply(prompt).split("\n")[1]) == {
        "name": "read_file",
        "arguments": {"file_path": "/testbed/pkg/mod.py"},
    }
    elsewhere = traced.replace("pkg/mod.py", "pkg/other.py")  # the traceback passes elsewhere: search as before
    server = ExpertServer([_row("b", elsewhere)], _Tok())
    reply = server.reply(f"<|im_start|>user\n{elsewhere}<|im_end|>\n<|im_start|>assistant\n")
    assert json.loads(reply.split("\n")[1])["arguments"] == {"command": search_command(["f"])}


def _demos(tmp_path, n: int):
    path = tmp_path / "demos.jsonl"
    path.write_text(
        "".join(
            json.dumps({"instance_id": f"t{i}", "tokens": [1, 2, 3, 4], "response_length": 2, "loss_mask": [1, 0]})
            + "\n"
            for i in range(n)
        )
    )
    return path


def test_demo_driver_walks_epochs_in_a_seeded_order_and_resumes(tmp_path):
    settings = Settings.build(train_mode="sft", sft_data=str(_demos(tmp_path, 5)), rollout_batch_size=2, seed=3)
    driver = DemoDriver(settings)
    seen = [s.metadata["instance_id"] for step in range(5) for s in driver.generate(step, step)[0]]
    assert sorted(seen[:5]) == [f"t{i}" for i in range(5)] and sorted(seen[5:10]) == sorted(seen[:5])
    again = DemoDriver(settings)
    again.load_state_dict({"position": 4})
    assert [s.metadata["instance_id"] for s in again.generate(2, 2)[0]] == seen[4:6]
    samples, _ = driver.generate(9, 7)
    assert all(s.metadata["weight_version"] == 7 and s.reward == 1.0 for s in samples)


def test_a_dropped_demonstration_is_reported_with_its_task_and_detail():
    ok = Sample(group_index=0, index=0, prompt="p", metadata={"instance_id": "t0"})
    gone = Sample(
        group_index=1,
        index=0,
        prompt="p",
        metadata={"instance_id": "t1", "drop_reason": "agent_error", "drop_detail": "qwen-code exited 1: " + "x" * 900},
    )
    ok.status, gone.status = Status.COMPLETED, Status.ABORTED
    [d] = drops([ok, gone])
    assert d["instance_id"] == "t1" and d["reason"] == "agent_error"
    assert d["detail"].startswith("qwen-code exited 1") and len(d["detail"]) == 500


def test_demo_driver_rejects_bad_files(tmp_path):
    with pytest.raises(DataError, match="SFT_DATA"):
        DemoDriver(Settings.build(train_mode="sft", sft_data=str(tmp_path / "missing.jsonl")))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_id": "x", "tokens": [1, 2]}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:1 lacks response_length, loss_mask"):
        DemoDriver(Settings.build(train_mode="sft", sft_data=str(bad)))


def test_sft_batch_trains_every_demonstration_with_advantage_one(tmp_path):
    settings = Settings.build(train_mode="sft", sft_data=str(_demos(tmp_path, 3)), rollout_batch_size=3)
    samples, _ = DemoDriver(settings).generate(0, 0)
    items, metrics = prepare_batch(samples, settings, 0)
    assert [x["advantage"] for x in items] == [1.0, 1.0, 1.0]
    assert all(x["rollout_log_probs"] is None for x in items)  # the loss then runs at ratio 1
    assert metrics["zero_variance_groups"] == 0
    grpo = Settings.build(rollout_batch_size=3)
    assert prepare_batch(samples, grpo, 0)[0] == []  # the same equal rewards give GRPO nothing


def test_a_checkpoint_folder_keeps_its_base_models_tool_call_format(tmp_path):
    from qwen_swe.errors import ConfigError
    from qwen_swe.paths import ORIGIN_FILE, base_model_of
    from qwen_swe.traffic.toolcalls import tool_call_parser_for

    sft, rl = tmp_path / "sft" / "v000008", tmp_path / "rl" / "v000004"
    for folder, parent in ((sft, "/models/smollm2-135m-instruct"), (rl, str(sft))):
        folder.mkdir(parents=True)
        (folder / ORIGIN_FILE).write_text(json.dumps({"base_model": parent}))
    assert base_model_of(str(rl)) == "/models/smollm2-135m-instruct"
    assert tool_call_parser_for(str(rl)) == "hermes"
    (sft / ORIGIN_FILE).write_text(json.dumps({"base_model": str(rl)}))  # a loop ends instead of spinning
    assert base_model_of(str(rl)) in (str(rl), str(sft))
    with pytest.raises(ConfigError, match="no tool-call parser"):
        tool_call_parser_for(str(tmp_path / "unknown" / "v000001"))


def test_expert_stumbles_on_a_fixed_fraction_of_tasks_and_recovers():
    statements = [f"bug {i}" for i in range(400)]
    kinds = [stumble_for(s, 0.5) for s in statements]
    assert 150 < sum(k is not None for k in kinds) < 250 and {NOOP, SWAP} <= set(kinds)
    assert kinds == [stumble_for(s, 0.5) for s in statements]  # from the statement alone: same on every run
    assert all(stumble_for(s, 0.0) is None for s in statements)
    assert None not in {stumble_for(s, 1.0) for s in statements}
    fix = one_line_fix(PATCH)
    calls = [expert_turn(fix, t, stumble=NOOP) for t in range(4)]
    noop = json.loads(calls[1].split("\n")[1])["arguments"]
    assert noop["old_string"] == noop["new_string"] == "return x - a"  # changes nothing
    assert calls[2] == expert_turn(fix, 1) and calls[3] == DONE  # then the real fix
    calls = [expert_turn(fix, t, stumble=SWAP) for t in range(5)]
    swap = json.loads(calls[1].split("\n")[1])["arguments"]
    assert (swap["old_string"], swap["new_string"]) == ("return x + a", "return x - a")  # not in the file
    assert calls[2] == calls[0] and calls[3] == expert_turn(fix, 1) and calls[4] == DONE  # read again, then fix
    with pytest.raises(DataError, match="recover"):
        ExpertServer([_row("a", "bug")], _Tok(), recover=1.5)


def test_a_stumble_is_kept_out_of_the_loss_and_only_there():
    tokens = [9, 9, 5, 6, 7, 2, 8, 8, 5, 6, 7, 2]  # prompt 9 9 | stumble 5 6 7 2 | tool 8 8 | fix 5 6 7 2
    mask = [1, 1, 1, 1, 0, 0, 1, 1, 1, 1]
    assert mask_out(tokens, 10, mask, [5, 6, 7, 2]) == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    with pytest.raises(DataError, match="stumble"):
        mask_out(tokens, 10, [1, 1, 1, 0, 0, 0, 1, 1, 1, 0], [5, 6, 7, 2])  # never fully trained: not the stumble
