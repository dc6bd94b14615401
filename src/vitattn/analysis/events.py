"""Scalars out of TensorBoard event files."""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TypeVar

from vitattn.runs.event_files import check_event_files
from vitattn.runs.files import UnreadableFileError, one_line

Point = TypeVar("Point", tuple[int, float], tuple[int, float, float])

MAX_CURVE_POINTS = 10_000
"""The most points of one curve a summary keeps of a run: as many as TensorBoard's own reader
keeps of a tag by default (``event_accumulator.DEFAULT_SIZE_GUIDANCE``; its scalars view draws
1,000). A longer curve is thinned (:func:`thinned`), so what a summary holds of a sweep grows
with its runs, not with their steps (docs/runs.md, "Event files")."""


def read_scalar_events(
    run_dir: str | Path, tags: Collection[str] | None = None
) -> dict[str, list[tuple[int, float, float]]]:
    """All scalars of a run (or those of ``tags``) as ``{tag: [(step, wall_time, value), ...]}``
    sorted by step.

    Reads the event files under ``<run_dir>/tensorboard`` (or ``run_dir`` itself if it has no
    such folder) as TensorBoard does: one accumulator over the whole folder, in the order the
    files were written, so that a resumed run's purge marker hides the steps a killed run had
    logged past its checkpoint. A run that was fitted and then tested has one file per stage.

    The files are checked first (:func:`vitattn.runs.event_files.check_event_files`: regular
    files, no link, within a size and a count of records, each record's length framed and
    bounded); one that is not is one line naming it (:class:`UnreadableFileError`), and
    TensorBoard reads nothing of the run.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = Path(run_dir)
    folder = run_dir / "tensorboard" if (run_dir / "tensorboard").is_dir() else run_dir
    if folder.is_symlink():
        raise UnreadableFileError(folder, "is a symbolic link, and a run holds none", "remove it")
    if not check_event_files(folder):
        return {}
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    tensorboard_log = logging.getLogger("tensorboard")
    level = tensorboard_log.level
    tensorboard_log.setLevel(logging.ERROR)  # a purge is expected after a resume, not news
    try:
        accumulator.Reload()
    finally:
        tensorboard_log.setLevel(level)
    scalars = {
        tag: sorted(
            (event.step, event.wall_time, event.value) for event in accumulator.Scalars(tag)
        )
        for tag in accumulator.Tags()["scalars"]
        if tags is None or tag in tags
    }
    check_accuracies(folder, scalars)
    return scalars


def check_accuracies(folder: Path, scalars: dict[str, list[tuple[int, float, float]]]) -> None:
    """Each accuracy curve (``val/acc``, a tag ending in ``/acc``) between 0 and 1, as vitattn
    logs it (NaN aside); else one line naming ``folder`` (an ``inf`` planted in a run's
    ``val/acc`` ended a sweep's summary in an ``AttributeError`` of ``statistics``; red
    team)."""
    for tag, events in scalars.items():
        if tag.rsplit("/", 1)[-1] != "acc":
            continue
        for step, _, value in events:
            if not (math.isnan(value) or 0 <= value <= 1):
                raise UnreadableFileError(
                    folder,
                    f"holds {one_line(tag)}={value} at step {step}, and an accuracy is "
                    "between 0 and 1",
                )


def read_curves(
    run_dir: str | Path, tags: Collection[str], max_points: int | None = None
) -> dict[str, list[tuple[int, float, float]]]:
    """The scalars of ``tags`` as :func:`read_scalar_events` reads them, each curve
    :func:`thinned` to at most ``max_points`` (default :data:`MAX_CURVE_POINTS`, read when
    called): what a summary keeps of a run."""
    max_points = MAX_CURVE_POINTS if max_points is None else max_points
    return {
        tag: thinned(events, max_points)
        for tag, events in read_scalar_events(run_dir, tags).items()
    }


def thinned(points: Sequence[Point], max_points: int) -> list[Point]:
    """``points`` (sorted by step, the value last) as they are where there are at most
    ``max_points`` (at least 5: steps either side of 0 take two spans however wide); else at
    most ``max_points`` of them, in order: the last point of each span of ``2**k`` steps
    (``step // 2**k``, the smallest ``k`` that leaves at most ``max_points - 3`` spans), the
    last point, and those of the highest and the lowest value (NaN aside), so the best accuracy
    and the final one a summary reports are the run's own. The spans are of steps, not of
    positions: runs that logged the same steps keep the same steps (where one started a step
    earlier, or logged a step twice, too), and their mean is taken at them. Runs whose first
    and last steps are far apart may take spans of different sizes, a power of two apart: of
    the same steps, the coarser keeps a subset of the finer's."""
    if max_points < 5:
        raise ValueError(f"a curve is thinned to at least 5 points, not {max_points}")
    if len(points) <= max_points:
        return list(points)
    first, last = points[0][0], points[-1][0]
    width = 1
    while last // width - first // width + 1 > max_points - 3:
        width *= 2
    kept = {len(points) - 1}
    for at in range(len(points) - 1):
        if points[at][0] // width != points[at + 1][0] // width:
            kept.add(at)  # the last point of its span
    values = [(point[-1], at) for at, point in enumerate(points) if not math.isnan(point[-1])]
    if values:
        kept |= {max(values)[1], min(values)[1]}
    return [points[at] for at in sorted(kept)]


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """All scalars of a run as ``{tag: [(step, value), ...]}`` sorted by step, read as
    :func:`read_scalar_events` reads them."""
    return {
        tag: sorted((step, value) for step, _, value in events)
        for tag, events in read_scalar_events(run_dir).items()
    }
