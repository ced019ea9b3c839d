"""The compact Hermes chat template, rendered by the real tokenizer of the converted SmolLM2 folder, and the
conversion cache. The folder is built by scripts/setup (50_model.sh); if missing, it is built here (~20 s)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from qwen_swe.inference import embedded_model

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_shell_command",
            "description": "Executes a given shell command. The command runs in bash.\nLong details follow here.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "x" * 500}, "timeout": {"type": "number"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Reads a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
]
CALL = {"id": "c1", "type": "function", "function": {"name": "run_shell_command", "arguments": '{"command": "ls"}'}}


@pytest.fixture(scope="module")
def folder() -> Path:
    return embedded_model.ensure_embedded_model()


@pytest.fixture(scope="module")
def tok(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def render(tok, messages, **kw) -> str:
    return tok.apply_chat_template(messages, tokenize=False, **kw)


def test_folder_template_is_the_repo_template(folder: Path, tok):
    assert (folder / "chat_template.jinja").read_text() == embedded_model.TEMPLATE_PATH.read_text()
    assert tok.chat_template == embedded_model.TEMPLATE_PATH.read_text()


def test_tools_are_one_compact_line_each(tok):
    text = render(tok, [{"role": "user", "content": "hi"}], tools=TOOLS, add_generation_prompt=True)
    lines = text.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first == {
        "name": "run_shell_command",
        "description": "Executes a given shell command",
        "arguments": {"command": "string", "timeout": "number"},
        "required": ["command"],
    }
    assert json.loads(lines[1])["required"] == []
    assert "xxxx" not in text and "Long details" not in text
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_qwen_code_history_renders(tok):
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "You are an agent."}]},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "tool_calls": [CALL, {**CALL, "id": "c2"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "out1"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "out2"}]},
        {"role": "assistant", "content": "Done."},
    ]
    text = render(tok, messages, tools=TOOLS)
    assert text.startswith("<|im_start|>system\nYou are an agent.\n\n# Tools")
    assert "<|im_start|>user\na\nb<|im_end|>\n" in text
    call = '<tool_call>\n{"name": "run_shell_command", "arguments": {"command": "ls"}}\n</tool_call>'
    assert f"<|im_start|>assistant\n{call}\n{call}<|im_end|>\n" in text
    assert (
        "<|im_start|>user\n<tool_response>\nout1\n</tool_response>\n<tool_response>\nout2\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\nDone.<|im_end|>\n"
    ) in text


def test_no_tools_keeps_smollm_default_system(tok):
    text = render(tok, [{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_resent_tool_call_keeps_the_sampled_token_prefix(tok):
    """The model samples `<tool_call>...</tool_call><|im_end|>`; the re-rendered history must start with those ids."""
    history = [{"role": "user", "content": "list files"}]
    prompt = tok.apply_chat_template(history, tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False)
    sampled = tok.encode(
        '<tool_call>\n{"name": "run_shell_command", "arguments": {"command": "ls"}}\n</tool_call>',
        add_special_tokens=False,
    ) + [tok.convert_tokens_to_ids("<|im_end|>")]
    resent = tok.apply_chat_template(
        history + [{"role": "assistant", "content": None, "tool_calls": [CALL]}],
        tools=TOOLS,
        tokenize=True,
        return_dict=False,
    )
    assert list(resent[: len(prompt) + len(sampled)]) == list(prompt) + sampled


def test_cached_folder_is_reused_and_a_new_template_is_rewritten_in_place(folder: Path, tmp_path: Path):
    copy = tmp_path / "model"
    shutil.copytree(folder, copy, copy_function=os.link)  # hard links: no 540 MB copy
    weights = (copy / "model.safetensors").stat()
    assert embedded_model.ensure_embedded_model(copy) == copy
    stamp = json.loads((copy / embedded_model.STAMP_NAME).read_text())
    stamp["template_sha256"] = "old"
    for name, text in ((embedded_model.STAMP_NAME, json.dumps(stamp)), ("chat_template.jinja", "old template")):
        (copy / name).unlink()  # break the hard link before writing, so the real folder is untouched
        (copy / name).write_text(text)
    embedded_model.ensure_embedded_model(copy)
    assert (copy / "chat_template.jinja").read_text() == embedded_model.TEMPLATE_PATH.read_text()
    after = (copy / "model.safetensors").stat()
    assert (after.st_ino, after.st_mtime_ns) == (weights.st_ino, weights.st_mtime_ns)  # weights not rebuilt
