"""The import rules, checked on the import graph of the source (README: "Architecture: import rules").

Every module under ``libs/nrt`` and ``services/`` is parsed with ``ast`` (nothing is imported), and
each import becomes an edge to the modules it runs: ``from a.b import c`` runs ``a.b.c`` when that
is a module (else ``a.b``), plus the packages above it that the importer is not already inside;
relative imports are resolved against the importer's package; a name that a package provides
lazily (its ``LAZY`` table, read by its module ``__getattr__``) resolves to the submodule that
defines it. Each edge has one of three kinds, and each rule says which kinds it reads:

- ``module``: runs when the module is imported (top level, class bodies, ``try`` blocks);
- ``typing``: under ``if TYPE_CHECKING:``, never runs, but is a dependency of the code's meaning;
- ``lazy``: inside a function, runs only when that function is called.

The rules:

- (a) the core (``nrt.core``) imports the stdlib, msgspec, yaml and itself: ``module`` and ``typing``
  edges;
- (a') the layers ``nrt.core`` < ``nrt.adapters`` < ``nrt.hosting`` < ``nrt.entrypoints``: a module
  imports its own layer and those below, never one above and never the test support
  (``nrt.testing``), not even late: every kind of edge; every module of ``libs/nrt`` is in a layer
  or in the test support;
- (b) the in-memory store, the event log's interface and the in-memory broker set-up load no
  database or server code, and the wire contract loads no shell: ``module`` edges (what runs);
- (c) no service imports another and the library imports none, not even late; no service imports
  the test support: every kind of edge;
- (d) no import cycle at module level, package ``__init__`` loops included: ``module`` edges.

There is no list of exceptions: a break fails the test.

Not seen: ``importlib.import_module`` calls (the ``LAZY`` tables aside). ``tests/integration/processes/test_light_core.py``
checks the same promises at run time, in a fresh interpreter, through ``sys.modules``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from paths import ROOT

SOURCE_ROOTS = (ROOT / "libs", ROOT / "services")

# The layers of libs/nrt, lowest first. A module imports its own layer and those below it, never
# one above; nothing in them imports the test support (``nrt.testing``) or a service.
LAYERS = (
    "nrt.core",  # what decides: pure, typed data and functions
    "nrt.adapters",  # what talks to the world: NATS, the stores, ONNX Runtime, models, servers
    "nrt.hosting",  # the model-hosting jobs that router_svc and specialist_worker both run
    "nrt.entrypoints",  # what starts processes: the CLI, the stack, the service runtime
)
TESTING = "nrt.testing"  # test support: may import any layer

# The pure core imports the stdlib, these third-party packages and itself.
CORE = "nrt.core"
CORE_THIRD_PARTY = frozenset({"msgspec", "yaml"})

# Modules that tests and tools use without servers: they must not load database or server code.
# ``nrt.adapters.bus.broker`` builds the broker that tests wrap in FastStream's in-memory TestNatsBroker.
IN_MEMORY = (
    "nrt.core.eventlog",
    "nrt.core.state.snapshot",
    "nrt.adapters.store",
    "nrt.adapters.store.memory",
    "nrt.adapters.bus",
    "nrt.adapters.bus.broker",
)
SERVER_CODE = frozenset(
    {
        "sqlalchemy",
        "psycopg",
        "psycopg_pool",
        "asyncpg",
        "alembic",
        "nrt.adapters.infra.embedded_postgres",
        "nrt.adapters.infra.embedded_nats",
        "nrt.adapters.store.postgres",
        "nrt.adapters.store.migrate",
        "nrt.adapters.store.tables",
        "nrt.testing",
    }
)

# The wire contract (what any process may read to talk to another) runs no shell.
WIRE = ("nrt.core.protocol", "nrt.adapters.bus.contract")
SHELLS = frozenset({"nrt.entrypoints", "faststream", "uvloop", "prometheus_client"})

SERVICES = frozenset({"api_gateway", "cluster_state", "router_svc", "specialist_worker"})


@dataclass(frozen=True)
class Edge:
    """One import: ``source`` runs ``target`` (a module of the tree, or a top-level package outside it)."""

    source: str
    target: str
    kind: str  # "module", "typing" or "lazy"
    line: int


def module_name(path: Path) -> str:
    root = next(root for root in SOURCE_ROOTS if root in path.parents)
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of libs/nrt and services/, by dotted name."""
    found = {module_name(path): path for root in SOURCE_ROOTS for path in sorted(root.rglob("*.py"))}
    return {name: path for name, path in found.items() if name.split(".")[0] in SERVICES | {"nrt"}}


def is_package(name: str) -> bool:
    return modules()[name].name == "__init__.py"


