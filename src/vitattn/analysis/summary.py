"""The summary of runs and sweeps (``scripts/plot_curves.py``, and every ``-m`` at its end):
:func:`summarize` turns any mix of run and multirun directories into a :class:`Summary` (the runs
with their rows, the settings, the comparisons with a baseline, the Markdown text) and writes
from it ``summary.csv``, ``settings.csv`` and ``summary.md`` (:mod:`vitattn.analysis.tables`),
the figures (:mod:`vitattn.analysis.figures`) and, for a sweep summarized in place, TensorBoard
runs of its seed means (:mod:`vitattn.analysis.seed_runs`). :func:`report` is what it prints.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitattn.analysis.comparison import Comparison, compare
from vitattn.analysis.figures import plot_figures
from vitattn.analysis.grouping import (
    RunRow,
    Setting,
    choose_baseline,
    group_settings,
    load_warning,
)
from vitattn.analysis.records import Run, common_root, label_runs, load_run, summary_row
from vitattn.analysis.search import pareto_files, read_search, search_markdown
from vitattn.analysis.seed_runs import write_seed_runs
from vitattn.analysis.tables import summary_markdown, write_tables
from vitattn.errors import VitattnError
from vitattn.runs.files import UnreadableFileError, folder_problem, one_line
from vitattn.runs.layout import find_runs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Summary:
    """What a summary found and wrote: every file and printed line is rendered from it."""

    root: Path
    """The folder the runs are named relative to (:func:`vitattn.analysis.records.common_root`)."""
    runs: tuple[RunRow, ...]
    """Each run with its row of ``summary.csv``, in the order the runs were found."""
    settings: tuple[Setting, ...]
    """The runs grouped by what differs but the seed, each holding its runs."""
    baseline: Setting | None
    """The setting the others are compared with, if any."""
    comparisons: tuple[Comparison, ...]
    """Each setting against :attr:`baseline`, in the settings' order."""
    text: str
    """The text of ``summary.md``."""
    warnings: tuple[str, ...] = ()
    """Lines for the reader: a baseline that names no setting, a busy machine, no seed runs."""
    files: tuple[Path, ...] = ()
    """The files written: ``summary.csv``, ``summary.md``, ``settings.csv``, the figures."""
    seed_runs: tuple[Path, ...] = ()
    """The TensorBoard runs of seed means written."""

    @property
    def rows(self) -> tuple[Mapping[str, Any], ...]:
        """The rows of ``summary.csv``, one per run."""
        return tuple(member.row for member in self.runs)


def summarize(
    paths: Sequence[str | Path],
    out_dir: str | Path | None = None,
    baseline: str | None = None,
    given_as: str = "",
) -> Summary:
    """The summary of the runs under ``paths``, with its tables and figures written to
    ``out_dir`` (default: the first path). A run directory that cannot be read is left out with
    a warning. ``baseline`` names the setting the others are compared with
    (:func:`vitattn.analysis.grouping.choose_baseline`). A sweep summarized in place also gains
    a TensorBoard run per setting of two or more completed seeds, their mean with its band
    (:func:`vitattn.analysis.seed_runs.write_seed_runs`). An Optuna search's directory adds a
    section on its trials and, for two objectives, its Pareto trials and ``pareto.png``
    (:mod:`vitattn.analysis.search`). With ``given_as`` (``--baseline ``), a ``baseline`` that
    names no setting, or several, is refused (``ValueError``) before anything is written, not
    a warning."""
    runs = read_runs(paths)
    summary = summary_of(runs, baseline, given_as or "summary.baseline=")
    if given_as and baseline and summary.baseline is None:
        raise ValueError(summary.warnings[0])
    out = Path(out_dir) if out_dir is not None else Path(paths[0])
    out.mkdir(parents=True, exist_ok=True)
    in_place = len(paths) == 1 and out.resolve() == Path(paths[0]).resolve()  # a sweep
    search = None
    try:
        search = read_search(Path(paths[0])) if len(paths) == 1 else None
    except UnreadableFileError as error:  # the runs are summarized all the same
        log.warning("no section on the Optuna search: %s", error)
    if search is not None:
        summary = dataclasses.replace(summary, text=f"{summary.text}\n{search_markdown(search)}")
    written = write_summary(summary, out, seed_runs=in_place)
    figures = tuple(pareto_files(search, out))
    return dataclasses.replace(written, files=(*written.files, *figures)) if figures else written


