"""The run viewer in a real headless browser (Debian's chromium): a fixed page and one data file per step or
evaluation, nothing from the network; a sample found by instance id from the URL, HTML in patches and tool outputs
kept as text, a screenshot that is not blank; a run of 512 samples x 10 steps and an evaluation folder open; the
trainer's metrics writer refreshes it after every step, rewriting only what changed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image, ImageStat

from benchmarks.bench_viewer import generate_run
from qwen_swe.viewer.build import DATA_DIR, PREFIX, SUFFIX, refresh, write_viewer

browser = pytest.mark.browser
EVIL = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"


def _sample(step: int, iid: str, resolved: bool, **kw) -> dict:
    talk = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": f"fix {iid}"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "run_shell_command", "arguments": '{"command": "cat a.py"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": EVIL, "truncated_chars": 120},
            {"role": "assistant", "content": "done"},
        ],
        "calls": [{"index": 0, "sampled_tokens": 30}, {"index": 1, "sampled_tokens": 12}],
        "output_cap": 4000,
    }
    patch = "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n-x = 1\n+x = 2\n" + "".join(
        f"+line {i} {EVIL}\n" for i in range(200)
    )
    return {
        "instance_id": iid,
        "group_index": 0,
        "index": step,
        "status": "completed",
        "reward": 1.0 if resolved else -1.0,
        "resolved": resolved,
        "outcome": "completed",
        "patch": patch,
        "turns": 2,
        "response_length": 80,
        "sampled_tokens": 42,
        "trained_tokens": 42,
        "agent_seconds": 3.5,
        "grade_seconds": 6.0,
        "reward_components": {"gold_file": 1.0, "completion": 0.5},
        "conversation": talk,
        **kw,
    }


@pytest.fixture()
def chromium() -> str:
    return shutil.which("chromium") or shutil.which("chromium-browser")  # the browser marker checked it is there


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    steps = {
        0: [_sample(0, "demo__calc-1", False), _sample(0, "demo__calc-2", True)],
        1: [
            _sample(1, "demo__calc-1", True),
            _sample(1, "demo__parse-7", False, status="aborted", drop_reason="sandbox", drop_detail="gone"),
            _sample(1, "demo__calc-3", False, filtered="equal_rewards"),
        ],
    }  # DYNAMIC_SAMPLING left it out
    for step, rows in steps.items():
        (run / "rollouts" / f"step_{step:06d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "reward_mean": r, "resolve_rate": q, "response_length_mean": 80 + s}) + "\n"
            for s, r, q in ((0, 0.0, 0.5), (1, 1.0, 1.0))
        )
    )
    return run


def _browser(chromium: str, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--virtual-time-budget=3000",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _data(path: Path) -> dict:
    text = path.read_text()
    assert text.startswith(PREFIX) and text.endswith(SUFFIX)
    return json.loads(text[len(PREFIX) : -len(SUFFIX)])


def test_the_page_is_fixed_and_its_data_loads_nothing_from_the_network(run_dir):
    html = write_viewer(run_dir).read_text()
    data = sorted((run_dir / DATA_DIR).glob("*.js"))
    assert [p.name for p in data] == ["index.js", "step_000000.js", "step_000001.js"]
    for text in [html] + [p.read_text() for p in data]:
        assert not re.search(
            r"""(src|href)\s*=\s*["']?https?:|url\(\s*["']?https?:|fetch\(|XMLHttpRequest|import\(""", text
        )
    assert "demo__calc" not in html  # the samples live in the data files, not in the page
    steps = [_data(p)["samples"] for p in data[1:]]
    assert [len(s) for s in steps] == [2, 3] and EVIL in steps[0][0]["patch"]
    index = _data(data[0])
    assert [p["summary"]["samples"] for p in index["parts"]] == [2, 3]
    assert [c["resolve_rate"] for c in index["curves"]] == [0.5, 1.0]


def test_a_refresh_rewrites_only_the_new_step_and_the_index(run_dir):
    write_viewer(run_dir)
    data = run_dir / DATA_DIR
    before = {p.name: p.stat().st_ino for p in data.glob("*.js")}  # a rewrite replaces the file: a new inode
    rows = [_sample(2, "demo__calc-9", True)]
    with (run_dir / "rollouts" / "step_000002.jsonl").open("w") as fh:  # the next step, its last line half written
        fh.write(json.dumps(rows[0]) + "\n" + json.dumps(rows[0])[:40])
    write_viewer(run_dir)
    after = {p.name: p.stat().st_ino for p in data.glob("*.js")}
    assert after["step_000000.js"] == before["step_000000.js"] and after["step_000001.js"] == before["step_000001.js"]
    assert after["index.js"] != before["index.js"] and len(_data(data / "step_000002.js")["samples"]) == 1
    with (run_dir / "rollouts" / "step_000002.jsonl").open("a") as fh:
        fh.write(json.dumps(rows[0])[40:] + "\n")  # the line is finished: the step is rebuilt with it
    write_viewer(run_dir)
    assert _data(data / "index.js")["parts"][-1]["summary"]["samples"] == 2


