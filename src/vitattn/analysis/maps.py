"""Attention maps of several runs side by side: ``attention_maps.png``.

A run that recorded its attention has ``<run>/attention/maps.npz`` with ``images`` (uint8,
``(N, H, W, C)``, C = 3 or 1), ``rollout`` (float32, ``(N, H, W)`` in [0, 1]: the attention
rollout of Abnar & Zuidema 2020), ``layers`` (float32, ``(L, N, H, W)``: each layer's map of the
pooled query), ``step`` and ``attention``. :func:`plot_attention_maps` lays the runs out as rows
and the same validation images as columns, each cell the image with that run's rollout over it
as a heat map, so that where each mechanism looks can be compared at a glance.
"""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vitattn.runs.arrays import read_npz
from vitattn.runs.files import UnreadableFileError, one_line, save_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

MAPS_FILE = Path("attention") / "maps.npz"
"""Where a run directory keeps its attention maps."""
COLORMAP = "inferno"
SCALE_LABEL = "rollout / map's max"
"""The colour bar's label, short enough for the bar of one row: each map is divided by its
maximum as it is kept (:func:`vitattn.training.callbacks.insight.to_grid`), so a map's
brightest patch is 1 however spread its attention is (rollout 1/64 on each of 64 patches is
drawn at 1 everywhere)."""
OVERLAY_ALPHA = (0.15, 0.65)
"""Opacity of the heat map where the rollout is 0 and where it is 1: where a run does not look,
the image shows through almost as it is."""
CELL_INCHES = 1.45
MAX_IMAGES = 8
"""The images of a run drawn (and kept once read: its others are dropped as it is read)."""
MAX_SIDE = 256
"""The largest side of an image or rollout drawn: a CIFAR-10 image and its rollout are 32."""
MAX_ROWS = 32
"""The runs drawn, one row each: a sweep of more has its first ones drawn, with a warning (a
row per run of thousands made a picture of 80,000 pixels and gigabytes of memory)."""


@dataclass
class AttentionMaps:
    """What ``maps.npz`` holds."""

    images: np.ndarray
    rollout: np.ndarray
    step: int | None = None
    attention: str = ""

    @property
    def count(self) -> int:
        return min(len(self.images), len(self.rollout))


def load_maps(run_dir: str | Path) -> AttentionMaps | None:
    """The maps of the run at ``run_dir``; ``None`` if it has none, or (with a warning) if the
    file cannot be read or does not hold images and a rollout of the shapes above."""
    path = Path(run_dir) / MAPS_FILE
    if not path.exists() and not path.is_symlink():
        return None
    try:
        content = read_npz(path)  # headers checked before anything is inflated
        images = np.asarray(content["images"])[:MAX_IMAGES]
        if images.dtype.kind not in "biuf":
            raise TypeError(f"its images are {images.dtype}, not numbers")
        stored = np.asarray(content["rollout"])
        if stored.ndim == 3 and max(stored.shape[1:], default=0) > MAX_SIDE:
            raise ValueError(f"its rollout of {stored.shape[1:]} is larger than {MAX_SIDE} a side")
        rollout = stored[:MAX_IMAGES].astype(np.float32)  # what is drawn: no more
        step = int(content["step"]) if "step" in content else None
        attention = str(content["attention"]) if "attention" in content else ""
    except UnreadableFileError as error:
        log.warning("skipping %s", error)
        return None
    except (KeyError, TypeError, ValueError, OverflowError) as error:  # a step of inf: Overflow
        log.warning("skipping %s: %s", path, one_line(error))
        return None
    if images.ndim == 3:  # grayscale without its channel axis
        images = images[..., None]
    if (
        images.ndim != 4
        or images.shape[-1] not in (1, 3)
        or max(images.shape[1:3]) > MAX_SIDE
        or rollout.ndim != 3
    ):
        log.warning(
            "skipping %s: images %s and rollout %s are not (N, H, W, C) and (N, H, W), H and W "
            f"at most {MAX_SIDE}",
            path,
            images.shape,
            rollout.shape,
        )
        return None
    if min(len(images), len(rollout)) == 0:
        return None
    return AttentionMaps(images, rollout, step, attention)


def _wrap(text: str, width: int = 22) -> str:
    return (
        "\n".join(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False))
        or text
    )


