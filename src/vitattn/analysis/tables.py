"""The tables of a summary, rendered from its value: ``summary.csv`` (one row per run, every
column of :data:`vitattn.analysis.records.SUMMARY_COLUMNS`), ``settings.csv`` (one row per
setting, every number unformatted) and ``summary.md`` (the settings table, then one row per run).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vitattn.analysis.comparison import COMPARED, Comparison
from vitattn.analysis.grouping import FIGURES, Setting
from vitattn.analysis.records import SUMMARY_COLUMNS
from vitattn.analysis.uncertainty import Difference, Estimate
from vitattn.runs.files import write_text
from vitattn.runs.results import markdown_table, write_csv

SHOWN_COLUMNS = ("run", "status", "label", "seed", "params", "best_val_acc", "final_val_acc")


SHOWN_COLUMNS += ("test_acc", "images_per_sec", "seconds", "error")
"""The columns of ``summary.md`` (``summary.csv`` has all of :data:`SUMMARY_COLUMNS`)."""


SETTINGS_INTRO = (
    "Settings: runs that differ only by seed, grouped. Each figure is the mean \N{PLUS-MINUS SIGN} "
    "std [95% interval, Student's t] over completed runs; for one run, test/acc shows the 95% "
    "binomial interval of its test set. \N{GREEK CAPITAL LETTER DELTA}: difference from the "
    "baseline [95% interval, Welch]; the verdict is on test/acc."
)


def write_tables(
    out_dir: Path,
    rows: Sequence[Mapping[str, Any]],
    comparisons: Sequence[Comparison],
    text: str,
) -> list[Path]:
    """``summary.csv`` of ``rows``, ``settings.csv`` of the settings compared and ``summary.md``
    (``text``, :func:`summary_markdown`) in ``out_dir``; the files written, ``summary.csv`` and
    ``summary.md`` first."""
    written = [out_dir / "summary.csv", out_dir / "summary.md"]
    write_csv(written[0], rows, SUMMARY_COLUMNS)
    records = [setting_record(comparison) for comparison in comparisons]
    if records:
        write_csv(out_dir / "settings.csv", records, list(records[0]))
        written.append(out_dir / "settings.csv")
    write_text(written[1], text)
    return written


def summary_markdown(
    rows: Sequence[Mapping[str, Any]],
    comparisons: Sequence[Comparison],
    baseline: Setting | None,
) -> str:
    """The text of ``summary.md``: the settings table (with a difference and a verdict column
    against ``baseline`` when there is one), then one row per run."""
    shown = [{c: _cell(row[c]) for c in SHOWN_COLUMNS} for row in rows]
    runs_table = markdown_table(shown, {c: c for c in SHOWN_COLUMNS})
    if not comparisons:
        return runs_table + "\n"
    table_rows, headers = settings_table_rows(comparisons, baseline)
    return f"{SETTINGS_INTRO}\n\n{markdown_table(table_rows, headers)}\n\nRuns:\n\n{runs_table}\n"


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def setting_record(comparison: Comparison) -> dict[str, Any]:
    """One row of ``settings.csv``: every number of the setting compared, unformatted."""
    setting = comparison.setting
    record: dict[str, Any] = {"setting": setting.label, "n": len(setting.completed)}
    record["runs"] = len(setting.runs)
    for key in FIGURES:
        estimate = setting.estimates.get(key)
        for part in ("mean", "std", "low", "high"):
            record[f"{key}_{part}"] = None if estimate is None else getattr(estimate, part)
        if key == "test_acc":
            record["test_acc_interval"] = None if estimate is None else estimate.interval
    for key in COMPARED:
        difference = comparison.differences.get(key)
        for part in ("delta", "low", "high", "df"):
            record[f"{key}_diff_{part}"] = None if difference is None else getattr(difference, part)
    record["verdict"] = comparison.verdict
    record["notes"] = "; ".join(setting.notes)
    return record


def _number(value: float, key: str) -> str:
    if key.endswith("acc"):
        return f"{value:.3f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def format_estimate(estimate: Estimate | None, key: str) -> str:
    """``0.512 ± 0.013 [0.480, 0.544]`` (n > 1), ``0.512 [0.481, 0.543]`` (one run's binomial
    interval), ``0.512`` (one value, no interval), or empty."""
    if estimate is None:
        return ""
    text = _number(estimate.mean, key)
    if estimate.std == 0:  # every run the same (a FLOP count): the interval says nothing
        return text
    if estimate.std is not None and estimate.n > 1:
        text += f" ± {_number(estimate.std, key)}"
    if estimate.low is not None and estimate.high is not None:
        text += f" [{_number(estimate.low, key)}, {_number(estimate.high, key)}]"
    return text


def format_difference(difference: Difference | None) -> str:
    """``+0.021 [-0.004, 0.046]`` in accuracy points, or the bare difference with one seed."""
    if difference is None:
        return ""
    text = f"{difference.delta:+.3f}"
    if difference.low is not None and difference.high is not None:
        text += f" [{difference.low:+.3f}, {difference.high:+.3f}]"
    return text


def settings_table_rows(
    comparisons: Sequence[Comparison], baseline: Setting | None
) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The settings table for Markdown: rows of text and the headers, with a difference and
    verdict column only when there is a baseline, and only the figures some run has."""
    settings = [comparison.setting for comparison in comparisons]
    present = [key for key in FIGURES if any(s.estimates.get(key) for s in settings)]
    headers = {"setting": "setting", "n": "n"}
    headers.update({key: FIGURES[key] for key in present})
    if baseline is not None:
        headers.update({f"diff_{key}": f"Δ {name}" for key, name in COMPARED.items()})
        headers["verdict"] = f"vs {baseline.label}"
    headers["notes"] = "notes"
    rows = []
    for comparison in comparisons:
        setting = comparison.setting
        row = {"setting": setting.label, "n": str(len(setting.completed))}
        row.update({key: format_estimate(setting.estimates.get(key), key) for key in present})
        if baseline is not None:
            for key in COMPARED:
                row[f"diff_{key}"] = format_difference(comparison.differences.get(key))
            row["verdict"] = comparison.verdict
        row["notes"] = "; ".join(setting.notes)
        rows.append(row)
    if not any(row["notes"] for row in rows):
        headers.pop("notes")
    return rows, headers
