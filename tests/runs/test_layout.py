"""A run directory's layout and its one state rule (``vitattn.runs.layout``): every reader of a
run's state (the sweep continuation, a failed continuation's record, the summary, the LoRA
table) asks it, so they cannot disagree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from vitattn.analysis.lora import FinetuneRun
from vitattn.analysis.records import Run
from vitattn.runs.files import UnreadableFileError
from vitattn.runs.layout import RunDir, RunState, find_runs, finite_number, run_state


def make_run(
    path: Path, metrics: Any = None, checkpoint: bool = False, config: bool = True
) -> RunDir:
    run = RunDir(path)
    path.mkdir(parents=True)
    if config:
        run.hydra_dir.mkdir()
        run.config_file.write_text("seed: 1\n")
    if metrics is not None:
        run.metrics_file.write_text(json.dumps(metrics))
    if checkpoint:
        run.checkpoints.mkdir()
        run.last_checkpoint.write_bytes(b"")
    return run


@pytest.mark.parametrize(
    ("metrics", "checkpoint", "state"),
    [
        ({"status": "completed"}, True, RunState.COMPLETED),
        ({"status": "failed", "error": "NaN"}, True, RunState.FAILED),
        ({"status": "interrupted", "steps": 25}, True, RunState.INTERRUPTED),
        ({"status": "interrupted", "steps": 0}, False, RunState.CUT),  # nothing to resume from
        ({"val/acc": 0.5, "test/acc": 0.4}, True, RunState.COMPLETED),  # an earlier version's
        ({}, True, RunState.INTERRUPTED),
        (None, True, RunState.INTERRUPTED),
        (None, False, RunState.CUT),  # a log and nothing else
        ([], False, RunState.CUT),  # not a mapping: read as nothing
    ],
)
def test_one_rule_decides_a_runs_state(
    tmp_path: Path, metrics: Any, checkpoint: bool, state: RunState
) -> None:
    run = make_run(tmp_path / "run", metrics, checkpoint)
    (run.path / "train.log").write_text("")
    assert run.state() is state
    recorded = run.metrics()
    assert run_state(recorded, run.path) is state
    # the summary and the LoRA table say the same
    assert Run(run.path, [], {}, recorded).status == state
    assert FinetuneRun(run.path, recorded, []).completed == (
        state is RunState.COMPLETED and recorded.get("test/acc") is not None
    )


@pytest.mark.parametrize(
    ("config", "checkpoints", "state"),
    [
        (False, None, RunState.CUT),  # a lone metrics.json saying completed
        (False, "last.ckpt", RunState.INTERRUPTED),  # no config: resumable, not completed
        (True, "empty", RunState.CUT),  # a checkpoints/ folder with no checkpoint in it
        (True, "link", RunState.CUT),  # its checkpoint a link to another run's
        (True, "best.ckpt", RunState.COMPLETED),
        (True, None, RunState.COMPLETED),  # a run that saved no checkpoint
    ],
)
def test_a_completed_status_counts_only_where_the_files_agree(
    tmp_path: Path, elsewhere: Path, config: bool, checkpoints: str | None, state: RunState
) -> None:
    metrics = {"status": "completed", "test/acc": 0.5}
    run = make_run(tmp_path / "run", metrics, config=config)
    if checkpoints is not None:
        run.checkpoints.mkdir()
    if checkpoints == "link":
        (run.checkpoints / "best.ckpt").symlink_to(elsewhere / "kept.txt")
    elif checkpoints not in (None, "empty"):
        (run.checkpoints / checkpoints).write_bytes(b"weights")
    assert run.state() is state
    assert Run(run.path, [], {}, metrics).status == state  # the summary says the same


def test_a_run_that_does_not_exist_is_new(tmp_path: Path) -> None:
    assert RunDir(tmp_path / "nothing").state() is RunState.NEW
    assert RunDir.of_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt") == RunDir(
        tmp_path / "run"
    )
    assert RunDir.of_checkpoint(tmp_path / "elsewhere.ckpt") is None


def test_find_runs_in_natural_order_without_attempts_set_aside(tmp_path: Path) -> None:
    for name in ["seed=10", "seed=2", ".attempts/seed=3/1"]:
        (tmp_path / name / ".hydra").mkdir(parents=True)
        (tmp_path / name / ".hydra" / "config.yaml").write_text("{}\n")
    (tmp_path / "seed=2" / "metrics.json").write_text("{}")
    assert find_runs([tmp_path]) == [tmp_path / "seed=2", tmp_path / "seed=10"]
    assert find_runs([tmp_path], marker=("metrics.json",)) == [tmp_path / "seed=2"]
    with pytest.raises(FileNotFoundError):
        find_runs([tmp_path / "missing"])


def test_find_runs_lists_a_linked_folder_for_the_summary_to_refuse(tmp_path: Path) -> None:
    """A job folder that is a link to one outside is listed, so that the summary says it left it
    out (no search follows it: it was left out without a word); a link inside a run is that
    run's to refuse, and a sweep the user names through a link is read as the sweep."""
    sweep, outside = tmp_path / "sweep", tmp_path / "outside"
    for run in (sweep / "seed=1", outside / "seed=2"):
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "config.yaml").write_text("{}\n")
    (sweep / "seed=2").symlink_to(outside / "seed=2", target_is_directory=True)
    (sweep / "seed=1" / "attention").symlink_to(outside, target_is_directory=True)
    (sweep / "summary.md").symlink_to(outside / "seed=2" / ".hydra" / "config.yaml")
    assert find_runs([sweep]) == [sweep / "seed=1", sweep / "seed=2"]
    (tmp_path / "named").symlink_to(sweep, target_is_directory=True)
    assert find_runs([tmp_path / "named"]) == [tmp_path / "named" / n for n in ("seed=1", "seed=2")]


