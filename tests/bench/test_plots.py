"""The benchmark's figures as a reader sees them: what their log axes' tick labels say."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import pytest

from vitattn.bench.plots import _log_log_panel
from vitattn.bench.scaling_table import Row


def y_tick_labels(low: float, high: float) -> list[str]:
    """The y tick labels matplotlib draws on a panel of ``vitattn-bench``'s figures whose times
    run from ``low`` to ``high`` ms, major and minor, within the data (empty ones left out)."""
    rows = [Row("linear", n, 64, fwd_ms=ms) for n, ms in ((256, low), (4096, high))]
    figure, axis = plt.subplots()
    try:
        _log_log_panel(axis, rows, "fwd_ms", 1.0, "milliseconds (median)", "forward")
        figure.canvas.draw()
        ticks = [*axis.yaxis.get_majorticklabels(), *axis.yaxis.get_minorticklabels()]
        shown = [t for t in ticks if low <= t.get_position()[1] <= high]
        return [t.get_text() for t in shown if t.get_text()]
    finally:
        plt.close(figure)


@pytest.mark.parametrize(("low", "high"), [(0.2, 3.0), (1.0, 3000.0), (0.004, 0.03), (9, 60)])
def test_a_log_axis_reads_as_plain_numbers(low: float, high: float) -> None:
    """Milliseconds, MiB and shares of the floor span a decade or a few: each label is a plain
    number (``0.4``, ``20``), not matplotlib's power of ten (``4x10^-1``)."""
    labels = y_tick_labels(low, high)
    assert labels
    for label in labels:
        assert float(label) > 0, label  # no "$\\mathdefault{4\\times10^{-1}}$"


def test_an_axis_within_a_decade_labels_the_ticks_between_decades() -> None:
    """A share of the floor from 9% to 60% has one decade tick (10): the ticks between are
    labelled too, or the axis would carry a single number."""
    assert {"10", "20", "30", "40", "60"} <= set(y_tick_labels(9, 60))


def test_an_axis_of_several_decades_labels_the_decades() -> None:
    assert set(y_tick_labels(1.0, 3000.0)) == {"1", "10", "100", "1000"}


@pytest.mark.parametrize(("low", "high"), [(1.3, 60), (11.7, 80), (0.02, 3.0), (0.5, 900)])
def test_every_point_has_a_labelled_tick_at_or_below_it(low: float, high: float) -> None:
    """Shares of the floor of 1.3 % and 3.9 % sat under a lowest label of 10, and nystrom's 11.7 %
    under one of 20 (user audit, 2026-12-02): the axis ends on a tick below the lowest point and
    one above the highest, and a label is at or below each."""
    rows = [Row("linear", n, 64, fwd_ms=ms) for n, ms in ((256, low), (4096, high))]
    figure, axis = plt.subplots()
    try:
        _log_log_panel(axis, rows, "fwd_ms", 1.0, "milliseconds (median)", "forward")
        figure.canvas.draw()
        bottom, top = axis.get_ylim()
        assert bottom <= low and top >= high
        ticks = [*axis.yaxis.get_majorticklabels(), *axis.yaxis.get_minorticklabels()]
        labelled = [t.get_position()[1] for t in ticks if t.get_text()]
        assert any(bottom <= y <= low for y in labelled), (low, sorted(labelled))
    finally:
        plt.close(figure)


def drawn_lines(rows: list[Row], key: str, unit: str, title: str) -> dict[str, Any]:
    """The lines one log-log panel draws of ``rows``' ``key``, by label (the figure closed)."""
    figure, axis = plt.subplots()
    try:
        _log_log_panel(axis, rows, key, 1.0, unit, title)
        return {line.get_label(): line for line in axis.get_lines()}
    finally:
        plt.close(figure)


def test_a_compiled_row_is_drawn_in_its_eager_rows_colour_with_hollow_markers() -> None:
    """``compiled=[linear]`` puts ``linear_compiled`` beside ``linear``: the two lines share a
    colour and a marker, the compiled one hollow, so that a reader pairs them at a glance (each
    took a colour of its own, as another mechanism would)."""
    rows = [
        Row(name, n, 64, fwd_ms=ms * n, compiled=name.endswith("_compiled"))
        for name, ms in (("softmax", 1.0), ("linear", 0.5), ("linear_compiled", 0.3))
        for n in (256, 1024)
    ]
    lines = drawn_lines(rows, "fwd_ms", "milliseconds (median)", "forward")
    eager, compiled = lines["linear"], lines["linear_compiled"]
    assert compiled.get_color() == eager.get_color() != lines["softmax"].get_color()
    assert compiled.get_marker() == eager.get_marker()
    assert compiled.get_markerfacecolor() == "none" != eager.get_markerfacecolor()


def test_the_share_of_the_floor_panel_draws_the_floor_in_its_range(tmp_path, monkeypatch) -> None:
    """Calls at 2% to 5% of their floor (issue 42's GPU rows): the panel spans 100% too, a
    dashed line there, so that how far below the device's limit they run reads off it."""
    from matplotlib.figure import Figure

    from vitattn.bench import plots

    rows = [
        Row("linear", n, 64, fwd_ms=1.0, fwd_bwd_ms=2.0, fwd_bwd_floor_pct=pct)
        for n, pct in ((256, 2.0), (4096, 5.0))
    ]
    drawn: list[Figure] = []
    finish = plots._finish
    monkeypatch.setattr(plots, "_finish", lambda f, *args: (drawn.append(f), finish(f, *args)))
    plots.plot_time(rows, tmp_path / "time.png")
    share = drawn[0].axes[2]
    low, high = share.get_ylim()
    assert low <= 2.0 and high >= 100.0
    floor_lines = [line for line in share.get_lines() if list(line.get_ydata()) == [100.0, 100.0]]
    assert len(floor_lines) == 1 and floor_lines[0].get_linestyle() == "--"
    assert "the floor" in [text.get_text() for text in share.texts]


def test_every_attention_has_a_colour_of_its_own() -> None:
    """Fifteen rows (every registered attention, the check's two ``impl=autograd`` variants and
    ``linear_compiled``) on matplotlib's ten colours drew linear and taylor both red, softmax
    and random_feature_autograd both blue, efficient and sparse both green (audit of
    ``check_kernels.png``): distinct attentions have distinct colours, a compiled row its
    eager row's."""
    from matplotlib.colors import to_hex

    from vitattn.attention import ATTENTIONS

    names = [*ATTENTIONS, "performer_autograd", "random_feature_autograd", "linear_compiled"]
    rows = [
        Row(name, n, 64, fwd_ms=(i + 1) * n, compiled=name.endswith("_compiled"))
        for i, name in enumerate(names)
        for n in (256, 1024)
    ]
    lines = drawn_lines(rows, "fwd_ms", "milliseconds (median)", "forward")
    colours = {label: to_hex(line.get_color()) for label, line in lines.items()}
    assert set(colours) == set(names)
    eager = [name for name in names if name != "linear_compiled"]
    assert len({colours[name] for name in eager}) == len(eager), colours
    assert colours["linear_compiled"] == colours["linear"]


def test_a_compiled_row_on_its_eager_row_stays_visible() -> None:
    """``linear_compiled``'s memory is ``linear``'s to the byte: its line lay exactly under the
    eager one and could not be seen (audit). Its hollow markers are larger and drawn above, a
    ring around each filled one."""
    rows = [
        Row(name, n, 64, memory_bytes=n * 1024, compiled=name.endswith("_compiled"))
        for name in ("linear", "linear_compiled")
        for n in (256, 1024)
    ]
    lines = drawn_lines(rows, "memory_bytes", "MiB", "memory")
    eager, compiled = lines["linear"], lines["linear_compiled"]
    assert list(compiled.get_ydata()) == list(eager.get_ydata())
    assert compiled.get_markersize() >= 1.5 * eager.get_markersize()
    assert compiled.get_markerfacecolor() == "none"
    assert compiled.get_zorder() > eager.get_zorder()
