"""The import graph of ``src/vitattn`` and ``scripts/``: no circles, no module importing an entry
point, and each room importing only the rooms below it (``docs/architecture.md``).

Imports are read from the source with :mod:`ast`, wherever they stand (module level or inside a
function), so a function-level import cannot hide a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from vitattn.utils.config import PROJECT_ROOT

SOURCE = PROJECT_ROOT / "src"
ENTRY_POINTS = {
    "vitattn.train",
    "vitattn.eval",
    "vitattn.finetune",
    "vitattn.bench.app",
    "vitattn.check.app",
}
"""The console scripts' modules: they use the package; nothing uses them."""
ALLOWED_TO_IMPORT_AN_ENTRY_POINT = {"vitattn.bench.__main__", "vitattn.check.__main__"}
"""``python -m vitattn.bench`` and ``python -m vitattn.check`` run those entry points."""

BASE = {"vitattn.errors", "vitattn.utils", "vitattn.runs"}
"""The ground floor: one-line errors, general helpers, and the run directory's owner."""

ROOMS = {
    "vitattn.errors": set(),
    "vitattn.utils": {"vitattn.errors"},
    "vitattn.runs": {"vitattn.errors", "vitattn.utils"},
    "vitattn.cli": BASE,
    "vitattn.attention": BASE,
    "vitattn.data": BASE,
    "vitattn.models": {"vitattn.attention", *BASE},
    "vitattn.training.hparams": BASE,
    "vitattn.training.logger": {"vitattn.training.hparams", *BASE},
    "vitattn.training.callbacks": {"vitattn.attention", "vitattn.training.logger", *BASE},
    "vitattn.training": {
        "vitattn.training.callbacks",
        "vitattn.training.logger",
        "vitattn.training.hparams",
        *BASE,
    },
    "vitattn.lora": {"vitattn.models", "vitattn.attention", *BASE},
    "vitattn.loading": {"vitattn.models", "vitattn.lora", *BASE},
    "vitattn.analysis": {"vitattn.data", *BASE},
}
"""Each room (package or module) and the rooms it may import besides itself. The entry points,
``vitattn.bench`` and ``vitattn.check`` (which runs the bench's pieces) sit above all of them and
may import any."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((SOURCE / "vitattn").rglob("*.py"))}


def imported(path: Path, known: set[str], name: str = "") -> set[str]:
    """The modules of ``known`` that the file at ``path`` imports, anywhere in it."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    known = set(modules)
    graph = {name: imported(path, known, name) for name, path in modules.items()}
    # A package's __init__ runs before any of its modules: importing a.b imports a.
    for name in modules:
        parent = name.rpartition(".")[0]
        if parent in known and parent != name:
            for importer, targets in graph.items():
                if name in targets and importer != parent and not importer.startswith(parent):
                    targets.add(parent)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
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


def room_of(module: str) -> str | None:
    return next((room for room in ROOMS if module == room or module.startswith(f"{room}.")), None)


def test_the_import_graph_has_no_circle() -> None:
    assert circles(import_graph()) == []


def test_the_circle_finder_finds_a_planted_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]


def test_no_module_imports_an_entry_point() -> None:
    graph = import_graph()
    offenders = {
        name: sorted(targets & ENTRY_POINTS)
        for name, targets in graph.items()
        if targets & ENTRY_POINTS and name not in ALLOWED_TO_IMPORT_AN_ENTRY_POINT
    }
    known = set(graph)
    for script in sorted((PROJECT_ROOT / "scripts").glob("*.py")):
        uses = imported(script, known) & ENTRY_POINTS
        if uses:
            offenders[str(script.relative_to(PROJECT_ROOT))] = sorted(uses)
    assert offenders == {}


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_each_room_imports_only_the_rooms_below_it(room: str) -> None:
    graph = import_graph()
    allowed = ROOMS[room] | {room}
    wrong = {
        name: sorted(t for t in targets if room_of(t) not in allowed)
        for name, targets in graph.items()
        if room_of(name) == room
    }
    assert {name: targets for name, targets in wrong.items() if targets} == {}


ENTRY_POINT_FUNCTION_LINES = 60
"""An entry point reads as a short task over helpers named for what they do."""


def long_functions(path: Path, limit: int) -> list[str]:
    """``name (lines)`` of every function in ``path`` longer than ``limit`` lines."""
    tree = ast.parse(path.read_text())
    return [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > limit
    ]


@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
def test_entry_points_are_short_functions(entry_point: str) -> None:
    path = package_modules()[entry_point]
    assert long_functions(path, ENTRY_POINT_FUNCTION_LINES) == []


def test_a_long_function_is_found(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(ENTRY_POINT_FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f"def task():\n{body}\n")
    assert long_functions(tmp_path / "long.py", ENTRY_POINT_FUNCTION_LINES) == ["task (61 lines)"]
