"""The real embedded vLLM CPU server: tool calls, exact token ids and logprobs (chat and token-id completions), the
chat template shared with the tokenizer, and weight reload from disk (changed weights change the output; the
original folder restores it exactly)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from qwen_swe import paths
from qwen_swe.config import settings as config
from qwen_swe.inference.client import InferenceClient
from qwen_swe.inference.embedded_server import EMBEDDED_SERVED_NAME
from qwen_swe.traffic.upstream import served_figures

pytestmark = pytest.mark.vllm

MODEL = EMBEDDED_SERVED_NAME
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Reads a file from the repository. Returns its text.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "file path"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_shell_command",
            "description": "Runs a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
]


@pytest.fixture(scope="module")
def client(embedded_vllm: str) -> InferenceClient:
    return InferenceClient(embedded_vllm, timeout=300)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(paths.embedded_model_dir()))


def test_server_lists_the_embedded_model(client: InferenceClient):
    assert client.health()
    assert MODEL in client.models()


def test_forced_tool_call_comes_back_parsed_with_token_ids(client: InferenceClient, tokenizer):
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": [{"type": "text", "text": "Show me the file setup.py"}]},
    ]
    body = client.post(
        "/v1/chat/completions",
        {
            "model": MODEL,
            "messages": messages,
            "tools": TOOLS,
            "tool_choice": "required",
            "max_tokens": 96,
            "temperature": 0.0,
            "return_token_ids": True,
            "logprobs": True,
        },
    )
    choice = body["choices"][0]
    calls = choice["message"]["tool_calls"]
    assert calls and calls[0]["function"]["name"] in {"read_file", "run_shell_command"}
    assert isinstance(json.loads(calls[0]["function"]["arguments"]), dict)
    ids, lps = choice["token_ids"], choice["logprobs"]["content"]
    assert ids and len(ids) == len(lps) == body["usage"]["completion_tokens"]
    assert all(isinstance(x["logprob"], float) and x["logprob"] <= 0.0 for x in lps)
    # The server renders with the folder's chat_template.jinja: the same ids the trainer's tokenizer produces.
    expected = tokenizer.apply_chat_template(
        messages, tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert body["prompt_token_ids"] == list(expected)


def test_history_with_null_content_and_tool_results_renders(client: InferenceClient, tokenizer):
    """What qwen-code resends: assistant tool calls with null content, tool results, content as a list of parts."""
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "List the files."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "run_shell_command", "arguments": '{"command": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "setup.py\nsrc"}]},
    ]
    body = client.post(
        "/v1/chat/completions",
        {
            "model": MODEL,
            "messages": messages,
            "tools": TOOLS,
            "max_tokens": 8,
            "temperature": 0.0,
            "return_token_ids": True,
        },
    )
    text = tokenizer.decode(body["prompt_token_ids"])
    assert '<tool_call>\n{"name": "run_shell_command", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>' in text
    assert "<|im_start|>user\n<tool_response>\nsetup.py\nsrc\n</tool_response><|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert text.count('\n{"name": "read_file"') == 1  # one compact line per tool


def test_completion_from_token_ids_returns_ids_and_logprobs(client: InferenceClient, tokenizer):
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    body = client.post(
        "/v1/completions",
        {
            "model": MODEL,
            "prompt": list(prompt),
            "max_tokens": 12,
            "temperature": 1.0,
            "seed": 7,
            "return_token_ids": True,
            "logprobs": 0,
        },
    )
    choice = body["choices"][0]
    assert choice["prompt_token_ids"] == list(prompt)
    assert 0 < len(choice["token_ids"]) == len(choice["logprobs"]["token_logprobs"]) <= 12
    assert tokenizer.decode(choice["token_ids"]) == choice["text"]


def test_served_logprobs_are_the_sampled_distributions_as_the_trainer_computes_them(client: InferenceClient, tokenizer):
    """``--logprobs-mode processed_logprobs``: a reply sampled at temperature 0.7 carries the log-probs of the
    distribution it was drawn from, which the trainer's policy recomputes from logits / 0.7 (bf16 serving noise
    apart); vLLM's default, the temperature-1 log-probs, would put every importance ratio off 1."""
    import torch
    from transformers import AutoModelForCausalLM

    from qwen_swe.train.policy import PolicyModel, make_micro_batch

    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a short poem about the sea."}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    body = client.post(
        "/v1/completions",
        {
            "model": MODEL,
            "prompt": list(prompt),
            "max_tokens": 48,
            "temperature": 0.7,
            "seed": 3,
            "return_token_ids": True,
            "logprobs": 0,
        },
    )
    choice = body["choices"][0]
    ids, served = choice["token_ids"], torch.tensor(choice["logprobs"]["token_logprobs"])
    lm = AutoModelForCausalLM.from_pretrained(str(paths.embedded_model_dir()), dtype=torch.float32)
    mb = make_micro_batch([{"tokens": list(prompt) + ids, "response_length": len(ids)}], torch.device("cpu"))

    def gap(temperature: float) -> float:
        with torch.no_grad():
            logp, _ = PolicyModel(lm, temperature=temperature)(
                mb.input_ids, mb.attention_mask, mb.positions, mb.targets
            )
        return float((logp - served).abs().mean())

    at_sampling, at_one = gap(0.7), gap(1.0)
    print(f"mean |served - trainer| over {len(ids)} tokens: {at_sampling:.4f} at 0.7, {at_one:.4f} at 1.0")
    assert len(ids) >= 16
    assert at_sampling < 0.1 and at_sampling < at_one / 2