def maps_figure(
    rows: Sequence[tuple[str, AttentionMaps]], title: str = "", max_images: int = 8
) -> Figure:
    """One row per ``(label, maps)``, one column per image (the first ``max_images`` that every
    row has): the image with the rollout over it, and one colour bar for all."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    if not rows:
        raise ValueError("no attention maps to show")
    columns = max(1, min(max_images, *(maps.count for _, maps in rows)))
    steps = {maps.step for _, maps in rows}
    same_step = len(steps) == 1 and None not in steps
    if same_step:
        title = f"{title}, step {steps.pop()}" if title else f"step {steps.pop()}"
    labels = [
        _wrap(label if same_step or maps.step is None else f"{label} (step {maps.step})")
        for label, maps in rows
    ]
    label_inches = 0.08 * max(len(line) for label in labels for line in label.splitlines())
    grid_inches = (CELL_INCHES * columns, CELL_INCHES * len(rows))
    width = max(grid_inches[0] + label_inches + 1.3, 0.11 * len(title))
    height = grid_inches[1] + 0.9
    # Placed by hand, in inches: the labels on the left, the grid, 1.3 inches on the right for
    # the colour bar, 0.9 above for the titles (a layout engine placing every cell made this
    # figure the slowest part of a sweep's summary).
    left = label_inches + 0.2 + (width - grid_inches[0] - label_inches - 1.3) / 2
    bottom = 0.15
    figure, axes = plt.subplots(
        len(rows),
        columns,
        figsize=(width, height),
        squeeze=False,
        gridspec_kw={
            "left": left / width,
            "right": (left + grid_inches[0]) / width,
            "bottom": bottom / height,
            "top": (bottom + grid_inches[1]) / height,
            "wspace": 0.06,
            "hspace": 0.06,
        },
    )
    for row, (label, (_, maps)) in enumerate(zip(labels, rows, strict=True)):
        for column in range(columns):
            draw_cell(axes[row][column], maps.images[column], maps.rollout[column])
            if row == 0:
                axes[row][column].set_title(f"image {column + 1}", fontsize=9)
        axes[row][0].set_ylabel(label, rotation=0, ha="right", va="center", fontsize=9, labelpad=8)
    bar_height = min(grid_inches[1] * 0.9, 2.5 * CELL_INCHES)  # at most about two rows tall
    bar = figure.add_axes(
        (
            (left + grid_inches[0] + 0.25) / width,
            (bottom + (grid_inches[1] - bar_height) / 2) / height,
            0.15 / width,
            bar_height / height,
        )
    )
    figure.colorbar(ScalarMappable(Normalize(0.0, 1.0), cmap=COLORMAP), cax=bar, label=SCALE_LABEL)
    if title:
        figure.suptitle(title)
    return figure


def draw_cell(axes: Any, image: np.ndarray, rollout: np.ndarray) -> None:
    """One image (gray or colour) with its attention rollout over it, more opaque where the
    rollout is higher, on ``axes`` without ticks."""
    height, width = image.shape[:2]
    extent = (0, width, height, 0)  # the rollout may be coarser than the image
    if image.shape[-1] == 1:
        axes.imshow(image[..., 0], cmap="gray", vmin=0, vmax=255, extent=extent)
    else:
        axes.imshow(image, extent=extent)
    finite = np.isfinite(rollout)  # a run whose weights went NaN has maps of NaN
    level = np.clip(np.where(finite, rollout, 0.0), 0, 1)
    axes.imshow(
        rollout,
        cmap=COLORMAP,
        vmin=0.0,
        vmax=1.0,
        alpha=np.where(finite, OVERLAY_ALPHA[0] + (OVERLAY_ALPHA[1] - OVERLAY_ALPHA[0]) * level, 0),
        extent=extent,
        interpolation="bilinear",
    )
    if not finite.all():
        axes.text(
            width / 2, height - 1, "rollout not finite", ha="center", va="bottom", fontsize=8,
            color="white", bbox={"facecolor": "black", "alpha": 0.6, "pad": 1.5, "linewidth": 0},
        )  # fmt: skip
    axes.set_xticks([])
    axes.set_yticks([])


def plot_attention_maps(
    rows: Sequence[tuple[str, str | Path]],
    path: Path,
    title: str = "",
    max_images: int = MAX_IMAGES,
) -> bool:
    """Write :func:`maps_figure` of the runs ``(label, run directory)`` that have maps to
    ``path``, the first :data:`MAX_ROWS` of them (a warning names how many more there were);
    runs without are left out. ``False`` (and nothing written) if none has any."""
    import matplotlib.pyplot as plt

    found: list[tuple[str, AttentionMaps]] = []
    for at, (label, run_dir) in enumerate(rows):
        if len(found) == MAX_ROWS:
            log.warning(
                "%s shows the attention maps of the first %d runs; %d more are not drawn",
                path.name,
                MAX_ROWS,
                sum(1 for _, later in rows[at:] if (Path(later) / MAPS_FILE).exists()),
            )
            break
        if (maps := load_maps(run_dir)) is not None:
            found.append((label, maps))
    if not found:
        return False
    figure = maps_figure(found, title, max_images)
    save_figure(figure, path, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return True
