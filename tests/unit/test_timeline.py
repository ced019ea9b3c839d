"""A rollout's timeline and a step's summary of it (qwen_swe/rollout/timeline.py): hand-built spans give exact
fractions; the proxy's turns become model-call spans with the gaps between them (traffic/transcript.call_spans);
what vLLM reports about a call (prefix-cached tokens, queue / prefill / decode time) is read from its response."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from qwen_swe.inference.client import InferenceClient
from qwen_swe.rollout.server_counters import read_counters, snapshot, step_figures
from qwen_swe.rollout.timeline import MODEL, OTHER, TOOL, Clock, Span, summarize, union_seconds
from qwen_swe.traffic.trajectory import Turn
from qwen_swe.traffic.transcript import call_spans
from qwen_swe.traffic.upstream import served_figures
from qwen_swe.train.metrics import format_line


def _record(origin: float, seconds: float, *spans: tuple) -> dict:
    return {"origin": origin, "seconds": seconds, "spans": [Span(*s).to_dict() for s in spans]}


# Two rollouts of one step, on one wall-clock axis:
#   A: 100..110  boot 0-2, model 2-5 (100 prompt tokens, 60 cached), tool 5-6, model 6-8 (200, 150 cached), grade 8-10
#   B: 104..109  boot 0-1, model 1-3 (50 prompt tokens, cache not reported), grade 3-4, then 1 s under no span
A = _record(
    100.0,
    10.0,
    ("boot", 0.0, 2.0),
    (MODEL, 2.0, 5.0, {"prompt_tokens": 100, "cached_tokens": 60}),
    (TOOL, 5.0, 6.0, {"tools": ["edit"]}),
    (MODEL, 6.0, 8.0, {"prompt_tokens": 200, "cached_tokens": 150}),
    ("grade", 8.0, 10.0),
)
B = _record(104.0, 5.0, ("boot", 0.0, 1.0), (MODEL, 1.0, 3.0, {"prompt_tokens": 50}), ("grade", 3.0, 4.0))


def test_a_steps_figures_from_hand_built_spans():
    step = summarize([A, B])
    assert step is not None and step.rollouts == 2
    # model calls in flight: A 102-105, 106-108 and B 105-107 -> 102..108, 6 s of the phase's 100..110
    assert step.model_seconds == pytest.approx(6.0) and step.phase_seconds == pytest.approx(10.0)
    assert step.model_busy == pytest.approx(0.6)
    # shares of the rollouts' summed 15 s
    assert step.shares == pytest.approx({MODEL: 7 / 15, "boot": 3 / 15, TOOL: 1 / 15, "grade": 3 / 15, OTHER: 1 / 15})
    assert sum(step.shares.values()) == pytest.approx(1.0)
    assert step.cache_hit_rate == pytest.approx(210 / 300)  # B's call does not report its cache: left out
    assert step.tail == pytest.approx(10.0 / 7.5)  # slowest over the median of (10, 5)
    metrics = step.metrics()
    assert metrics["timeline/model_busy"] == pytest.approx(0.6)
    assert metrics["timeline/share/other"] == pytest.approx(1 / 15)
    assert metrics["timeline/cache_hit_rate"] == pytest.approx(0.7)


def test_records_without_a_timeline_are_skipped_and_none_left_is_no_summary():
    assert summarize([None, {"origin": 1.0}]) is None  # old records, a backend that does not record spans
    alone = summarize([None, B])
    assert alone is not None and alone.rollouts == 1 and alone.tail == pytest.approx(1.0)
    assert alone.cache_hit_rate is None and "timeline/cache_hit_rate" not in alone.metrics()
    assert alone.model_busy == pytest.approx(2.0 / 5.0)


def test_union_of_intervals():
    assert union_seconds([(0.0, 10.0), (2.0, 3.0), (12.0, 13.0)]) == pytest.approx(11.0)
    assert union_seconds([(5.0, 6.0), (0.0, 1.0), (0.5, 2.0)]) == pytest.approx(3.0)
    assert union_seconds([]) == 0.0


def test_a_clock_keeps_offsets_from_its_start_and_times_a_block_that_raises():
    clock = Clock()
    t = clock.origin_mono
    clock.add("grade", t + 4.0, t + 5.0, {"start": 0.5})  # attrs may use any name
    clock.add("boot", t + 0.0, t + 1.5)
    clock.add("diff", t + 3.0, t + 2.0)  # an end before its start: a zero-length span, never a negative one
    with pytest.raises(RuntimeError), clock.span("agent_setup") as attrs:
        attrs["step"] = "write"
        raise RuntimeError("the block failed")
    record = clock.record()
    kinds = [s["kind"] for s in record["spans"]]
    assert kinds == ["boot", "agent_setup", "diff", "grade"]  # sorted by start (the block began just after 0)
    spans = {s["kind"]: s for s in record["spans"]}
    assert (spans["boot"]["start"], spans["boot"]["end"]) == pytest.approx((0.0, 1.5), abs=1e-3)
    assert spans["diff"]["start"] == spans["diff"]["end"] == pytest.approx(3.0, abs=1e-3)
    assert spans["grade"]["attrs"] == {"start": 0.5}
    assert spans["agent_setup"]["attrs"] == {"step": "write"}
    assert record["seconds"] >= 0.0 and record["origin"] == clock.origin_wall


def _turn(index: int, start: float, latency: float, tools: list[str] | None = None, **kw) -> Turn:
    calls = [{"id": f"c{i}", "function": {"name": n, "arguments": "{}"}} for i, n in enumerate(tools or [])]
    message = {"role": "assistant", "content": "", **({"tool_calls": calls} if calls else {})}
    return Turn(
        index=index,
        session_id="s",
        request_messages=[],
        message=message,
        prompt_ids=list(range(10 * (index + 1))),
        sampled_ids=[1, 2, 3],
        started_mono=start,
        latency=latency,
        upstream_latency=latency - 0.01,
        **kw,
    )


def test_model_calls_and_the_gaps_between_them():
    turns = [
        _turn(2, 30.0, 1.0),  # out of order: sorted by when they arrived
        _turn(0, 10.0, 2.0, ["read_file", "edit"], cached_tokens=0),
        _turn(1, 15.0, 3.0, server_timing={"queue_ms": 1.0, "prefill_ms": 5.0, "decode_ms": 900.0}),
    ]
    spans = call_spans(turns)
    assert [(k, s, e) for k, s, e, _ in spans] == [
        (MODEL, 10.0, 12.0),
        (TOOL, 12.0, 15.0),  # after a reply with tool calls: the agent ran them
        (MODEL, 15.0, 18.0),
        ("agent", 18.0, 30.0),  # after a reply with none: the agent's own work
        (MODEL, 30.0, 31.0),
    ]
    first, gap, second = spans[0][3], spans[1][3], spans[2][3]
    assert first["cached_tokens"] == 0 and first["prompt_tokens"] == 10 and first["generated_tokens"] == 3
    assert first["server_seconds"] == pytest.approx(1.99) and first["turn"] == 0
    assert gap == {"tools": ["read_file", "edit"]}
    assert "cached_tokens" not in second and second["decode_ms"] == 900.0 and second["prompt_tokens"] == 20
    # leading prompt ids that repeat the previous call's prompt + sampled ids: call 1's prompt 0..19 against 0..9 then
    # the sampled 1, 2, 3 shares 0..9; call 2's 0..29 against 0..19, 1, 2, 3 shares 0..19
    assert [s[3]["reused_prefix_tokens"] for s in spans if s[0] == MODEL] == [0, 10, 20]
    assert call_spans([_turn(0, 0.0, 1.0)]) == []  # a turn never timed (a recorded one) is no span


def test_what_vllm_reports_about_a_call():
    # a vLLM 0.32 /v1/completions body with --enable-prompt-tokens-details and --enable-per-request-metrics
    data = {
        "usage": {"prompt_tokens": 120, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 96}},
        "metrics": {
            "queue_time_ms": 0.4,
            "time_to_first_token_ms": 31.0,
            "generation_time_ms": 220.5,
            "mean_itl_ms": 3,
        },
    }
    assert served_figures(data) == (96, {"queue_ms": 0.4, "prefill_ms": 31.0, "decode_ms": 220.5})
    # the same server without those flags: usage alone, so nothing is recorded rather than a zero
    assert served_figures({"usage": {"prompt_tokens": 120, "prompt_tokens_details": None}}) == (None, None)
    assert served_figures({"metrics": {"queue_time_ms": None}}) == (None, None)


# vLLM 0.32's /metrics, in prometheus_client's text format (counters get _total; two engines, labels with a path)
PAGE = """# HELP vllm:prefix_cache_queries Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="/models/a b"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="/models/a b"} 200.0
vllm:prefix_cache_queries_created{engine="0",model_name="/models/a b"} 1.7e+09
vllm:prefix_cache_hits_total{engine="0",model_name="/models/a b"} 600.0
vllm:prefix_cache_hits_total{engine="1",model_name="/models/a b"} 0.0
vllm:request_queue_time_seconds_bucket{engine="0",le="0.3",model_name="/models/a b"} 4.0
vllm:request_queue_time_seconds_count{engine="0",model_name="/models/a b"} 5.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="/models/a b"} 0.25
vllm:request_prefill_time_seconds_sum{engine="0",model_name="/models/a b"} 1.5
vllm:request_decode_time_seconds_sum{engine="0",model_name="/models/a b"} 12.0
vllm:num_requests_running{engine="0",model_name="/models/a b"} 1.0
"""


def test_the_servers_counters_around_a_batch():
    before = read_counters(PAGE)
    assert before == {
        "prefix_cache_queries": 1200.0,
        "prefix_cache_hits": 600.0,
        "requests": 5.0,
        "queue_seconds": 0.25,
        "prefill_seconds": 1.5,
        "decode_seconds": 12.0,
    }
    after = dict(before, prefix_cache_queries=2200.0, prefix_cache_hits=1350.0, requests=9.0, decode_seconds=20.0)
    figures = step_figures(before, after)
    assert figures["server/prefix_cache_hit_rate"] == pytest.approx(750 / 1000)
    assert figures["server/requests"] == 4.0 and figures["server/decode_seconds"] == pytest.approx(8.0)
    assert figures["server/queue_seconds"] == 0.0 and "server/prefix_cache_queries" not in figures
    assert step_figures(None, after) == {} and step_figures(before, None) == {}  # a server without the page
    idle = step_figures(before, before)
    assert "server/prefix_cache_hit_rate" not in idle and idle["server/requests"] == 0.0  # nothing queried


class _Server(BaseHTTPRequestHandler):
    """A loopback server with vLLM's /metrics page and nothing else (like a server that is not vLLM elsewhere)."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        found = self.path == "/metrics"
        body = PAGE.encode() if found else b"not found"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_the_counters_are_read_over_http_and_a_server_without_them_gives_none():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert snapshot(InferenceClient(url, timeout=10)) == read_counters(PAGE)
        server.RequestHandlerClass = type("NoPage", (_Server,), {"do_GET": lambda self: self.send_error(404)})
        assert snapshot(InferenceClient(url, timeout=10)) is None
    finally:
        server.shutdown()
        server.server_close()


def test_the_printed_step_line_names_the_model_busy_fraction_and_the_tail():
    line = format_line({"step": 0, "timeline/model_busy": 0.4242, "timeline/tail": 1.75}, total_steps=2)
    assert line.endswith("| model busy 0.42 tail 1.75")
    assert "model busy" not in format_line({"step": 0}, total_steps=2)  # a step without a timeline