def lazy_table(package: str) -> dict[str, str]:
    """The names a package provides lazily: its top-level ``LAZY = {name: module}`` literal."""
    tree = ast.parse(modules()[package].read_text())
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "LAZY" and node.value is not None:
            table: dict[str, str] = ast.literal_eval(node.value)
            return table
    return {}


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(node: ast.AST, kind: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Each import statement under ``node`` with its kind."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, kind
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from imports(child, "lazy")
        elif isinstance(child, ast.If) and is_type_checking(child.test) and kind == "module":
            for statement in child.body:
                yield from imports(ast.Module(body=[statement], type_ignores=[]), "typing")
            for statement in child.orelse:
                yield from imports(ast.Module(body=[statement], type_ignores=[]), "module")
        else:
            yield from imports(child, kind)


def absolute(importer: str, statement: ast.ImportFrom) -> str:
    """The absolute module a ``from`` import names, with relative levels resolved."""
    if statement.level == 0:
        return statement.module or ""
    package = importer if is_package(importer) else importer.rpartition(".")[0]
    base = package.split(".")[: len(package.split(".")) - statement.level + 1]
    return ".".join([*base, *([statement.module] if statement.module else [])])


def runs(importer: str, name: str) -> list[str]:
    """What importing ``name`` runs: the module itself (or its top package outside the tree) and
    the packages above it that ``importer`` is not already inside."""
    if name.split(".")[0] not in SERVICES | {"nrt"}:
        return [name.split(".")[0]]
    parts = name.split(".")
    chain = [".".join(parts[: i + 1]) for i in range(len(parts))]
    inside = {".".join(importer.split(".")[: i + 1]) for i in range(len(importer.split(".")))}
    return [module for module in chain if module in modules() and module not in inside and module != importer]


def targets(importer: str, statement: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(statement, ast.Import):
        return [target for alias in statement.names for target in runs(importer, alias.name)]
    base = absolute(importer, statement)
    found = runs(importer, base)
    for alias in statement.names:
        submodule = f"{base}.{alias.name}"
        if submodule in modules():
            found += runs(importer, submodule)
        elif base in modules() and is_package(base) and alias.name in lazy_table(base):
            found += runs(importer, lazy_table(base)[alias.name])
    return found


@cache
def edges() -> tuple[Edge, ...]:
    found: set[Edge] = set()
    for name, path in modules().items():
        for statement, kind in imports(ast.parse(path.read_text(), str(path)), "module"):
            found |= {Edge(name, target, kind, statement.lineno) for target in targets(name, statement)}
    return tuple(sorted(found, key=lambda edge: (edge.source, edge.line, edge.target)))


def out(name: str, kinds: frozenset[str]) -> list[Edge]:
    return [edge for edge in edges() if edge.source == name and edge.kind in kinds]


def inside(name: str, packages: tuple[str, ...] | frozenset[str]) -> bool:
    return any(name == package or name.startswith(f"{package}.") for package in packages)


RUNTIME = frozenset({"module"})
DEPENDS = frozenset({"module", "typing"})
ANY = frozenset({"module", "typing", "lazy"})
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


def core_breaks() -> list[Edge]:
    """Rule (a): each import of a core module that is not the stdlib, msgspec, yaml or the core."""
    allowed = STDLIB | CORE_THIRD_PARTY
    return [
        edge
        for name in modules()
        if inside(name, (CORE,))
        for edge in out(name, DEPENDS)
        if edge.target not in allowed and not (inside(edge.target, (CORE,)) or edge.target == "nrt")
    ]


def test_the_core_imports_only_the_stdlib_msgspec_yaml_and_itself() -> None:
    breaks = [f"{e.source}:{e.line} imports {e.target}" for e in core_breaks()]
    assert breaks == [], "the core imports outside itself:\n" + "\n".join(breaks)


def layer_of(name: str) -> int | None:
    """The index of the layer ``name`` belongs to, or None (``nrt`` itself, the test support, outside)."""
    return next((i for i, layer in enumerate(LAYERS) if inside(name, (layer,))), None)


def layer_breaks() -> list[Edge]:
    """Rule (a'): a layer importing one above it, or the test support, at any time (even late)."""
    found = []
    for edge in edges():
        source = layer_of(edge.source)
        if source is None:
            continue
        target = layer_of(edge.target)
        if (target is not None and target > source) or inside(edge.target, (TESTING,)):
            found.append(edge)
    return found


def test_each_layer_imports_only_itself_and_the_layers_below() -> None:
    breaks = [f"{e.source}:{e.line} imports {e.target} ({e.kind})" for e in layer_breaks()]
    assert breaks == [], "a layer imports one above it:\n" + "\n".join(breaks)


def test_every_module_of_the_library_is_in_one_layer_or_the_test_support() -> None:
    homeless = [
        name
        for name in modules()
        if name.startswith("nrt.") and layer_of(name) is None and not inside(name, (TESTING,))
    ]
    assert homeless == []


def test_services_never_import_the_test_support() -> None:
    found = [
        f"{e.source}:{e.line} imports {e.target}"
        for e in edges()
        if e.source.split(".")[0] in SERVICES and inside(e.target, (TESTING,))
    ]
    assert found == []


def reachable(start: str, kinds: frozenset[str]) -> dict[str, list[str]]:
    """Every module ``start`` runs, transitively, each with the chain of imports that reaches it."""
    paths = {start: [start]}
    todo = [start]
    while todo:
        name = todo.pop()
        for edge in out(name, kinds):
            if edge.target not in paths:
                paths[edge.target] = [*paths[name], edge.target]
                if edge.target in modules():
                    todo.append(edge.target)
    return paths


@pytest.mark.parametrize("light", IN_MEMORY)
def test_the_in_memory_adapters_load_no_database_or_server_code(light: str) -> None:
    heavy = {name: path for name, path in reachable(light, RUNTIME).items() if inside(name, SERVER_CODE)}
    assert heavy == {}, f"importing {light} runs server code:\n" + "\n".join(
        " -> ".join(path) for path in heavy.values()
    )


@pytest.mark.parametrize("wire", WIRE)
def test_the_wire_contract_loads_no_shell(wire: str) -> None:
    shell = {name: path for name, path in reachable(wire, RUNTIME).items() if inside(name, SHELLS)}
    assert shell == {}, f"importing {wire} runs a shell:\n" + "\n".join(" -> ".join(path) for path in shell.values())


def service_breaks() -> dict[tuple[str, str], Edge]:
    """Rule (c): a service importing another service, or libs/nrt importing any service."""
    found = {}
    for edge in edges():
        source, target = edge.source.split(".")[0], edge.target.split(".")[0]
        if edge.kind in ANY and target in SERVICES and source != target:
            key = (edge.source, target)
            if key not in found or len(edge.target) > len(found[key].target):
                found[key] = edge  # the deepest module the statement names, for the message
    return found


def test_no_service_imports_another_and_the_library_imports_none() -> None:
    breaks = [f"{e.source}:{e.line} imports {e.target}" for e in service_breaks().values()]
    assert breaks == [], "a service is imported from outside it:\n" + "\n".join(breaks)


def cycles() -> list[tuple[str, ...]]:
    """The import cycles at module level, each as the sorted modules it passes through."""
    return strongly_connected(
        {name: sorted({e.target for e in out(name, RUNTIME) if e.target in modules()}) for name in modules()}
    )


def strongly_connected(graph: dict[str, list[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one node (Tarjan), or of one node that imports itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[tuple[str, ...]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for target in graph[name]:
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == name:
                    break
            if len(component) > 1 or name in graph[name]:
                found.append(tuple(sorted(component)))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for name in graph:
            if name not in index:
                visit(name)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def test_no_import_cycles_at_module_level() -> None:
    found = [" <-> ".join(cycle) for cycle in cycles()]
    assert found == [], "import cycles at module level:\n" + "\n".join(found)


# The checks above only count what they parse: each must see the break it exists for.


def test_the_layers_name_packages_of_the_tree() -> None:
    assert [name for name in (*LAYERS, TESTING) if name not in modules() or not is_package(name)] == []


def has_edge(source: str, target: str, kind: str) -> bool:
    return any(e.source == source and e.target == target and e.kind == kind for e in edges())


def test_the_graph_sees_imports_of_each_kind() -> None:
    assert has_edge("nrt.adapters.store.postgres", "sqlalchemy", "module")
    assert has_edge("nrt.adapters.store", "nrt.adapters.store.postgres", "typing")
    assert has_edge("nrt.hosting.whatif_run", "nrt.hosting.offline_router", "lazy")


def test_the_graph_follows_a_package_s_lazy_names_and_its_init() -> None:
    # ``from nrt.adapters.store import upgrade`` runs nrt.adapters.store (its __init__) and, through LAZY, nrt.adapters.store.migrate
    assert has_edge("nrt.entrypoints.cli.db", "nrt.adapters.store", "module")
    assert has_edge("nrt.entrypoints.cli.db", "nrt.adapters.store.migrate", "module")


def test_the_cycle_check_finds_a_loop_through_a_package_init() -> None:
    graph = {"p": ["p.a"], "p.a": ["q"], "q": ["p"], "r": ["r"], "s": ["p"]}
    assert strongly_connected(graph) == [("p", "p.a", "q"), ("r",)]


def test_the_reach_finds_server_code_behind_the_postgres_store() -> None:
    assert "sqlalchemy" in reachable("nrt.adapters.store.postgres", RUNTIME)


def test_the_layers_are_ordered_and_the_test_support_is_outside_them() -> None:
    assert layer_of("nrt.core.events") == 0
    assert layer_of("nrt.adapters.store.postgres") == 1
    assert layer_of("nrt.hosting.worker") == 2
    assert layer_of("nrt.entrypoints.cli.main") == 3
    assert layer_of("nrt.testing.servers") is None
    assert layer_of("nrt.core_like") is None  # a prefix is not a package
