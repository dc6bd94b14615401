"""Figures of the benchmark (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import LogFormatter

from vitattn.bench.approx import ApproxRow
from vitattn.bench.kernels import COMPILED_SUFFIX
from vitattn.bench.scaling_table import Row
from vitattn.bench.spectrum import HeadSpectrum
from vitattn.runs.files import save_figure

LINESTYLES = ("-", "--", ":", "-.")
MIB = 2**20
FLOOR_PERCENT = 100.0
"""A call's share of its floor at the device's limit, where the share panel draws its line."""


def _series(rows: Sequence[Row]) -> dict[tuple[str, int], list[Row]]:
    series: dict[tuple[str, int], list[Row]] = {}
    for row in rows:
        series.setdefault((row.attention, row.head_dim), []).append(row)
    return series


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")


class PlainLogFormatter(LogFormatter):
    """Tick labels of a log axis as plain numbers (``0.4``, ``20``, ``1000``) rather than powers
    of ten (``4x10^-1``), labelling the same ticks matplotlib would: on an axis that spans less
    than a decade or two, those between the decades too."""

    def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
        return f"{x:g}"


MINOR_LABELS = 3
"""A log axis of at most this many decade ticks has the ticks between labelled too."""


def _plain_log_y(axis: Any) -> None:
    """A log y axis whose ticks read as numbers (:class:`PlainLogFormatter`), ending on ticks
    (1, 2 or 5 times a power of ten) below and above what is drawn, with the ticks between the
    decades labelled where it spans up to three decade ticks: a point below the lowest label was
    read against nothing (1.3 % under a lowest label of 10; user audit). Call it once the
    panel's data is drawn."""
    axis.set_yscale("log")
    axis.yaxis.set_major_formatter(PlainLogFormatter())
    axis.yaxis.set_minor_formatter(
        PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(MINOR_LABELS, 1))
    )
    _end_on_ticks(axis, *axis.get_ylim())


def _end_on_ticks(axis: Any, low: float, high: float) -> None:
    """The log y axis from a labelled tick at or below ``low`` to one at or above ``high``."""
    if not (0 < low < high and math.isfinite(high)):
        return
    low, high = _tick_below(low), _tick_above(high)
    if math.floor(math.log10(high) + 1e-9) - math.ceil(math.log10(low) - 1e-9) + 1 > MINOR_LABELS:
        low = 10 ** math.floor(math.log10(low) + 1e-9)  # only decades are labelled: end on one
    axis.set_ylim(low, high)


def _tick_below(value: float) -> float:
    """The largest of 1, 2 or 5 times a power of ten at most ``value`` (> 0)."""
    decade = 10 ** math.floor(math.log10(value))
    return max(m * decade for m in (1, 2, 5) if m * decade <= value * (1 + 1e-9))


