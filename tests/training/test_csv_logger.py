"""The CSV logger counts steps as the TensorBoard curves do, and that of a resumed run keeps the
rows logged before its checkpoint (Lightning's writer deletes ``metrics.csv`` as it starts), and
drops those a killed run logged past it."""

from __future__ import annotations

import csv
import logging
import os
from pathlib import Path

import pytest

from tests.support.in_process import run_in_process
from tests.support.presets import TINY, steps
from tests.support.runners import run_cli
from vitattn.training.logger import rows_before

TIME_COLUMNS = ("images_per_sec", "seconds")
"""Columns of wall-clock measures, which differ between any two runs."""


def rows(run: Path) -> list[dict[str, str]]:
    with (run / "csv" / "metrics.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def comparable(table: list[dict[str, str]]) -> list[dict[str, str]]:
    """Each row's values logged (empty cells and wall-clock measures left out)."""
    return [
        {k: v for k, v in row.items() if v and not any(t in k for t in TIME_COLUMNS)}
        for row in table
    ]


@pytest.mark.slow
def test_a_resumed_run_keeps_its_earlier_rows(tmp_path: Path, data_dir: Path) -> None:
    """Twelve steps stopped by SIGTERM after step 6, then resumed: the same rows as twelve
    steps straight. On the code before, the resumed file held only the rows from step 6 on
    (Lightning's writer deleted it as the resume started)."""
    logged = [*TINY, *steps(12, 4), "logger=many_loggers", "trainer.log_every_n_steps=2"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run_in_process("vitattn-train", *logged, f"hydra.run.dir={straight}", data_dir=data_dir)
    fault = [
        "+callbacks.fault._target_=tests.support.faults.SigtermAtStep",
        "+callbacks.fault.step=6",
    ]
    stopped = run_cli("vitattn-train", *logged, *fault, f"hydra.run.dir={resumed}",
                      data_dir=data_dir, check=False)  # fmt: skip
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    assert {row["step"] for row in rows(resumed)} <= {"2", "4", "6"}
    run_in_process("vitattn-train", "resume=true", f"hydra.run.dir={resumed}", "~callbacks.fault",
                   data_dir=data_dir)  # fmt: skip
    expected = comparable(rows(straight))
    assert {row["step"] for row in expected} == {"2", "4", "6", "8", "10", "12"}
    assert comparable(rows(resumed)) == expected


def test_the_csv_counts_steps_as_tensorboards_curves_do(tmp_path: Path, data_dir: Path) -> None:
    """Each tag's steps in ``metrics.csv`` are those TensorBoard's accumulator reads from the
    run's events, and the test's row is at the last step. On the code before, every row but
    the test's was one step behind (Lightning's count before the step), the test's one past
    the last training row."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logged = [*TINY, *steps(6, 3), "logger=many_loggers", "trainer.log_every_n_steps=2"]
    run_in_process("vitattn-train", *logged, f"hydra.run.dir={tmp_path}", data_dir=data_dir)
    table = rows(tmp_path)
    accumulator = EventAccumulator(str(tmp_path))
    accumulator.Reload()
    for tag in ("train/loss", "val/acc"):
        in_csv = [int(row["step"]) for row in table if row.get(tag)]
        assert in_csv == [event.step for event in accumulator.Scalars(tag)], tag
    assert [int(row["step"]) for row in table if row.get("test/acc")] == [6]


def write_rows(path: Path, steps_logged: range) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["epoch,step,train/loss"] + [f"0,{step},{step / 10}" for step in steps_logged]
    path.write_text("\n".join(lines) + "\n")


def test_the_rows_before_the_checkpoint_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "csv" / "metrics.csv"
    write_rows(path, range(10))
    columns, kept = rows_before(path, 6)
    assert columns == ["epoch", "step", "train/loss"]
    assert kept == ["epoch,step,train/loss", *(f"0,{step},{step / 10}" for step in range(6))]
    assert rows_before(tmp_path / "none.csv", 6) is None


@pytest.mark.parametrize(
    "kind",
    [
        "a step as text",
        "a row wider than its header",
        "a row without a step",
        "a link",
        "20,001 columns",
        "10,000 columns and 300 short rows",
    ],
)
def test_a_file_not_of_such_rows_is_set_aside_named(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "csv" / "metrics.csv"
    if kind == "a link":
        path.parent.mkdir()
        (tmp_path / "kept.txt").write_text("kept\n")
        os.symlink(tmp_path / "kept.txt", path)
    elif kind == "10,000 columns and 300 short rows":  # 3 million dictionary entries to Lightning
        path.parent.mkdir()
        header = "step," + ",".join(f"c{i}" for i in range(9_999))
        path.write_text(header + "\n" + "0\n" * 300)
    elif kind == "20,001 columns":
        path.parent.mkdir()
        header = "step," + ",".join(f"c{i}" for i in range(20_000))
        path.write_text(header + "\n" + ("1" + "," * 20_000 + "\n") * 400)
    else:
        write_rows(path, range(3))
        extra = {"a step as text": "0,x,1\n", "a row without a step": "0\n"}.get(kind, "0,1,2,3\n")
        path.write_text(path.read_text() + extra)
    before = path.read_bytes()
    with caplog.at_level(logging.WARNING):
        assert rows_before(path, 6) is None
    aside = path.with_name("metrics.csv.unreadable-1")
    assert not path.exists() and not path.is_symlink()
    assert aside.read_bytes() == before
    assert f"{path} could not be carried over" in caplog.text
    assert (tmp_path / "kept.txt").exists() or kind != "a link"
