"""The imports between the project's own modules, read with `ast` (nothing is imported): no import cycle,
and nothing in client/ or bcctool/ imports host/ (the client and the metrics' harness run without the
app's machine-side code; host/ is the app's). An import inside a function counts like one at the top.
And no module of the project (tests/ and bench/ aside) is over MAX_LINES lines: one read in a sitting."""

from __future__ import annotations

import ast
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("bcctool", "client", "collector", "gui", "host", "monitor", "profile_data", "metrics", "registry")
TOP_LEVEL = ("config", "worker", "main_app", "ui_main_window", "server", "launcher")
NO_HOST = ("client", "bcctool")
MAX_LINES = 600
NOT_MODULES = ("tests", "bench")   # top-level directories whose files are not the project's modules


def module_files(root: pathlib.Path, packages=PACKAGES, top_level=TOP_LEVEL) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for the packages' modules (a package by its __init__.py) and the
    top-level modules."""
    files = {name: root / f"{name}.py" for name in top_level if (root / f"{name}.py").exists()}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if "node_modules" in parts or "__pycache__" in parts:
                continue
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def imported_names(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, str | None]]:
    """(module, name or None) for each import in the tree, relative ones made absolute."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[:len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            found += [(base, alias.name) for alias in node.names]
    return found


def import_graph(root: pathlib.Path, packages=PACKAGES, top_level=TOP_LEVEL) -> dict[str, set[str]]:
    """Module -> the project modules it imports (`from P import x`: P.x when that is a module, else P)."""
    files = module_files(root, packages, top_level)

    def project_module(name: str) -> str | None:
        parts = name.split(".")
        while parts and ".".join(parts) not in files:
            parts.pop()
        return ".".join(parts) or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = set()
        for base, name in imported_names(tree, module, path.name == "__init__.py"):
            target = f"{base}.{name}" if name and f"{base}.{name}" in files else project_module(base)
            if target and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_reader_finds_a_cycle_through_a_relative_and_a_function_level_import(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from . import a\n")
    (tmp_path / "pkg" / "a.py").write_text("from .b import f\n")
    (tmp_path / "pkg" / "b.py").write_text("import os\n\ndef f():\n    from pkg import a\n")
    (tmp_path / "top.py").write_text("import pkg.b\nfrom pkg import a, missing\n")
    graph = import_graph(tmp_path, packages=("pkg",), top_level=("top",))
    assert graph == {"top": {"pkg.a", "pkg.b", "pkg"}, "pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


def test_no_import_cycle_among_the_projects_modules():
    graph = import_graph(ROOT)
    assert {"host.procs", "client.transport", "bcctool.unwind", "worker"} <= graph.keys()
    assert cycles(graph) == []


def test_nothing_in_client_or_bcctool_imports_host():
    graph = import_graph(ROOT)
    upward = sorted(f"{module} -> {target}" for module, targets in graph.items()
                    if module.split(".")[0] in NO_HOST for target in targets if target.split(".")[0] == "host")
    assert upward == []


def python_files(root: pathlib.Path) -> list[pathlib.Path]:
    """Every .py file of the project: hidden directories (.venv, .git), tests/, bench/ and caches left out."""
    found = []
    for base, dirs, files in os.walk(root):
        top = pathlib.Path(base) == root
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "node_modules")
                         and not (top and d in NOT_MODULES))
        found += [pathlib.Path(base) / f for f in sorted(files) if f.endswith(".py")]
    return found


def test_the_file_walk_leaves_out_tests_bench_and_hidden_directories(tmp_path):
    for path in ("main.py", "pkg/a.py", "pkg/tests/b.py", "tests/t.py", "bench/b.py", ".venv/lib/x.py", "pkg/c.txt"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    assert [str(p.relative_to(tmp_path)) for p in python_files(tmp_path)] == ["main.py", "pkg/a.py", "pkg/tests/b.py"]


def test_no_module_is_over_600_lines():
    files = python_files(ROOT)
    assert ROOT / "config.py" in files and ROOT / "bcctool" / "tool.py" in files
    long = {str(path.relative_to(ROOT)): lines for path in files
            if (lines := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"over {MAX_LINES} lines (split by job): {long}"