def _tick_above(value: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten at least ``value`` (> 0)."""
    decade = 10 ** math.floor(math.log10(value))
    return min(m * decade for m in (1, 2, 5, 10) if m * decade >= value * (1 - 1e-9))


PALETTE = "tab20"
"""Twenty qualitative colours: ten hues dark (matplotlib's default ten), then the same ten light,
so that every attention the registry holds has a colour of its own."""
COMPILED_MARKER_SCALE = 1.8
"""A compiled row's hollow markers, this much larger than its eager row's filled ones, ring
them where the two lines lie on each other (``linear_compiled``'s memory is ``linear``'s)."""


def _palette() -> list[str]:
    """:data:`PALETTE`'s colours as hex, its dark shades first, then its light ones."""
    from matplotlib.colors import to_hex

    colours = [to_hex(c) for c in matplotlib.colormaps[PALETTE].colors]
    return colours[0::2] + colours[1::2]


def _styles(names: Sequence[str]) -> dict[str, tuple[Any, str]]:
    """A distinct (colour, marker) per attention: a colour of its own among twenty, the light
    shades with a second marker, a third marker past twenty. A compiled row
    ``<name>_compiled`` takes its eager row's, where that is drawn too (its markers are
    hollow)."""
    palette = _palette()
    shades = len(palette) // 2
    unique = list(dict.fromkeys(names))
    own = [name for name in unique if _eager_of(name, unique) is None]
    styles = {
        name: (palette[i % len(palette)], MARKERS[(i // shades) % len(MARKERS)])
        for i, name in enumerate(own)
    }
    for name in unique:
        eager = _eager_of(name, unique)
        if eager is not None:
            styles[name] = styles[eager]
    return styles


def _eager_of(name: str, names: Sequence[str]) -> str | None:
    """The eager row ``name`` is the compiled twin of, where ``names`` has it."""
    eager = name.removesuffix(COMPILED_SUFFIX)
    return eager if eager != name and eager in names else None


def _log_log_panel(
    axis: Any, rows: Sequence[Row], column: str, scale: float, ylabel: str, title: str
) -> None:
    series = _series(rows)
    head_dims = sorted({d for _, d in series})
    styles = _styles([r.attention for r in rows])
    for (attention, head_dim), points in series.items():
        ok = sorted((r.seq_len, getattr(r, column)) for r in points if r.ok and getattr(r, column))
        if not ok:
            continue
        colour, marker = styles[attention]
        label = attention if len(head_dims) == 1 else f"{attention} d={head_dim}"
        compiled = any(r.compiled for r in points)
        size = plt.rcParams["lines.markersize"] * (COMPILED_MARKER_SCALE if compiled else 1)
        axis.plot(
            [n for n, _ in ok],
            [v / scale for _, v in ok],
            marker=marker,
            markersize=size,
            markerfacecolor="none" if compiled else colour,
            linestyle=LINESTYLES[head_dims.index(head_dim) % len(LINESTYLES)],
            color=colour,
            label=label,
            zorder=3 if compiled else 2,  # above the eager line it may lie on
        )
    seq_lens = sorted({r.seq_len for r in rows})
    axis.set_xscale("log", base=2)
    _plain_log_y(axis)
    if seq_lens:
        axis.set_xticks(seq_lens, [str(n) for n in seq_lens])
    axis.set_xlabel("sequence length n")
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.grid(True, which="both", alpha=0.3)


def _finish(figure: Any, axes: Sequence[Any], title: str, path: Path) -> None:
    """One legend right of the panels (every line of any panel), a title, and save."""
    labels: dict[str, Any] = {}
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            labels.setdefault(label, handle)
    figure.suptitle(title)
    if labels:
        figure.legend(
            list(labels.values()), list(labels), loc="center left", bbox_to_anchor=(1.0, 0.5)
        )
    figure.tight_layout()
    save_figure(figure, path, dpi=120, bbox_inches="tight")
    plt.close(figure)


def _subtitle(rows: Sequence[Row]) -> str:
    if not rows:
        return ""
    r = rows[0]
    return f"{r.level}, batch {r.batch_size}, {r.heads} heads, {r.dtype}, {r.device}"


def plot_time(rows: Sequence[Row], path: Path) -> None:
    """``time_vs_seq_len.png``: forward and forward+backward milliseconds against n, and the
    forward+backward's share of its floor (:mod:`vitattn.bench.floor`), log-log."""
    figure, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    _log_log_panel(axes[0], rows, "fwd_ms", 1.0, "milliseconds (median)", "forward (inference)")
    _log_log_panel(axes[1], rows, "fwd_bwd_ms", 1.0, "milliseconds (median)", "forward + backward")
    _log_log_panel(
        axes[2], rows, "fwd_bwd_floor_pct", 1.0, "% of floor (100 = at the device's limit)",
        "forward + backward: share of its floor",
    )  # fmt: skip
    mark_the_floor(axes[2])
    _finish(figure, axes, f"Attention time vs sequence length ({_subtitle(rows)})", path)


def mark_the_floor(axis: Any) -> None:
    """A dashed line at 100% of the floor, the device's limit, in the axis's range: how far
    below it each call runs reads off the panel (a panel of calls at 2% to 5% alone hid it)."""
    axis.axhline(FLOOR_PERCENT, color="0.35", linestyle="--", linewidth=1.0, zorder=1)
    low, high = axis.get_ylim()  # room above the line too, ending on labelled ticks
    _end_on_ticks(axis, low, max(high, FLOOR_PERCENT * 1.05))
    axis.annotate(
        "the floor", (0.01, FLOOR_PERCENT), xycoords=("axes fraction", "data"),
        xytext=(0, 3), textcoords="offset points", color="0.35", fontsize=8,
    )  # fmt: skip


def plot_memory(rows: Sequence[Row], path: Path) -> None:
    """``memory_vs_seq_len.png``: memory of one forward+backward and saved bytes against n."""
    method = next((r.memory_method for r in rows if r.memory_method), "")
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    _log_log_panel(axes[0], rows, "memory_bytes", MIB, "MiB", f"memory ({method})")
    _log_log_panel(axes[1], rows, "saved_bytes", MIB, "MiB", "saved for backward")
    _finish(figure, axes, f"Attention memory vs sequence length ({_subtitle(rows)})", path)


def plot_approx(rows: Sequence[ApproxRow], attention: str, path: Path) -> None:
    """``approx_<attention>.png``: relative error of output and matrix against the budget, ours
    and (labelled with its name) another package's."""
    mine = [r for r in rows if r.attention == attention and r.status == "ok"]
    figure, axis = plt.subplots(figsize=(6, 4.5))
    knob = next((r.knob for r in mine if r.knob), "")
    numeric = all(
        isinstance(r.budget, int | float) and not isinstance(r.budget, bool) for r in mine
    )
    several = len({r.implementation for r in mine}) > 1
    for implementation, source in dict.fromkeys((r.implementation, r.source) for r in mine):
        points = [r for r in mine if (r.implementation, r.source) == (implementation, source)]
        who = f"{implementation}, " if several else ""
        if numeric:
            points.sort(key=lambda r: r.budget)
        xs = [r.budget if numeric else str(r.budget) for r in points]
        for column, style, marker in (
            ("output_rel_error", "-", "o"),
            ("matrix_rel_error", "--", "s"),
        ):
            ys = [getattr(r, column) for r in points]
            if all(y is None for y in ys):
                continue
            errs = [getattr(r, f"{column}_std") or 0.0 for r in points]
            axis.errorbar(
                xs,
                [float("nan") if y is None else y for y in ys],
                yerr=errs,
                marker=marker,
                markerfacecolor="none" if marker == "s" else None,
                linestyle=style,
                capsize=3,
                label=f"{column.split('_')[0]} ({who}{source}, n={points[0].seq_len})",
            )
    if numeric and knob and mine and min(r.budget for r in mine) > 0:
        axis.set_xscale("log", base=2)
        budgets = sorted({r.budget for r in mine})
        axis.set_xticks(budgets, [f"{b:g}" for b in budgets])
    _plain_log_y(axis)
    axis.set_xlabel(f"attention.{knob}" if knob else "default settings")
    axis.set_ylabel("relative error vs softmax (Frobenius)")
    axis.set_title(f"{attention}: approximation error")
    axis.grid(True, which="both", alpha=0.3)
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize="small")
    figure.tight_layout()
    save_figure(figure, path, dpi=120)
    plt.close(figure)


def _energy_panel(
    axis: Any, spectra: Sequence[HeadSpectrum], column: str, energy: float, title: str
) -> None:
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for layer in sorted({s.layer for s in spectra}):
        mine = [s for s in spectra if s.layer == layer]
        colour = cycle[layer % len(cycle)]
        index = list(range(1, mine[0].seq_len + 1))
        curves = [getattr(s, column) for s in mine]
        for curve in curves:
            axis.plot(index, curve, color=colour, alpha=0.3, linewidth=0.8)
        mean = [sum(c) / len(curves) for c in zip(*curves, strict=True)]
        axis.plot(index, mean, color=colour, linewidth=2, label=f"layer {layer}")
    axis.axhline(energy, color="grey", linestyle="--", linewidth=1)
    axis.set_xscale("log")
    axis.set_xlabel("number of singular values r")
    axis.set_title(title)
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize="small")


def plot_spectrum(spectra: Sequence[HeadSpectrum], energy: float, path: Path) -> None:
    """``spectrum.png``: cumulative energy and singular-value curves per layer, and the ranks."""
    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 4.5))
    _energy_panel(left, spectra, "cumulative_energy", energy, "cumulative energy (sigma^2)")
    left.set_ylabel("share (thin: heads, thick: layer mean)")
    _energy_panel(
        middle, spectra, "cumulative_singular", energy, "cumulative sigma (Linformer Fig. 1)"
    )
    layers = sorted({s.layer for s in spectra})
    heads = sorted({s.head for s in spectra})
    grid = [[0] * len(heads) for _ in layers]
    labels = [[""] * len(heads) for _ in layers]
    for s in spectra:
        i, j = layers.index(s.layer), heads.index(s.head)
        grid[i][j] = s.rank_singular
        labels[i][j] = f"{s.rank} / {s.rank_singular}"
    image = right.imshow(grid, cmap="viridis", aspect="auto")
    for i, row in enumerate(labels):
        for j, text in enumerate(row):
            right.text(j, i, text, ha="center", va="center", color="white", fontsize=8)
    right.set_xticks(range(len(heads)), [str(h) for h in heads])
    right.set_yticks(range(len(layers)), [str(layer) for layer in layers])
    right.set_xlabel("head")
    right.set_ylabel("layer")
    n = spectra[0].seq_len if spectra else 0
    right.set_title(f"rank at {energy:.0%}: energy / sigma (n={n})")
    figure.colorbar(image, ax=right)
    figure.suptitle("Singular values of softmax attention matrices on real images")
    figure.tight_layout()
    save_figure(figure, path, dpi=120)
    plt.close(figure)
