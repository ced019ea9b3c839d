"""The run viewer in a real headless browser (Debian's chromium): one self-contained page that loads nothing from
the network, renders a screenshot that is not blank, finds a sample by instance id from the URL, and keeps HTML in
patches and tool outputs as text."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image, ImageStat

from qwen_swe.viewer.build import write_viewer

pytestmark = pytest.mark.browser
EVIL = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"


def _sample(step: int, iid: str, resolved: bool, **kw) -> dict:
    talk = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"fix {iid}"},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "c1", "type": "function",
                              "function": {"name": "run_shell_command", "arguments": "{\"command\": \"cat a.py\"}"}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": EVIL, "truncated_chars": 120},
                         {"role": "assistant", "content": "done"}],
            "calls": [{"index": 0, "sampled_tokens": 30}, {"index": 1, "sampled_tokens": 12}], "output_cap": 4000}
    patch = "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n-x = 1\n+x = 2\n" + \
        "".join(f"+line {i} {EVIL}\n" for i in range(200))
    return {"instance_id": iid, "group_index": 0, "index": step, "status": "completed", "reward": 1.0 if resolved
            else -1.0, "resolved": resolved, "outcome": "completed", "patch": patch, "turns": 2,
            "response_length": 80, "sampled_tokens": 42, "trained_tokens": 42, "agent_seconds": 3.5,
            "grade_seconds": 6.0, "reward_components": {"gold_file": 1.0, "completion": 0.5}, "conversation": talk,
            **kw}


@pytest.fixture()
def chromium() -> str:
    return shutil.which("chromium") or shutil.which("chromium-browser")  # the browser marker checked it is there


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    steps = {0: [_sample(0, "demo__calc-1", False), _sample(0, "demo__calc-2", True)],
             1: [_sample(1, "demo__calc-1", True),
                 _sample(1, "demo__parse-7", False, status="aborted", drop_reason="sandbox", drop_detail="gone"),
                 _sample(1, "demo__calc-3", False, filtered="equal_rewards")]}  # DYNAMIC_SAMPLING left it out
    for step, rows in steps.items():
        (run / "rollouts" / f"step_{step:06d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "metrics.jsonl").write_text("".join(json.dumps(
        {"step": s, "reward_mean": r, "resolve_rate": q, "response_length_mean": 80 + s}) + "\n"
        for s, r, q in ((0, 0.0, 0.5), (1, 1.0, 1.0))))
    return run


def _browser(chromium: str, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=3000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_the_page_is_self_contained_and_keeps_html_as_text(run_dir):
    html = write_viewer(run_dir).read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:|url\(\s*["']?https?:|fetch\(|XMLHttpRequest|import\(""", html)
    assert "<script>document.title" not in html  # the payload escapes "<", so no data can open or close a tag
    data = json.loads(re.search(r'id="run-data">(.*?)</script>', html, re.S).group(1))
    assert len(data["samples"]) == 5 and EVIL in data["samples"][0]["patch"]


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
