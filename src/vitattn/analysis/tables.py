"""The tables of a summary, rendered from its value: ``summary.csv`` (one row per run, every
column of :data:`vitattn.analysis.records.SUMMARY_COLUMNS`), ``settings.csv`` (one row per
setting, every number unformatted) and ``summary.md`` (the settings table, then one row per run).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vitattn.analysis.comparison import COMPARED, FAMILY_LEVEL, Comparison
from vitattn.analysis.grouping import FIGURES, Setting
from vitattn.analysis.power import MOST_SEEDS, seeds_agreeing_needed
from vitattn.analysis.records import SUMMARY_COLUMNS
from vitattn.analysis.uncertainty import (
    MANN_WHITNEY,
    NO_DIFFERENCE,
    PAIRS,
    SIGN,
    Difference,
    Estimate,
)
from vitattn.runs.files import write_text
from vitattn.runs.results import markdown_table, write_csv

SHOWN_COLUMNS = ("run", "status", "label", "seed", "params", "best_val_acc", "final_val_acc")


SHOWN_COLUMNS += ("test_acc", "images_per_sec", "seconds", "attempts", "error")
"""The columns of ``summary.md`` (``summary.csv`` has all of :data:`SUMMARY_COLUMNS`)."""


SETTINGS_INTRO = (
    "Settings: runs that differ only by seed, grouped. Each figure is the mean \N{PLUS-MINUS SIGN} "
    "std [95% interval, Student's t] over completed runs; for one run, or seeds that all scored "
    "alike, test/acc shows the 95% binomial interval of one run's test set. "
    "\N{GREEK CAPITAL LETTER DELTA}: difference from the baseline [95% interval, not corrected "
    "for the number of comparisons], paired t over the seeds both completed, else Welch (test, "
    "with its n); the verdict is on test/acc, from its p-value adjusted for the number of "
    "comparisons (Holm-Bonferroni)."
)
ADD_SEEDS = "same command with more seeds and the same hydra.sweep.dir: only the new jobs run"
"""How to add seeds to a finished sweep, said where a verdict is undecided."""


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
    answer = "\n".join(verdict_lines(comparisons, baseline)) + "\n\n" if baseline else ""
    table = markdown_table(table_rows, headers)
    return f"{answer}{SETTINGS_INTRO}\n\n{table}\n\nRuns:\n\n{runs_table}\n"


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
        for part in ("delta", "low", "high", "df", "test", "sizes", "unpaired", "p"):
            record[f"{key}_diff_{part}"] = None if difference is None else getattr(difference, part)
    record["judged"] = comparison.judged or None
    record["p_holm"] = comparison.p_adjusted
    record["comparisons"] = comparison.family or None
    record["seeds_needed"] = comparison.seeds_needed
    record["smallest_detectable"] = comparison.detectable
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
    if estimate.std == 0 and estimate.interval != "binomial":
        return text  # every run the same (a FLOP count): the interval says nothing
    if estimate.std is not None and estimate.n > 1:
        text += f" ± {_number(estimate.std, key)}"
    if estimate.low is not None and estimate.high is not None:
        text += f" [{_number(estimate.low, key)}, {_number(estimate.high, key)}]"
    return text


def figure_cell(setting: Setting, key: str) -> str:
    """A setting's figure as :func:`format_estimate` writes it, with its own n where fewer runs
    than the setting's completed ones have it (a cost an earlier version did not carry across a
    resume is left out, not counted as zero)."""
    estimate = setting.estimates.get(key)
    text = format_estimate(estimate, key)
    if estimate is not None and estimate.n != len(setting.completed):
        text += f" (n={estimate.n})"
    return text


def format_difference(difference: Difference | None) -> str:
    """``+0.021 [-0.004, 0.046]`` in accuracy points, or the bare difference with one seed."""
    if difference is None:
        return ""
    text = f"{difference.delta:+.3f}"
    if difference.low is not None and difference.high is not None:
        text += f" [{difference.low:+.3f}, {difference.high:+.3f}]"
    return text


def format_test(comparison: Comparison) -> dict[str, str]:
    """The test the verdict used with its n (``paired t, 3``; ``Welch, 3/2``; ``paired t, 4, 1
    unpaired``: a seed only one setting completed) and its p-value with the Holm-adjusted one
    (``0.033 (0.17)``)."""
    difference = comparison.difference
    if difference is None:
        return {"test": "", "p": ""}
    p = "" if difference.p is None else f"{difference.p:.3g}"
    if comparison.p_adjusted is not None:
        p += f" ({comparison.p_adjusted:.3g})"
    unpaired = f", {difference.unpaired} unpaired" if difference.unpaired else ""
    return {"test": f"{difference.test}, {difference.sizes}{unpaired}", "p": p}


def verdict_lines(comparisons: Sequence[Comparison], baseline: Setting) -> list[str]:
    """The answer a summary opens with: how many comparisons were corrected for, then one
    sentence per setting against ``baseline`` (difference, interval, test, p, verdict, and for
    an undecided verdict the seeds that would decide it)."""
    family = max((c.family for c in comparisons), default=0)
    judged = headline_figure(comparisons)
    corrected = (
        f"{family} comparisons, corrected for (Holm-Bonferroni: at most a 5% chance of any "
        "false verdict; each interval is its comparison's own, not corrected)"
        if family > 1
        else "1 comparison (no correction needed)"
    )
    lines = [f"Against {baseline.label}, on {COMPARED[judged]}: {corrected}.", ""]
    for comparison in comparisons:
        if comparison.setting is not baseline:
            sentence = verdict_sentence(comparison, judged, baseline)
            lines.append(f"- {comparison.setting.label}: {sentence}")
    return lines


def headline_figure(comparisons: Sequence[Comparison]) -> str:
    """The figure most verdicts are on (test/acc unless no setting has it), which the opening
    line names; a verdict on another names its own."""
    judged = [c.judged for c in comparisons if c.judged]
    return max(COMPARED, key=judged.count) if judged else "test_acc"


def incomplete(setting: Setting) -> str | None:
    """``linear 3 of 5`` where some of ``setting``'s runs did not complete (failed, cut, pruned
    or still running), for a verdict reached on the rest."""
    runs, completed = len(setting.runs), len(setting.completed) + len(setting.repeats)
    return f"{setting.label} {completed} of {runs}" if completed < runs else None


def verdict_sentence(
    comparison: Comparison, headline: str = "test_acc", baseline: Setting | None = None
) -> str:
    """One setting's verdict in words: ``-0.053 [-0.096, -0.009] (paired t over 3 seeds), p =
    0.033, 0.17 after correction: no detectable difference; ...``; with the figure it is on
    where that is not the ``headline``'s, the seeds left unpaired, and the runs of this setting
    or of ``baseline`` that did not complete."""
    difference = comparison.difference
    if difference is None:
        return comparison.verdict
    over = (
        f"{difference.test} over {difference.n_a} seeds"
        if difference.test in PAIRS
        else f"{difference.test}, {difference.n_a} and {difference.n_b} runs"
    )
    if difference.unpaired:
        over += f" both ran; {difference.unpaired} without a pair left out"
    missing = [m for m in (incomplete(comparison.setting), baseline and incomplete(baseline)) if m]
    if missing:
        over += f"; on the completed runs only: {', '.join(missing)}"
    text = f"{format_difference(difference)} ({over})"
    if comparison.judged and comparison.judged != headline:
        text = f"on {COMPARED[comparison.judged]}, {text}"
    if difference.p is not None:
        text += f", p = {difference.p:.2g}"
        if comparison.family > 1 and comparison.p_adjusted is not None:
            text += f", {comparison.p_adjusted:.2g} after correction"
    text += f": **{comparison.verdict}**"
    if comparison.verdict != NO_DIFFERENCE:
        return text
    if difference.delta == 0:
        text += "; the difference observed is 0: there is none to plan more seeds for"
    elif difference.test == SIGN:
        level = FAMILY_LEVEL / max(comparison.family, 1)
        text += (
            f"; every seed moved alike: {seeds_agreeing_needed(level)} seeds that all do would "
            f"decide it ({ADD_SEEDS})"
        )
    elif difference.test == MANN_WHITNEY:
        text += "; each setting's seeds scored alike: no spread to plan more seeds from"
    elif not difference.spread:
        text += "; the seeds' figures do not vary: no spread to plan more seeds from"
    elif comparison.seeds_needed is None:
        text += f"; below what this sweep can resolve (more than {MOST_SEEDS} seeds per setting)"
    else:
        text += (
            f"; about {comparison.seeds_needed} seeds per setting would detect it, if the "
            f"difference and spread observed hold ({ADD_SEEDS})"
        )
    if comparison.detectable is not None:
        now = difference.sizes
        text += f"; the smallest difference {now} seeds detect: {comparison.detectable:.3f}"
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
        headers.update({"test": "test, n", "p": "p (Holm)"})
        headers["verdict"] = f"vs {baseline.label}"
    headers["notes"] = "notes"
    rows = []
    for comparison in comparisons:
        setting = comparison.setting
        row = {"setting": setting.label, "n": str(len(setting.completed))}
        row.update({key: figure_cell(setting, key) for key in present})
        if baseline is not None:
            for key in COMPARED:
                row[f"diff_{key}"] = format_difference(comparison.differences.get(key))
            row.update(format_test(comparison))
            row["verdict"] = comparison.verdict
        row["notes"] = "; ".join(setting.notes)
        rows.append(row)
    if not any(row["notes"] for row in rows):
        headers.pop("notes")
    return rows, headers
