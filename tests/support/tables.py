"""The tables a command writes, read back: CSV files and the Markdown tables of a report."""

from __future__ import annotations

import csv
from pathlib import Path


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file (``summary.csv``, ``results.csv``, ...) as dictionaries."""
    with path.open() as handle:
        return list(csv.DictReader(handle))


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table in ``text``: its rows (header first, the ``---`` rule left out) as
    lists of stripped cells."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(set(cell) <= set("-: ") for cell in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables
