"""Raw rows of a dataset, each with where it was (``row 3``, ``line 7``) for error messages: a local .json, .jsonl
or .parquet file, a Hugging Face dataset folder, or a hub name (``name[:split]``). No validation here; a file that
cannot be read or parsed fails naming the file, the line and what to do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qwen_swe.errors import DataError

LOCAL_SUFFIXES = (".json", ".jsonl", ".parquet")


def read_rows(source: str) -> tuple[str, list[tuple[str, Any]]]:
    """(origin, [(location, raw row)]) from a local file or a HF dataset."""
    path = Path(source).expanduser()
    folder, _, split = source.rpartition(":") if ":" in source else (source, "", "")
    if path.is_dir() or (folder and Path(folder).expanduser().is_dir()):
        # a Hugging Face dataset folder (e.g. a downloaded copy of the hub repo): datasets reads it offline
        return _read_hf(str(path) if path.is_dir() else f"{Path(folder).expanduser()}:{split}")
    if path.exists():
        suffix = path.suffix.lower()
        if suffix not in LOCAL_SUFFIXES:
            raise DataError(
                f"dataset {path} has the unknown extension {suffix or '(none)'!r}; "
                "give a .json, .jsonl or .parquet file, or a Hugging Face dataset name"
            )
        origin = str(path)
        try:
            if suffix == ".parquet":
                return origin, _read_parquet(path)
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(
                f"dataset {path} cannot be read ({exc.__class__.__name__}: {exc}); check the file and its permissions"
            ) from None
        if suffix == ".json":
            return origin, _parse_json(text, origin)
        return origin, _parse_jsonl(text, origin)
    if path.suffix.lower() in LOCAL_SUFFIXES or source.startswith(("/", ".", "~")):
        raise DataError(f"dataset file {path} does not exist; check the path, or give a Hugging Face dataset name")
    return _read_hf(source)


def _parse_json(text: str, origin: str) -> list[tuple[str, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise DataError(
                f"{origin} line {exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno}); "
                "fix the file (a JSON list of rows, or one JSON object a line)"
            ) from None
        return _parse_jsonl(text, origin)  # several top-level values: JSON lines under a .json name
    if isinstance(data, dict):
        return [("row 1", data)]
    if not isinstance(data, list):
        raise DataError(
            f"{origin} holds a JSON {type(data).__name__}, not a list of rows; give a JSON list of row objects"
        )
    return [(f"row {n}", row) for n, row in enumerate(data, 1)]


def _parse_jsonl(text: str, origin: str) -> list[tuple[str, Any]]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((f"line {n}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise DataError(
                f"{origin} line {n}: not valid JSON ({exc.msg}, column {exc.colno}); "
                "fix or remove that line (one JSON object a line)"
            ) from None
    return out


def _read_parquet(path: Path) -> list[tuple[str, Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several unrelated types for a bad file
        raise DataError(
            f"dataset {path} is not a readable parquet file ({exc.__class__.__name__}: {exc}); "
            "regenerate it or give a .jsonl file"
        ) from None
    return [(f"row {n}", row) for n, row in enumerate(table.to_pylist(), 1)]


def _read_hf(source: str) -> tuple[str, list[tuple[str, Any]]]:
    name, _, split = source.rpartition(":") if ":" in source else (source, "", "")
    split = split or "test"
    origin = f"Hugging Face dataset {name} (split {split})"
    try:
        import datasets

        # the hub client's own HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT bound each request
        ds = datasets.load_dataset(name, split=split)
    except Exception as exc:  # noqa: BLE001 - datasets wraps network, auth and naming errors in many types
        raise DataError(
            f"cannot load {origin}: {exc.__class__.__name__}: {str(exc)[:300]}; check the name and "
            "split (write name:split), network access to the hub, or give a local .jsonl file"
        ) from None
    return origin, [(f"row {n}", dict(row)) for n, row in enumerate(ds, 1)]
