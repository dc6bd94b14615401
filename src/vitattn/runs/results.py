"""Writing results: ``metrics.json``, CSV tables, and Markdown tables for the terminal and docs.

One writer for every command: training and evaluation (``metrics.json``), the benchmark
(``results.json``, ``*.csv``, ``*.md``) and the analysis scripts (``summary.csv``,
``summary.md``, ``lora_table.*``). Values are written as plain numbers: tensors become Python
scalars, and NaN or infinity becomes an empty cell (CSV) or ``null`` (JSON).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vitattn.runs.files import replacing, write_text


def plain_value(value: Any) -> Any:
    """A tensor or NumPy scalar as a Python number; NaN and infinity as ``None``."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_plain(content: Any) -> Any:
    """``content`` with every nested value made plain (:func:`plain_value`), keys as strings."""
    if isinstance(content, Mapping):
        return {str(k): to_plain(v) for k, v in content.items()}
    if isinstance(content, list | tuple):
        return [to_plain(v) for v in content]
    return plain_value(content)


def write_json(path: Path, content: Any) -> None:
    """``content`` as indented JSON; values that JSON cannot hold are written as strings. Written
    whole or not at all, never through a symbolic link (:func:`vitattn.runs.files.replacing`):
    a full disk leaves the previous file, or none, never an empty or truncated one."""
    text = json.dumps(to_plain(content), indent=2, default=str) + "\n"
    write_text(path, text)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What makes a spreadsheet read a cell as a formula (OWASP's list for CSV injection)."""


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell: empty for none (:func:`plain_value`); text a spreadsheet would
    run as a formula (a job folder named ``=HYPERLINK(...)``) behind a ``'``, as OWASP
    advises, unless it reads as a number."""
    value = plain_value(value)
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not _is_number(value):
        return "'" + value
    return value


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def write_csv(
    path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None
) -> None:
    """One line per mapping. ``columns`` (default: every key, in first-seen order) sets the
    header; keys outside it are left out, missing ones are empty cells; each cell as
    :func:`csv_cell` writes it. Written whole or not at all, never through a symbolic link."""
    if columns is None:
        columns = list(dict.fromkeys(key for row in rows for key in row))
    with replacing(path, text=True, newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="ignore")
        writer.writerow({column: csv_cell(column) for column in columns})
        for row in rows:
            writer.writerow({k: csv_cell(v) for k, v in row.items()})


MAX_PADDED = 200
"""The widest a Markdown table's column is padded to."""


def markdown_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Mapping[str, str],
    align_right: Sequence[str] = (),
) -> str:
    """A Markdown table of ``rows`` with ``{key: header}`` columns, padded to align in a
    terminal, each column to at most :data:`MAX_PADDED` characters (a longer cell, or header,
    is written whole and not padded to: the table's size grows with its text, not with its rows
    times its longest cell or header). Values are shown as given (format them first); a ``|``
    inside a cell or a header (a header can be read from a run: a LoRA table's shift) is
    escaped and line breaks are folded, so every row stays one line. Columns in
    ``align_right`` are right aligned (``---:``)."""
    headers = [_cell_text(header) for header in columns.values()]
    cells = [[_cell_text(row.get(key, "")) for key in columns] for row in rows]
    widths = [
        min(max([len(h)] + [len(c[i]) for c in cells]), MAX_PADDED) for i, h in enumerate(headers)
    ]
    right = [key in align_right for key in columns]

    def line(values: Sequence[str]) -> str:
        padded = (
            v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)
        )
        return "| " + " | ".join(padded) + " |"

    rules = (
        "-" * (w + 1) + ":" if r else "-" * (w + 2) for w, r in zip(widths, right, strict=True)
    )
    separator = "|" + "|".join(rules) + "|"
    return "\n".join([line(headers), separator, *(line(c) for c in cells)])


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    return " ".join(str(value).split()).replace("|", "\\|")


def number(value: float | None, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits, or ``-`` when there is none; one of more
    whole digits than that is written whole, not in powers of ten (112% of a floor with two
    digits: ``110``, not ``1.1e+02``; 1,234.5 ms: ``1230``)."""
    value = plain_value(value)
    if value is None:
        return "-"
    rounded = f"{value:.{digits}g}"
    if 10**digits <= abs(float(rounded)) < WHOLE_UP_TO:  # 999.7: "1e+03" rounded
        return f"{float(rounded):.0f}"
    return rounded


WHOLE_UP_TO = 1e15
"""Past this, :func:`number` writes powers of ten again: a float's whole digits end here."""


def mebibytes(value: float | None) -> str:
    """Bytes as MiB with one decimal, or ``-``."""
    return "-" if value is None else f"{value / 2**20:.1f}"
