"""A run directory is data (issue 35): a symbolic link planted where vitattn writes is never
written through, and a malformed run file is one line, through the real console scripts.

Each test copies one real run of ``vitattn-train`` (trained once for the module), plants the
real hostile file (a symbolic link to a file outside the run whose bytes must stay the same, a
malformed JSON or YAML file), runs the console script, and checks: the exit status, one last
line ``<program>: error: ...`` that names the file, no traceback, and nothing outside the run
changed."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import lightning as L
import pytest

from tests.support.faults import CrashAtStep
from tests.support.in_process import refused_in_process, run_in_process
from tests.support.presets import plug
from tests.support.runners import refusal_message, refused, run_cli
from tests.support.trees import KEPT, copy_run, sweep_job, tree_digest
from vitattn.utils.config import PROJECT_ROOT

pytestmark = pytest.mark.slow

RESUME = ["resume=true", "trainer.max_steps=12"]
"""Four more steps of the trained run (it completed at step 8)."""


class PlantLinkAtStep(L.Callback):
    """Plant a symbolic link at ``link`` pointing to ``target`` at global step ``step``: a link
    that appears while the run is writing, after every check before it started."""

    def __init__(self, step: int, link: str, target: str) -> None:
        self.step, self.link, self.target = step, Path(link), target

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            self.link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(self.target, self.link)


@pytest.fixture
def run(tmp_path: Path, tiny_run: Path) -> Path:
    """A copy of the module's tiny run, unlocked."""
    return copy_run(tiny_run, tmp_path / "runs" / "run")


def plant(link: Path, target: Path) -> Path:
    """A real symbolic link at ``link`` (whatever was there removed) to ``target``."""
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.is_file():
        link.unlink()
    os.symlink(target, link)
    return link


def edit_metrics(run: Path, text: str) -> Path:
    path = run / "metrics.json"
    path.write_text(text)
    return path


# --- a link planted before a command ---------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "train.log",
        ".metrics.json.partial",
        ".failed_attempts.json.partial",
        ".vitattn.lock",
        ".vitattn.lock.json",
        "checkpoints/.last.ckpt.partial",
        ".hydra/config.yaml",
    ],
)
def test_a_link_planted_in_a_run_is_refused_before_it_resumes(
    run: Path, elsewhere: Path, name: str, data_dir: Path
) -> None:
    link = plant(run / name, elsewhere / "kept.txt")
    outside, inside = tree_digest(elsewhere), tree_digest(run)
    said = refused_in_process("vitattn-train", *RESUME, f"hydra.run.dir={run}", data_dir=data_dir)
    assert said.startswith(f"{link} is a symbolic link (to {elsewhere / 'kept.txt'}): "), said
    assert said.endswith("remove it and run again")
    assert tree_digest(elsewhere) == outside and (elsewhere / "kept.txt").read_bytes() == KEPT
    assert tree_digest(run) == inside and link.is_symlink()


@pytest.mark.parametrize("name", ["checkpoints/.x.partial", ".metrics.json.partial"])
def test_a_folder_at_a_partial_files_name_is_refused_before_it_resumes(
    run: Path, name: str, data_dir: Path
) -> None:
    """A resume removes the partial files a killed run left: a folder planted at such a name
    ended it in ``IsADirectoryError`` with a traceback, after it had rewritten the run's
    recorded config and overrides, recorded a failed attempt and begun an event file (found by
    a red-team pass)."""
    (run / name).mkdir()
    inside = tree_digest(run)
    said = refused_in_process("vitattn-train", *RESUME, f"hydra.run.dir={run}", data_dir=data_dir)
    assert said == (
        f"{run / name} is not a regular file (a folder): vitattn writes its run files itself, "
        "never through a link, and wrote nothing there: remove it and run again"
    )
    assert tree_digest(run) == inside


def test_a_linked_log_is_refused_by_a_real_process(
    run: Path, elsewhere: Path, data_dir: Path
) -> None:
    link = plant(run / "train.log", elsewhere / "kept.txt")
    said = refused("vitattn-train", *RESUME, f"hydra.run.dir={run}", data_dir=data_dir)
    assert said.startswith(f"{link} is a symbolic link")
    assert (elsewhere / "kept.txt").read_bytes() == KEPT


