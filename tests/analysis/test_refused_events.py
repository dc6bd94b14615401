"""A run whose event files are refused (issue 43) stays in the summary with its ``metrics.json``
figures and without curves; one warning line names the file, and the seeds' mean leaves it out."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.analysis.conftest import write_seeded_sweep
from tests.support import bombs
from vitattn.analysis.summary import summarize
from vitattn.runs.event_files import event_files


def test_a_run_whose_events_are_refused_keeps_its_row_without_curves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sweep = write_seeded_sweep(tmp_path / "sweep", {"softmax": [0.5, 0.6, 0.7]})
    (bad,) = event_files(sweep / "attention=softmax,seed=1")
    bombs.length_bomb(bad)  # TensorBoard would ask Python for 1 TB
    with caplog.at_level(logging.WARNING):
        summary = summarize([sweep])
    rows = {row["seed"]: row for row in summary.rows}
    assert sorted(rows) == [1, 2, 3]
    assert rows[1]["best_val_acc"] is None and rows[2]["best_val_acc"] == pytest.approx(0.6)
    assert rows[1]["final_val_acc"] == pytest.approx(0.5)  # metrics.json's
    assert rows[1]["test_acc"] == pytest.approx(0.5) and rows[1]["status"] == "completed"
    (line,) = [record.getMessage() for record in caplog.records if str(bad) in record.getMessage()]
    assert line.startswith(f"skipping {bad}: has a record at byte ") and "\n" not in line
    assert [path.name for path in summary.seed_runs] == ["sweep (2 seeds)"]


@pytest.mark.parametrize("planted", [float("inf"), 1e308, -0.5, 7.0])
def test_an_accuracy_outside_0_to_1_refuses_the_runs_curves_not_the_summary(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, planted: float
) -> None:
    """An ``inf`` planted in a run's ``val/acc`` (1e308 is one in float32) ended the sweep's
    summary in an ``AttributeError`` of ``statistics`` (red team): now the run keeps its row
    without curves, and one line names its events."""
    from torch.utils.tensorboard import SummaryWriter

    sweep = write_seeded_sweep(tmp_path / "sweep", {"softmax": [0.5, 0.6, 0.7]})
    planted_run = sweep / "attention=softmax,seed=1"
    folder = planted_run / "tensorboard"
    with SummaryWriter(str(folder if folder.is_dir() else planted_run)) as writer:
        writer.add_scalar("val/acc", planted, 299)
    with caplog.at_level(logging.WARNING):
        summary = summarize([sweep])
    rows = {row["seed"]: row for row in summary.rows}
    assert sorted(rows) == [1, 2, 3]
    assert rows[1]["best_val_acc"] is None and rows[2]["best_val_acc"] == pytest.approx(0.6)
    (line,) = [m for r in caplog.records if "an accuracy is" in (m := r.getMessage())]
    assert line.startswith("skipping ") and "val/acc=" in line and "at step 299" in line
    assert [path.name for path in summary.seed_runs] == ["sweep (2 seeds)"]
