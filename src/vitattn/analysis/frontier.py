"""``frontier.png``: a sweep's accuracy against its cost, the Long Range Arena paper's
accuracy-speed-memory figure (Tay et al. 2021, figure 3) for the settings of one sweep.

Two panels share the accuracy axis: steady training images/s (more is better) and GFLOP per image
(less is better). Each setting is one point at its mean accuracy with its 95% interval as an
error bar (Student's t over seeds; the binomial interval of the test set for one run), labelled
by what differs, with marker area proportional to peak memory where it was measured (on a GPU).
The Pareto-optimal settings of each panel, those no other setting beats on both axes (at least as
good on both and better on one), are joined by a line and named under the panel, so that a point
drawn close to the line is never taken for one on it.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitattn.analysis.grouping import Setting
from vitattn.analysis.labels import MAX_LABELS, Label, place_labels
from vitattn.analysis.uncertainty import Estimate
from vitattn.runs.files import save_figure
from vitattn.utils.config import cut_apart

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PANELS = (
    ("images_per_sec", "steady training images/s (more is better)", True),
    ("gflop_per_image", "GFLOP per image (less is better)", False),
)
"""Cost axes: the summary key, its label, and whether a larger value is better."""

FRONT_WIDTH = 70
"""Characters per line of the names of the frontier under a panel."""

MARKER_AREA = (40.0, 600.0)
"""Smallest and largest marker area (points squared) for the least and most peak memory."""


PANEL_WIDTH = 6.0
"""Inches of figure per panel."""


ACCURACIES = {"test_acc": "test accuracy", "best_val_acc": "best validation accuracy"}
"""The accuracies a setting may be placed at, the first where every setting has it."""


def accuracy_axis(settings: Sequence[Setting]) -> str:
    """The one accuracy every setting is placed at: test/acc where each setting with an
    accuracy has it, else best val/acc (a maximum over validations, which reads higher: the two
    are never mixed on one axis)."""
    measured = [s for s in settings if any(s.estimates.get(key) for key in ACCURACIES)]
    for key in ACCURACIES:
        if all(s.estimates.get(key) is not None for s in measured):
            return key
    return "best_val_acc"


def pareto_front(points: Sequence[tuple[float, float]], more_is_better: bool) -> list[int]:
    """Indices of the points no other point dominates (accuracy ``y`` higher is better; cost
    ``x`` higher is better when ``more_is_better``), sorted by ``x``."""
    sign = 1.0 if more_is_better else -1.0

    def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
        at_least = sign * a[0] >= sign * b[0] and a[1] >= b[1]
        return at_least and (sign * a[0] > sign * b[0] or a[1] > b[1])

    front = [
        i for i, p in enumerate(points) if not any(dominates(q, p) for q in points if q is not p)
    ]
    return sorted(front, key=lambda i: points[i][0])


def marker_areas(memories: Sequence[float | None]) -> list[float]:
    """Marker areas proportional to peak memory (scaled into :data:`MARKER_AREA`); the middle
    size for every point when no memory was measured."""
    measured = [m for m in memories if m]
    if not measured:
        return [sum(MARKER_AREA) / 4] * len(memories)
    largest = max(measured)
    small, big = MARKER_AREA
    return [max(small, big * m / largest) if m else small for m in memories]


MAX_FRONT_LISTED = 12
"""The most names of the frontier listed under a panel."""

NAME_WIDTH = 28
"""Characters of a point's name."""


