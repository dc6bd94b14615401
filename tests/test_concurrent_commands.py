"""Two commands at once on the same sweep: the second is refused in one line naming the holder,
and changes nothing the first is writing. Each test holds the first command at a known step by
an event (:class:`tests.support.faults.WaitAtStep` waits for a file), starts the second as a
process of its own, then lets the first go on and checks how it ends."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.faults import WAIT_FOR, WaitAtStep
from tests.support.presets import TINY, plug, steps
from tests.support.runners import last_line, run_cli, start_cli
from tests.support.tables import read_csv
from vitattn.runs.continuation import ATTEMPTS
from vitattn.runs.layout import RunDir

pytestmark = pytest.mark.slow

MOST_WAITED = 300.0
"""Seconds a test waits for a command to reach its step or to end before it fails."""


def start(command: list[str], data_dir: Path, release: Path) -> subprocess.Popen:
    """``vitattn-train command`` in a process group of its own; its :class:`WaitAtStep` waits
    for ``release``."""
    return start_cli("vitattn-train", *command, data_dir=data_dir, **{WAIT_FOR: str(release)})


def wait_for(path: Path, process: subprocess.Popen) -> None:
    """Until ``path`` exists, while ``process`` runs; a bounded wait that fails the test."""
    import time

    deadline = time.monotonic() + MOST_WAITED
    while not path.exists():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def let_go(process: subprocess.Popen, release: Path) -> tuple[int, str]:
    """Release ``process`` and wait for it to end (killed, and the test failed, past
    :data:`MOST_WAITED`); its exit status and stderr."""
    release.touch()
    try:
        _, err = process.communicate(timeout=MOST_WAITED)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail("the first command never ended once released")
    return process.returncode, err


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()


def the_sweep(log_dir: Path) -> Path:
    """The one sweep directory Hydra named under ``paths.log_dir``."""
    [sweep] = (log_dir / "train" / "multiruns").iterdir()
    return sweep


def continue_while_it_runs(
    command: list[str], sweep: Path, first: subprocess.Popen, data_dir: Path
) -> None:
    """The same ``command`` into ``sweep`` (``hydra.sweep.dir``) while ``first`` runs there: it
    is refused, its last line naming ``first`` as the sweep's holder."""
    second = run_cli(
        "vitattn-train", *command, f"hydra.sweep.dir={sweep}", data_dir=data_dir, check=False
    )
    assert second.returncode == 1, second.stderr[-2000:]
    assert f"is in use by vitattn-train (PID {first.pid}, " in last_line(second)


