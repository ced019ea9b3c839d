"""The SWE-bench data source on the real rows in shared/data/swebench: loading, validation, groups, epochs,
save/load continuity, the push-back buffer, and every bad-input message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qwen_swe.config.settings import Settings
from qwen_swe.data.prompts import build_prompt
from qwen_swe.data.sample import Status
from qwen_swe.data.source import DataError, SWEBenchDataSource, load_instances
from qwen_swe.paths import REPO_ROOT

LITE, VERIFIED, V5 = "lite_300.jsonl", "verified_50.jsonl", "verified_django5_v5columns.jsonl"


def raw_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def make_source(shared_data, tmp_path, name=VERIFIED, **kw) -> SWEBenchDataSource:
    args = SimpleNamespace(prompt_data=str(shared_data / name), **kw)
    return SWEBenchDataSource(args)


def ids_of(groups) -> list[str]:
    return [g[0].metadata["instance_id"] for g in groups]


# --- loading ---------------------------------------------------------------------------------


def test_lite_300_loads_in_file_order_with_decoded_test_lists(shared_data):
    rows = load_instances(shared_data / LITE)
    raw = raw_rows(shared_data / LITE)
    assert len(rows) == 300
    assert [r["instance_id"] for r in rows] == [r["instance_id"] for r in raw]
    first = rows[0]
    assert first["FAIL_TO_PASS"] == json.loads(raw[0]["FAIL_TO_PASS"]) and isinstance(first["FAIL_TO_PASS"], list)
    assert all(isinstance(r["PASS_TO_PASS"], list) and r["FAIL_TO_PASS"] for r in rows)
    assert first["hints_text"] == raw[0]["hints_text"]  # extra columns are kept


def test_django_instance_list_file_selects_exactly_114_rows(shared_data, tmp_path):
    raw = raw_rows(shared_data / LITE)
    django = [r["instance_id"] for r in raw if r["repo"] == "django/django"]
    listing = tmp_path / "django.txt"
    listing.write_text("# the django instances of Lite\n\n" + "\n".join(reversed(django)) + "\n  \n")
    rows = load_instances(shared_data / LITE, instance_list=listing)
    assert len(rows) == 114
    assert [r["instance_id"] for r in rows] == django  # the data's order, not the list's
    assert {r["repo"] for r in rows} == {"django/django"}


def test_instance_list_as_python_list(shared_data):
    rows = load_instances(shared_data / VERIFIED, instance_list=["pylint-dev__pylint-8898", "psf__requests-1724"])
    assert [r["instance_id"] for r in rows] == ["psf__requests-1724", "pylint-dev__pylint-8898"]


def test_verified_50_keeps_difficulty(shared_data):
    rows = load_instances(str(shared_data / VERIFIED))
    assert len(rows) == 50 and len({r["repo"] for r in rows}) == 12
    assert all(isinstance(r["difficulty"], str) for r in rows)


def test_v5_columns_are_validated_and_kept(shared_data, tmp_path):
    rows = load_instances(shared_data / V5)
    assert len(rows) == 5
    for r in rows:
        assert r["eval_type"] == "pass_and_fail" and r["log_parser"] == "parse_log_django"
        assert r["image"].startswith("swebench/sweb.eval.x86_64.django_1776_")
        assert r["eval_script"].startswith("#!/bin/bash")
    bad = raw_rows(shared_data / V5)
    bad[2]["eval_type"] = "everything"
    with pytest.raises(
        DataError,
        match=rf"line 3 \(instance {bad[2]['instance_id']}\): field eval_type is "
        r"'everything'; use one of pass_and_fail, fail_only",
    ):
        load_instances(write_jsonl(tmp_path / "v5.jsonl", bad))
    bad = raw_rows(shared_data / V5)
    bad[0]["image"] = ""
    with pytest.raises(DataError, match=r"line 1 .*field image must be a non-empty string"):
        load_instances(write_jsonl(tmp_path / "v5.jsonl", bad))


def test_parquet_round_trip(shared_data, tmp_path):
    raw = raw_rows(shared_data / LITE)[:40]
    path = tmp_path / "lite40.parquet"
    pq.write_table(pa.Table.from_pylist(raw), path)
    assert load_instances(path) == load_instances(write_jsonl(tmp_path / "lite40.jsonl", raw))


def test_parquet_with_native_list_columns(shared_data, tmp_path):
    raw = raw_rows(shared_data / V5)
    for r in raw:
        r["FAIL_TO_PASS"], r["PASS_TO_PASS"] = json.loads(r["FAIL_TO_PASS"]), json.loads(r["PASS_TO_PASS"])
    pq.write_table(pa.Table.from_pylist(raw), tmp_path / "v5.parquet")
    rows = load_instances(tmp_path / "v5.parquet")
    assert [r["FAIL_TO_PASS"] for r in rows] == [r["FAIL_TO_PASS"] for r in raw]


def test_json_list_and_json_lines_under_a_json_name(shared_data, tmp_path):
    raw = raw_rows(shared_data / V5)
    (tmp_path / "list.json").write_text(json.dumps(raw, indent=1))
    expected = load_instances(shared_data / V5)
    assert load_instances(tmp_path / "list.json") == expected
    assert load_instances(write_jsonl(tmp_path / "lines.json", raw)) == expected


def _run_isolated(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """datasets reads its cache location and offline switch at import: give it a fresh process."""
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_hugging_face_dataset_folder_loads_through_datasets(shared_data, tmp_path):
    (tmp_path / "swebench" / "data").mkdir(parents=True)
    pq.write_table(
        pa.Table.from_pylist(raw_rows(shared_data / VERIFIED)),
        tmp_path / "swebench" / "data" / "test-00000-of-00001.parquet",
    )
    code = (
        "import json, sys; from qwen_swe.data.source import load_instances as L; "
        f"rows = L({str(tmp_path / 'swebench')!r}); rows2 = L({str(tmp_path / 'swebench') + ':test'!r}); "
        "assert rows == rows2; json.dump([[r['instance_id'], r['FAIL_TO_PASS']] for r in rows], sys.stdout)"
    )
    done = _run_isolated(code, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = [[r["instance_id"], r["FAIL_TO_PASS"]] for r in load_instances(shared_data / VERIFIED)]
    assert json.loads(done.stdout) == expected


def test_unreachable_hub_dataset_is_a_data_error(tmp_path):
    code = (
        "from qwen_swe.data.source import load_instances, DataError\n"
        "try:\n    load_instances('no-such-org/no-such-dataset:dev')\n"
        "except DataError as e:\n    print(e)\n"
    )
    done = _run_isolated(code, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cannot load Hugging Face dataset no-such-org/no-such-dataset (split dev)" in done.stdout
    assert "give a local .jsonl file" in done.stdout


# --- bad input -------------------------------------------------------------------------------


@pytest.fixture
def rows5(shared_data):
    return raw_rows(shared_data / V5)


def test_missing_field_names_file_line_instance_and_field(rows5, tmp_path):
    del rows5[2]["patch"]
    path = write_jsonl(tmp_path / "bad.jsonl", rows5)
    with pytest.raises(DataError) as err:
        load_instances(path)
    assert str(err.value).startswith(f"{path} line 3 (instance {rows5[2]['instance_id']}): field patch is missing;")
    assert "every SWE-bench row needs" in str(err.value)


def test_non_string_field(rows5, tmp_path):
    rows5[1]["base_commit"] = 123
    with pytest.raises(DataError, match=r"line 2 .*field base_commit must be a non-empty string, got int"):
        load_instances(write_jsonl(tmp_path / "bad.jsonl", rows5))


def test_malformed_fail_to_pass(rows5, tmp_path):
    rows5[0]["FAIL_TO_PASS"] = "[test_a, test_b]"
    with pytest.raises(
        DataError,
        match=rf"line 1 \(instance {rows5[0]['instance_id']}\): field FAIL_TO_PASS is not "
        r"valid JSON .*write it as a JSON list of test names",
    ):
        load_instances(write_jsonl(tmp_path / "bad.jsonl", rows5))
    rows5[0]["FAIL_TO_PASS"] = '["ok", 3]'
    with pytest.raises(DataError, match=r"field FAIL_TO_PASS must be a list of test-name strings"):
        load_instances(write_jsonl(tmp_path / "bad.jsonl", rows5))
    rows5[0]["FAIL_TO_PASS"] = "[]"
    with pytest.raises(DataError, match=r"field FAIL_TO_PASS is empty; an instance needs at least one test"):
        load_instances(write_jsonl(tmp_path / "bad.jsonl", rows5))
    rows5[0]["FAIL_TO_PASS"] = '["t"]'
    rows5[4]["PASS_TO_PASS"] = '{"a": 1}'
    with pytest.raises(DataError, match=r"line 5 .*field PASS_TO_PASS must be a list of test-name strings"):
        load_instances(write_jsonl(tmp_path / "bad.jsonl", rows5))


def test_bad_json_line_reports_its_line_number(rows5, tmp_path):
    path = tmp_path / "bad.jsonl"
    lines = [json.dumps(r) for r in rows5]
    lines.insert(1, "")  # blank lines are skipped but still counted
    lines[3] = lines[3][:-10]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=rf"^{path} line 4: not valid JSON .*fix or remove that line"):
        load_instances(path)


def test_bad_json_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[{"instance_id": "a",\n  "repo": }]')
    with pytest.raises(DataError, match=rf"^{path} line 2: not valid JSON"):
        load_instances(path)
    path.write_text('"just a string"')
    with pytest.raises(DataError, match="holds a JSON str, not a list of rows"):
        load_instances(path)


def test_row_that_is_not_an_object(rows5, tmp_path):
    with pytest.raises(DataError, match=r"line 2: a row must be a JSON object, got list"):
        load_instances(write_jsonl(tmp_path / "bad.jsonl", [rows5[0], [1, 2]]))


def test_empty_file(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="holds no rows"):
        load_instances(tmp_path / "empty.jsonl")


def test_unknown_extension(shared_data, tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text((shared_data / V5).read_text())
    with pytest.raises(DataError, match=r"unknown extension '.csv'; give a .json, .jsonl or .parquet file"):
        load_instances(path)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match=rf"dataset file {tmp_path}/nope.jsonl does not exist; check the path"):
        load_instances(tmp_path / "nope.jsonl")


def test_corrupt_parquet(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match="is not a readable parquet file"):
        load_instances(tmp_path / "bad.parquet")


def test_unknown_ids_are_all_listed(shared_data, tmp_path):
    listing = tmp_path / "ids.txt"
    listing.write_text("django__django-10914\nfoo__bar-1  # a typo\nfoo__bar-2\n")
    with pytest.raises(DataError) as err:
        load_instances(shared_data / V5, instance_list=listing)
    msg = str(err.value)
    assert msg.startswith(
        f"2 instance id(s) from instance list {listing} are not in {shared_data / V5}: foo__bar-1, foo__bar-2;"
    )


def test_duplicate_ids_in_the_data(rows5, tmp_path):
    rows = rows5 + [rows5[1]]
    with pytest.raises(DataError, match=rf"instance id {rows5[1]['instance_id']} appears twice \(line 2 and line 6\)"):
        load_instances(write_jsonl(tmp_path / "dup.jsonl", rows))


def test_duplicate_ids_in_the_list(shared_data, tmp_path):
    listing = tmp_path / "ids.txt"
    listing.write_text("django__django-10914\ndjango__django-10914\n")
    with pytest.raises(DataError, match="lists these instance ids more than once: django__django-10914"):
        load_instances(shared_data / V5, instance_list=listing)
    with pytest.raises(DataError, match="more than once"):
        load_instances(shared_data / V5, instance_list=["a", "a"])


def test_unreadable_or_empty_instance_list(shared_data, tmp_path):
    with pytest.raises(DataError, match=rf"instance list {tmp_path}/missing.txt cannot be read"):
        load_instances(shared_data / V5, instance_list=tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("# nothing yet\n\n")
    with pytest.raises(DataError, match="holds no instance ids"):
        load_instances(shared_data / V5, instance_list=tmp_path / "empty.txt")


# --- the data source -------------------------------------------------------------------------


def test_missing_prompt_data():
    with pytest.raises(DataError, match=r"needs prompt_data \(slime --prompt-data, or DATASET\)"):
        SWEBenchDataSource(SimpleNamespace(n_samples_per_prompt=2))


def test_groups_indices_prompt_and_metadata(shared_data, tmp_path):
    ds = make_source(shared_data, tmp_path, n_samples_per_prompt=3)
    assert len(ds) == 50 and len(ds.dataset) == 50
    groups = ds.get_samples(4) + ds.get_samples(2)
    assert [len(g) for g in groups] == [3] * 6
    assert [s.group_index for g in groups for s in g] == [i for i in range(6) for _ in range(3)]
    assert [s.index for g in groups for s in g] == list(range(18))
    by_id = {r["instance_id"]: r for r in ds.dataset}
    for group in groups:
        row = by_id[group[0].label]
        for s in group:
            assert s.prompt == build_prompt(row)
            assert s.metadata == {**row, "instance_id": row["instance_id"]}
            assert s.label == row["instance_id"] and s.status == Status.PENDING
    # the samples of a group are independent: changing one changes neither its siblings nor the data
    groups[0][0].metadata["FAIL_TO_PASS"].append("x")
    groups[0][0].metadata["note"] = 1
    assert "x" not in groups[0][1].metadata["FAIL_TO_PASS"] and "note" not in groups[0][1].metadata
    assert "x" not in by_id[groups[0][0].label]["FAIL_TO_PASS"]
    assert ds.get_samples(0) == []
    with pytest.raises(DataError, match="non-negative whole number"):
        ds.get_samples(-1)


def test_default_attributes(shared_data, tmp_path):
    ds = SWEBenchDataSource(SimpleNamespace(prompt_data=str(shared_data / V5), save=None, load=None))
    assert (ds.n_samples_per_prompt, ds.shuffle, ds.seed) == (2, True, 42)
    assert ds.save(0) is None and ds.load() is False


def test_every_epoch_serves_every_instance_once(shared_data, tmp_path):
    ds = make_source(shared_data, tmp_path)
    served = []
    while len(served) < 125:  # 2.5 epochs, in batches that do not divide the epoch
        served += ids_of(ds.get_samples(min(7, 125 - len(served))))
    epochs = [served[:50], served[50:100], served[100:]]
    every = {r["instance_id"] for r in ds.dataset}
    assert sorted(epochs[0]) == sorted(every) and sorted(epochs[1]) == sorted(every)
    assert len(set(epochs[2])) == 25
    assert epochs[0] != epochs[1] and epochs[0] != [r["instance_id"] for r in ds.dataset]
    assert ds.epoch == 2 and ds.offset == 25
    again = make_source(shared_data, tmp_path)
    assert ids_of(again.get_samples(125)) == served  # same seed, same order
    other = make_source(shared_data, tmp_path, rollout_seed=7)
    assert ids_of(other.get_samples(50)) != epochs[0]


def test_no_shuffle_serves_the_data_order(shared_data, tmp_path):
    ds = make_source(shared_data, tmp_path, rollout_shuffle=False)
    order = [r["instance_id"] for r in ds.dataset]
    assert ids_of(ds.get_samples(60)) == order + order[:10]


def test_save_load_continues_with_exactly_the_next_group(shared_data, tmp_path):
    run = tmp_path / "run"
    ds = make_source(shared_data, tmp_path, save=str(run), load=str(run))
    ds.get_samples(33)
    path = ds.save(3)
    assert path == run / "rollout" / "data_source_state_3.json"
    assert [p.name for p in (run / "rollout").iterdir()] == ["data_source_state_3.json"]  # no tmp left behind
    fresh = make_source(shared_data, tmp_path, save=str(run), load=str(run))
    assert fresh.load() is True
    assert fresh.state_dict() == ds.state_dict()
    ahead, restored = ds.get_samples(40), fresh.get_samples(40)  # crosses the epoch boundary
    assert [(g[0].label, g[0].group_index, [s.index for s in g]) for g in restored] == [
        (g[0].label, g[0].group_index, [s.index for s in g]) for g in ahead
    ]


def test_load_picks_the_latest_or_the_given_rollout(shared_data, tmp_path):
    run = tmp_path / "run"
    ds = make_source(shared_data, tmp_path, save=str(run), load=str(run))
    marks = {}
    for rollout_id in (2, 10, 9):  # 10 is the latest numerically, not by name
        ds.get_samples(rollout_id)
        ds.save(rollout_id)
        marks[rollout_id] = ds.state_dict()
    latest = make_source(shared_data, tmp_path, load=str(run))
    assert latest.load() and latest.state_dict() == marks[10]
    chosen = make_source(shared_data, tmp_path, load=str(run))
    assert chosen.load(2) and chosen.state_dict() == marks[2]
    nothing = make_source(shared_data, tmp_path, load=str(run))
    assert nothing.load(5) is False and nothing.offset == 0  # no state for that id: a fresh start
    empty = make_source(shared_data, tmp_path, load=str(tmp_path / "elsewhere"))
    assert empty.load() is False


def test_load_rejects_state_of_other_data_or_seed_or_a_corrupt_file(shared_data, tmp_path):
    run = tmp_path / "run"
    make_source(shared_data, tmp_path, save=str(run)).save(0)
    with pytest.raises(DataError, match=r"was saved for a different set of instances \(50 instances, now 5\)"):
        make_source(shared_data, tmp_path, name=V5, load=str(run)).load()
    with pytest.raises(DataError, match=r"saved with seed=42 shuffle=True, now seed=1 shuffle=True"):
        make_source(shared_data, tmp_path, rollout_seed=1, load=str(run)).load()
    (run / "rollout" / "data_source_state_1.json").write_text("{not json")
    with pytest.raises(DataError, match=r"data_source_state_1.json cannot be read .*delete it"):
        make_source(shared_data, tmp_path, load=str(run)).load()


def test_add_samples_are_served_first(shared_data, tmp_path):
    ds = make_source(shared_data, tmp_path)
    first = ds.get_samples(2)
    ds.add_samples([first[1]])
    again = ds.get_samples(2)
    assert again[0] is first[1]
    assert again[1][0].group_index == 2 and again[1][0].index == 4
    assert ds.state_dict()["buffer_size"] == 0


def test_add_samples_rejects_partial_groups(shared_data, tmp_path):
    ds = make_source(shared_data, tmp_path)
    group = ds.get_samples(1)[0]
    with pytest.raises(DataError, match=r"add_samples: group 1 has 3 samples, expected n_samples_per_prompt=2"):
        ds.add_samples([group, group + [group[0]]])
    assert ds.buffer == []  # nothing half-added


def test_from_settings(shared_data, tmp_path):
    raw = raw_rows(shared_data / LITE)
    listing = tmp_path / "django.txt"
    listing.write_text("\n".join(r["instance_id"] for r in raw if r["repo"] == "django/django"))
    settings = Settings.build(
        vllm_url="http://127.0.0.1:1/v1",
        dataset=str(shared_data / LITE),
        n_samples=3,
        seed=5,
        output_dir=tmp_path / "out",
        instance_list=listing,
    )
    ds = SWEBenchDataSource.from_settings(settings)
    assert len(ds) == 114 and ds.n_samples_per_prompt == 3 and ds.seed == 5 and ds.shuffle
    assert [len(g) for g in ds.get_samples(2)] == [3, 3]
    assert ds.save(0) == tmp_path / "out" / "rollout" / "data_source_state_0.json"
    again = SWEBenchDataSource.from_settings(settings)
    assert again.load() and again.get_samples(1)[0][0].group_index == 2