def test_a_run_state_reads_as_its_value_everywhere() -> None:
    """``RunState`` is ``(str, Enum)`` with its value as its text, as ``enum.StrEnum`` (Python
    3.11) would be: the project runs on 3.10, where the import of ``StrEnum`` failed."""
    state = RunState.INTERRUPTED
    assert state == "interrupted" and str(state) == f"{state}" == "interrupted"
    assert f"{state:>12}" == " interrupted"
    assert json.dumps({"status": state}) == '{"status": "interrupted"}'
    assert RunState("completed") is RunState.COMPLETED


@pytest.mark.parametrize(
    ("value", "fits"),
    [(1e40, True), (-1e40, True), (10**40, True), (1.0000001e40, False), (10**40 + 10**25, False)],
)
def test_a_metric_at_the_bound_the_message_names_is_within_it(value: float, fits: bool) -> None:
    """The refusal says "between -10^40 and 10^40": a ``metrics.json`` value written ``1e40`` is
    within it (the float 1e40 is a little above the integer 10**40, and had been refused)."""
    assert finite_number(value) is fits


def test_a_sweeps_command_is_read_from_its_multirun_yaml_as_data(tmp_path: Path) -> None:
    """Hydra's ``multirun.yaml`` gives the sweep's overrides; one of another shape, a link to a
    file outside, or a flood of overrides is one line naming it (audit: each trial of a search
    read a planted one)."""
    from vitattn.runs.layout import MULTIRUN, sweep_command_overrides

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    assert sweep_command_overrides(sweep) == []
    written = {"hydra": {"overrides": {"task": ["attention=softmax,linear", "seed=1"]}}}
    (sweep / MULTIRUN).write_text(yaml.safe_dump(written))
    assert sweep_command_overrides(sweep) == ["attention=softmax,linear", "seed=1"]
    outside = tmp_path / "outside.yaml"
    outside.write_text(yaml.safe_dump(written))
    (sweep / MULTIRUN).unlink()
    (sweep / MULTIRUN).symlink_to(outside)
    with pytest.raises(UnreadableFileError, match=r"multirun\.yaml: .*symbolic link"):
        sweep_command_overrides(sweep)
    (sweep / MULTIRUN).unlink()
    (sweep / MULTIRUN).write_text(yaml.safe_dump({"hydra": {"overrides": {"task": "seed=1"}}}))
    with pytest.raises(UnreadableFileError, match=r"holds a string as hydra\.overrides\.task"):
        sweep_command_overrides(sweep)
