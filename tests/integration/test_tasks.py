"""The local task pack: generated rows, the images built from them, and the check that proves every task."""

from __future__ import annotations

import json
import shutil

import pytest

from qwen_swe.data.taskpack import SRC_DIR, TASKS_JSONL
from qwen_swe.data.taskpack.repo import make_repo
from qwen_swe.data.taskpack.source import generate, load_rows, patch_files
from qwen_swe.errors import TaskPackError

CLASSIC = (
    "repo",
    "instance_id",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "created_at",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)
V5 = ("image", "eval_script", "log_parser", "eval_type")


@pytest.fixture(scope="module")
def rows():
    return load_rows(TASKS_JSONL)


# --- no Docker ------------------------------------------------------------------------------------------------


def test_generate_reproduces_committed_tasks_jsonl(tmp_path):
    out = tmp_path / "tasks.jsonl"
    generate(out)
    stale = "tasks.jsonl is stale: run `python -m qwen_swe.data.taskpack generate`"
    assert out.read_bytes() == TASKS_JSONL.read_bytes(), stale


def test_rows_have_swebench_columns(rows):
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT
    from swebench.harness.log_parsers import python as parsers

    assert len(rows) >= 6
    assert len({row["instance_id"] for row in rows}) == len(rows)
    for row in rows:
        missing = [key for key in CLASSIC + V5 if not row.get(key)]
        assert not missing, f"{row['instance_id']} lacks {missing}"
        f2p, p2p = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
        assert f2p and all(isinstance(t, str) and "::" in t for t in f2p + p2p)
        assert not set(f2p) & set(p2p)
        owner, name = row["repo"].split("/")
        assert row["instance_id"].startswith(f"{owner}__{name}-")
        assert row["image"] == f"qwen-swe/sweb.eval.x86_64.{row['instance_id'].lower()}:latest"
        assert hasattr(parsers, row["log_parser"]) and row["eval_type"] == "pass_and_fail"
        script = row["eval_script"]
        assert f": '{START_TEST_OUTPUT}'" in script and f": '{END_TEST_OUTPUT}'" in script
        assert "git apply -v - <<'EOF_114329324912'\n" + row["test_patch"] + "EOF_114329324912" in script
        assert script.count(f"git checkout {row['base_commit']} -- ") == 2
        assert not any(p.startswith("tests/") for p in patch_files(row["patch"]))
        assert all(p.startswith("tests/") for p in patch_files(row["test_patch"]))


def test_pack_has_the_required_variety(rows):
    by_id = {row["instance_id"]: row for row in rows}
    assert any(len(patch_files(row["patch"])) >= 2 for row in rows), "no task spreads its fix over two files"
    assert any(
        sum(line.startswith("+") and not line.startswith("+++") for line in row["patch"].splitlines()) == 1
        for row in rows
    ), "no one-line fix"
    assert any("\n+def " in row["patch"] for row in rows), "no task that needs a new function"
    assert any((SRC_DIR / iid / "careless").is_dir() for iid in by_id), "no task with a careless fix"


def test_base_commit_is_deterministic(rows, tmp_path):
    for row in rows:
        dest = tmp_path / row["instance_id"]
        assert make_repo(row["repo"].split("/")[1], dest) == row["base_commit"]
        assert not (dest / ".git" / "logs").exists()


def test_bad_sources_are_named(tmp_path):
    with pytest.raises(TaskPackError, match="no repository folder .*nosuchrepo"):
        make_repo("nosuchrepo", tmp_path / "x")
    (tmp_path / "src" / "Not-An-Id").mkdir(parents=True)
    from qwen_swe.data.taskpack.source import load_sources

    with pytest.raises(TaskPackError, match="'Not-An-Id' is not named owner__repo-N"):
        load_sources(tmp_path / "src")
    good = tmp_path / "src2" / "qwenswe__minicalc-9"
    shutil.copytree(SRC_DIR / "qwenswe__minicalc-1", good)
    task = json.loads((good / "task.json").read_text())
    task["PASS_TO_PASS"].append("tests/test_tokens.py::test_positions")
    (good / "task.json").write_text(json.dumps(task))
    from qwen_swe.data.taskpack.source import build_rows

    with pytest.raises(TaskPackError, match="test_positions is not in a file the test patch touches"):
        build_rows(tmp_path / "src2")


