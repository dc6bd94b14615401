"""Accuracy curves and sweep summaries out of run directories.

A *run directory* is what ``vitattn-train`` writes: ``.hydra/`` (config and overrides),
``tensorboard/`` (event files, read with TensorBoard's own ``EventAccumulator``) and
``metrics.json``. A multirun directory holds one run directory per job. :func:`summarize` turns
any mix of them into ``val_acc_vs_step.png`` (the founding report's figure: validation accuracy
against training step, one line per attention type, the mean and the min-max band over seeds),
``train_loss_vs_step.png``, ``summary.csv`` and ``summary.md``.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vitattn.analysis.events import read_scalars
from vitattn.utils.results import markdown_table, write_csv

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
    "error",
)
SEED_OVERRIDE = "seed="


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
        for override in self.overrides:
            if override.startswith("attention="):
                return override.split("=", 1)[1]
        return str(self.metrics.get("attention") or _target_name(self.config.get("attention")))

    @property
    def status(self) -> str:
        if "status" in self.metrics:
            return str(self.metrics["status"])
        return (
            "completed" if "test/acc" in self.metrics or "val/acc" in self.metrics else "incomplete"
        )

    def knobs(self) -> dict[str, Any]:
        attention = self.config.get("attention") or {}
        return {k: v for k, v in attention.items() if not k.startswith("_")}


def _target_name(config: Any) -> str:
    if isinstance(config, dict) and "_target_" in config:
        return str(config["_target_"]).rsplit(".", 1)[-1]
    return "unknown"


def find_runs(paths: Iterable[str | Path]) -> list[Path]:
    """Every run directory at or below ``paths`` (a directory with ``.hydra/config.yaml``)."""
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.is_dir():
            raise FileNotFoundError(f"{path} is not a directory")
        if (path / ".hydra" / "config.yaml").is_file():
            found.append(path)
            continue
        found.extend(sorted(p.parent.parent for p in path.rglob(".hydra/config.yaml")))
    return sorted(dict.fromkeys(found), key=_natural_key)


def _natural_key(path: Path) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in path.parts]


def load_run(path: Path) -> Run:
    hydra_dir = path / ".hydra"
    config = yaml.safe_load((hydra_dir / "config.yaml").read_text()) or {}
    overrides_file = hydra_dir / "overrides.yaml"
    overrides = yaml.safe_load(overrides_file.read_text()) if overrides_file.is_file() else []
    metrics_file = path / "metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
    scalars = read_scalars(path) if (path / "tensorboard").is_dir() else {}
    hydra_file = hydra_dir / "hydra.yaml"
    hydra_config = yaml.safe_load(hydra_file.read_text()) if hydra_file.is_file() else {}
    choices = ((hydra_config or {}).get("hydra") or {}).get("runtime", {}).get("choices") or {}
    overrides = [str(o) for o in overrides or []]
    return Run(
        path, overrides, config, metrics, scalars, choices={k: str(v) for k, v in choices.items()}
    )


def label_runs(runs: Sequence[Run]) -> None:
    """Name each run by what sets it apart: its attention, plus the overrides that vary across
    the runs other than ``seed`` (runs differing only by seed share a label and a line)."""
    relevant = [
        [o for o in run.overrides if not o.startswith(SEED_OVERRIDE) and "hydra." not in o]
        for run in runs
    ]
    common = set.intersection(*(set(r) for r in relevant)) if relevant else set()
    for run, overrides in zip(runs, relevant, strict=True):
        extra = [o for o in overrides if o not in common and not o.startswith("attention=")]
        run.label = run.attention + (f" ({', '.join(extra)})" if extra else "")


def summary_row(run: Run, root: Path) -> dict[str, Any]:
    val_acc = [value for _, value in run.scalars.get("val/acc", [])]
    metrics = run.metrics
    try:
        relative = run.path.relative_to(root)
    except ValueError:
        relative = run.path
    return {
        "run": str(relative) or ".",
        "status": run.status,
        "label": run.label,
        "attention": run.attention,
        "knobs": json.dumps(run.knobs(), sort_keys=True),
        "model": metrics.get("model")
        or run.choices.get("model")
        or _target_name(run.config.get("model")),
        "seed": run.config.get("seed"),
        "params": metrics.get("params"),
        "best_val_acc": max(val_acc) if val_acc else None,
        "final_val_acc": val_acc[-1] if val_acc else metrics.get("val/acc"),
        "test_acc": metrics.get("test/acc"),
        "images_per_sec": metrics.get("train/images_per_sec"),
        "seconds": metrics.get("seconds"),
        "peak_memory_gb": metrics.get("peak_memory_gb"),
        "error": metrics.get("error"),
    }


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


def plot_metric(runs: Sequence[Run], tag: str, ylabel: str, path: Path) -> bool:
    """One line per label (mean over its runs, min-max band if several); ``False`` if no data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[str, list[list[tuple[int, float]]]] = defaultdict(list)
    for run in runs:
        if run.scalars.get(tag):
            groups[run.label].append(run.scalars[tag])
    if not groups:
        return False
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for label in sorted(groups):
        steps, mean, low, high = mean_curve(groups[label])
        count = len(groups[label])
        (line,) = axes.plot(steps, mean, label=label + (f" (mean of {count})" if count > 1 else ""))
        if count > 1:
            axes.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    axes.set_xlabel("training step")
    axes.set_ylabel(ylabel)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


