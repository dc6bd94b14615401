"""Labels next to their points, each where it hides the least of the figure.

Each label tries the places around its point in turn (right of it, above and below its middle,
then left, then over and under it) and keeps the one that covers the fewest things already drawn:
other labels, markers and lines (error bars, the Pareto line), and that stays inside the frame;
the first such place wins a tie. It is how matplotlib's ``legend(loc="best")`` picks its corner
(``Legend._find_best_position``: candidates scored by the data they cover), applied to each label
against the labels placed before it. Positions are in display units after the figure's layout
has run, and offsets are in points, so the placing holds at any dpi the figure is saved at.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MAX_LABELS = 30
"""The most labels a figure places on one panel: each is placed against every one before it,
and a thousand took minutes to lay out (``pareto.png``'s trials, ``frontier.png``'s settings:
each caller keeps the ones that matter most, and says so)."""

PLACES: tuple[tuple[float, float, str, str], ...] = (
    (1.0, 0.35, "left", "bottom"),  # right of the point, above its middle
    (1.0, -0.35, "left", "top"),  # right, below
    (-1.0, 0.35, "right", "bottom"),  # left, above
    (-1.0, -0.35, "right", "top"),  # left, below
    (0.0, 1.0, "center", "bottom"),  # over it
    (0.0, -1.0, "center", "top"),  # under it
)
"""Where a label may go: the direction of its offset from its point, in units of the marker's
radius and :data:`GAP`, and the alignment that keeps the text on that side, in order of
preference."""

GAP = 2.0
"""Points between a marker's edge and its label."""

OUTSIDE, ON_LABEL, ON_MARKER, ON_LINE = 8, 4, 2, 1
"""What a place costs for leaving the frame, for each label and marker it covers whole (a part
of one costs that share), and for each line it crosses: a label over another is unreadable, one
over a marker hides a point, one across a bar hides less."""


@dataclass(frozen=True)
class Label:
    """A point's label: its text, its point in data coordinates, the marker's area (points
    squared, as ``scatter`` takes it) and its weight."""

    text: str
    x: float
    y: float
    marker_area: float
    fontweight: str = "normal"


def place_labels(axes: Any, labels: Sequence[Label], fontsize: float = 8) -> list[Any]:
    """Annotate ``axes`` with ``labels``, in order, each at the place of :data:`PLACES` that
    covers the least (see the module). Call it once everything else of the figure is drawn
    and its layout has run (``figure.draw_without_rendering()``). The annotations made."""
    figure = axes.figure
    renderer = figure.canvas.get_renderer()
    frame = axes.get_window_extent(renderer)
    markers = marker_boxes(axes)
    lines = line_paths(axes)
    placed: list[Any] = []
    annotations = []
    for label in labels:
        anchor = axes.transData.transform((label.x, label.y))
        others = [box for box in markers if not box.contains(*anchor)]  # not its own marker
        reach = math.sqrt(label.marker_area) / 2 + GAP
        annotation = axes.annotate(
            label.text,
            (label.x, label.y),
            xytext=(0, 0),
            textcoords="offset points",
            fontsize=fontsize,
            fontweight=label.fontweight,
            # a line it crosses, where no place was free, shows through faintly
            bbox={
                "boxstyle": "square,pad=0.1",
                "facecolor": "white",
                "edgecolor": "none",
                "alpha": 0.7,
            },
        )
        scored = []
        for order, place in enumerate(PLACES):
            put(annotation, place, reach)
            box = annotation.get_window_extent(renderer)
            cost = (
                OUTSIDE * (not inside(box, frame))
                + ON_LABEL * sum(covered(other, box) for other in placed)
                + ON_MARKER * sum(covered(marker, box) for marker in others)
                + ON_LINE * sum(path.intersects_bbox(box, filled=False) for path in lines)
            )
            scored.append((cost, order, box))
        _, order, box = min(scored, key=lambda entry: entry[:2])
        put(annotation, PLACES[order], reach)
        placed.append(box)
        annotations.append(annotation)
    return annotations


def put(annotation: Any, place: tuple[float, float, str, str], reach: float) -> None:
    """Move ``annotation`` to ``place`` of :data:`PLACES`, ``reach`` points from its point."""
    dx, dy, horizontal, vertical = place
    annotation.set_position((dx * reach, dy * reach))
    annotation.set_horizontalalignment(horizontal)
    annotation.set_verticalalignment(vertical)


def covered(box: Any, by: Any) -> float:
    """The share of ``box`` that ``by`` covers (both display bounding boxes)."""
    width = min(box.x1, by.x1) - max(box.x0, by.x0)
    height = min(box.y1, by.y1) - max(box.y0, by.y0)
    area = box.width * box.height
    return max(0.0, width) * max(0.0, height) / area if area > 0 else 0.0


def inside(box: Any, frame: Any) -> bool:
    """Whether ``box`` lies within ``frame`` (both display bounding boxes)."""
    return box.x0 >= frame.x0 and box.x1 <= frame.x1 and box.y0 >= frame.y0 and box.y1 <= frame.y1


def marker_boxes(axes: Any) -> list[Any]:
    """The display bounding box of every scatter marker of ``axes``."""
    from matplotlib.collections import PathCollection
    from matplotlib.transforms import Bbox

    to_pixels = axes.figure.dpi / 72
    boxes = []
    for collection in axes.collections:
        if not isinstance(collection, PathCollection):
            continue
        sizes = collection.get_sizes()
        centres = collection.get_offset_transform().transform(collection.get_offsets())
        for index, (x, y) in enumerate(centres):
            radius = math.sqrt(sizes[index % len(sizes)] if len(sizes) else 36.0) / 2 * to_pixels
            boxes.append(Bbox.from_extents(x - radius, y - radius, x + radius, y + radius))
    return boxes


def line_paths(axes: Any) -> list[Any]:
    """Every line of ``axes`` in display coordinates: its ``plot`` lines drawn with a line
    style, and the segments of its line collections (error bars, ``hlines``)."""
    from matplotlib.collections import LineCollection

    paths = [
        line.get_transform().transform_path(line.get_path())
        for line in axes.get_lines()
        if line.get_linestyle() not in ("None", "", " ")
    ]
    for collection in axes.collections:
        if isinstance(collection, LineCollection):
            transform = collection.get_transform()
            paths.extend(transform.transform_path(path) for path in collection.get_paths())
    return paths
