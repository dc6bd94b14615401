"""Scalars out of TensorBoard event files."""

from __future__ import annotations

import logging
from pathlib import Path

from vitattn.runs.event_files import check_event_files
from vitattn.runs.files import UnreadableFileError


def read_scalar_events(run_dir: str | Path) -> dict[str, list[tuple[int, float, float]]]:
    """All scalars of a run as ``{tag: [(step, wall_time, value), ...]}`` sorted by step.

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
    return {
        tag: sorted(
            (event.step, event.wall_time, event.value) for event in accumulator.Scalars(tag)
        )
        for tag in accumulator.Tags()["scalars"]
    }


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """All scalars of a run as ``{tag: [(step, value), ...]}`` sorted by step, read as
    :func:`read_scalar_events` reads them."""
    return {
        tag: sorted((step, value) for step, _, value in events)
        for tag, events in read_scalar_events(run_dir).items()
    }
