"""A run's folder replaced while a command writes it: the job's own directory, or its
``checkpoints/``, swapped for a symbolic link to a folder outside while the run trains, as
someone who can write the sweep could. Links planted before a command are refused as it starts
(``test_hostile_run_files.py``); these come after, so every later write and deletion checks the
folders it goes through (:func:`vitattn.runs.files.check_confined`). On the code before, the
job wrote its checkpoints, attention maps, ``metrics.json`` and ``hparams.yaml`` into the folder
outside, deleted the lock's record and the reserve there, and the sweep exited 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from tests.support.faults import ReplaceEventFileAtStep, ReplaceFolderAtStep
from tests.support.in_process import run_in_process
from tests.support.presets import FEW_STEPS, plug
from tests.support.runners import last_line
from tests.support.trees import tree_digest

pytestmark = pytest.mark.slow

KEPT = {".vitattn.lock.json": b"H\n", ".vitattn.reserve": b"R\n", "metrics.json": b'{"k": 1}\n'}
"""A folder outside the run holding files of the names a run writes and deletes."""


def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    for name, content in KEPT.items():
        (folder / name).write_bytes(content)
    return folder


def test_a_sweeps_job_replaced_by_a_link_writes_and_deletes_nothing_outside(
    tmp_path: Path, data_dir: Path
) -> None:
    sweep, victim = tmp_path / "sweep", outside(tmp_path)
    job = sweep / "seed=1"
    quoted = f'"{job}"'  # Hydra reads the "=" of the job's name as its own
    swap = plug("swap", ReplaceFolderAtStep, run=quoted, folder=quoted, target=victim, step=2)
    result = run_in_process(
        "vitattn-train", "-m", *FEW_STEPS, "seed=1,2", *swap, f"hydra.sweep.dir={sweep}",
        data_dir=data_dir, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("vitattn-train:")]
    line = lines[-1]  # Hydra's basic sweeper adds its footer after it (docs/runs.md)
    assert line.startswith(
        f"vitattn-train: error: {job} was replaced while this command wrote in it, and is now a "
        f"symbolic link (to {victim}): vitattn wrote and deleted nothing more there ("
    ), line
    assert line.endswith("included); restore the folder, or run again elsewhere")
    assert tree_digest(victim) == {name: _sha(content) for name, content in KEPT.items()}
    assert sorted(p.name for p in victim.iterdir()) == sorted(KEPT)
    other = json.loads((sweep / "seed=2" / "metrics.json").read_text())
    assert other["status"] == "completed"  # the other job is untouched


@pytest.mark.parametrize(
    ("folder", "first", "settings"),
    [
        ("checkpoints", "step000004-", []),
        ("csv", "metrics.csv", ["logger=many_loggers"]),  # Lightning's CSV logger writes by name
    ],
)
def test_a_runs_folder_replaced_by_a_link_ends_the_run_in_one_line(
    folder: str, first: str, settings: list[str], tmp_path: Path, data_dir: Path
) -> None:
    run, victim = tmp_path / "run", outside(tmp_path)
    swap = plug("swap", ReplaceFolderAtStep, run=run, folder=run / folder, target=victim, step=2)
    result = run_in_process(
        "vitattn-train", *FEW_STEPS, *settings, *swap, f"hydra.run.dir={run}",
        data_dir=data_dir, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    said = last_line(result)
    assert said.startswith(
        f"vitattn-train: error: {run / folder} was replaced while this command wrote in it, and "
        f"is now a symbolic link (to {victim}): vitattn wrote and deleted nothing more there "
        f"({first}"
    ), said
    assert sorted(p.name for p in victim.iterdir()) == sorted(KEPT)
    metrics = json.loads((run / "metrics.json").read_text())  # the run directory is its own
    assert metrics["status"] == "failed" and "was replaced" in metrics["error"]


def test_a_link_planted_at_the_event_file_while_the_run_trains_gets_no_record(
    tmp_path: Path, data_dir: Path
) -> None:
    """TensorBoard's writer reopens its event file by name for every record it appends: on the
    code before, the run's later records went into the file the link named. The writer now
    appends through the descriptor the file was made with, so they stay in the run's file,
    moved aside, and the run completes."""
    run, victim = tmp_path / "run", outside(tmp_path) / "metrics.json"
    swap = plug("swap", ReplaceEventFileAtStep, target=victim, step=2)
    run_in_process("vitattn-train", *FEW_STEPS, *swap, f"hydra.run.dir={run}", data_dir=data_dir)
    assert victim.read_bytes() == KEPT["metrics.json"]
    (moved,) = run.glob("events.out.tfevents.*.real")
    steps = {event.step for event in EventFileLoader(str(moved)).Load() if event.summary.value}
    assert max(steps) == 8  # the records after the swap (steps 3 to 8) went on into it
    assert json.loads((run / "metrics.json").read_text())["status"] == "completed"


def _sha(content: bytes) -> str:
    import hashlib

    return hashlib.sha256(content).hexdigest()
