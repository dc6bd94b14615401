"""The bench package's shape: imports go one way, from the entry point down."""

from __future__ import annotations

import ast
from pathlib import Path

import vitattn.bench

PACKAGE = Path(vitattn.bench.__file__).parent


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code (function-level imports too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_module_of_the_bench_imports_its_entry_point() -> None:
    modules = sorted(p for p in PACKAGE.glob("*.py") if p.name not in ("app.py", "__main__.py"))
    assert len(modules) > 10
    for path in modules:
        assert "vitattn.bench.app" not in imported_modules(path), path.name
