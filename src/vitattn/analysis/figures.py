"""The figures of a summary: ``val_acc_vs_step.png`` and ``train_loss_vs_step.png``
(:mod:`vitattn.analysis.curves`), ``frontier.png`` (:mod:`vitattn.analysis.frontier`) and
``attention_maps.png`` (:mod:`vitattn.analysis.maps`), each titled by what the runs share."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from vitattn.analysis.curves import plot_metric
from vitattn.analysis.frontier import plot_frontier
from vitattn.analysis.grouping import Setting
from vitattn.analysis.maps import plot_attention_maps
from vitattn.analysis.records import Run, describe, map_labels

CURVES = (
    ("val/acc", "validation accuracy", "val_acc_vs_step.png", True),
    ("train/loss", "training loss", "train_loss_vs_step.png", False),
)
"""The curves drawn: the tag, its axis label, the file, and whether points get markers."""


@contextlib.contextmanager
def text_as_written() -> Iterator[None]:
    """Figures made in the block draw their text as written. Their labels and titles come from
    the runs' files (a setting ``+x=$\\frac{$``, a job folder's name), and matplotlib reads
    ``$...$`` as mathematics: one such label failed the whole summary's figures, in a
    ``ParseSyntaxException`` or, nested deep, a ``RecursionError``."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False}):
        yield


def plot_figures(
    runs: Sequence[Run], settings: Sequence[Setting], root: Path, out: Path
) -> list[Path]:
    """The summary's figures in ``out``: the curves, the frontier, the attention maps (runs
    named relative to ``root`` where their labels are shared), their text as written
    (:func:`text_as_written`); those written (a figure with no data is not)."""
    with text_as_written():
        return _plot_figures(runs, settings, root, out)


def _plot_figures(
    runs: Sequence[Run], settings: Sequence[Setting], root: Path, out: Path
) -> list[Path]:
    written = []
    shared = describe(runs)
    counted = curve_runs(runs, settings)
    for tag, ylabel, name, markers in CURVES:
        title = ylabel[0].upper() + ylabel[1:] + (f" \N{EM DASH} {shared}" if shared else "")
        if plot_metric(counted, tag, ylabel, out / name, title, markers):
            written.append(out / name)
    title = "Accuracy against cost" + (f" \N{EM DASH} {shared}" if shared else "")
    if plot_frontier(settings, out / "frontier.png", title):
        written.append(out / "frontier.png")
    # the maps name their own step: that of the checkpoint they were drawn with
    shared = describe(runs, steps=False)
    maps_title = "Attention rollout" + (f" \N{EM DASH} {shared}" if shared else "")
    entries = list(zip(map_labels(runs, root), (run.path for run in runs), strict=True))
    if plot_attention_maps(entries, out / "attention_maps.png", maps_title):
        written.append(out / "attention_maps.png")
    return written


def curve_runs(runs: Sequence[Run], settings: Sequence[Setting]) -> list[Run]:
    """The runs the curves average, in the order of ``runs``: of each setting, those its row of
    the settings table counts (completed, each seed once), as TensorBoard's seed runs do; a
    setting with none completed keeps all its runs, so that how they ended still shows. A failed
    seed cut its setting's line at its last step, and a copied job folder narrowed its band."""
    keep: set[int] = set()
    for setting in settings:
        members = setting.completed or setting.runs
        keep.update(id(member.run) for member in members)
    grouped = {id(member.run) for setting in settings for member in setting.runs}
    return [run for run in runs if id(run) in keep or id(run) not in grouped]
