"""Optuna searches through the console script (``hparams_search=optuna|optuna_pareto``) on
vitattn's own sweeper: two objectives and their Pareto trials, pruning, a malformed study file.
A study continued after a kill, a trial planted outside the space and a link at the results
file: ``tests/test_sweep_continuation.py``."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.support.in_process import refused_in_process, run_in_process
from tests.support.presets import FEW_STEPS, TINY, plug, steps
from tests.support.probes import LogsItsOwnFigure
from tests.support.runners import refusal_message
from tests.support.tables import markdown_tables
from vitattn.runs.layout import RunDir

optuna.logging.set_verbosity(optuna.logging.WARNING)


def search(sweep: Path, *settings: str, preset: str = "optuna") -> list[str]:
    return [f"hparams_search={preset}", *settings, f"hydra.sweep.dir={sweep}"]


def jobs(sweep: Path) -> list[str]:
    return sorted(p.name for p in sweep.iterdir() if p.is_dir() and p.name[0].isdigit())


def states(sweep: Path, name: str = "vitattn") -> list[str]:
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{sweep}/optuna.db")
    return [trial.state.name for trial in study.trials]


@pytest.mark.slow
def test_a_pareto_search_stores_two_directions_and_its_pareto_trials(
    tmp_path: Path, data_dir: Path
) -> None:
    sweep = tmp_path / "pareto"
    # Two trials, each validating once and not testing: what a Pareto search needs of them.
    settings = ["hydra.sweeper.n_trials=2", *TINY, *steps(6, 6), "test=false"]
    run_in_process(
        "vitattn-train", *search(sweep, *settings, preset="optuna_pareto"), data_dir=data_dir
    )

    study = optuna.load_study(study_name="vitattn_pareto", storage=f"sqlite:///{sweep}/optuna.db")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MAXIMIZE"]
    assert study.metric_names == ["val/acc_best", "train/images_per_sec"]
    frame = study.trials_dataframe(multi_index=True)  # as optuna-dashboard names the values
    assert list(frame["values"].columns) == ["val/acc_best", "train/images_per_sec"]
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
    for trial in study.trials:
        metrics = json.loads((sweep / trial.user_attrs["run"] / "metrics.json").read_text())
        assert trial.values == [metrics["val/acc_best"], metrics["train/images_per_sec"]]
        assert trial.params["attention"] == metrics["attention"]
    pareto = sorted(t.number for t in study.best_trials)
    assert pareto
    summary = (sweep / "summary.md").read_text()
    assert "Pareto trials (study.best_trials):" in summary
    table = markdown_tables(summary.split("Pareto trials (study.best_trials):")[1])[0]
    assert sorted(int(row[0]) for row in table[1:]) == pareto
    assert (sweep / "pareto.png").is_file() and (sweep / "frontier.png").is_file()


@pytest.mark.slow
def test_a_search_whose_runs_record_no_objective_stops_at_its_first_trial(
    tmp_path: Path, data_dir: Path
) -> None:
    """With a callback of the user's own, the names a run logs are not known before it runs
    (``optimized_metric`` is checked against them otherwise). On the code before, a trial whose
    run finished without the objective failed, the search went on to fail every trial, and the
    command exited 0."""
    own = plug("mine", LogsItsOwnFigure, figure="val/mine")
    settings = [*TINY, *steps(4, 4), "test=false", *own]
    found = tmp_path / "found"
    run_in_process(
        "vitattn-train",
        *search(found, *settings, "hydra.sweeper.n_trials=1", "optimized_metric=val/mine"),
        data_dir=data_dir,
    )
    assert states(found) == ["COMPLETE"]  # a figure of the user's own is the objective

    typed = tmp_path / "typed"
    result = run_in_process(
        "vitattn-train",
        *search(typed, *settings, "hydra.sweeper.n_trials=3", "optimized_metric=val/mien"),
        data_dir=data_dir,
        check=False,
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "vitattn-train: error: trial 0 failed: its run recorded no val/mien, which "
        "optimized_metric names, and no trial would: the search stops here; choose among its "
        "numbers: "
    ), last
    assert "val/mine" in last and "Traceback" not in result.stderr
    assert states(typed) == ["FAIL"] and len(jobs(typed)) == 1


@pytest.mark.slow
def test_a_trial_trailing_the_median_is_pruned(tmp_path: Path, data_dir: Path) -> None:
    sweep = tmp_path / "pruned"
    sweep.mkdir()
    study = optuna.create_study(
        study_name="vitattn", storage=f"sqlite:///{sweep}/optuna.db", direction="maximize"
    )
    study.add_trial(  # an earlier trial, far ahead at every step
        optuna.trial.create_trial(value=1.0, intermediate_values=dict.fromkeys(range(1, 7), 1.0))
    )
    pruner = "hydra.sweeper.pruner={_target_:optuna.pruners.MedianPruner,n_startup_trials:1}"
    command = search(sweep, "hydra.sweeper.n_trials=2", pruner, *TINY, *steps(6, 3), "test=false")
    result = run_in_process("vitattn-train", *command, data_dir=data_dir)

    assert states(sweep) == ["COMPLETE", "PRUNED"]
    (job,) = jobs(sweep)
    metrics = json.loads((sweep / job / "metrics.json").read_text())
    assert metrics["status"] == "pruned" and metrics["pruned_at_step"] == 3
    assert metrics["steps"] == 3  # stopped at its first validation
    assert RunDir(sweep / job).state() == "pruned"
    reported = optuna.load_study(study_name="vitattn", storage=f"sqlite:///{sweep}/optuna.db")
    assert reported.trials[1].intermediate_values == {3: metrics["val/acc"]}
    summary = (sweep / "summary.md").read_text()
    assert "trials 1 complete, 1 pruned" in summary
    runs = markdown_tables(summary)[1]
    assert runs[1][:2] == [job, "pruned"]
    assert "1 of 1 runs pruned by the search" in summary and "not completed" not in summary
    said = result.stdout + result.stderr
    assert f"pruned by the search: {job}" in said and "not completed" not in said


def trial_params(sweep: Path) -> list[dict[str, object]]:
    study = optuna.load_study(study_name="vitattn", storage=f"sqlite:///{sweep}/optuna.db")
    return [trial.params for trial in study.trials]


@pytest.mark.slow
def test_a_continued_search_draws_new_points_and_the_same_ones_again(
    tmp_path: Path, data_dir: Path
) -> None:
    """The preset's TPE seeds its start-up draws with 1234, and Optuna stores no random state:
    continued from 2 trials to 4, the search drew trial 0's and 1's values again (trial 2 ==
    trial 0). A fresh search still draws what TPESampler(seed=1234) draws, and the same
    continuation of the same study draws the same values."""
    import shutil

    tiny = [*TINY, *steps(2, 2), "test=false"]
    sweep, again = tmp_path / "search", tmp_path / "again"
    run_in_process("vitattn-train", *search(sweep, "hydra.sweeper.n_trials=2", *tiny),
                   data_dir=data_dir)  # fmt: skip
    first = trial_params(sweep)
    fresh = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=1234))
    stored = optuna.load_study(study_name="vitattn", storage=f"sqlite:///{sweep}/optuna.db")
    asked = [fresh.ask(stored.trials[0].distributions).params for _ in range(2)]
    assert asked == first  # a fresh search: the seed's draws, as before
    again.mkdir()
    shutil.copyfile(sweep / "optuna.db", again / "optuna.db")

    for where in (sweep, again):
        run_in_process("vitattn-train", *search(where, "hydra.sweeper.n_trials=4", *tiny),
                       data_dir=data_dir)  # fmt: skip

    continued = trial_params(sweep)
    assert continued[:2] == first and len(continued) == 4
    assert all(params not in first for params in continued[2:]), continued
    assert continued[2] != continued[3]
    assert trial_params(again) == continued  # reproducible


@pytest.mark.slow
def test_a_search_without_a_pruner_records_each_trials_learning_curve(
    tmp_path: Path, data_dir: Path
) -> None:
    """Each trial reports val/acc at every validation, pruner or not: without one, its
    intermediate values were empty, and optuna-dashboard drew no learning curve."""
    sweep = tmp_path / "curves"
    command = search(sweep, "hydra.sweeper.n_trials=1", *TINY, *steps(6, 3), "test=false")
    run_in_process("vitattn-train", *command, data_dir=data_dir)

    study = optuna.load_study(study_name="vitattn", storage=f"sqlite:///{sweep}/optuna.db")
    (trial,) = study.trials
    assert trial.state == TrialState.COMPLETE
    metrics = json.loads((sweep / trial.user_attrs["run"] / "metrics.json").read_text())
    assert sorted(trial.intermediate_values) == [3, 6]  # one per validation, at its step
    assert trial.intermediate_values[6] == metrics["val/acc"]
    assert max(trial.intermediate_values.values()) == trial.value == metrics["val/acc_best"]


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            "hydra.sweeper.n_trials=0",
            "hydra.sweeper.n_trials=0 is not valid; choose an integer 1 <= "
            "hydra.sweeper.n_trials <= 10000",
        ),
        (  # a study of more is refused as the search continues (tests/test_hostile_study.py)
            "hydra.sweeper.n_trials=10001",
            "hydra.sweeper.n_trials=10001 is not valid; choose an integer 1 <= "
            "hydra.sweeper.n_trials <= 10000",
        ),
        ("hydra.sweeper.n_jobs=0", "hydra.sweeper.n_jobs=0 is not valid; choose an integer >= 1"),
        (
            "hydra.sweeper.storage=5",
            "hydra.sweeper.storage=5 is not valid; choose a storage URL (e.g. "
            "sqlite:///${hydra.sweep.dir}/optuna.db, the presets' own) or null (in memory)",
        ),
        (
            "hydra.sweeper.sampler.seed=-1",
            "hydra.sweeper: these settings are refused (ValueError: Seed must be between 0 and "
            "2**32 - 1)",
        ),
        (
            "hydra.sweeper.direction=up",
            "hydra.sweeper.direction=up is not valid; choose maximize or minimize (a list of them "
            "for several objectives)",
        ),
        (
            "optimized_metric=[val/acc_best,train/images_per_sec]",
            "optimized_metric=['val/acc_best', 'train/images_per_sec'] is not valid; name 1 "
            "metric(s) "
            "of metrics.json (e.g. val/acc_best), one per direction of "
            "hydra.sweeper.direction(s)",
        ),
    ],
)
def test_a_bad_search_setting_is_one_line_before_the_search_starts(
    setting: str, message: str, tmp_path: Path, data_dir: Path
) -> None:
    """Checked as the search checks them, before Hydra starts it: ``n_trials=0`` ran nothing
    and exited 0, ``sampler.seed=-1`` ended in Hydra's three lines, and the rest were refused
    once the search had started, its sweep directory made, followed by a warning that it had no
    summary."""
    sweep = tmp_path / "search"
    command = search(sweep, *FEW_STEPS, setting)
    said = refused_in_process("vitattn-train", *command, data_dir=data_dir, creates=sweep)
    assert said == message


def test_a_storage_hydra_would_build_is_one_line_before_anything_is_made(
    tmp_path: Path, data_dir: Path
) -> None:
    """``hydra.sweeper.storage={_target_: optuna.storages.JournalStorage, ...}`` ended in
    ``AttributeError: 'JournalStorage' object has no attribute 'startswith'`` once the sweep
    directory was made (and Hydra, building it, had made the journal's file)."""
    sweep, journal = tmp_path / "search", tmp_path / "journal.log"
    backend = f"{{_target_:optuna.storages.journal.JournalFileBackend,file_path:'{journal}'}}"
    journal_storage = f"{{_target_:optuna.storages.JournalStorage,log_storage:{backend}}}"
    storage = f"hydra.sweeper.storage={journal_storage}"
    command = search(sweep, *FEW_STEPS, storage)
    said = refused_in_process("vitattn-train", *command, data_dir=data_dir, creates=sweep)
    assert said == (
        "hydra.sweeper.storage={'_target_': 'optuna.storages.JournalStorage', 'log_storage': "
        "{'_target_': 'optuna.storages.journal.JournalFileBackend', 'file_path': "
        f"'{journal}'}}}} is not valid; choose a storage URL (e.g. "
        "sqlite:///${hydra.sweep.dir}/optuna.db, the presets' own) or null (in memory)"
    )
    assert not journal.exists()


@pytest.mark.slow
def test_a_malformed_study_file_is_one_line(tmp_path: Path, data_dir: Path) -> None:
    sweep = tmp_path / "search"
    sweep.mkdir()
    (sweep / "optuna.db").write_bytes(b"not a database, " * 64)
    result = run_in_process(
        "vitattn-train", *search(sweep, *FEW_STEPS), data_dir=data_dir, check=False
    )
    message = refusal_message("vitattn-train", result)
    assert "no summary" not in result.stdout + result.stderr  # no job to summarize
    assert message.startswith(f"{sweep}/optuna.db (hydra.sweeper.storage) is not an Optuna study")
    assert "file is not a database" in message
    assert (sweep / "optuna.db").read_bytes() == b"not a database, " * 64
    assert [path.name for path in sweep.iterdir()] == ["optuna.db"]  # no lock left (red team)


@pytest.mark.slow
def test_a_study_file_elsewhere_that_is_no_study_makes_no_sweep_directory(
    tmp_path: Path, data_dir: Path
) -> None:
    """Refused after the console had taken the new sweep directory, it was left holding the
    lock (red team); now refused before."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"the user's own file")
    sweep = tmp_path / "search"
    command = [*search(sweep, *FEW_STEPS), f"hydra.sweeper.storage=sqlite:///{victim}"]
    said = refused_in_process("vitattn-train", *command, data_dir=data_dir, creates=sweep)
    assert said.startswith(f"{victim} (hydra.sweeper.storage) is not an Optuna study"), said
    assert victim.read_bytes() == b"the user's own file"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["a folder", "a database of other tables of those names"])
def test_a_study_file_that_is_no_study_is_one_line_and_kept(
    kind: str, tmp_path: Path, data_dir: Path
) -> None:
    """A folder at ``optuna.db`` was a traceback (``sqlite3.connect`` before the check); a
    database with tables named ``studies`` and ``trials`` passed the check and got Optuna's
    tables added (the docs say such a file is kept as it is)."""
    import sqlite3

    sweep = tmp_path / "search"
    sweep.mkdir()
    path = sweep / "optuna.db"
    if kind == "a folder":
        path.mkdir()
        expected = "is not a file"
    else:
        with contextlib.closing(sqlite3.connect(path)) as database, database:
            database.execute("create table studies(a)")
            database.execute("create table trials(b)")
        expected = "is a database without an Optuna study"
    before = path.read_bytes() if path.is_file() else None
    result = run_in_process(
        "vitattn-train", *search(sweep, *FEW_STEPS), data_dir=data_dir, check=False
    )
    message = refusal_message("vitattn-train", result)
    assert message.startswith(f"{path} (hydra.sweeper.storage) {expected}"), message
    assert [entry.name for entry in sweep.iterdir()] == ["optuna.db"]  # no job, no lock
    if before is None:
        assert path.is_dir() and not any(path.iterdir())
    else:  # the database as it was: no table of Optuna's added
        assert path.read_bytes() == before