def summary_of(
    runs: Sequence[Run], baseline: str | None = None, given_as: str = "summary.baseline="
) -> Summary:
    """The summary of ``runs`` (labelled here by what differs between them), compared with the
    setting ``baseline`` names (``given_as``, in a warning that it names none); nothing is
    written."""
    root = common_root([run.path for run in runs])
    label_runs(runs, root)
    members = tuple(RunRow(run, summary_row(run, root)) for run in runs)
    settings = group_settings(members)
    chosen, baseline_warning = choose_baseline(settings, baseline, given_as)
    comparisons = compare(settings, chosen)
    rows = [member.row for member in members]
    warnings = tuple(w for w in (baseline_warning, load_warning(rows)) if w)
    text = summary_markdown(rows, comparisons, chosen)
    return Summary(root, members, settings, chosen, comparisons, text, warnings)


def write_summary(summary: Summary, out: Path, seed_runs: bool = False) -> Summary:
    """Write ``summary``'s tables and figures to ``out`` and, with ``seed_runs``, a TensorBoard
    run of each setting's seed mean (``out`` is then the sweep's directory); ``summary`` with the
    files written, and a warning when the seed runs could not be."""
    files = write_tables(out, summary.rows, summary.comparisons, summary.text)
    runs = [member.run for member in summary.runs]
    files += plot_figures(runs, summary.settings, summary.root, out)
    written = dataclasses.replace(summary, files=tuple(files))
    if not seed_runs:
        return written
    seeds = {s.label: [member.run.path for member in s.completed] for s in summary.settings}
    read = {run.path: run.events for run in runs}
    try:
        return dataclasses.replace(written, seed_runs=tuple(write_seed_runs(out, seeds, read=read)))
    except (ValueError, UnreadableFileError) as error:
        warning = f"no TensorBoard runs of seed means: {error}"
        return dataclasses.replace(written, warnings=(*summary.warnings, warning))


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
            said = error if named else f"{type(error).__name__}: {error}"
            log.warning("skipping %s: %s", one_line(path), one_line(said))
    if not runs:
        raise FileNotFoundError(f"no readable run directories under {list(paths)}")
    return runs


def report(summary: Summary) -> str:
    """What a summary prints: the Markdown tables, the warnings, the files written, the runs not
    completed."""
    lines = [summary.text.rstrip("\n"), *summary.warnings]
    lines += [f"wrote {path}" for path in summary.files]
    lines += [
        f"wrote {path} (TensorBoard: the mean of its seeds with a 95% band)"
        for path in summary.seed_runs
    ]
    stopped = [member.row for member in summary.runs if not member.completed]
    pruned = [row["run"] for row in stopped if row["status"] == "pruned"]
    running = [row["run"] for row in stopped if row["status"] == "running"]
    failed = [row["run"] for row in stopped if row["status"] not in ("pruned", "running")]
    if pruned:
        lines.append(f"pruned by the search: {', '.join(pruned)}")
    if running:
        lines.append(f"still running: {', '.join(running)}")
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
    problem = None if args.out is None else folder_problem(Path(args.out))
    if problem is not None:
        parser.exit(
            1,
            f"plot_curves.py: error: --out {one_line(args.out)}: {problem}; choose a folder to "
            "write the summary in (it is made if missing)\n",
        )
    try:
        summary = summarize(args.dirs, args.out, args.baseline, given_as="--baseline ")
    except (OSError, ValueError, VitattnError) as error:  # a folder where a file is written...
        parser.exit(1, f"plot_curves.py: error: {one_line(error)}\n")
    print(report(summary))
    return 0
