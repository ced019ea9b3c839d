"""The import graph stays the data flow: no cycles between modules, no library module importing an entry point,
no module of ours loaded by a string, imports at the top of the module (a late one says why on its line), and
the seed's entry points in examples/qwen_swe stay thin."""

from __future__ import annotations

import ast
from pathlib import Path

from qwen_swe.paths import PACKAGE_DIR, REPO_ROOT

ENTRY_DIR = REPO_ROOT / "examples" / "qwen_swe"
TASK_DATA = (PACKAGE_DIR / "data" / "taskpack" / "src", PACKAGE_DIR / "data" / "taskpack" / "repos")
# the run's orchestration, and the console command (qwen_swe/cli) that fronts it: called by entry points only
ENTRY_MODULES = {
    "qwen_swe.run",
    "qwen_swe.cli.commands",
    "qwen_swe.cli.main",
    "qwen_swe.cli.__main__",
    "qwen_swe.cli.reference",
}  # the CLI page, rendered from the commands
LATE_OK = "# late:"  # a function-level import of ours must say why on its line


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if any(path.is_relative_to(d) for d in TASK_DATA):
            continue
        rel = path.relative_to(REPO_ROOT).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        found[name] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module of ours an import names (``from a.b import c``: ``a.b.c`` when that is a module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(path: Path) -> list[tuple[str, int, bool, str]]:
    """(imported name, line, inside a function, source line) for every import of ours in ``path``."""
    source = path.read_text()
    lines = source.splitlines()
    out: list[tuple[str, int, bool, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                for alias in child.names:
                    out.append((f"{child.module}.{alias.name}", child.lineno, in_function, lines[child.lineno - 1]))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    out.append((alias.name, child.lineno, in_function, lines[child.lineno - 1]))
            visit(child, nested)

    visit(ast.parse(source), False)
    return [x for x in out if x[0].startswith(("qwen_swe", "examples"))]


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for imported, *_ in _imports(path):
            target = _resolve(imported)
            if target and target != name and not name.startswith(target + "."):  # a package's own __init__
                graph[name].add(target)
    return graph


def test_no_import_cycles():
    graph, state, stack, cycles = _graph(), {}, [], []

    def dfs(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                dfs(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            dfs(node)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_library_module_imports_an_entry_point():
    bad = [
        f"{MODULES[name].relative_to(REPO_ROOT)}:{line}: {imported}"
        for name in MODULES
        if name not in ENTRY_MODULES
        for imported, line, _, _ in _imports(MODULES[name])
        if imported.startswith("examples") or _resolve(imported) in ENTRY_MODULES
    ]
    assert not bad, "library modules importing entry points:\n" + "\n".join(bad)


def test_no_module_of_ours_is_loaded_by_a_string():
    bad = []
    for path in MODULES.values():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = getattr(node.func, "attr", getattr(node.func, "id", None))
            first = node.args[0]
            ours = isinstance(first, ast.Constant) and str(first.value).startswith(("qwen_swe", "examples"))
            dynamic = func in ("import_module", "__import__") and not isinstance(first, ast.Constant)
            if (
                func in ("import_module", "__import__", "find_spec")
                and (ours or dynamic)
                and LATE_OK not in lines[node.lineno - 1]
            ):
                bad.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not bad, "modules loaded by a string:\n" + "\n".join(bad)


def test_our_imports_are_at_the_top_of_the_module():
    late = [
        f"{MODULES[name].relative_to(REPO_ROOT)}:{line}: {text.strip()}"
        for name in MODULES
        for imported, line, in_function, text in _imports(MODULES[name])
        if in_function and LATE_OK not in text
    ]
    assert not late, (
        "function-level imports of our own modules (move them up, or say why with "
        f"'{LATE_OK} ...' on the line):\n" + "\n".join(late)
    )


def test_the_seed_entry_points_stay_thin():
    for path in sorted(ENTRY_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        assert not defs, f"{path.relative_to(REPO_ROOT)} defines {[d.name for d in defs]}: put logic in qwen_swe/"
        assert len(path.read_text().splitlines()) <= 30, f"{path.relative_to(REPO_ROOT)} is not thin"


# --- the seams (issue 37): one typed rollout contract, its record, no test code in the library, small modules ---

SEAM = (
    "rollout/contract.py",
    "rollout/driver.py",
    "rollout/replay.py",
    "warmstart/demos.py",
    "train/trainer.py",
    "train/publish.py",
    "train/offpolicy.py",
    "data/sample.py",
)
MAX_MODULE_LINES = 400  # the house style: modules stay near 300 lines, and past 400 are split by job


def test_the_rollout_contract_needs_no_type_ignore():
    # data/sample.py's fallback type is slime's Sample re-declared where slime is absent: the only ignores allowed
    allowed = {"data/sample.py": 3}
    bad = {rel: n for rel in SEAM if (n := (PACKAGE_DIR / rel).read_text().count("type: ignore")) > allowed.get(rel, 0)}
    assert not bad, f"`type: ignore` on the trainer/rollout seam: {bad}; implement qwen_swe.rollout.contract instead"


def test_what_a_rollout_records_goes_through_the_run_record():
    """Outside data/sample.py a sample's metadata is written only through ``stamp`` (a ``RunRecord`` field) or
    replaced by ``attempt_row`` (a retry): so a retry drops every field an attempt wrote, by construction."""
    bad = []
    for path in MODULES.values():
        if path == PACKAGE_DIR / "data" / "sample.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    item = isinstance(target, ast.Subscript) and _is_metadata(target.value)
                    whole = _is_metadata(target) and not (
                        isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "attempt_row"
                    )
                    if item or whole:
                        bad.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}: {ast.unparse(node)[:90]}")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and _is_metadata(node.func.value)
                and node.func.attr in ("update", "setdefault", "pop", "clear", "__setitem__")
            ):
                bad.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}: {ast.unparse(node)[:90]}")
    assert not bad, "metadata written around RunRecord (use qwen_swe.data.sample.stamp):\n" + "\n".join(bad)


def _is_metadata(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "metadata"


def test_the_library_carries_no_test_hooks():
    """No library module imports from tests/ or benchmarks/; the trainer takes a test's rollout source as a Python
    argument (tests/fake_trainer.py), never as a ``--driver module:function`` flag."""
    bad = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {module}"
        for path in MODULES.values()
        for module, line in _all_imports(path)
        if module.split(".")[0] in ("tests", "benchmarks")
    ]
    bad += [f"{path.relative_to(REPO_ROOT)}: --driver" for path in MODULES.values() if "--driver" in path.read_text()]
    assert not bad, "test-only code paths in the library (put them under tests/):\n" + "\n".join(bad)


def test_tests_and_benchmarks_import_no_private_names_of_each_other():
    bad = []
    for path in sorted([*(REPO_ROOT / "tests").rglob("*.py"), *(REPO_ROOT / "benchmarks").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("tests", "benchmarks")):
                bad += [
                    f"{path.relative_to(REPO_ROOT)}:{node.lineno}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_")
                ]
    assert not bad, "private helpers imported across test/benchmark files (give them a shared home):\n" + "\n".join(bad)


def test_no_module_is_over_the_size_limit():
    lines = {str(p.relative_to(REPO_ROOT)): len(p.read_text().splitlines()) for p in MODULES.values()}
    big = {rel: n for rel, n in lines.items() if n > MAX_MODULE_LINES}
    assert not big, f"modules over {MAX_MODULE_LINES} lines (split them by job): {big}"


def _all_imports(path: Path) -> list[tuple[str, int]]:
    """Every imported module name in ``path`` (ours or not), with its line."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
    return out


def test_docker_is_imported_only_where_containers_are_made():
    """The rollout engine, the agent, the grader and the trainer see containers through ``qwen_swe.sandbox`` only (its
    errors are ``SandboxError``; the engine and the grader are handed a ``SandboxFactory``). The task pack's image
    build drives a Docker client it is given, through ``qwen_swe.sandbox.docker_host``'s helpers, never by importing
    docker itself."""
    allowed = ("sandbox/",)
    bad = [
        str(path.relative_to(REPO_ROOT))
        for path in MODULES.values()
        if any(m == "docker" or m.startswith("docker.") for m, _ in _all_imports(path))
        and not str(path.relative_to(PACKAGE_DIR)).startswith(allowed)
    ]
    assert not bad, f"modules importing docker outside the sandbox: {bad}"


def test_machines_are_made_through_a_sandbox_factory():
    """Outside ``qwen_swe/sandbox`` no library module names the Docker sandbox: the rollout engine and the grader
    describe a machine with a ``SandboxRequest`` and are handed a ``SandboxFactory``, so a second backend
    (tests/local_sandbox.py) runs them unchanged."""
    bad = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {module}"
        for path in MODULES.values()
        if not str(path.relative_to(PACKAGE_DIR)).startswith("sandbox/")
        for module, line in _all_imports(path)
        if module == "qwen_swe.sandbox.docker" or module.startswith("qwen_swe.sandbox.docker.")
    ]
    assert not bad, "library modules making Docker sandboxes themselves (take a SandboxFactory):\n" + "\n".join(bad)


def test_benchmarks_import_no_test_file():
    """What a benchmark shares with the tests (a scripted server, a torchrun worker) lives in a helper module under
    tests/, never in a ``test_*.py`` file, which pytest collects and may change for its own tests."""
    bad = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {module}"
        for path in sorted((REPO_ROOT / "benchmarks").glob("*.py"))
        for module, line in _all_imports(path)
        if module.startswith("tests.") and module.rsplit(".", 1)[-1].startswith("test_")
    ]
    assert not bad, "benchmarks importing test files (move what they share into a tests/ helper):\n" + "\n".join(bad)


def test_tests_and_benchmarks_reach_no_private_names_through_a_module():
    """The same rule through a module object (``from benchmarks import bench_x`` then ``bench_x._helper``)."""
    bad = []
    for path in sorted([*(REPO_ROOT / "tests").rglob("*.py"), *(REPO_ROOT / "benchmarks").glob("*.py")]):
        tree, bound = ast.parse(path.read_text()), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("tests", "benchmarks"):
                bound |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.Import):
                bound |= {
                    a.asname or a.name.split(".")[0]
                    for a in node.names
                    if a.name.split(".")[0] in ("tests", "benchmarks")
                }
        bad += [
            f"{path.relative_to(REPO_ROOT)}:{node.lineno}: {node.value.id}.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ]
    reached = "\n".join(bad)
    assert not bad, f"private helpers reached across test/benchmark files (make them public or move them):\n{reached}"
