"""A sweep re-run into its directory continues it: completed jobs kept byte for byte, an
interrupted job resumed exactly, failed ones set aside and run again, jobs never started run;
a job directory made with other settings is refused in one line before anything runs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.support.faults import PAUSE_SECONDS, PauseAfterStep
from tests.support.in_process import refused_in_process, run_in_process
from tests.support.presets import TINY, plug, steps
from tests.support.runners import run_cli, start_cli, train_with
from tests.support.tables import markdown_tables, read_csv
from tests.support.trees import tree_digest
from vitattn.analysis.events import read_scalars
from vitattn.runs.continuation import (
    ATTEMPTS,
    kept_not_reused,
    planned_jobs,
    set_aside,
    set_failed_jobs_aside,
)
from vitattn.runs.layout import RunDir


def state(run_dir: Path) -> str:
    """What the job's directory says of it (the one rule: :meth:`RunDir.state`)."""
    return RunDir(run_dir).state()


PAUSE = plug("pause", PauseAfterStep, step=8)
STEPS = 16
SETTINGS = [*TINY, *steps(STEPS, 8), *PAUSE]
"""Checkpoints at steps 8 and 16, and in a process started by :func:`start_training` paused
steps after the first: a kill lands in between. Elsewhere the same settings do not pause."""

PAUSED = {PAUSE_SECONDS: "0.4"}


def sweep_command(sweep: Path) -> list[str]:
    return ["-m", "seed=1,2,3", *SETTINGS, f"hydra.sweep.dir={sweep}"]


def start_training(command: list[str], data_dir: Path, **environment: str) -> subprocess.Popen:
    """``vitattn-train command`` in a process group of its own, ``environment`` added to ours."""
    return start_cli("vitattn-train", *command, data_dir=data_dir, **PAUSED, **environment)


def wait_until(ready: Callable[[], bool], process: subprocess.Popen) -> None:
    """Poll ``ready()`` while ``process`` runs, then give it a second more (into the paused
    steps that follow)."""
    deadline = time.monotonic() + 300
    while not ready():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the moment never came"
        time.sleep(0.2)
    time.sleep(1.0)


def kill_when(command: list[str], ready: Callable[[], bool], data_dir: Path) -> None:
    """Run ``vitattn-train command`` and SIGKILL its whole process group a second after
    ``ready()`` holds."""
    process = start_training(command, data_dir)
    try:
        wait_until(ready, process)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
    assert process.returncode == -signal.SIGKILL


def kill_during(sweep: Path, job: str, data_dir: Path) -> None:
    """Start the sweep and SIGKILL its whole process group once ``job`` saved a checkpoint."""
    checkpoint = sweep / job / "checkpoints" / "last.ckpt"
    kill_when(sweep_command(sweep), checkpoint.is_file, data_dir)


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return torch.load(checkpoint, weights_only=True, map_location="cpu")["state_dict"]


@pytest.mark.slow
def test_a_killed_sweep_continues_where_it_stopped(tmp_path: Path, data_dir: Path) -> None:
    sweep = tmp_path / "sweep"
    kill_during(sweep, "seed=2", data_dir)
    assert state(sweep / "seed=1") == "completed"
    assert state(sweep / "seed=2") == "interrupted" and not (sweep / "seed=3").exists()
    first = tree_digest(sweep / "seed=1")

    result = run_in_process("vitattn-train", *sweep_command(sweep), data_dir=data_dir)

    assert tree_digest(sweep / "seed=1") == first  # kept byte for byte, not trained again
    losses = read_scalars(sweep / "seed=2")["train/loss"]  # as TensorBoard reads the run
    assert [step for step, _ in losses] == list(range(1, STEPS + 1))  # each step once
    straight = tmp_path / "straight"
    train_with(straight, data_dir, "seed=2", *SETTINGS)  # in this process, without pauses
    expected = weights(straight / "checkpoints" / "last.ckpt")
    resumed = weights(sweep / "seed=2" / "checkpoints" / "last.ckpt")
    assert expected.keys() == resumed.keys()
    assert all(torch.equal(expected[name], resumed[name]) for name in expected)
    assert losses == read_scalars(straight)["train/loss"]
    assert state(sweep / "seed=3") == "completed"
    assert result.stdout.count("Sweep summary") == 1
    settings, runs = markdown_tables((sweep / "summary.md").read_text())
    assert [row[1] for row in settings[1:]] == ["3"]  # one setting, its three seeds
    assert [row[0] for row in runs[1:]] == ["seed=1", "seed=2", "seed=3"]

    # the same sweep with another setting is refused before anything runs
    before = tree_digest(sweep)
    other = [arg.replace("model.depth=1", "model.depth=2") for arg in sweep_command(sweep)]
    said = refused_in_process("vitattn-train", *other, data_dir=data_dir)
    assert said.startswith(f"hydra.sweep.dir={sweep} holds seed=1, run with other settings: ")
    assert "model.depth=1 (now 2)" in said
    assert tree_digest(sweep) == before

    # a failed job is set aside, kept whole, and run again
    metrics = sweep / "seed=3" / "metrics.json"
    metrics.write_text(json.dumps({"status": "failed", "error": "RuntimeError: boom"}))
    failed = tree_digest(sweep / "seed=3")
    result = run_in_process("vitattn-train", *sweep_command(sweep), data_dir=data_dir)
    attempt = sweep / ATTEMPTS / "seed=3" / "1"
    assert f"a failed attempt is kept in {attempt}" in result.stderr
    assert tree_digest(attempt) == failed
    assert state(sweep / "seed=3") == "completed" and tree_digest(sweep / "seed=1") == first
    runs = markdown_tables((sweep / "summary.md").read_text())[1]
    assert [row[0] for row in runs[1:]] == ["seed=1", "seed=2", "seed=3"]  # attempts left out


