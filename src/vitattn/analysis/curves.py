"""Accuracy and loss curves against the training step: one line per label (the mean over its
runs, with the min-max band over seeds), as the founding report drew them
(``val_acc_vs_step.png``, ``train_loss_vs_step.png``)."""

from __future__ import annotations

import textwrap
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitattn.analysis.records import Run
from vitattn.runs.files import save_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure


LINE_STYLES = ("-", "--", "-.", ":")


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
"""Each line gets a colour, a line style and (on validation points) a marker of its own, so
that curves lying on top of each other stay visible."""


LEGEND_WIDTH = 32
"""Characters per legend line before a label wraps."""


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