SHOWN_COLUMNS = ("run", "status", "label", "params", "best_val_acc", "final_val_acc", "test_acc")
SHOWN_COLUMNS += ("images_per_sec", "seconds", "error")
"""The columns of ``summary.md`` (``summary.csv`` has all of :data:`SUMMARY_COLUMNS`)."""


def write_summary(rows: Sequence[dict[str, Any]], out_dir: Path) -> None:
    write_csv(out_dir / "summary.csv", rows, SUMMARY_COLUMNS)
    shown = [{c: _cell(row[c]) for c in SHOWN_COLUMNS} for row in rows]
    table = markdown_table(shown, {c: c for c in SHOWN_COLUMNS})
    (out_dir / "summary.md").write_text(table + "\n")


def summarize(paths: Sequence[str | Path], out_dir: str | Path | None = None) -> dict[str, Any]:
    """Figures and tables for the runs under ``paths``, written to ``out_dir`` (default: the
    first path). Returns the rows and the files written."""
    if not paths:
        raise ValueError("give at least one run or multirun directory")
    run_dirs = find_runs(paths)
    if not run_dirs:
        raise FileNotFoundError(f"no run directories (with .hydra/config.yaml) under {list(paths)}")
    out = Path(out_dir) if out_dir is not None else Path(paths[0])
    out.mkdir(parents=True, exist_ok=True)
    runs = [load_run(path) for path in run_dirs]
    label_runs(runs)
    rows = [summary_row(run, Path(paths[0])) for run in runs]
    write_summary(rows, out)
    written = [out / "summary.csv", out / "summary.md"]
    for tag, ylabel, name in (
        ("val/acc", "validation accuracy", "val_acc_vs_step.png"),
        ("train/loss", "training loss", "train_loss_vs_step.png"),
    ):
        if plot_metric(runs, tag, ylabel, out / name):
            written.append(out / name)
    return {"rows": rows, "files": written}


def main(argv: Sequence[str] | None = None) -> int:
    """``scripts/plot_curves.py DIR... [--out DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="plot_curves.py",
        description="Accuracy/loss curves (PNG) and a summary table (CSV, Markdown) of runs "
        "and multiruns written by vitattn-train.",
    )
    parser.add_argument("dirs", nargs="+", help="run or multirun directories")
    parser.add_argument("--out", help="where to write (default: the first directory)")
    args = parser.parse_args(argv)
    try:
        result = summarize(args.dirs, args.out)
    except (FileNotFoundError, ValueError) as error:
        parser.exit(1, f"plot_curves.py: error: {error}\n")
    failed = [row["run"] for row in result["rows"] if row["status"] != "completed"]
    print(Path(result["files"][1]).read_text(), end="")
    for path in result["files"]:
        print(f"wrote {path}")
    if failed:
        print(f"not completed: {', '.join(failed)}")
    return 0
