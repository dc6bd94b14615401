"""What a summary says of an Optuna search (``hparams_search=optuna|optuna_pareto``), read from
the ``optimization_results.yaml`` its sweeper wrote (:mod:`vitattn.runs.optuna_sweeper`): how
its trials ended (complete, pruned, failed), its best trial, and for two objectives the Pareto
trials (``study.best_trials``) as a section of ``summary.md`` and ``pareto.png`` next to
``frontier.png``."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitattn.analysis.labels import MAX_LABELS, Label, place_labels
from vitattn.analysis.records import bounded
from vitattn.runs.files import UnreadableFileError, read_yaml, save_figure
from vitattn.runs.optuna_study import STUDY_BOUNDS
from vitattn.runs.optuna_sweeper import RESULTS_FILE
from vitattn.runs.results import markdown_table
from vitattn.utils.config import cut_apart

PARETO_FIGURE = "pareto.png"
MAX_ROWS = 100
"""The most Pareto trials ``summary.md`` lists (the rest are in the sweep's results file): a
real front holds a few of a search's trials, a planted one any number."""
MAX_DRAWN = 1e300
"""The largest value (in size) of a trial the summary reads: near the largest float
(1.8e308), an axis's span or its margins overflow."""


@dataclass(frozen=True)
class Trial:
    number: int
    run: str
    """Its job directory in the sweep; in another sweep directory, with that directory first."""
    values: tuple[float, ...]
    params: dict[str, Any]


@dataclass(frozen=True)
class SearchResults:
    """An Optuna search's results: its metrics, directions, trials' ends and Pareto trials."""

    study: str
    metrics: tuple[str, ...]
    directions: tuple[str, ...]
    states: dict[str, int]
    trials: tuple[Trial, ...]
    """Every complete trial."""
    pareto: tuple[Trial, ...]
    """The Pareto trials (two or more objectives), else the best trial."""


def _finite(value: Any) -> bool:
    """Whether ``value`` is a finite number a float holds (a 400-digit integer is not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _trial(entry: Any, count: int, path: Path) -> Trial:
    if not isinstance(entry, dict) or not isinstance(entry.get("trial"), int):
        raise UnreadableFileError(path, "holds a trial without its number")
    values = entry.get("values")
    if not isinstance(values, list) or len(values) != count:
        raise UnreadableFileError(path, f"trial {entry['trial']} holds no {count} values")
    if not all(_finite(v) for v in values):
        raise UnreadableFileError(path, f"trial {entry['trial']} holds values that are not numbers")
    params = entry.get("params") if isinstance(entry.get("params"), dict) else {}
    run = str(entry.get("run") or "")
    elsewhere = entry.get("sweep_dir")  # a trial another sweep directory's search ran
    if isinstance(elsewhere, str) and elsewhere:
        run = f"{elsewhere}/{run}"
    run = bounded(run)
    params = {bounded(str(key)): bounded(str(value)) for key, value in params.items()}
    return Trial(entry["trial"], run, tuple(map(float, values)), params)


def read_search(sweep_dir: Path) -> SearchResults | None:
    """The results of the Optuna search in ``sweep_dir``, ``None`` where it holds none; a file
    that is not as the sweeper writes it is one line (:class:`UnreadableFileError`)."""
    path = sweep_dir / RESULTS_FILE
    if not os.path.lexists(path):
        return None
    # never through a link (a link to a file outside put its text in summary.md), and a FIFO
    # or a folder there is one line, not a section left out without a word (audit)
    content = read_yaml(path, follow_links=False)
    metrics, directions = content.get("metrics"), content.get("directions")
    if not isinstance(metrics, list) or not isinstance(directions, list) or not metrics:
        raise UnreadableFileError(path, "names no metrics and directions")
    if len(metrics) != len(directions):
        raise UnreadableFileError(path, "names as many metrics as directions")
    states = content.get("states") if isinstance(content.get("states"), dict) else {}
    trials = tuple(_trial(t, len(metrics), path) for t in _listed(content, "trials", path))
    by_number = {t.number: t for t in trials}
    if len(metrics) == 1:
        best = content.get("best_trial")
        pareto = (by_number[best],) if isinstance(best, int) and best in by_number else ()
    else:
        solutions = _listed(content, "solutions", path)
        pareto = tuple(_trial(t, len(metrics), path) for t in solutions)
    for index, metric in enumerate(metrics):
        values = [trial.values[index] for trial in (*trials, *pareto)]
        if values and max(abs(min(values)), abs(max(values))) > MAX_DRAWN:
            raise UnreadableFileError(
                path,
                f"holds values of {bounded(str(metric))} from {min(values):.4g} to "
                f"{max(values):.4g}, past the {MAX_DRAWN:.0e} a figure's axis draws",
            )
    return SearchResults(
        bounded(str(content.get("study_name") or "")),
        tuple(bounded(str(m)) for m in metrics),
        tuple(bounded(str(d)) for d in directions),
        {
            bounded(str(k)): int(v)
            for k, v in states.items()
            if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= STUDY_BOUNDS.trials
        },
        trials,
        pareto,
    )


def _listed(content: dict, key: str, path: Path) -> list:
    """``content[key]``, a list of trials (none where it is missing or null)."""
    value = content.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise UnreadableFileError(path, f'holds {type(value).__name__} at "{key}", not a list')
    return value


def search_markdown(search: SearchResults) -> str:
    """The section of ``summary.md`` on the search: how its trials ended, then its best trial
    or its Pareto trials."""
    ended = ", ".join(f"{count} {state.lower()}" for state, count in search.states.items())
    aims = " and ".join(f"{d} {m}" for d, m in zip(search.directions, search.metrics, strict=True))
    lines = [f"Optuna study {search.study} ({aims}): trials {ended or 'none'}."]
    if "test/acc" not in search.metrics:
        lines.append(
            f"Choose among the trials by {' and '.join(search.metrics)}, as the search did: the "
            "tables and figures above place them by test/acc too, which reports the trial "
            "chosen; choosing by it would fit the settings to the test images."
        )
    if search.states.get("PRUNED"):
        lines.append("Pruned trials were stopped early by the pruner (status pruned).")
    title = "Pareto trials (study.best_trials)" if len(search.metrics) > 1 else "Best trial"
    rows = [
        {
            "trial": trial.number,
            "run": trial.run,
            **dict(zip(search.metrics, (f"{v:.4g}" for v in trial.values), strict=True)),
            "params": ", ".join(f"{k}={v}" for k, v in trial.params.items()),
        }
        for trial in sorted(search.pareto, key=lambda t: t.values)
    ]
    headers = {key: key for key in ("trial", "run", *search.metrics, "params")}
    table = markdown_table(rows[:MAX_ROWS], headers) if rows else "(no complete trial)"
    more = len(rows) - MAX_ROWS
    after = [f"and {more:,} more, in {RESULTS_FILE}", ""] if more > 0 else []
    return "\n".join([*lines, "", f"{title}:", "", table.rstrip("\n"), "", *after])


def plot_pareto(search: SearchResults, path: Path) -> bool:
    """``pareto.png`` of a two-objective search: each complete trial at its two values, the
    Pareto trials in bold and joined, each named with its values where the search is small
    (:data:`~vitattn.analysis.labels.MAX_LABELS`: all of a search of at most that many trials,
    else the Pareto trials, at most that many of them); ``False`` (nothing written) for other
    searches."""
    if len(search.metrics) != 2 or not search.trials:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = pareto_figure(search)
    save_figure(figure, path, dpi=120)
    plt.close(figure)
    return True


def pareto_figure(search: SearchResults) -> Any:
    """The figure of :func:`plot_pareto`."""
    import matplotlib.pyplot as plt

    front = {t.number for t in search.pareto}
    labelled = front if len(search.trials) > MAX_LABELS else {t.number for t in search.trials}
    labelled = set(sorted(labelled)[:MAX_LABELS])
    figure, axes = plt.subplots(figsize=(6.5, 5.0), layout="constrained")
    labels = []
    for trial in search.trials:
        on = trial.number in front
        y, x = trial.values
        area = 60 if on else 25
        axes.scatter(x, y, s=area, color="C3" if on else "C0", zorder=3)
        if trial.number in labelled:
            text = cut_apart(", ".join([str(trial.number), *map(str, trial.params.values())]), 80)
            labels.append(Label(text, x, y, area, "bold" if on else "normal"))
    line = sorted((t.values[1], t.values[0]) for t in search.pareto)
    if len(line) > 1:
        axes.plot(*zip(*line, strict=True), color="grey", linestyle="--", linewidth=1, zorder=1)
    axes.set_ylabel(_axis(search, 0))
    axes.set_xlabel(_axis(search, 1))
    axes.grid(alpha=0.3)
    axes.set_title(
        f"Optuna study {search.study}: trial, its values; bold and joined: Pareto trials",
        fontsize=10,
    )
    figure.draw_without_rendering()  # the layout, so that labels are placed where they will be
    place_labels(axes, sorted(labels, key=lambda label: label.fontweight != "bold"))
    return figure


def _axis(search: SearchResults, index: int) -> str:
    better = "more" if search.directions[index] == "maximize" else "less"
    return f"{search.metrics[index]} ({better} is better)"


def pareto_files(search: SearchResults | None, out: Path) -> Sequence[Path]:
    """The search's figure written to ``out``: ``pareto.png`` where it has one (its text, the
    metrics' names from the study, as written:
    :func:`~vitattn.analysis.figures.text_as_written`)."""
    from vitattn.analysis.figures import text_as_written

    with text_as_written():
        if search is not None and plot_pareto(search, out / PARETO_FIGURE):
            return [out / PARETO_FIGURE]
    return []