def test_the_jobs_are_named_as_hydra_names_them(tmp_path: Path) -> None:
    exclude = "hydra.job.config.override_dirname.exclude_keys=[trainer.max_steps]"
    jobs = planned_jobs(
        ["attention=softmax,linear", "seed=1,2", "trainer.max_steps=5", exclude], tmp_path
    )
    assert [job.directory.name for job in jobs] == [
        "attention=softmax,seed=1",
        "attention=softmax,seed=2",
        "attention=linear,seed=1",
        "attention=linear,seed=2",
    ]
    assert jobs[0].overrides == ["attention=softmax", "seed=1", "trainer.max_steps=5"]


def test_each_job_state_and_a_failed_attempt_is_kept_aside(tmp_path: Path) -> None:
    job = tmp_path / "sweep" / "seed=1"
    assert state(job) == "new"
    (job / "checkpoints").mkdir(parents=True)
    (job / "train.log").write_text("started\n")
    assert state(job) == "cut"
    (job / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert state(job) == "interrupted"
    (job / "metrics.json").write_text(json.dumps({"status": "failed", "error": "boom"}))
    assert state(job) == "failed"
    digest = tree_digest(job)
    first = set_aside(job)
    assert first == tmp_path / "sweep" / ATTEMPTS / "seed=1" / "1" and not job.exists()
    assert tree_digest(first) == digest
    job.mkdir()
    assert set_aside(job).name == "2"
    (job.mkdir(), (job / "metrics.json").write_text(json.dumps({"status": "completed"})))
    assert state(job) == "cut"  # a lone metrics.json saying so is not a completed job
    (job / ".hydra").mkdir()
    (job / ".hydra" / "config.yaml").write_text("seed: 1\n")
    assert state(job) == "completed"  # its files agree


def test_a_cut_job_whose_lock_a_live_process_holds_is_not_set_aside(tmp_path: Path) -> None:
    """A cut job whose ``.vitattn.lock`` another live process holds (a cluster's job still
    running after its sweep's process was stopped, which the sweep's lock does not rule out):
    its continuation is refused in one line naming the job, and no job is moved; once that
    process ends, the job is set aside."""
    import sys

    from vitattn.runs.continuation import PlannedJob
    from vitattn.runs.layout import LOCK
    from vitattn.runs.lock import RunDirectoryInUseError

    sweep = tmp_path / "sweep"
    jobs = [PlannedJob(sweep / f"seed={seed}", [f"seed={seed}"]) for seed in (1, 2)]
    for job in jobs:
        (job.directory / "checkpoints").mkdir(parents=True)
        (job.directory / "train.log").write_text("started\n")
        assert state(job.directory) == "cut"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, filelock; lock = filelock.FileLock(sys.argv[1]); "
         "lock.acquire(); print('held', flush=True); sys.stdin.read()",
         str(jobs[1].directory / LOCK)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(RunDirectoryInUseError) as refused:
            set_failed_jobs_aside(jobs, sweep)
        assert str(refused.value).startswith(f"{jobs[1].directory} is in use by ")
        assert all(job.directory.is_dir() for job in jobs) and not (sweep / ATTEMPTS).exists()
    finally:
        holder.communicate("")
    assert [path.parent.name for path in set_failed_jobs_aside(jobs, sweep)] == [
        "seed=1",
        "seed=2",
    ]


def completed_job(job: Path, metrics: Path | None = None) -> None:
    """A folder holding what a completed job leaves (:func:`run_state`); its ``metrics.json``
    a hard link to ``metrics`` where given."""
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "config.yaml").write_text("seed: 1\n")
    if metrics is None:
        (job / "metrics.json").write_text(json.dumps({"status": "completed"}))
    else:
        os.link(metrics, job / "metrics.json")