def point_names(labels: Sequence[str]) -> tuple[dict[str, str], str]:
    """What each point is called, and what the names are values of: the settings' values alone
    (``linear``; ``linear, 2`` of ``attention, model.depth``) when every label is ``key=value``
    pairs of the same keys in the same order, else the labels; each within
    :data:`NAME_WIDTH` characters, and two names cut alike kept apart by a hash."""
    pairs = [[part.partition("=") for part in label.split(", ")] for label in labels]
    keys = {tuple(key for key, _, _ in parts) for parts in pairs}
    plain = all(equals for parts in pairs for _, equals, _ in parts)
    if plain and len(keys) == 1:
        names = {
            label: ", ".join(v for _, _, v in parts)
            for label, parts in zip(labels, pairs, strict=True)
        }
        key_name = ", ".join(keys.pop())
    else:
        names, key_name = {label: label for label in labels}, ""
    short = {label: _short(name) for label, name in names.items()}
    alike = Counter(short.values())
    return {
        label: short[label] if alike[short[label]] == 1 else cut_apart(names[label], NAME_WIDTH)
        for label in labels
    }, key_name


def _short(label: str, width: int = NAME_WIDTH) -> str:
    return label if len(label) <= width else label[: width - 1] + "\N{HORIZONTAL ELLIPSIS}"


def plot_frontier(settings: Sequence[Setting], path: Path, title: str = "") -> bool:
    """Write :func:`frontier_figure` to ``path``; ``False`` (nothing written) when no setting
    has both an accuracy and a cost."""
    import matplotlib.pyplot as plt

    figure = frontier_figure(settings, title)
    if figure is None:
        return False
    save_figure(figure, path, dpi=120)
    plt.close(figure)
    return True


def frontier_figure(settings: Sequence[Setting], title: str = "") -> Figure | None:
    """The frontier of ``settings``: a panel per cost of :data:`PANELS` that some setting has,
    each setting at its mean accuracy (one for all: :func:`accuracy_axis`) and cost; ``None``
    when no setting has both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    axis = accuracy_axis(settings)
    for key, xlabel, more in PANELS:
        placed: list[tuple[Setting, Estimate, Estimate]] = []
        for setting in settings:
            cost, accuracy = setting.estimates.get(key), setting.estimates.get(axis)
            if cost is not None and accuracy is not None and cost.mean > 0:
                placed.append((setting, cost, accuracy))
        if placed:
            panels.append((key, xlabel, more, placed))
    if not panels:
        return None
    accuracy_name = ACCURACIES[axis]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color_of = {s.label: colors[i % len(colors)] for i, s in enumerate(settings)}
    names, key_name = point_names([s.label for s in settings])
    memory = {
        s.label: (e.mean if (e := s.estimates.get("peak_memory_gb")) else None) for s in settings
    }
    figure, axes_list = plt.subplots(
        1,
        len(panels),
        figsize=(PANEL_WIDTH * len(panels), 5.0),
        layout="constrained",
        squeeze=False,
    )
    labels = []
    for axes, (_, xlabel, more, placed) in zip(axes_list[0], panels, strict=True):
        labels.append(_draw_panel(axes, xlabel, more, placed, color_of, names, memory))
        axes.set_ylabel(accuracy_name)
    measured = any(memory.values())
    size_note = (
        "marker area: peak memory" if measured else "markers of one size: no peak memory on a CPU"
    )
    points = f"points: {key_name}; " if key_name else ""
    caption = (
        f"{points}mean with 95% interval on each axis (a bar to the frame runs past it); "
        f"dashed line, names in bold: Pareto frontier; {size_note}"
    )
    # about 14 characters of 10-point text to the inch: a longer line ran off both edges
    caption = textwrap.fill(caption, int(14 * PANEL_WIDTH * len(panels)))
    figure.suptitle((title + "\n" if title else "") + caption, fontsize=10)
    figure.draw_without_rendering()  # the layout, so that labels are placed where they will be
    for axes, panel_labels in zip(axes_list[0], labels, strict=True):
        place_labels(axes, panel_labels)
    return figure


def _draw_panel(
    axes: Any,
    xlabel: str,
    more_is_better: bool,
    placed: Sequence[tuple[Setting, Estimate, Estimate]],
    color_of: dict[str, str],
    names: dict[str, str],
    memory: dict[str, float | None],
) -> list[Label]:
    """A panel's points, intervals and Pareto line; the labels of its points, to be placed
    (:func:`vitattn.analysis.labels.place_labels`) once the figure's layout has run, the
    frontier's first."""
    points = [(cost.mean, accuracy.mean) for _, cost, accuracy in placed]
    front = pareto_front(points, more_is_better)
    areas = marker_areas([memory[s.label] for s, _, _ in placed])
    labels = []
    for index, (entry, area) in enumerate(zip(placed, areas, strict=True)):
        setting, cost, accuracy = entry
        n = f" (n={accuracy.n})" if accuracy.n > 1 else " (1 run)"
        _draw_point(axes, cost, accuracy, area, color_of[setting.label])
        labels.append(
            Label(
                names[setting.label] + n,
                cost.mean,
                accuracy.mean,
                area,
                "bold" if index in front else "normal",
            )
        )
    if len(front) > 1:
        axes.plot(
            [points[i][0] for i in front],
            [points[i][1] for i in front],
            color="black",
            linestyle="--",
            linewidth=1.2,
            zorder=2.5,  # over the intervals' bars (2), which would hide it, under the markers
        )
    xs = [x for x, _ in points]
    if min(xs) > 0 and max(xs) / min(xs) > 20:
        axes.set_xscale("log")
    _pad(axes, xs)
    _draw_cost_bars(axes, placed, color_of)
    listed = [names[placed[i][0].label] for i in front[:MAX_FRONT_LISTED]]
    on_front = ("; " if any("," in name for name in listed) else ", ").join(listed)
    if len(front) > MAX_FRONT_LISTED:
        on_front += f" and {len(front) - MAX_FRONT_LISTED} more"
    ordered = [labels[i] for i in front] + [a for i, a in enumerate(labels) if i not in front]
    named = f" (names: {MAX_LABELS} of {len(labels)} points)" if len(labels) > MAX_LABELS else ""
    axes.set_xlabel(
        xlabel + "\n" + textwrap.fill(f"Pareto frontier: {on_front}{named}", FRONT_WIDTH)
    )
    axes.grid(alpha=0.3)
    return ordered[:MAX_LABELS]  # the frontier's first


