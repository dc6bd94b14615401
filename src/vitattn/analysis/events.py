"""Scalars out of TensorBoard event files."""

from __future__ import annotations

from pathlib import Path


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """All scalars of a run as ``{tag: [(step, value), ...]}`` sorted by step.

    Reads every event file under ``<run_dir>/tensorboard`` (or ``run_dir`` itself if it has no
    such folder); a run that was fitted and then tested has one file per stage.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = Path(run_dir)
    folder = run_dir / "tensorboard" if (run_dir / "tensorboard").is_dir() else run_dir
    scalars: dict[str, list[tuple[int, float]]] = {}
    for event_file in sorted(folder.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(event_file), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend((e.step, e.value) for e in accumulator.Scalars(tag))
    return {tag: sorted(points) for tag, points in scalars.items()}
