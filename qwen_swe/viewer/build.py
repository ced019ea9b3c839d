"""Write the viewer of a run or evaluation folder: ``viewer.html`` (a fixed page), ``viewer_data/index.js`` (curves,
one summary line per step and evaluation) and one ``viewer_data/<part>.js`` per step or evaluation, which the page
loads only when that part is opened.

The data files are scripts calling ``qwenSweViewer.load({...})``: a page opened from disk (file://) may not fetch()
files, but it may load scripts beside it, and so may a page served over HTTP. A refresh rewrites the index and only
the parts whose source changed since the last one (by size and modification time), so the trainer can call it after
every step. The page renders every value with ``textContent``, so patches and tool outputs full of HTML stay text.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from qwen_swe.viewer.collect import Part, curves, find_parts, report, samples, step_timelines, summarize

log = logging.getLogger(__name__)
PAGE = Path(__file__).resolve().parent / "page.html"
DATA_DIR = "viewer_data"
INDEX = "index"
PREFIX, SUFFIX = "qwenSweViewer.load(", ");\n"


def _script(payload: dict[str, Any]) -> str:
    return PREFIX + json.dumps(payload, default=str) + SUFFIX


def _write(path: Path, text: str) -> None:
    """Whole or not at all: a page opened mid-refresh reads the old file or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _previous_parts(index: Path) -> dict[str, dict[str, Any]]:
    """The parts the last refresh wrote, by key; none (so all are rebuilt) when there is no readable index."""
    try:
        text = index.read_text()
        return {p["key"]: p for p in json.loads(text[len(PREFIX) : -len(SUFFIX)])["parts"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _entry(
    part: Part, data: Path, before: dict[str, dict[str, Any]], timelines: dict[int, dict[str, Any]]
) -> dict[str, Any]:
    stamp, old = part.stamp(), before.get(part.key)
    if old is not None and old.get("stamp") == stamp and (data / f"{part.key}.js").is_file():
        summary = old["summary"]
    else:
        rows = samples(part)
        _write(data / f"{part.key}.js", _script({"key": part.key, "samples": rows}))
        summary = summarize(rows)
    return {
        "key": part.key,
        "kind": part.kind,
        "label": part.label,
        "step": part.step,
        "stamp": stamp,
        "summary": summary,
        "report": report(part),
        # the trainer's phases and the step's figures, written after its rollouts: read on every refresh
        "timeline": timelines.get(part.step) if part.kind == "step" and part.step is not None else None,
    }


def write_viewer(run_dir: str | Path) -> Path:
    """Write or refresh ``RUN_DIR/viewer.html`` and its data from what the folder holds now; return the page."""
    run_dir = Path(run_dir)
    data = run_dir / DATA_DIR
    data.mkdir(exist_ok=True)
    index = data / f"{INDEX}.js"
    before = _previous_parts(index)
    timelines = step_timelines(run_dir)
    parts = [_entry(part, data, before, timelines) for part in find_parts(run_dir)]
    _write(
        index,
        _script({"key": INDEX, "run": run_dir.name, "written": time.time(), "curves": curves(run_dir), "parts": parts}),
    )
    page, text = run_dir / "viewer.html", PAGE.read_text()
    if not page.is_file() or page.read_text() != text:
        _write(page, text)
    return page


def refresh(run_dir: str | Path) -> None:
    """``write_viewer`` for the trainer after each step: a viewer that cannot be written is logged, never raised."""
    try:
        write_viewer(run_dir)
    except Exception as exc:  # noqa: BLE001 - the viewer must never stop a training run
        log.warning("viewer not refreshed in %s: %r", run_dir, exc)
