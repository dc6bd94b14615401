"""Accuracy curves, attention maps and sweep summaries out of run directories.

A *run directory* is what ``vitattn-train`` writes: ``.hydra/`` (config and overrides),
TensorBoard event files (in the directory itself, or in ``tensorboard/`` for older runs; read
with TensorBoard's own ``EventAccumulator``), ``metrics.json`` and, with the attention-maps
callback, ``attention/maps.npz``. A multirun directory holds one run directory per job.
:func:`summarize` turns any mix of them into ``val_acc_vs_step.png`` (the founding report's
figure: validation accuracy against training step, one line per setting, the mean and the
min-max band over seeds), ``train_loss_vs_step.png``, ``attention_maps.png``
(:mod:`vitattn.analysis.maps`), ``summary.csv`` and ``summary.md``.

Runs are labelled by the overrides that differ between the runs shown (``attention=linear``),
never by those they share; runs that differ only by ``seed`` share a label, hence a line.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import textwrap
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitattn.analysis.events import read_scalars
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
from vitattn.analysis.seed_runs import write_seed_runs
from vitattn.runs.continuation import ATTEMPTS
from vitattn.runs.files import (
    UnreadableFileError,
    read_json,
    read_yaml,
    save_figure,
    write_text,
)
from vitattn.runs.results import markdown_table, write_csv

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

SUMMARY_COLUMNS = (
    "run",
    "status",
    "label",
    "attention",
    "knobs",
    "model",
    "seed",
    "params",
    "best_val_acc",
    "final_val_acc",
    "test_acc",
    "images_per_sec",
    "seconds",
    "peak_memory_gb",
    "gflop_per_image",
    "test_images",
    "degenerate",
    "load_avg_start",
    "load_avg_end",
    "cpu_count",
    "error",
)
SEED_KEY = "seed"
LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
"""Each line gets a colour, a line style and (on validation points) a marker of its own, so
that curves lying on top of each other stay visible."""
LEGEND_WIDTH = 32
"""Characters per legend line before a label wraps."""


@dataclass
class Run:
    """One run directory with what the summary needs from it."""

    path: Path
    overrides: list[str]
    config: dict[str, Any]
    metrics: dict[str, Any]
    scalars: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    label: str = ""
    choices: dict[str, str] = field(default_factory=dict)

    @property
    def attention(self) -> str:
        if self.choices.get("attention"):
            return self.choices["attention"]
        if "attention" in self.settings:
            return self.settings["attention"]
        return str(self.metrics.get("attention") or _target_name(self.config.get("attention")))

    @property
    def model(self) -> str:
        return str(
            self.metrics.get("model")
            or self.choices.get("model")
            or self.settings.get("model")
            or _target_name(self.config.get("model"))
        )

    @property
    def seed(self) -> Any:
        if SEED_KEY in self.config:
            return self.config[SEED_KEY]
        return self.settings.get(SEED_KEY)

    @property
    def steps(self) -> int | None:
        """The steps the run took (``metrics.json``), else those it was set to take."""
        steps = self.metrics.get("steps")
        if steps is None:
            steps = (self.config.get("trainer") or {}).get("max_steps")
        finite = isinstance(steps, int | float) and math.isfinite(steps)
        return int(steps) if finite and steps > 0 else None

    @property
    def status(self) -> str:
        if "status" in self.metrics:
            return str(self.metrics["status"])
        return (
            "completed" if "test/acc" in self.metrics or "val/acc" in self.metrics else "incomplete"
        )

    @property
    def settings(self) -> dict[str, str]:
        """The command-line overrides as ``{key: value}`` (Hydra's own left out)."""
        pairs: dict[str, str] = {}
        for override in self.overrides:
            key, equals, value = override.partition("=")
            key = key.lstrip("+~")
            if equals and key != "hydra" and not key.startswith(("hydra.", "hydra/")):
                pairs[key] = value
        return pairs

    def setting(self, key: str) -> str | None:
        """``key``'s value in this run: its override, else the config group's choice or the
        config's value (so that a run that left ``key`` at its default still compares)."""
        if key in self.settings:
            return self.settings[key]
        if key in self.choices:
            return self.choices[key]
        node: Any = self.config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return None if isinstance(node, dict | list) else str(node)

    def knobs(self) -> dict[str, Any]:
        attention = self.config.get("attention") or {}
        return {k: v for k, v in attention.items() if not k.startswith("_")}


def _target_name(config: Any) -> str:
    if isinstance(config, dict) and "_target_" in config:
        return str(config["_target_"]).rsplit(".", 1)[-1]
    return "unknown"


def find_runs(paths: Iterable[str | Path]) -> list[Path]:
    """Every run directory at or below ``paths`` (a directory with ``.hydra/config.yaml``), in
    natural order of their paths (``seed=2`` before ``seed=10``)."""
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.is_dir():
            raise FileNotFoundError(f"{path} is not a directory")
        if (path / ".hydra" / "config.yaml").is_file():
            found.append(path)
            continue
        found.extend(
            p.parent.parent
            for p in path.rglob(".hydra/config.yaml")
            if ATTEMPTS not in p.relative_to(path).parts  # failed attempts set aside
        )
    return sorted(dict.fromkeys(found), key=_natural_key)


def _natural_key(path: Path) -> list[list[Any]]:
    # re.split with a group alternates text and digits, so the lists compare element-wise.
    return [
        [int(piece) if piece.isdigit() else piece for piece in re.split(r"(\d+)", part)]
        for part in path.parts
    ]


def load_run(path: Path) -> Run:
    """The run in ``path``; a file of it that cannot be read is one line
    (:class:`vitattn.runs.files.UnreadableFileError`)."""
    hydra_dir = path / ".hydra"
    config = read_yaml(hydra_dir / "config.yaml", dict)
    overrides = [str(o) for o in _optional(hydra_dir / "overrides.yaml", read_yaml, list)]
    metrics = _optional(path / "metrics.json", read_json, dict)
    hydra = _optional(hydra_dir / "hydra.yaml", read_yaml, dict).get("hydra")
    choices = ((hydra if isinstance(hydra, dict) else {}).get("runtime") or {}).get("choices")
    choices = {k: str(v) for k, v in choices.items()} if isinstance(choices, dict) else {}
    return Run(path, overrides, config, metrics, read_scalars(path), choices=choices)


def _optional(path: Path, read: Any, expected: type) -> Any:
    """``read(path, expected)``, or an empty ``expected`` where there is no such file."""
    return read(path, expected) if path.exists() or path.is_symlink() else expected()


def common_root(paths: Sequence[Path]) -> Path:
    """The folder the ``run`` column is relative to: the common folder of ``paths``, or its
    parent when that is one of them (a single run is named by its directory)."""
    resolved = [Path(p).resolve() for p in paths]
    root = Path(os.path.commonpath(resolved))
    return root.parent if root in resolved else root


def relative_name(run: Run, root: Path) -> str:
    try:
        return str(run.path.resolve().relative_to(root)) or "."
    except ValueError:
        return str(run.path.resolve())


def label_runs(runs: Sequence[Run], root: Path | None = None) -> None:
    """Name each run by the overrides whose values differ between ``runs`` other than
    ``seed`` (``attention=linear, model.depth=2``). Runs that differ only by seed share a label
    (the name of their common folder), hence a line; if nothing differs at all, each run is
    named by its directory (relative to ``root``, default :func:`common_root`)."""
    if not runs:
        return
    root = root if root is not None else common_root([run.path for run in runs])
    keys = list(dict.fromkeys(k for run in runs for k in run.settings if k != SEED_KEY))
    values = [{key: run.setting(key) for key in keys} for run in runs]
    differing = [key for key in keys if len({v[key] for v in values}) > 1]
    if differing:
        for run, value in zip(runs, values, strict=True):
            run.label = ", ".join(f"{key}={value[key] or '(unset)'}" for key in differing)
    elif len({str(run.seed) for run in runs}) > 1:
        for run in runs:
            run.label = root.name or str(root)
    else:
        for run in runs:
            run.label = relative_name(run, root)


def describe(runs: Sequence[Run], steps: bool = True) -> str:
    """What the runs share, for a title: ``model vit, attention softmax, 350 steps`` (the
    attention only when all runs share it, ``steps`` as a range when they differ)."""
    parts = []
    models = list(dict.fromkeys(run.model for run in runs if run.model != "unknown"))
    if models:
        parts.append(("model " if len(models) == 1 else "models ") + " / ".join(models))
    attentions = {run.attention for run in runs}
    if len(attentions) == 1 and "unknown" not in attentions:
        parts.append(f"attention {attentions.pop()}")
    counts = sorted({s for run in runs if (s := run.steps) is not None}) if steps else []
    if counts:
        parts.append(
            f"{counts[0]} steps"
            if len(counts) == 1
            else f"{counts[0]}\N{EN DASH}{counts[-1]} steps"
        )
    return ", ".join(parts)


def summary_row(run: Run, root: Path) -> dict[str, Any]:
    val_acc = [value for _, value in run.scalars.get("val/acc", [])]
    metrics = run.metrics
    return {
        "run": relative_name(run, root),
        "status": run.status,
        "label": run.label,
        "attention": run.attention,
        "knobs": json.dumps(run.knobs(), sort_keys=True),
        "model": run.model,
        "seed": run.seed,
        "params": metrics.get("params"),
        "best_val_acc": max(val_acc) if val_acc else None,
        "final_val_acc": val_acc[-1] if val_acc else metrics.get("val/acc"),
        "test_acc": metrics.get("test/acc"),
        "images_per_sec": metrics.get("train/images_per_sec"),
        "seconds": metrics.get("seconds"),
        "peak_memory_gb": metrics.get("peak_memory_gb"),
        "gflop_per_image": metrics.get("gflop_per_image"),
        "test_images": tested_images(metrics),
        "degenerate": metrics.get("degenerate"),
        "load_avg_start": metrics.get("load_avg_start"),
        "load_avg_end": metrics.get("load_avg_end"),
        "cpu_count": metrics.get("cpu_count"),
        "error": metrics.get("error"),
    }


def tested_images(metrics: dict[str, Any]) -> int | None:
    """How many images the run was tested on: the sum of its confusion matrix."""
    matrix = metrics.get("test/confusion_matrix")
    if not isinstance(matrix, list) or not matrix:
        return None
    try:
        return int(sum(sum(row) for row in matrix)) or None
    except (TypeError, ValueError, OverflowError):
        return None


def mean_curve(
    curves: Sequence[list[tuple[int, float]]],
) -> tuple[list[int], list[float], list[float], list[float]]:
    """Steps present in every curve, with the mean, minimum and maximum value at each."""
    step_sets = [{step for step, _ in curve} for curve in curves if curve]
    if not step_sets:
        return [], [], [], []
    steps = sorted(set.intersection(*step_sets))
    by_step = [dict(curve) for curve in curves if curve]
    values = [[points[s] for points in by_step] for s in steps]
    return (
        steps,
        [sum(v) / len(v) for v in values],
        [min(v) for v in values],
        [max(v) for v in values],
    )


def _wrap(text: str, width: int = LEGEND_WIDTH) -> str:
    return (
        "\n".join(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False))
        or text
    )


