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
    assert number(None) == number(math.nan) == "-"