# --- Docker ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client():
    import docker

    return docker.from_env(timeout=600)


@pytest.fixture(scope="module")
def built(rows, client):
    from qwen_swe.data.taskpack.images import build_all

    return build_all(rows, client)


def _sh(client, image: str, command: str) -> str:
    container = client.containers.create(
        image, command=["sleep", "infinity"], network_mode="none", labels={"qwen-swe": "1", "qwen-swe.role": "test"}
    )
    try:
        container.start()
        code, out = container.exec_run(["timeout", "60", "bash", "-c", command], workdir="/testbed")
        assert code == 0, out.decode(errors="replace")
        return out.decode()
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_images_hold_testbed_at_base_commit(rows, client, built):
    seen = set()
    for row in rows:
        image = client.images.get(row["image"])
        assert image.labels.get("qwen-swe.inputs") and image.labels.get("qwen-swe.role") != "build"
        if image.id in seen:
            continue
        seen.add(image.id)
        out = _sh(
            client,
            row["image"],
            "git rev-list --all; echo ==; git for-each-ref --format='%(refname)'; echo ==; "
            "git status --porcelain; echo ==; ls .git/logs 2>&1 || true; echo ==; "
            "python3 -m pytest --version 2>&1; command -v git bash patch",
        )
        commits, refs, status, logs, tools = out.split("==\n")
        assert commits.split() == [row["base_commit"]]
        assert refs.split() == ["refs/heads/main"]
        assert status.strip() == ""
        assert "No such file" in logs
        assert "pytest" in tools and "/git" in tools and "/bash" in tools and "/patch" in tools


@pytest.mark.docker
def test_build_reuses_unchanged_images(rows, client, built):
    from qwen_swe.data.taskpack.images import build_all

    again = build_all(rows, client, log=lambda _: None)
    assert [s.action for s in again if s.image.startswith("qwen-swe/")] == ["reused"] * (len(rows) + 2)


@pytest.mark.docker
def test_stale_image_is_replaced(rows, client, built):
    from qwen_swe.data.taskpack.images import LABEL_INPUTS, PY_IMAGE, ensure_task

    row = dict(rows[0], image="qwen-swe/test-stale:latest")
    client.images.get(PY_IMAGE).tag("qwen-swe/test-stale", "latest")  # same name, wrong inputs
    try:
        step = ensure_task(client, row, log=lambda _: None)
        assert step.action in ("built", "tagged")
        expected = client.images.get(rows[0]["image"]).labels[LABEL_INPUTS]
        assert client.images.get(row["image"]).labels[LABEL_INPUTS] == expected
    finally:
        client.images.remove("qwen-swe/test-stale:latest", noprune=True)


@pytest.mark.docker
def test_check_passes_for_every_task(rows, client, built):
    from qwen_swe.data.taskpack.check import check_all, format_report

    results = check_all(rows, log=lambda _: None)
    assert all(r.ok for r in results), format_report(results)
    careless = [r for r in results if "careless" in r.runs]
    assert careless, "the careless fix was not exercised"
    for result in results:
        assert result.runs["base"] and result.runs["gold"]


@pytest.mark.docker
def test_no_build_or_check_containers_remain(client, built):
    from qwen_swe.data.taskpack.check import CHECK_RUN_ID
    from qwen_swe.sandbox.docker_host import containers_of

    leftovers = containers_of(client)
    # the task pack's: the build's and this file's carry no run label, the check's its own (other tests' run beside)
    roles = [
        c.labels.get("qwen-swe.role") for c in leftovers if c.labels.get("qwen-swe.run", CHECK_RUN_ID) == CHECK_RUN_ID
    ]
    assert not [r for r in roles if r in ("build", "check", "test")], roles