def _legend_text(label: str, count: int) -> str:
    text = _wrap(label)
    if count == 1:
        return text
    suffix = f"(mean of {count})"
    fits = len(text.splitlines()[-1]) + 1 + len(suffix) <= LEGEND_WIDTH
    return f"{text} {suffix}" if fits else f"{text}\n{suffix}"


def metric_figure(
    runs: Sequence[Run], tag: str, ylabel: str, title: str = "", markers: bool = False
) -> Figure | None:
    """One line per label (mean over its runs, min-max band if several), in the order the runs
    come, with the legend to the right of the axes inside the figure; ``None`` if no run has
    ``tag``. ``markers`` marks every point (a line of one point is always marked)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    groups: dict[str, list[list[tuple[int, float]]]] = defaultdict(list)
    for run in runs:
        if run.scalars.get(tag):
            groups[run.label].append(run.scalars[tag])
    if not groups:
        return None
    texts = {label: _legend_text(label, len(curves)) for label, curves in groups.items()}
    longest = max(len(line) for text in texts.values() for line in text.splitlines())
    figure = plt.figure(figsize=(6.4 + 0.075 * longest + 0.7, 4.4), layout="constrained")
    axes = figure.add_subplot()
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (label, curves) in enumerate(groups.items()):
        steps, mean, low, high = mean_curve(curves)
        style: dict[str, Any] = {
            "color": colors[index % len(colors)],
            "linestyle": LINE_STYLES[index % len(LINE_STYLES)],
            "linewidth": 1.8,
        }
        if markers or len(steps) == 1:
            style.update(
                marker=MARKERS[index % len(MARKERS)],
                markersize=7,
                markerfacecolor="none",  # hollow, so that markers on the same point all show
                markeredgewidth=1.6,
            )
        axes.plot(steps, mean, label=texts[label], **style)
        if len(curves) > 1:
            axes.fill_between(steps, low, high, color=style["color"], alpha=0.15, linewidth=0)
    axes.set_xlabel("training step")
    axes.set_ylabel(ylabel)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(alpha=0.3)
    if title:
        axes.set_title(title, fontsize=11)
    figure.legend(loc="outside right upper", fontsize=9)
    return figure


def plot_metric(
    runs: Sequence[Run], tag: str, ylabel: str, path: Path, title: str = "", markers: bool = False
) -> bool:
    """Write :func:`metric_figure` to ``path``; ``False`` (nothing written) if no data."""
    import matplotlib.pyplot as plt

    figure = metric_figure(runs, tag, ylabel, title, markers)
    if figure is None:
        return False
    save_figure(figure, path, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return True


def map_labels(runs: Sequence[Run], root: Path) -> list[str]:
    """Row names for the attention maps: the runs' labels, with the seed (or else the run's
    directory) added where runs share a label, since each run has a row of its own."""
    counts = Counter(run.label for run in runs)
    seeds = Counter((run.label, str(run.seed)) for run in runs)
    names = []
    for run in runs:
        if counts[run.label] == 1:
            names.append(run.label)
        elif run.seed is not None and seeds[(run.label, str(run.seed))] == 1:
            names.append(f"{run.label}, seed={run.seed}")
        else:
            names.append(relative_name(run, root))
    return names


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
) -> None:
    """``summary.csv`` (one row per run, every column), ``settings.csv`` (one row per setting,
    every number) and ``summary.md``: the settings table, then one row per run."""
    write_csv(out_dir / "summary.csv", rows, SUMMARY_COLUMNS)
    shown = [{c: _cell(row[c]) for c in SHOWN_COLUMNS} for row in rows]
    runs_table = markdown_table(shown, {c: c for c in SHOWN_COLUMNS})
    if not settings:
        write_text(out_dir / "summary.md", runs_table + "\n")
        return
    records = [setting_record(setting) for setting in settings]
    write_csv(out_dir / "settings.csv", records, list(records[0]))
    table_rows, headers = settings_table_rows(settings, baseline)
    text = f"{SETTINGS_INTRO}\n\n{markdown_table(table_rows, headers)}\n\nRuns:\n\n{runs_table}\n"
    write_text(out_dir / "summary.md", text)


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
    ``summary.md`` first) and the seed runs."""
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
    write_summary(rows, out, settings, chosen)
    written = [out / "summary.csv", out / "summary.md", out / "settings.csv"]
    warnings = [w for w in (baseline_warning, load_warning(rows)) if w]
    shared = describe(runs)
    for tag, ylabel, name, markers in (
        ("val/acc", "validation accuracy", "val_acc_vs_step.png", True),
        ("train/loss", "training loss", "train_loss_vs_step.png", False),
    ):
        title = ylabel[0].upper() + ylabel[1:] + (f" \N{EM DASH} {shared}" if shared else "")
        if plot_metric(runs, tag, ylabel, out / name, title, markers):
            written.append(out / name)
    if plot_frontier(
        settings,
        out / "frontier.png",
        "Accuracy against cost" + (f" \N{EM DASH} {shared}" if shared else ""),
    ):
        written.append(out / "frontier.png")
    seed_runs: list[Path] = []
    if len(paths) == 1 and out.resolve() == Path(paths[0]).resolve():  # a sweep, in place
        runs_of = {s.label: [by_name[row["run"]].path for row in s.completed] for s in settings}
        try:
            seed_runs = write_seed_runs(out, runs_of)
        except ValueError as error:
            warnings.append(f"no TensorBoard runs of seed means: {error}")
    # the maps name their own step: that of the checkpoint they were drawn with
    shared = describe(runs, steps=False)
    maps_title = "Attention rollout" + (f" \N{EM DASH} {shared}" if shared else "")
    entries = list(zip(map_labels(runs, root), (run.path for run in runs), strict=True))
    if plot_attention_maps(entries, out / "attention_maps.png", maps_title):
        written.append(out / "attention_maps.png")
    return {
        "rows": rows,
        "settings": settings,
        "warnings": warnings,
        "files": written,
        "seed_runs": seed_runs,
    }


def report(result: dict[str, Any]) -> str:
    """What a summary prints: the Markdown tables, the warnings, the files written, the runs not
    completed."""
    lines = [Path(result["files"][1]).read_text().rstrip("\n")]
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