def _draw_point(axes: Any, cost: Estimate, accuracy: Estimate, area: float, color: str) -> None:
    """A setting's marker at its mean cost and accuracy, with the accuracy's interval as an
    error bar (the cost's is drawn once the axes' limits are set: :func:`_draw_cost_bars`)."""
    x, y = cost.mean, accuracy.mean
    if accuracy.low is not None and accuracy.high is not None:
        axes.errorbar(
            x,
            y,
            yerr=[[y - accuracy.low], [accuracy.high - y]],
            color=color,
            capsize=3,
            linewidth=1.2,
            zorder=2,
        )
    axes.scatter(x, y, s=area, color=color, alpha=0.75, edgecolor="black", zorder=3)


def _draw_cost_bars(
    axes: Any, placed: Sequence[tuple[Setting, Estimate, Estimate]], color_of: dict[str, str]
) -> None:
    """Each cost's interval as a horizontal bar through its point, drawn within the limits the
    points set: a bar that reaches past them (a t interval of two runs can reach below 0, which
    a log axis does not hold) runs to the frame, so the points keep their room."""
    low, high = axes.get_xlim()
    for setting, cost, accuracy in placed:
        if cost.low is None or cost.high is None:
            continue
        left, right = max(cost.low, low), min(cost.high, high)
        axes.hlines(accuracy.mean, left, right, color=color_of[setting.label], linewidth=1.2)
    axes.set_xlim(low, high)


def _pad(axes: Any, xs: Sequence[float]) -> None:
    """Room on the right for the last point's label."""
    low, high = axes.get_xlim()
    if axes.get_xscale() == "log":
        axes.set_xlim(low, high * 10 ** (0.25 * math.log10(max(high / low, 10))))
    else:
        axes.set_xlim(low, high + 0.25 * (high - low if high > low else max(xs)))