def test_a_log_linked_after_the_checks_is_refused_by_the_task(
    run: Path, elsewhere: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The link appears after the command line's checks, before Hydra opens the log: the log
    handler opens nothing through it, and the task ends the run in one line."""
    from vitattn.cli import console as cli

    link, hold = run / "train.log", cli.hold_run_directory

    def hold_then_plant(directory: Path, program: str) -> None:
        hold(directory, program)
        plant(link, elsewhere / "kept.txt")

    monkeypatch.setattr(cli, "hold_run_directory", hold_then_plant)
    result = run_in_process(
        "vitattn-train", *RESUME, f"hydra.run.dir={run}", data_dir=data_dir, check=False
    )
    said = refusal_message("vitattn-train", result)
    assert said.startswith(f"{link} is a symbolic link (to {elsewhere / 'kept.txt'}): ")
    assert (elsewhere / "kept.txt").read_bytes() == KEPT
    assert json.loads((run / "metrics.json").read_text())["steps"] == 8  # nothing trained


# --- a link planted while a run writes -------------------------------------------------------


@pytest.mark.parametrize("name", [".metrics.json.partial", "checkpoints/.last.ckpt.partial"])
def test_a_link_planted_while_a_run_writes_is_refused_and_the_run_kept(
    run: Path, elsewhere: Path, name: str, data_dir: Path
) -> None:
    link = run / name
    planter = [
        f"+callbacks.plant._target_={__name__}.PlantLinkAtStep",
        "+callbacks.plant.step=10",
        f"+callbacks.plant.link={link}",
        f"+callbacks.plant.target={elsewhere / 'kept.txt'}",
    ]
    finished = (run / "metrics.json").read_bytes()
    outside = tree_digest(elsewhere)
    result = run_in_process(
        "vitattn-train", *RESUME, *planter, f"hydra.run.dir={run}", data_dir=data_dir, check=False
    )
    said = refusal_message("vitattn-train", result)
    assert said.startswith(f"{link} is a symbolic link"), said
    assert tree_digest(elsewhere) == outside
    assert (run / "checkpoints").is_dir() and (run / ".hydra").is_dir()  # the run is kept
    assert (run / "metrics.json").read_bytes() == finished  # its results stand
    (attempt,) = json.loads((run / "failed_attempts.json").read_text())
    assert attempt["error"] == said  # the failure is recorded beside them


# --- malformed run files -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "problem"),
    [
        (None, "holds a list where a mapping belongs"),
        ("1e999", '"steps" is Infinity, not a finite number'),
        ("NaN", '"steps" is NaN, not a finite number'),
    ],
)
def test_a_malformed_metrics_file_is_one_line_on_resume(
    run: Path, steps: str | None, problem: str, data_dir: Path
) -> None:
    if steps is None:
        path = edit_metrics(run, "[]")
    else:
        metrics = json.loads((run / "metrics.json").read_text())
        text = json.dumps({**metrics, "steps": "STEPS"}).replace('"STEPS"', steps)
        path = edit_metrics(run, text)
    inside = tree_digest(run)
    said = refused_in_process("vitattn-train", *RESUME, f"hydra.run.dir={run}", data_dir=data_dir)
    assert said.startswith(f"{path}: {problem}"), said
    assert tree_digest(run) == inside


@pytest.mark.parametrize("content", ["[{", '{"not": "a list"}'])
def test_an_unreadable_attempts_file_is_set_aside_and_the_failure_recorded(
    run: Path, elsewhere: Path, content: str, data_dir: Path
) -> None:
    attempts = run / "failed_attempts.json"
    attempts.write_text(content)
    finished = (run / "metrics.json").read_bytes()
    outside = tree_digest(elsewhere)
    crash = plug("crash", CrashAtStep, step=10)
    result = run_in_process(
        "vitattn-train", *RESUME, *crash, f"hydra.run.dir={run}", data_dir=data_dir, check=False
    )
    said = refusal_message("vitattn-train", result)
    assert said.startswith("unexpected RuntimeError: boom at step 10")  # the real failure
    (recorded,) = json.loads(attempts.read_text())
    assert recorded["error"] == "RuntimeError: boom at step 10"
    aside = run / "failed_attempts.json.unreadable-1"
    assert aside.read_text() == content
    assert f"{attempts}: " in result.stdout + result.stderr  # a warning names the file
    assert (run / "metrics.json").read_bytes() == finished
    assert tree_digest(elsewhere) == outside


def test_a_linked_attempts_file_is_refused_before_the_resume(
    run: Path, elsewhere: Path, data_dir: Path
) -> None:
    """A run holds no link (issue 43): a linked ``failed_attempts.json`` is refused before
    anything runs; one planted while the run writes is set aside unread
    (``tests/runs/test_run_files.py``)."""
    (elsewhere / "list.json").write_text('[{"secret": "of another file"}]')
    attempts = plant(run / "failed_attempts.json", elsewhere / "list.json")
    outside, inside = tree_digest(elsewhere), tree_digest(run)
    said = refused_in_process("vitattn-train", *RESUME, f"hydra.run.dir={run}", data_dir=data_dir)
    assert said.startswith(f"{attempts} is a symbolic link (to {elsewhere / 'list.json'}): ")
    assert tree_digest(elsewhere) == outside and tree_digest(run) == inside


# --- a sweep continuation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "name"),
    [
        ("interrupted", "train.log"),
        ("completed", "train.log"),
        ("failed", ".metrics.json.partial"),
        ("failed", "../.attempts"),
        ("failed", "../.attempts/{job}"),
    ],
)
def test_a_link_planted_in_a_sweep_is_refused_before_any_job_runs(
    run: Path, elsewhere: Path, status: str, name: str, data_dir: Path
) -> None:
    job, command = sweep_job(run, status)
    target = elsewhere if ".attempts" in name else elsewhere / "kept.txt"
    link = plant((job / name.format(job=job.name)).resolve(strict=False), target)
    outside, sweep = tree_digest(elsewhere), tree_digest(job.parent)
    said = refused_in_process("vitattn-train", *command, data_dir=data_dir)
    assert said.startswith(f"{link} is a symbolic link (to {target}): "), said
    assert tree_digest(elsewhere) == outside and sorted(elsewhere.iterdir()) == [
        elsewhere / "kept.txt"
    ]
    assert tree_digest(job.parent) == sweep  # the failed job is not moved, nothing runs


def refused_sweep_untouched(job: Path, command: list[str], data_dir: Path) -> str:
    """The one-line refusal of the sweep ``command`` continuing ``job``'s sweep, which it leaves
    as it was: nothing moved, nothing run."""
    sweep = tree_digest(job.parent)
    said = refused_in_process("vitattn-train", *command, data_dir=data_dir)
    assert tree_digest(job.parent) == sweep
    return said


@pytest.mark.parametrize("name", [".attempts", ".attempts/{job}"])
def test_a_file_where_a_failed_job_is_set_aside_is_one_line(
    run: Path, name: str, data_dir: Path
) -> None:
    """A regular file at ``.attempts`` or ``.attempts/<job>`` ended the continuation in
    ``NotADirectoryError`` or ``FileExistsError`` tracebacks (found by a red-team pass)."""
    job, command = sweep_job(run, "failed")
    planted = job.parent / name.format(job=job.name)
    planted.parent.mkdir(exist_ok=True)
    planted.write_text("not a folder\n")
    assert refused_sweep_untouched(job, command, data_dir) == (
        f"{planted} is not a folder: vitattn sets a failed job aside in .attempts/<job>/<attempt> "
        "of its sweep and wrote nothing there: move it away"
    )


def test_a_folder_at_an_interrupted_jobs_lock_is_one_line(run: Path, data_dir: Path) -> None:
    """A folder at a resumed job's ``.vitattn.lock`` ended the job in filelock's
    ``IsADirectoryError`` traceback, its failure unrecorded (found by a red-team pass)."""
    job, command = sweep_job(run, "interrupted")
    (job / ".vitattn.lock").mkdir()
    result = run_in_process("vitattn-train", *command, data_dir=data_dir, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    said = f"vitattn-train: error: {job}/.vitattn.lock is not a regular file (a folder): "
    assert said in result.stderr
    assert (job / ".vitattn.lock").is_dir()


@pytest.mark.parametrize(
    ("where", "kind"),
    [("the job", "a folder"), ("its .hydra", "a folder"), ("multirun.yaml", "a file")],
)
def test_the_wrong_kind_where_hydra_writes_is_one_line(
    run: Path, where: str, kind: str, data_dir: Path
) -> None:
    """A file at a job's name or at its ``.hydra``, a folder at ``multirun.yaml``: Hydra's
    ``FileExistsError`` or ``IsADirectoryError`` in a traceback (found by a red-team pass)."""
    job, command = sweep_job(run, "completed")
    planted = {
        "the job": job,
        "its .hydra": job / ".hydra",
        "multirun.yaml": job.parent / "multirun.yaml",
    }[where]
    if planted.is_dir():
        shutil.rmtree(planted)
    if kind == "a file":
        planted.mkdir()
    else:
        planted.write_text("planted\n")
    assert refused_sweep_untouched(job, command, data_dir) == (
        f"{planted} is not {kind}, where Hydra writes {kind} for the sweep, and nothing was "
        "written there: move it away"
    )


def test_an_attempt_numbered_with_255_digits_is_no_attempt(run: Path, data_dir: Path) -> None:
    """A planted attempt folder of 255 digits made the next number 256 digits long: an
    ``OSError: File name too long`` traceback, and a sweep that could never continue. Only
    numbers of up to nine digits count: the failed job is set aside as attempt 1 and runs."""
    job, command = sweep_job(run, "failed")
    planted = job.parent / ".attempts" / job.name / ("9" * 255)
    planted.mkdir(parents=True)
    run_in_process("vitattn-train", *command, data_dir=data_dir)
    assert planted.is_dir() and (planted.parent / "1" / "metrics.json").is_file()
    assert json.loads((job / "metrics.json").read_text())["status"] == "completed"


@pytest.mark.parametrize(
    ("file", "content", "problem"),
    [
        ("metrics.json", "[]", "holds a list where a mapping belongs"),
        (".hydra/config.yaml", "model: [", "is not valid YAML at line 2, column 1: "),
        (".hydra/config.yaml", "- a list\n", "holds a list where a mapping belongs"),
    ],
)
def test_a_malformed_file_in_a_sweep_is_one_line(
    run: Path, file: str, content: str, problem: str, data_dir: Path
) -> None:
    job, command = sweep_job(run, "completed")
    (job / file).write_text(content)
    said = refused_sweep_untouched(job, command, data_dir)
    assert said.startswith(f"{job / file}: {problem}"), said


# --- plot_curves.py ------------------------------------------------------------------------------


def test_plot_curves_shows_a_malformed_run_as_unreadable(
    run: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from vitattn.analysis.summary import main

    runs = run.parent
    broken = {}
    for name, file, content in [
        ("list", "metrics.json", "[]"),
        ("yaml", ".hydra/config.yaml", "model: ["),
    ]:
        shutil.copytree(run, runs / name)
        (runs / name / file).write_text(content)
        broken[name] = runs / name / file
    shutil.copytree(run, runs / "infinite")
    metrics = json.loads((run / "metrics.json").read_text())
    text = json.dumps({**metrics, "steps": "STEPS"}).replace('"STEPS"', "1e999")
    (runs / "infinite" / "metrics.json").write_text(text)
    broken["infinite"] = runs / "infinite" / "metrics.json"  # vitattn writes infinity as null

    result = run_cli(
        "python", str(PROJECT_ROOT / "scripts" / "plot_curves.py"), str(runs), data_dir=data_dir
    )
    assert "Traceback" not in result.stderr
    for name, path in broken.items():
        (line,) = [line for line in result.stderr.splitlines() if f"skipping {runs / name}" in line]
        assert f": {path}: " in line

    with pytest.raises(SystemExit) as exited:  # nothing readable: one line
        main([str(runs / "list")])
    assert exited.value.code == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("plot_curves.py: error: no readable run directories")


def test_the_lora_table_shows_a_malformed_run_as_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from vitattn.analysis.lora import main

    sweep = tmp_path / "sweep"
    (sweep / "rank=4").mkdir(parents=True)
    (sweep / "rank=4" / "metrics.json").write_text("[]")
    (sweep / "rank=8" / ".hydra").mkdir(parents=True)
    (sweep / "rank=8" / "metrics.json").write_text('{"status": "completed", "test/acc": 0.5}')
    (sweep / "rank=8" / ".hydra" / "overrides.yaml").write_text("- [lora.rank=8\n")
    (sweep / "rank=16").mkdir()  # a rank that is not a number: left out, no traceback
    (sweep / "rank=16" / "metrics.json").write_text('{"lora/rank": "x", "test/acc": 0.5}')
    with pytest.raises(SystemExit) as ended:  # no run completed: no table, one line
        main([str(sweep)])
    assert ended.value.code == 1
    shown = capsys.readouterr().err
    assert shown.splitlines()[-1].startswith("lora_table.py: error: no completed ")
    for name, file, problem in [
        ("rank=4", "metrics.json", "holds a list where a mapping belongs"),
        ("rank=8", ".hydra/overrides.yaml", "is not valid YAML"),
    ]:
        assert f"Failed: {name} (rank=None, shift=None): {sweep / name / file}: {problem}" in shown
