"""Writing results: CSV, JSON, and plain-text tables for the terminal and the README."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """One line per mapping; columns in the order of the first mapping's keys."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if _plain(v) is None else _plain(v) for k, v in row.items()})


def write_json(path: Path, content: Any) -> None:
    def default(value: Any) -> Any:
        return _plain(value) if hasattr(value, "item") else str(value)

    def clean(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k): clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        return _plain(value)

    path.write_text(json.dumps(clean(content), indent=2, default=default) + "\n")


def format_table(rows: Sequence[Mapping[str, Any]], columns: Mapping[str, str]) -> str:
    """A Markdown table of ``rows`` with ``{key: header}`` columns (values already formatted)."""
    headers = list(columns.values())
    cells = [[str(row.get(key, "")) for key in columns] for row in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    separator = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), separator, *(line(c) for c in cells)])


def number(value: float | None, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits, or ``-``."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}g}"


def mebibytes(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f}"