def summarized_while_it_runs(sweep: Path, out: Path, capsys: pytest.CaptureFixture) -> None:
    """``scripts/plot_curves.py <sweep>`` while its job ``seed=1`` trains (before its first
    checkpoint): the job is shown running, not cut or interrupted, as its files alone would
    say; reading it does not stop it."""
    from vitattn.analysis.summary import main as plot_curves

    capsys.readouterr()
    assert plot_curves([str(sweep), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "still running: seed=1" in said and "not completed" not in said, said
    assert "| seed=1  | 0 | 1 of 1 runs still running |" in said, said
    assert [row["status"] for row in read_csv(out / "summary.csv")] == ["running"]


def test_a_sweep_continued_while_it_runs_in_the_folder_hydra_named_is_refused(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    """A sweep started without ``hydra.sweep.dir`` (its folder named by Hydra, as the README's
    first sweep is) is continued, as docs/runs.md says, by the same command with
    ``hydra.sweep.dir=<that folder>``. Run while the first still trains its first job, the
    continuation took the sweep (nothing held it), moved the running job's folder to
    ``.attempts/`` as a cut job, trained it again beside the live one and exited 0; the first
    then failed on its job's folder "replaced while this command wrote in it". A summary made
    meanwhile showed the live job as cut (:func:`summarized_while_it_runs`)."""
    log_dir, reached, release = tmp_path / "outputs", tmp_path / "reached", tmp_path / "go"
    wait = plug("wait", WaitAtStep, step=2, reached=reached)
    command = ["-m", "seed=1,2", *TINY, *steps(8, 4), *wait, f"paths.log_dir={log_dir}"]
    first = start(command, data_dir, release)
    try:
        wait_for(reached, first)
        sweep = the_sweep(log_dir)
        job = sweep / "seed=1"
        inode = job.stat().st_ino

        continue_while_it_runs(command, sweep, first, data_dir)

        moved = sorted(str(p.relative_to(sweep)) for p in (sweep / ATTEMPTS).glob("*/*"))
        assert not moved, f"the continuation moved the running job aside: {moved}"
        assert job.stat().st_ino == inode
        summarized_while_it_runs(sweep, tmp_path / "summary", capsys)
        status, err = let_go(first, release)
    finally:
        stop(first)
    assert status == 0, err[-3000:]
    assert [RunDir(sweep / f"seed={seed}").state() for seed in (1, 2)] == ["completed"] * 2


def test_a_search_continued_while_it_runs_in_the_folder_hydra_named_is_refused(
    tmp_path: Path, data_dir: Path
) -> None:
    """An Optuna search started without ``hydra.sweep.dir`` (its study in the folder Hydra
    named), continued with ``hydra.sweep.dir=<that folder>`` while its trial 0 trains: the
    continuation took the sweep's lock (nothing held it), marked the live trial 0 failed ("cut
    off") and ran trials of its own; the first search's trial then ended in "unexpected
    UpdateFinishedTrialError" and the search in "Optuna could not go on with the study"."""
    import optuna

    log_dir, reached, release = tmp_path / "outputs", tmp_path / "reached", tmp_path / "go"
    wait = plug("wait", WaitAtStep, step=2, reached=reached)
    command = [
        "hparams_search=optuna",
        "hydra.sweeper.n_trials=1",
        *TINY,
        *steps(6, 3),
        "test=false",
        *wait,
        f"paths.log_dir={log_dir}",
    ]
    first = start(command, data_dir, release)
    try:
        wait_for(reached, first)
        sweep = the_sweep(log_dir)
        storage = f"sqlite:///{sweep}/optuna.db"

        continue_while_it_runs(command, sweep, first, data_dir)

        study = optuna.load_study(study_name="vitattn", storage=storage)
        states = [trial.state.name for trial in study.trials]
        assert states == ["RUNNING"], f"the continuation changed the live search's study: {states}"
        status, err = let_go(first, release)
    finally:
        stop(first)
    assert status == 0, err[-3000:]
    study = optuna.load_study(study_name="vitattn", storage=storage)
    assert [trial.state.name for trial in study.trials] == ["COMPLETE"]


def test_two_searches_on_one_storage_name_each_trials_folder_by_its_trial_number(
    tmp_path: Path, data_dir: Path
) -> None:
    """Two searches of other sweep directories on one shared study (docs/runs.md: supported;
    each leaves the other's running trial as it is). A trial's job directory is "named by its
    number and values" and the study's ``run`` attribute names it; but a search numbers its
    jobs on from the trials stored as it started, not by the trial Optuna gave it: search A's
    trial 3 went to ``A/1_...``, while trial 1 (search B's) is ``B/1_...``, and A's
    ``optimization_results.yaml`` lists both as ``run: 1_...`` with no sweep directory."""
    import optuna

    reached, release = tmp_path / "reached", tmp_path / "go"
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    settings = [
        "hparams_search=optuna",
        "hydra.sweeper.n_trials=2",
        f"hydra.sweeper.storage={storage}",
        *TINY,
        *steps(6, 3),
        "test=false",
        *plug("wait", WaitAtStep, step=2, reached=reached),
    ]
    first = start([*settings, f"hydra.sweep.dir={tmp_path / 'A'}"], data_dir, release)
    try:
        wait_for(reached, first)  # A's trial 0 trains while B runs its two trials
        run_cli("vitattn-train", *settings, f"hydra.sweep.dir={tmp_path / 'B'}", data_dir=data_dir)
        status, err = let_go(first, release)
    finally:
        stop(first)
    assert status == 0, err[-3000:]
    trials = optuna.load_study(study_name="vitattn", storage=storage).trials
    named = {
        trial.number: (Path(trial.user_attrs["sweep_dir"]).name, trial.user_attrs["run"])
        for trial in trials
    }
    assert sorted(named) == [0, 1, 2, 3]
    for number, (sweep, run) in named.items():
        assert (tmp_path / sweep / run).is_dir()
        assert run.startswith(f"{number}_"), f"trial {number} ran in {sweep}/{run}"