def _grpo_settings(url: str) -> config.Settings:
    return config.Settings.build(vllm_url=url, served_model_name=MODEL, temperature=0.7, tool_choice="auto")


def test_preflight_measures_the_temperature_in_the_served_logprobs(client: InferenceClient, embedded_vllm: str):
    """The server started here serves the sampled distribution's log-probs: the probe's log-prob gap doubles at
    temperature 0.5, and a GRPO run at T 0.7 against it passes the preflight."""
    from qwen_swe import preflight

    scale = preflight.served_temperature_scale(client, MODEL)
    print(f"processed_logprobs: the probe's log-prob gap scaled {scale} at temperature 0.5")
    assert scale is not None and abs(scale - 2.0) < 0.1
    preflight.check_logprobs_mode(_grpo_settings(embedded_vllm))


@pytest.mark.slow
def test_preflight_refuses_a_server_that_serves_temperature_one_logprobs(tmp_path: Path):
    """vLLM's default ``--logprobs-mode raw_logprobs`` (an external VLLM_URL started by hand): a GRPO run sampling
    at T 0.7 with its log-probs as the behaviour policy's is refused before it starts, naming the fix. (This test's
    own server also shows that vLLM's ZMQ sockets and temporary files go to the server's private folder, removed when
    it stops.)"""
    import dataclasses

    from qwen_swe import preflight
    from qwen_swe.errors import ConfigError
    from qwen_swe.inference.embedded_server import embedded_serve_config
    from qwen_swe.inference.server import VLLMServer

    serve = dataclasses.replace(
        embedded_serve_config(config.load_settings([], env={})), extra_args=("--logprobs-mode", "raw_logprobs")
    )  # argparse: the last one wins
    with VLLMServer(serve, tmp_path / "vllm.log") as server:
        url = server.start(900)
        rpc_dir = server.rpc_dir
        assert rpc_dir is not None and any(path.is_socket() for path in rpc_dir.iterdir())
        assert any(path.name.startswith("vllm_dist_") for path in rpc_dir.iterdir())  # its temp files as well
        client = InferenceClient(url, timeout=300)
        scale = preflight.served_temperature_scale(client, MODEL)
        print(f"raw_logprobs: the probe's log-prob gap scaled {scale} at temperature 0.5")
        assert scale is not None and abs(scale - 1.0) < 0.05
        with pytest.raises(ConfigError, match=r"VLLM_URL=.* serves temperature-1 log-probs.*processed_logprobs"):
            preflight.check_logprobs_mode(_grpo_settings(url))
        preflight.check_logprobs_mode(_grpo_settings(url).replace(temperature=1.0))  # T 1: the same log-probs
    assert not rpc_dir.exists()


def _probe(client: InferenceClient) -> tuple[list[int], list[float]]:
    body = client.post(
        "/v1/completions",
        {
            "model": MODEL,
            "prompt": "The capital of France is",
            "max_tokens": 8,
            "temperature": 0.0,
            "return_token_ids": True,
            "logprobs": 0,
        },
    )
    choice = body["choices"][0]
    return choice["token_ids"], choice["logprobs"]["token_logprobs"]


