"""Accuracy and loss curves against the training step: one line per label (the mean over its
runs), as the founding report drew them (``val_acc_vs_step.png``, ``train_loss_vs_step.png``).
A label of several seeds is shaded with the 95% Student's t interval of its mean at each step:
the band TensorBoard's seed runs hold (:mod:`vitattn.analysis.seed_runs`), computed by the same
function, and the legend says so."""

from __future__ import annotations

import textwrap
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitattn.analysis.records import Run
from vitattn.analysis.seed_runs import reduce_tag
from vitattn.analysis.uncertainty import CONFIDENCE
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
    curves: Sequence[list[tuple[int, float]]], tag: str = ""
) -> tuple[list[int], list[float], list[float], list[float]]:
    """Steps present in every curve, with the mean at each and the bounds of its 95% Student's t
    interval over the curves (cut to ``tag``'s range): what TensorBoard's seed runs hold, from
    the same :func:`vitattn.analysis.seed_runs.reduce_tag`. One curve is its own mean, and its
    bounds."""
    present = [curve for curve in curves if curve]
    if len(present) < 2:
        points = dict(present[0]) if present else {}
        values = [points[step] for step in sorted(points)]
        return sorted(points), values, values, values
    runs = [{tag: [(step, 0.0, value) for step, value in curve]} for curve in present]
    band = reduce_tag(runs, tag)
    if band is None:
        return [], [], [], []
    return band.steps.tolist(), band.mean.tolist(), band.lower.tolist(), band.upper.tolist()


def band_note(counts: Sequence[int]) -> str:
    """The legend's title: what the shading is, over how many seeds (``""`` when no label has
    two or more runs, so nothing is shaded)."""
    seeds = sorted({count for count in counts if count > 1})
    if not seeds:
        return ""
    number = ", ".join(map(str, seeds[:-1])) + (" or " if len(seeds) > 1 else "") + str(seeds[-1])
    return f"shaded: {CONFIDENCE:.0%} interval (t)\nover {number} seeds"


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
    """One line per label (mean over its runs, shaded with the 95% t interval of that mean if
    several: :func:`mean_curve`), in the order the runs come, with the legend to the right of the
    axes inside the figure, titled by :func:`band_note`; ``None`` if no run has ``tag``.
    ``markers`` marks every point (a line of one point is always marked)."""
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
    texts = [_legend_text(label, len(curves)) for label, curves in groups.items()]
    note = band_note([len(curves) for curves in groups.values()])
    longest = max(len(line) for text in [*texts, note] for line in text.splitlines())
    figure = plt.figure(figsize=(6.4 + 0.075 * longest + 0.7, 4.4), layout="constrained")
    axes = figure.add_subplot()
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    handles = [
        _draw(axes, index, colors[index % len(colors)], curves, markers, tag)
        for index, curves in enumerate(groups.values())
    ]
    axes.set_xlabel("training step")
    axes.set_ylabel(ylabel)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(alpha=0.3)
    if title:
        axes.set_title(title, fontsize=11)
    figure.legend(
        handles,
        texts,
        loc="outside right upper",
        fontsize=9,
        title=note or None,
        title_fontsize=9,
        alignment="left",
    )
    return figure


def _draw(
    axes: Any,
    index: int,
    color: str,
    curves: Sequence[list[tuple[int, float]]],
    markers: bool,
    tag: str,
) -> Any:
    """One label's line, over its band when it has several runs; the legend's handle of both."""
    steps, mean, low, high = mean_curve(curves, tag)
    style: dict[str, Any] = {
        "color": color,
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
    (line,) = axes.plot(steps, mean, **style)
    if len(curves) < 2:
        return line
    band = axes.fill_between(steps, low, high, color=color, alpha=0.15, linewidth=0)
    return (band, line)


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
