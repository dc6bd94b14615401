"""The one results writer: JSON, CSV and Markdown with plain numbers."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import torch

from vitattn.runs.results import markdown_table, number, write_csv, write_json


def test_json_holds_plain_numbers_and_null_for_nan(tmp_path: Path) -> None:
    path = tmp_path / "metrics.json"
    write_json(path, {"acc": torch.tensor(0.5), "loss": math.nan, "rows": [{"x": torch.tensor(2)}]})
    assert json.loads(path.read_text()) == {"acc": 0.5, "loss": None, "rows": [{"x": 2}]}


def test_csv_columns_missing_cells_and_nan(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    write_csv(path, [{"a": 1, "b": math.inf}, {"a": torch.tensor(3.0), "c": "x"}])
    with path.open() as handle:
        assert list(csv.DictReader(handle)) == [
            {"a": "1", "b": "", "c": ""},
            {"a": "3.0", "b": "", "c": "x"},
        ]
    write_csv(path, [{"a": 1, "b": 2}], columns=["b"])
    assert path.read_text().splitlines() == ["b", "2"]


def test_a_long_cell_is_written_whole_and_pads_no_other_row() -> None:
    """A table's size grows with its text, not with its rows times its longest cell."""
    from vitattn.runs.results import MAX_PADDED

    rows = [{"name": "x" * 10_000}, *({"name": f"run {i}"} for i in range(1000))]
    lines = markdown_table(rows, {"name": "name"}).splitlines()
    assert lines[2] == f"| {'x' * 10_000} |"
    assert lines[3] == f"| {'run 0'.ljust(MAX_PADDED)} |"
    assert sum(map(len, lines)) <= 10_000 + len(lines) * (MAX_PADDED + 4)


def test_markdown_rows_stay_one_line_and_align() -> None:
    table = markdown_table(
        [{"name": "a|b", "n": 5}, {"name": "two\nlines", "n": 12}],
        {"name": "name", "n": "n"},
        align_right=["n"],
    )
    assert table.splitlines() == [
        "| name      |  n |",
        "|-----------|---:|",
        "| a\\|b      |  5 |",
        "| two lines | 12 |",
    ]


def test_number_formats_or_dashes() -> None:
    assert number(0.123456) == "0.123"
    # a table's cell in powers of ten, "1.1e+02" for 112% of a floor, reads as a typo
    assert number(112.4, 2) == "110" and number(1234.5) == "1230" and number(-98765.4) == "-98800"
    assert number(999.4) == "999" and number(999.7) == "1000" and number(3e20) == "3e+20"
    assert number(None) == number(math.nan) == "-"


def test_a_header_read_from_a_run_is_escaped_as_a_cell_is() -> None:
    """A header holding ``|`` or a line break (``scripts/lora_table.py`` heads a column with a
    run's shift, ``rot|ate`` in a red team's edited ``metrics.json``) keeps the table's columns:
    the header row has as many as the separator and the rows."""
    table = markdown_table([{"a": 1, "b": 2}], {"a": "rotate", "b": "rot|ate\nnext"})
    header, separator, row = table.splitlines()
    assert header.startswith("| rotate | rot\\|ate next")

    def columns(line: str) -> int:
        return line.replace("\\|", "").count("|")

    assert columns(header) == columns(separator) == columns(row) == 3