def test_reload_changed_weights_then_restore(client: InferenceClient, tmp_path: Path):
    import torch
    from safetensors.torch import load_file, save_file

    original = paths.embedded_model_dir()
    changed = tmp_path / "step_000001"
    changed.mkdir()
    weights = load_file(str(original / "model.safetensors"))
    for name in weights:  # silence every MLP of the first ten layers
        if "down_proj" in name and int(name.split(".")[2]) < 10:
            weights[name] = torch.zeros_like(weights[name])
    save_file(weights, str(changed / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(original / "config.json", changed / "config.json")

    before = _probe(client)
    try:
        assert client.reload_weights(changed) == 1
        assert client.weight_version.path == str(changed)
        after = _probe(client)
        assert after != before
    finally:
        client.reload_weights(original)  # the server is shared by the session: leave it as it was
    assert _probe(client) == before
    assert client.weight_version.version == 2
    status = client.get("/is_paused")
    assert status == {"is_paused": False}


@pytest.mark.slow
def test_lora_adapter_hot_loads_and_reloads_in_place(tmp_path: Path):
    """Runtime LoRA (the Modal path for LoRA training): a server started with LORA_RANK serves a PEFT adapter under
    its own model id, changes the logprobs, and takes a new adapter under the same id in place."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from qwen_swe.inference.embedded_server import embedded_server

    def adapter(seed: int) -> Path:
        torch.manual_seed(seed)
        base = AutoModelForCausalLM.from_pretrained(str(paths.embedded_model_dir()))
        peft_model = get_peft_model(
            base, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        )
        out = tmp_path / f"lora_{seed}"
        peft_model.save_pretrained(str(out))
        return out

    def first_logprob(client: InferenceClient, model: str) -> float:
        body = client.post(
            "/v1/completions",
            {"model": model, "prompt": "The capital of France is", "max_tokens": 1, "temperature": 0.0, "logprobs": 0},
        )
        return body["choices"][0]["logprobs"]["token_logprobs"][0]

    first, second = adapter(1), adapter(2)
    settings = config.load_settings([], env={"LORA_RANK": "8"})
    with embedded_server(settings, log_dir=tmp_path / "logs") as url:
        client = InferenceClient(url, timeout=300)
        base = first_logprob(client, MODEL)
        assert client.load_lora("policy", first) == 1
        assert "policy" in client.models()
        with_first = first_logprob(client, "policy")
        assert client.load_lora("policy", second) == 2
        with_second = first_logprob(client, "policy")
        assert len({base, with_first, with_second}) == 3
        assert first_logprob(client, MODEL) == base  # the base model is untouched


def test_each_answer_says_its_cached_prompt_tokens_and_its_timing(client: InferenceClient):
    """The flags the timeline needs (--enable-prompt-tokens-details, --enable-per-request-metrics): the second of two
    calls with one long prompt finds most of it in the prefix cache, and each answer carries its queue, prefill and
    decode times, read as the proxy reads them."""
    prompt = "Count the words of this line, slowly and carefully. " * 40
    request = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 4, "temperature": 0}
    first, second = (served_figures(client.post("/v1/chat/completions", request)) for _ in range(2))
    prompt_tokens = client.post("/v1/chat/completions", request)["usage"]["prompt_tokens"]
    assert first[1] is not None and set(first[1]) == {"queue_ms", "prefill_ms", "decode_ms"}, first
    assert second[0] is not None and prompt_tokens // 2 < second[0] <= prompt_tokens, (second, prompt_tokens)


def _counter(client: InferenceClient, name: str) -> float:
    """The sum of a metric's samples over its labels, the exact name only (not its ``_created`` time stamps)."""
    samples = (line for line in client.get("/metrics").splitlines() if not line.startswith("#"))
    return sum(float(line.rsplit(" ", 1)[1]) for line in samples if re.split(r"[{ ]", line, maxsplit=1)[0] == name)


def _wait_decoding(client: InferenceClient, tokens_before: float, done: dict, timeout: float = 300.0) -> None:
    """Until the server has generated a few tokens of the one request in flight: it is decoding (whatever the load;
    a fixed sleep either came before the request was scheduled or, on a fast CPU, after it ended)."""
    import time

    deadline = time.monotonic() + timeout
    while _counter(client, "vllm:generation_tokens_total") < tokens_before + 3:
        assert "at" not in done and time.monotonic() < deadline, "the generation never showed as decoding"
        time.sleep(0.05)


@pytest.mark.parametrize("interrupt", [True, False], ids=["interrupting", "draining"])
def test_an_interrupting_sync_does_not_wait_for_the_generation_in_flight(embedded_vllm: str, tmp_path: Path, interrupt):
    """PARTIAL_ROLLOUTS: a reload while a long generation runs returns before it ends (the request frozen, preempted
    and continued with the reloaded weights, counted as a preemption by the server), and the generation still
    comes back whole; a draining sync (the default) returns only after it."""
    import threading
    import time

    client = InferenceClient(embedded_vllm, timeout=300, interrupt=interrupt)
    request = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "ignore_eos": True}
    done: dict = {}

    def generate() -> None:
        done["body"] = client.post("/v1/completions", request)
        done["at"] = time.monotonic()

    before, tokens = _counter(client, "vllm:num_preemptions_total"), _counter(client, "vllm:generation_tokens_total")
    worker = threading.Thread(target=generate)
    worker.start()
    _wait_decoding(client, tokens, done)
    assert "at" not in done, "the generation ended before the sync began: make it longer"
    client.reload_weights(paths.embedded_model_dir())  # the same weights: the continued text is the same text
    synced = time.monotonic()
    worker.join(timeout=300)
    assert done["body"]["usage"]["completion_tokens"] == 400
    assert client.get("/is_paused") == {"is_paused": False}
    if interrupt:
        assert synced < done["at"], "the interrupting sync waited for the generation"
        assert _counter(client, "vllm:num_preemptions_total") > before
    else:
        assert synced >= done["at"], "the draining sync returned before the generation ended"
