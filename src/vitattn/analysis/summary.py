"""The summary of runs and sweeps (``scripts/plot_curves.py``, and every ``-m`` at its end):
:func:`summarize` turns any mix of run and multirun directories into ``val_acc_vs_step.png``
and ``train_loss_vs_step.png`` (:mod:`vitattn.analysis.curves`), ``frontier.png``,
``attention_maps.png`` (:mod:`vitattn.analysis.maps`), ``summary.csv``, ``settings.csv`` and
``summary.md``, and a sweep summarized in place gains TensorBoard runs of its seed means.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vitattn.analysis.curves import plot_metric
from vitattn.analysis.frontier import plot_frontier
from vitattn.analysis.grouping import (
    Setting,
    choose_baseline,
    compare_with,
    group_settings,
    load_warning,
    setting_record,
    settings_table_rows,
)
from vitattn.analysis.maps import plot_attention_maps
from vitattn.analysis.records import (
    SUMMARY_COLUMNS,
    Run,
    common_root,
    describe,
    label_runs,
    load_run,
    map_labels,
    summary_row,
)
from vitattn.analysis.seed_runs import write_seed_runs
from vitattn.runs.files import UnreadableFileError, write_text
from vitattn.runs.layout import find_runs
from vitattn.runs.results import markdown_table, write_csv

log = logging.getLogger(__name__)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


SHOWN_COLUMNS = ("run", "status", "label", "seed", "params", "best_val_acc", "final_val_acc")


SHOWN_COLUMNS += ("test_acc", "images_per_sec", "seconds", "error")
"""The columns of ``summary.md`` (``summary.csv`` has all of :data:`SUMMARY_COLUMNS`)."""


SETTINGS_INTRO = (
    "Settings: runs that differ only by seed, grouped. Each figure is the mean \N{PLUS-MINUS SIGN} "
    "std [95% interval, Student's t] over completed runs; for one run, test/acc shows the 95% "
    "binomial interval of its test set. \N{GREEK CAPITAL LETTER DELTA}: difference from the "
    "baseline [95% interval, Welch]; the verdict is on test/acc."
)


def write_summary(
    rows: Sequence[dict[str, Any]],
    out_dir: Path,
    settings: Sequence[Setting] = (),
    baseline: Setting | None = None,
) -> str:
    """``summary.csv`` (one row per run, every column), ``settings.csv`` (one row per setting,
    every number) and ``summary.md``: the settings table, then one row per run. Returns the
    text of ``summary.md``."""
    write_csv(out_dir / "summary.csv", rows, SUMMARY_COLUMNS)
    shown = [{c: _cell(row[c]) for c in SHOWN_COLUMNS} for row in rows]
    runs_table = markdown_table(shown, {c: c for c in SHOWN_COLUMNS})
    if not settings:
        write_text(out_dir / "summary.md", runs_table + "\n")
        return runs_table + "\n"
    records = [setting_record(setting) for setting in settings]
    write_csv(out_dir / "settings.csv", records, list(records[0]))
    table_rows, headers = settings_table_rows(settings, baseline)
    text = f"{SETTINGS_INTRO}\n\n{markdown_table(table_rows, headers)}\n\nRuns:\n\n{runs_table}\n"
    write_text(out_dir / "summary.md", text)
    return text


def summarize(
    paths: Sequence[str | Path],
    out_dir: str | Path | None = None,
    baseline: str | None = None,
) -> dict[str, Any]:
    """Figures and tables for the runs under ``paths``, written to ``out_dir`` (default: the
    first path). A run directory that cannot be read is left out with a warning. ``baseline``
    names the setting the others are compared with (:func:`grouping.choose_baseline`). A sweep
    summarized in place also gains a TensorBoard run per setting of two or more completed seeds,
    their mean with its band (:func:`vitattn.analysis.seed_runs.write_seed_runs`). Returns the
    rows, the settings, warnings for the reader, the files written (``summary.csv`` and
    ``summary.md`` first), the seed runs and the text of ``summary.md``."""
    runs = read_runs(paths)
    out = Path(out_dir) if out_dir is not None else Path(paths[0])
    out.mkdir(parents=True, exist_ok=True)
    root = common_root([run.path for run in runs])
    label_runs(runs, root)
    rows = [summary_row(run, root) for run in runs]
    settings = group_settings(rows)
    by_name = {row["run"]: run for row, run in zip(rows, runs, strict=True)}
    chosen, baseline_warning = choose_baseline(
        settings, baseline, lambda row, key: by_name[row["run"]].setting(key)
    )
    compare_with(settings, chosen)
    text = write_summary(rows, out, settings, chosen)
    written = [out / "summary.csv", out / "summary.md", out / "settings.csv"]
    written += plot_figures(runs, settings, root, out)
    warnings = [w for w in (baseline_warning, load_warning(rows)) if w]
    seed_runs: list[Path] = []
    if len(paths) == 1 and out.resolve() == Path(paths[0]).resolve():  # a sweep, in place
        runs_of = {s.label: [by_name[row["run"]].path for row in s.completed] for s in settings}
        try:
            seed_runs = write_seed_runs(out, runs_of)
        except ValueError as error:
            warnings.append(f"no TensorBoard runs of seed means: {error}")
    return {
        "rows": rows,
        "settings": settings,
        "warnings": warnings,
        "files": written,
        "seed_runs": seed_runs,
        "text": text,
    }


def read_runs(paths: Sequence[str | Path]) -> list[Run]:
    """The runs under ``paths``; one that cannot be read is left out with a warning that names
    it and what is wrong."""
    if not paths:
        raise ValueError("give at least one run or multirun directory")
    run_dirs = find_runs(paths)
    if not run_dirs:
        raise FileNotFoundError(f"no run directories (with .hydra/config.yaml) under {list(paths)}")
    runs = []
    for path in run_dirs:
        try:
            runs.append(load_run(path))
        except Exception as error:  # one broken job must not hide the others
            named = isinstance(error, UnreadableFileError)  # names its file and what is wrong
            log.warning(
                "skipping %s: %s", path, error if named else f"{type(error).__name__}: {error}"
            )
    if not runs:
        raise FileNotFoundError(f"no readable run directories under {list(paths)}")
    return runs


def plot_figures(
    runs: Sequence[Run], settings: Sequence[Setting], root: Path, out: Path
) -> list[Path]:
    """The summary's figures in ``out``: the curves, the frontier, the attention maps; those
    written (a figure with no data is not)."""
    written = []
    shared = describe(runs)
    for tag, ylabel, name, markers in (
        ("val/acc", "validation accuracy", "val_acc_vs_step.png", True),
        ("train/loss", "training loss", "train_loss_vs_step.png", False),
    ):
        title = ylabel[0].upper() + ylabel[1:] + (f" \N{EM DASH} {shared}" if shared else "")
        if plot_metric(runs, tag, ylabel, out / name, title, markers):
            written.append(out / name)
    title = "Accuracy against cost" + (f" \N{EM DASH} {shared}" if shared else "")
    if plot_frontier(settings, out / "frontier.png", title):
        written.append(out / "frontier.png")
    # the maps name their own step: that of the checkpoint they were drawn with
    shared = describe(runs, steps=False)
    maps_title = "Attention rollout" + (f" \N{EM DASH} {shared}" if shared else "")
    entries = list(zip(map_labels(runs, root), (run.path for run in runs), strict=True))
    if plot_attention_maps(entries, out / "attention_maps.png", maps_title):
        written.append(out / "attention_maps.png")
    return written


def report(result: dict[str, Any]) -> str:
    """What a summary prints: the Markdown tables, the warnings, the files written, the runs not
    completed."""
    lines = [result["text"].rstrip("\n")]
    lines += result.get("warnings", [])
    lines += [f"wrote {path}" for path in result["files"]]
    lines += [
        f"wrote {path} (TensorBoard: the mean of its seeds with a 95% band)"
        for path in result.get("seed_runs", [])
    ]
    failed = [row["run"] for row in result["rows"] if row["status"] != "completed"]
    if failed:
        lines.append(f"not completed: {', '.join(failed)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``scripts/plot_curves.py DIR... [--out DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="plot_curves.py",
        description="Accuracy/loss curves and attention maps (PNG) and a summary table (CSV, "
        "Markdown) of runs and multiruns written by vitattn-train.",
    )
    parser.add_argument("dirs", nargs="+", help="run or multirun directories")
    parser.add_argument("--out", help="where to write (default: the first directory)")
    parser.add_argument(
        "--baseline",
        help="the setting the others are compared with: key=value pairs ('attention=softmax') "
        "or a value ('softmax'); default: attention=softmax when the runs have it",
    )
    args = parser.parse_args(argv)
    try:
        result = summarize(args.dirs, args.out, args.baseline)
    except (FileNotFoundError, ValueError) as error:
        parser.exit(1, f"plot_curves.py: error: {error}\n")
    print(report(result))
    return 0