def test_a_sweep_of_hard_links_to_one_large_file_is_not_read_for_its_kept_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The line on completed jobs kept, not reused, counts a job as a summary does: 300 planted
    folders whose ``metrics.json`` is a hard link to one 16 MB file saying ``completed`` are
    neither counted nor read (read 300 times, they were 4.8 GB read and parsed)."""
    from vitattn.runs import layout

    sweep = tmp_path / "sweep"
    completed_job(sweep / "attention=linear")
    large = tmp_path / "large.json"
    large.write_text(json.dumps({"status": "completed", "padding": "x" * ((16 << 20) - 64)}))
    for number in range(300):
        completed_job(sweep / f"planted={number}", metrics=large)
    reads: list[Path] = []

    def counted(path: Path, *args: object, **kwargs: object) -> object:
        reads.append(path)
        return read_json(path, *args, **kwargs)

    read_json = layout.read_json
    monkeypatch.setattr(layout, "read_json", counted)
    line = kept_not_reused(planned_jobs(["seed=1,2"], sweep), sweep)
    assert "holds 1 completed job (attention=linear) and none of the 2" in str(line)
    assert reads == [sweep / "attention=linear" / "metrics.json"]


def optuna_command(sweep: Path) -> list[str]:
    return [
        "hparams_search=optuna",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.sampler.n_startup_trials=3",
        *TINY,
        *steps(6, 3),
        *plug("pause", PauseAfterStep, step=1),
        f"hydra.sweep.dir={sweep}",
    ]


def trial_states(database: Path) -> list[str]:
    import sqlite3

    with sqlite3.connect(database) as study:
        return [row[0] for row in study.execute("select state from trials order by number")]


@pytest.mark.slow
def test_an_optuna_search_cut_after_two_trials_continues_to_three(
    tmp_path: Path, data_dir: Path
) -> None:
    """Killed in its third trial, the same command runs only what is missing: the cut trial
    failed, jobs numbered on, the study Optuna's own. What the study or the sweep holds is data:
    a link planted at the results file refuses the search before anything is written, and a
    trial planted outside the space is refused in one line and never launched."""
    import optuna

    sweep = tmp_path / "search"

    def third_trial_started() -> bool:
        return any(p.name.startswith("2_") for p in sweep.glob("*"))

    kill_when(optuna_command(sweep), third_trial_started, data_dir)
    first = {p.name: tree_digest(p) for p in sweep.iterdir() if p.name[:2] in ("0_", "1_")}
    assert len(first) == 2 and trial_states(sweep / "optuna.db")[:2] == ["COMPLETE"] * 2

    storage = f"sqlite:///{sweep}/optuna.db"
    planted = optuna.load_study(study_name="vitattn", storage=storage)
    planted.enqueue_trial({"optimizer.lr": 12345.0, "attention.k": 8})  # trial 3
    results = sweep / "optimization_results.yaml"
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text("kept\n")
    results.unlink(missing_ok=True)
    results.symlink_to(elsewhere)
    said = refused_in_process("vitattn-train", *optuna_command(sweep), data_dir=data_dir)
    assert said.startswith(f"{results} is a symbolic link"), said  # no link in a sweep
    assert trial_states(sweep / "optuna.db") == ["COMPLETE", "COMPLETE", "RUNNING", "WAITING"]
    assert elsewhere.read_text() == "kept\n"  # nothing written, through the link or beside it
    results.unlink()

    result = run_in_process("vitattn-train", *optuna_command(sweep), data_dir=data_dir)

    assert {name: tree_digest(sweep / name) for name in first} == first  # not written again
    states = trial_states(sweep / "optuna.db")
    assert states == ["COMPLETE", "COMPLETE", "FAIL", "FAIL", "COMPLETE"]
    # the cut trial failed, its directory kept; the planted one refused; one more to make three
    lines = (result.stdout + result.stderr).splitlines()
    refusals = [line for line in lines if "is refused" in line]
    assert len(refusals) == 1 and "trial 3 of study vitattn is refused" in refusals[0]
    assert "optimizer.lr=12345.0 is outside hydra.sweeper.params.optimizer.lr" in refusals[0]
    jobs = sorted((p for p in sweep.iterdir() if p.name[0].isdigit()), key=lambda p: p.name)
    assert [int(p.name.split("_", 1)[0]) for p in jobs] == [0, 1, 2, 4]  # numbered on
    assert state(jobs[3]) == "completed"  # the refused trial 3 launched nothing
    assert all("optimizer.lr=" in p.name and "hparams_search" not in p.name for p in jobs)
    assert "lr=12345" not in " ".join(p.name for p in jobs)
    assert "Best value" in result.stdout + result.stderr
    study = optuna.load_study(study_name=None, storage=storage)  # Optuna's own format
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert [t.user_attrs["run"] for t in complete] == [jobs[i].name for i in (0, 1, 3)]
    metrics = [json.loads((jobs[i] / "metrics.json").read_text()) for i in (0, 1, 3)]
    assert all(m["attention"] == "linformer" and m["status"] == "completed" for m in metrics)
    assert study.best_value == max(m["val/acc_best"] for m in metrics)
    assert f"best_trial: {study.best_trial.number}" in results.read_text()
    assert not results.is_symlink() and elsewhere.read_text() == "kept\n"


@pytest.mark.slow
def test_a_preempted_slurm_job_saves_at_its_step_is_requeued_and_continues(
    tmp_path: Path, data_dir: Path
) -> None:
    # A fake scontrol records the requeue; SLURM_JOB_ID makes the job a SLURM job.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scontrol.calls"
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    scontrol.chmod(0o755)
    sweep = tmp_path / "sweep"
    command = ["-m", "seed=7", *SETTINGS, f"hydra.sweep.dir={sweep}"]
    job = sweep / "0"  # a one-job sweep: nothing differs, the job is numbered
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    process = start_training(command, data_dir, PATH=path, SLURM_JOB_ID="4242")
    wait_until((job / "checkpoints" / "last.ckpt").is_file, process)  # into steps after 8
    process.send_signal(signal.SIGUSR2)  # submitit's pre-emption warning
    _, stderr = process.communicate(timeout=120)
    assert "SIGUSR2: pre-empted; saving checkpoints/last.ckpt after this step" in stderr
    assert calls.read_text().split() == ["requeue", "4242"]  # the requeue, observed
    metrics = json.loads((job / "metrics.json").read_text())
    assert metrics["status"] == "interrupted"
    stopped = torch.load(job / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
    assert 8 < stopped < STEPS and stopped == metrics["steps"]  # saved at its step, not step 8

    run_in_process("vitattn-train", *command, data_dir=data_dir)  # the requeued job runs again
    losses = read_scalars(job)["train/loss"]
    assert [step for step, _ in losses] == list(range(1, STEPS + 1))
    assert state(job) == "completed"


@pytest.mark.slow
def test_seeds_added_to_a_finished_sweep_run_only_the_new_jobs(
    tmp_path: Path, data_dir: Path
) -> None:
    """The same command with more seeds and the same ``hydra.sweep.dir`` runs the new seeds'
    jobs alone, leaves the finished ones byte for byte, and summarizes all of them; an
    undecided verdict says that this is how to add seeds."""
    sweep = tmp_path / "sweep"
    tiny = [*TINY, *steps(4, 4)]

    def command(seeds: str) -> list[str]:
        sweep_dir = f"hydra.sweep.dir={sweep}"
        return ["-m", "attention=softmax,linear", f"seed={seeds}", *tiny, sweep_dir]

    run_in_process("vitattn-train", *command("1,2"), data_dir=data_dir)
    finished = {job.name: tree_digest(job) for job in sweep.iterdir() if ",seed=" in job.name}
    jobs = [f"attention={a},seed={s}" for a in ("linear", "softmax") for s in (1, 2)]
    assert sorted(finished) == jobs

    run_in_process("vitattn-train", *command("1,2,3"), data_dir=data_dir)

    assert {name: tree_digest(sweep / name) for name in finished} == finished
    for attention in ("linear", "softmax"):
        assert state(sweep / f"attention={attention},seed=3") == "completed"
    settings, runs = markdown_tables((sweep / "summary.md").read_text())
    assert [row[1] for row in settings[1:]] == ["3", "3"]  # each setting: its three seeds
    assert len(runs) == 1 + 6
    records = {row["setting"]: row for row in read_csv(sweep / "settings.csv")}
    assert records["attention=linear"]["test_acc_diff_test"] == "paired t"
    assert records["attention=linear"]["test_acc_diff_sizes"] == "3"
    assert (sweep / "attention=linear (3 seeds)").is_dir()  # TensorBoard's seed means, redone
    assert not (sweep / "attention=linear (2 seeds)").exists()


@pytest.mark.slow
def test_a_sweep_that_names_its_jobs_anew_says_its_completed_jobs_are_kept_not_reused(
    tmp_path: Path, data_dir: Path
) -> None:
    """A sweep of one seed given a second names every job anew (its folder is named by the
    settings it varies), so none of its completed jobs is reused: the re-run says so in one line
    before it trains, and leaves them as they were. A re-run that reuses its jobs says nothing
    of it, and a link among the folders is not counted."""
    sweep = tmp_path / "sweep"

    def command(seeds: str) -> list[str]:
        settings = [*TINY, *steps(1, 1), "test=false", f"hydra.sweep.dir={sweep}"]
        return ["-m", "attention=softmax,linear", f"seed={seeds}", *settings]

    first = run_in_process("vitattn-train", *command("1"), data_dir=data_dir)
    assert "not reused" not in first.stderr
    kept = {name: tree_digest(sweep / name) for name in ("attention=linear", "attention=softmax")}

    anew = run_in_process("vitattn-train", *command("1,2"), data_dir=data_dir)

    assert (
        f"vitattn-train: hydra.sweep.dir={sweep} holds 2 completed jobs (attention=linear, "
        "attention=softmax) and none of the 4 this sweep runs: they are kept, not reused; "
    ) in anew.stderr
    assert {name: tree_digest(sweep / name) for name in kept} == kept
    assert state(sweep / "attention=linear,seed=2") == "completed"
    again = run_in_process("vitattn-train", *command("1,2"), data_dir=data_dir)
    assert "not reused" not in again.stderr

    planned = ["attention=softmax,linear", "seed=1,2"]
    copied, linked = tmp_path / "copied", tmp_path / "linked"
    shutil.copytree(sweep / "attention=linear", copied / "attention=linear")
    line = kept_not_reused(planned_jobs(planned, copied), copied)
    assert "holds 1 completed job (attention=linear)" in str(line)
    linked.mkdir()
    (linked / "attention=linear").symlink_to(sweep / "attention=linear")
    assert kept_not_reused(planned_jobs(planned, linked), linked) is None


@pytest.mark.slow
def test_a_search_settles_only_its_own_trials_of_a_shared_storage(
    tmp_path: Path, data_dir: Path
) -> None:
    """Two sweep directories share one storage: a search marked failed every trial it found
    running, one another directory's live process was training too, whose end Optuna then
    refused to be told. Only a trial this directory started (its ``sweep_dir``) is cut off."""
    import optuna

    shared = f"sqlite:///{tmp_path}/shared.db"
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"

    def search(sweep: Path, n_trials: int) -> list[str]:
        return [
            "hparams_search=optuna", f"hydra.sweeper.storage={shared}",
            f"hydra.sweeper.n_trials={n_trials}", *TINY, *steps(2, 2), "test=false",
            f"hydra.sweep.dir={sweep}",
        ]  # fmt: skip

    run_in_process("vitattn-train", *search(theirs, 1), data_dir=data_dir)
    study = optuna.load_study(study_name="vitattn", storage=shared)
    live = study.ask()  # trial 1: the other directory's process, training its next trial
    live.set_user_attr("sweep_dir", str(theirs))
    cut = study.ask()  # trial 2: ours, its process killed
    cut.set_user_attr("sweep_dir", str(ours))

    result = run_in_process("vitattn-train", *search(ours, 2), data_dir=data_dir)

    study = optuna.load_study(study_name="vitattn", storage=shared)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "RUNNING", "FAIL", "COMPLETE"]
    assert [study.trials[i].user_attrs["sweep_dir"] for i in (0, 3)] == [str(theirs), str(ours)]
    said = result.stdout + result.stderr
    assert "trial 2 was cut off: marked failed" in said
    assert f"trial 1 is running for another search ({theirs}): left as it is" in said
    study.tell(live, 0.5)  # the other process tells its trial's end, as it would
    assert study.trials[1].state.name == "COMPLETE"


@pytest.mark.slow
def test_a_search_killed_between_two_asks_of_a_batch_settles_the_trials_it_attributed(
    tmp_path: Path, data_dir: Path
) -> None:
    """A search of ``n_jobs=2`` on a shared storage, killed as it asked for its batch's second
    trial: it asked for both before recording its directory on either, so trial 0, whose ask
    had returned, was left running for no search, at every continuation, for good. Each trial
    now records its directory as its ask returns: trial 0 is this search's, cut off, and marked
    failed. Trial 1 was killed inside its ask, before any caller could record anything: it is
    left running, as a trial of no directory on a shared storage is."""
    import optuna

    shared = f"sqlite:///{tmp_path}/shared.db"
    ours = tmp_path / "ours"
    search = [
        "hparams_search=optuna", f"hydra.sweeper.storage={shared}", "hydra.sweeper.n_trials=2",
        *TINY, *steps(2, 2), "test=false", f"hydra.sweep.dir={ours}",
    ]  # fmt: skip
    killed = [
        "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.sampler._target_=tests.support.samplers.KillAtAsk",
        "+hydra.sweeper.sampler.number=1",
    ]
    stopped = run_cli("vitattn-train", *search, *killed, data_dir=data_dir, check=False)
    assert stopped.returncode == -signal.SIGKILL, stopped.stderr[-2000:]
    study = optuna.load_study(study_name="vitattn", storage=shared)
    assert [t.state.name for t in study.trials] == ["RUNNING", "RUNNING"]
    assert study.trials[0].user_attrs == {"sweep_dir": str(ours)}
    assert study.trials[1].user_attrs == {}

    result = run_in_process("vitattn-train", *search, data_dir=data_dir)

    study = optuna.load_study(study_name="vitattn", storage=shared)
    assert [t.state.name for t in study.trials] == ["FAIL", "RUNNING", "COMPLETE", "COMPLETE"]
    said = result.stdout + result.stderr
    assert "trial 0 was cut off: marked failed" in said
    assert "trial 1 is running for another search (no directory): left as it is" in said


@pytest.mark.slow
def test_a_config_dir_run_resumes_and_its_sweep_rerun_is_checked(
    tmp_path: Path, data_dir: Path
) -> None:
    """With ``--config-dir`` (review): a run that chose an experiment of the folder could not
    resume ("not a choice of experiment ... may only choose among configs/experiment/"), and a
    sweep re-run with other settings kept its jobs trained with the old ones, unchecked."""
    mine = tmp_path / "mine"
    (mine / "experiment").mkdir(parents=True)
    (mine / "experiment" / "small.yaml").write_text("# @package _global_\ntest: false\n")
    with_dir = ["-cd", str(mine), "experiment=small", *TINY, *steps(2, 2)]
    run = tmp_path / "run"
    run_in_process("vitattn-train", *with_dir, f"hydra.run.dir={run}", data_dir=data_dir)
    resumed = ["-cd", str(mine), "resume=true", "trainer.max_steps=4", f"hydra.run.dir={run}"]
    run_in_process("vitattn-train", *resumed, data_dir=data_dir)
    assert json.loads((run / "metrics.json").read_text())["steps"] == 4
    # the flag after the overrides, and a primary config of the folder (-cn): review
    (mine / "my_train.yaml").write_text("defaults:\n  - train\n  - _self_\nnote: hello\n")
    own = tmp_path / "own"
    with_name = ["-cd", str(mine), "-cn", "my_train", "note=bye", *TINY, *steps(2, 2)]
    run_in_process("vitattn-train", *with_name, f"hydra.run.dir={own}", data_dir=data_dir)
    again = ["resume=true", "trainer.max_steps=3", f"hydra.run.dir={own}"]
    run_in_process("vitattn-train", *again, "-cd", str(mine), "-cn", "my_train", data_dir=data_dir)
    assert json.loads((own / "metrics.json").read_text())["steps"] == 3

    sweep = tmp_path / "sweep"
    command = ["-m", *with_dir, "seed=1,2", f"hydra.sweep.dir={sweep}"]
    run_in_process("vitattn-train", *command, data_dir=data_dir)
    before = tree_digest(sweep)
    other = [arg.replace("model.depth=1", "model.depth=2") for arg in command]
    said = refused_in_process("vitattn-train", *other, data_dir=data_dir)
    assert said.startswith(f"hydra.sweep.dir={sweep} holds seed=1, run with other settings: ")
    assert tree_digest(sweep) == before
