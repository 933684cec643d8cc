"""The ``nrt`` CLI's modules import one another without a cycle, read from the source.

Every import counts, also one inside a function, and importing ``a.b.c`` counts as importing the
packages ``a`` and ``a.b`` too (their ``__init__`` runs first), except the packages the importing
module is in (they are already being imported when it runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

from paths import ROOT

CLI = ROOT / "libs" / "nrt" / "entrypoints" / "cli"
PREFIX = "nrt.entrypoints.cli"


def module_name(path: Path) -> str:
    parts = path.relative_to(CLI.parents[2]).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, modules: set[str]) -> set[str]:
    """The CLI modules ``path`` imports, with the packages above each."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    found: set[str] = set()
    for name in names:
        parts = name.split(".")
        found.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in CLI.rglob("*.py")}
    modules = set(paths)
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        own_packages = {".".join(name.split(".")[:n]) for n in range(1, name.count(".") + 1)}
        graph[name] = imported(path, modules) - own_packages - {name}
    return graph


def a_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as the modules along it, or [] when there is none."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str]:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return []
        for target in sorted(graph.get(name, ())):
            cycle = visit(target, [*path, name])
            if cycle:
                return cycle
        done.add(name)
        return []

    for name in sorted(graph):
        cycle = visit(name, [])
        if cycle:
            return cycle
    return []


def test_the_graph_sees_the_cli_modules() -> None:
    graph = import_graph()
    assert f"{PREFIX}.whatif" in graph
    assert f"{PREFIX}.event_log" in graph[f"{PREFIX}.whatif"]


def test_the_cli_modules_import_one_another_without_a_cycle() -> None:
    assert a_cycle(import_graph()) == []