def test_the_metrics_writer_refreshes_the_viewer_after_each_step_and_never_raises(run_dir, caplog):
    from qwen_swe.train.metrics import MetricsLog

    (run_dir / "metrics.jsonl").unlink()
    metrics = MetricsLog(run_dir)
    try:
        metrics.write({"step": 0, "reward_mean": 0.5, "resolve_rate": 0.5}, total_steps=2)
    finally:
        metrics.close()
    index = _data(run_dir / DATA_DIR / "index.js")
    assert [c["step"] for c in index["curves"]] == [0] and (run_dir / "viewer.html").is_file()
    blocked = run_dir / "blocked"
    blocked.write_text("a file where the run folder should be")
    refresh(blocked)  # the trainer's call: logged, not raised
    assert "viewer not refreshed" in caplog.text


@browser
def test_a_sample_is_found_by_instance_id_and_the_screenshot_is_not_blank(run_dir, chromium, tmp_path):
    page = write_viewer(run_dir)
    dom = _browser(chromium, ["--dump-dom", f"{page.as_uri()}#q=demo__parse-7"]).stdout
    assert 'data-shown="1"' in dom, dom[-2000:]
    rows = re.findall(r'<tr class="sample[^"]*" data-instance="([^"]+)"', dom)
    assert rows == ["demo__parse-7"]
    assert "dropped: sandbox" in dom and "gone" in dom  # the selected sample's detail, with its drop reason
    assert "qwen-swe run: run" in dom and "<title>qwen-swe run</title>" in dom  # no injected script ran
    assert '<img src="x"' not in dom
    assert "&lt;script&gt;document.title" in dom  # tool output shown as text
    filtered = _browser(chromium, ["--dump-dom", f"{page.as_uri()}#q=demo__calc-3"]).stdout
    assert "completed (not trained: equal_rewards)" in filtered

    shot = tmp_path / "viewer.png"
    _browser(chromium, [f"--screenshot={shot}", "--window-size=1400,1000", f"{page.as_uri()}#q=demo__calc-1"])
    image = Image.open(shot).convert("L")
    assert image.size == (1400, 1000)
    assert ImageStat.Stat(image).stddev[0] > 20, "the screenshot is blank"


def _sample_rows(dom: str) -> list[str]:
    return re.findall(r'<tr class="sample[^"]*" data-instance="([^"]+)">(.*?)</tr>', dom, re.S)


@browser
def test_a_run_of_512_samples_by_10_steps_opens_its_index_then_a_step(chromium, tmp_path):
    run = generate_run(tmp_path / "run", steps=10, samples=512)
    page = write_viewer(run)
    assert page.stat().st_size < 50_000 and (run / DATA_DIR / "index.js").stat().st_size < 50_000

    first = _browser(chromium, ["--dump-dom", page.as_uri()]).stdout
    parts = re.findall(r'<tr class="part[^"]*" data-part="([^"]+)"', first)
    assert parts == ["all"] + [f"step_{s:06d}" for s in range(10)] + ["eval_step_000009"]
    assert "10 steps, 5120 samples" in first and "eval_step_000009: " in first
    assert first.count("<polyline") >= 5  # reward, resolve rate, length, clip fraction, KL
    assert 'data-open="step_000009"' in first and 'data-shown="512"' in first  # the latest step, opened by itself

    opened = _browser(chromium, ["--dump-dom", f"{page.as_uri()}#open=step_000003"]).stdout
    assert 'data-open="step_000003"' in opened and 'data-shown="512"' in opened
    rows = _sample_rows(opened)
    assert len(rows) == 512 and all("<td>step 3</td>" in cells for _, cells in rows)
    assert 'class="part selected" data-part="step_000003"' in opened

    chosen = _browser(chromium, ["--dump-dom", f"{page.as_uri()}#open=step_000003&q=repo_5__pkg-38"]).stdout
    assert 'data-shown="8"' in chosen and "repo_5__pkg-38 (step 3, sample 0)" in chosen  # its detail
    assert "conversation (" in chosen and "run_shell_command" in chosen


@browser
def test_an_evaluation_folder_opens(chromium, tmp_path):
    folder = tmp_path / "eval"
    folder.mkdir()
    rows = [_sample(0, "demo__calc-1", True), _sample(0, "demo__calc-2", False)]
    (folder / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "results.jsonl").write_text(
        json.dumps({"instance_id": "demo__calc-1", "attempt": 0, "outcome": "resolved", "reason": None, "seconds": 9.5})
        + "\n"
    )
    (folder / "report.json").write_text(
        json.dumps(
            {"resolve_rate": 0.5, "resolve_rate_ci95": [0.1, 0.9], "resolved_instances": 1, "submitted_instances": 2}
        )
    )
    graded = folder / "eval_graded"  # a grade-only evaluation inside it: results, no rollouts
    graded.mkdir()
    (graded / "results.jsonl").write_text(
        json.dumps(
            {"instance_id": "demo__x-4", "attempt": 1, "outcome": "error", "reason": "image missing", "seconds": 0.2}
        )
        + "\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "qwen_swe.viewer", str(folder)], capture_output=True, text=True, check=True
    ).stdout
    page = Path(out.strip())
    assert page == folder / "viewer.html"

    dom = _browser(chromium, ["--dump-dom", page.as_uri()]).stdout
    assert "qwen-swe evaluation: eval" in dom and "eval: 0.500 resolved" in dom
    assert "resolve rate 0.500 [0.100, 0.900], 1/2 instances" in dom
    assert 'data-open="root"' in dom and [i for i, _ in _sample_rows(dom)] == ["demo__calc-1", "demo__calc-2"]
    graded_dom = _browser(chromium, ["--dump-dom", f"{page.as_uri()}#open=eval_graded&q=demo__x-4"]).stdout
    assert "dropped: error" in graded_dom and "image missing" in graded_dom


def _timeline(origin: float, seconds: float, *spans: tuple) -> dict:
    return {
        "origin": origin,
        "seconds": seconds,
        "spans": [{"kind": k, "start": a, "end": b, "attrs": attrs} for k, a, b, attrs in spans],
    }


@pytest.fixture()
def timed_run(run_dir: Path) -> Path:
    """Step 2 of the run recorded with timelines (steps 0 and 1 were written before there were any)."""
    t = 1_700_000_000.0
    rows = [
        _sample(
            2,
            "demo__calc-1",
            True,
            timeline=_timeline(
                t,
                9.0,
                ("boot", 0.0, 1.0, {}),
                ("model", 1.0, 3.0, {"prompt_tokens": 900, "cached_tokens": 512, "generated_tokens": 40}),
                ("tool", 3.0, 4.0, {"tools": ["edit"]}),
                ("model", 4.0, 5.0, {"prompt_tokens": 1000, "generated_tokens": 9}),
                ("grade", 6.0, 9.0, {}),
            ),
        ),
        _sample(2, "demo__calc-2", False, timeline=_timeline(t + 0.5, 4.0, ("boot", 0.0, 1.5, {}))),
        _sample(2, "demo__calc-3", False),  # a record without one: no row
    ]
    (run_dir / "rollouts" / "step_000002.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    phases = _timeline(t - 0.1, 14.0, ("rollout", 0.0, 9.2, {}), ("train", 9.3, 12.0, {}), ("sync", 12.1, 13.9, {}))
    metric = {"step": 2, "reward_mean": 0.0, "phases": phases, "timeline/model_busy": 0.3, "timeline/tail": 1.5}
    metric["server/prefix_cache_hit_rate"] = 0.75
    with (run_dir / "metrics.jsonl").open("a") as fh:
        fh.write(json.dumps(metric) + "\n")
    return run_dir


def test_a_steps_timeline_and_the_trainers_phases_reach_the_index(timed_run):
    write_viewer(timed_run)
    index = _data(timed_run / DATA_DIR / "index.js")
    by_step = {p["step"]: p for p in index["parts"]}
    assert by_step[0]["timeline"] is None and by_step[1]["timeline"] is None  # old records load as they are
    step = by_step[2]["timeline"]
    assert [s["kind"] for s in step["phases"]["spans"]] == ["rollout", "train", "sync"]
    assert step["figures"] == {"timeline/model_busy": 0.3, "timeline/tail": 1.5, "server/prefix_cache_hit_rate": 0.75}
    assert [c.get("timeline/model_busy") for c in index["curves"]] == [None, None, 0.3]
    samples = _data(timed_run / DATA_DIR / "step_000002.js")["samples"]
    assert [len((s["timeline"] or {}).get("spans", [])) for s in samples] == [5, 1, 0]


@browser
def test_the_viewer_draws_a_steps_timeline(timed_run, chromium):
    page = write_viewer(timed_run)
    dom = _browser(chromium, ["--dump-dom", f"{page.as_uri()}#open=step_000002"]).stdout
    assert 'data-open="step_000002"' in dom
    assert re.search(r'<svg [^>]*data-rollouts="2" data-trainer="1"', dom), dom[-3000:]  # the unrecorded one: no row
    kinds = re.findall(r'data-kind="(\w+)" data-lane="(\w+)"', dom)
    assert sorted(k for k, lane in kinds if lane == "rollout") == ["boot", "boot", "grade", "model", "model", "tool"]
    assert [k for k, lane in kinds if lane == "trainer"] == ["rollout", "train", "sync"]
    assert "model busy 0.300" in dom and "tail (slowest / median) 1.500" in dom
    assert "prefix-cache hits (server) 0.750" in dom
    assert "demo__calc-1 #2: tool 1.00 s\ntools edit" in dom  # a span's tooltip names what ran
    assert "cached_tokens 512" in dom
    old = _browser(chromium, ["--dump-dom", f"{page.as_uri()}#open=step_000001"]).stdout
    assert 'data-open="step_000001"' in old and "no timeline recorded for this step" in old
    every = _browser(chromium, ["--dump-dom", f"{page.as_uri()}#open=all"]).stdout
    assert 'id="timeline" hidden' in every  # a timeline is one step's
