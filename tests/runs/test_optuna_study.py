"""A study file's bounds and a stored trial's checks (:mod:`vitattn.runs.optuna_study`), at
small bounds, in this process: each bound refused in its line, each trial Optuna would not write
or that stores a parameter as another kind named. Through the console, on real hostile files
under a memory cap: ``tests/test_hostile_study.py``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from tests.support import studies
from vitattn.errors import ConfigError
from vitattn.runs.optuna_study import (
    STUDY_BOUNDS,
    check_storage_file,
    check_stored_trials,
    trial_problem,
)

LR = FloatDistribution(1e-4, 3e-3, log=True)
SPACE = {"optimizer.lr": LR, "attention.k": CategoricalDistribution([4, 8])}


@pytest.mark.parametrize(
    ("bound", "message"),
    [
        ("file_bytes", "bytes, more than the 4096 a search reads"),
        ("trials", "holds 3 trials, more than the 2 a search reads"),
        ("rows", "holds 15 rows of trials, more than the 14 a search reads"),
        ("text_bytes", "characters of names and JSON, more than the 100 a search reads"),
    ],
)
def test_each_bound_of_a_study_file_is_one_line(bound: str, message: str, tmp_path: Path) -> None:
    path = studies.made_study(tmp_path)
    storage = f"sqlite:///{path}"
    check_storage_file(storage)  # within the bounds vitattn reads
    small = {"file_bytes": 4096, "trials": 2, "rows": 14, "text_bytes": 100}[bound]
    bounds = dataclasses.replace(STUDY_BOUNDS, **{bound: small})
    with pytest.raises(ConfigError) as refused:
        check_storage_file(storage, bounds)
    said = str(refused.value)
    assert said.startswith(f"{path} (hydra.sweeper.storage) holds "), said
    assert message in said


def test_a_storage_that_is_no_file_or_in_memory_is_not_read(tmp_path: Path) -> None:
    for storage in (None, "", "postgresql://host/db", f"sqlite:///{tmp_path}/absent.db"):
        check_storage_file(storage)
    assert not (tmp_path / "absent.db").exists()


def test_a_study_in_a_directory_with_a_hash_is_read_and_nothing_made_beside(
    tmp_path: Path,
) -> None:
    """The study was opened as the sqlite URI ``file:{path}?mode=ro`` without quoting the path:
    in ``<tmp>/run#2/optuna.db`` sqlite read ``#2/optuna.db?mode=ro`` as the URI's fragment,
    opened ``<tmp>/run`` read-write-create, made that empty file outside the sweep directory,
    and refused the valid study as "a database without an Optuna study" (a fresh search into
    ``hydra.sweep.dir="<tmp>/run#2"`` failed each trial so: each job checks the study)."""
    sweep = tmp_path / "run#2"
    studies.made_study(sweep)
    check_storage_file(f"sqlite:///{sweep}/optuna.db")  # a study Optuna made: passes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run#2"]


def test_a_study_another_process_holds_locked_is_in_use_not_refused_as_no_study(
    tmp_path: Path,
) -> None:
    """A live study under another process's write lock was "not an Optuna study ... move it
    away" (review): it is in use, and kept."""
    import contextlib
    import sqlite3

    path = studies.made_study(tmp_path)
    before = path.read_bytes()
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as holder:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(ConfigError) as refused:
            check_storage_file(f"sqlite:///{path}")
        holder.execute("ROLLBACK")
    said = str(refused.value)
    assert said.startswith(
        f"{path} (hydra.sweeper.storage) is in use: another process holds it "
        "locked (database is locked); run again once it is done"
    ), said
    assert path.read_bytes() == before
    check_storage_file(f"sqlite:///{path}")  # released: a study again


def complete(params: dict, distributions: dict, values: list[float]) -> optuna.trial.FrozenTrial:
    return create_trial(params=params, distributions=distributions, values=values)


def stored(name: str, value: object, distribution: object) -> optuna.trial.FrozenTrial:
    """A complete trial of one parameter, as a study stores it."""
    return complete({name: value}, {name: distribution}, [0.5])


def test_a_stored_trial_of_the_space_passes_and_one_of_another_kind_is_named() -> None:
    assert trial_problem(stored("optimizer.lr", 1e-3, LR), SPACE, 1) is None
    other_range = FloatDistribution(1e-5, 1e-2, log=True)  # a range may change, the kind not
    assert trial_problem(stored("optimizer.lr", 1e-3, other_range), SPACE, 1) is None
    unlisted = stored("seed", 3, CategoricalDistribution([3]))
    assert trial_problem(unlisted, SPACE, 1) is None  # no longer varied: its trials stay
    as_choice = stored("optimizer.lr", 1, CategoricalDistribution([1, 2]))
    assert trial_problem(as_choice, SPACE, 1) == (
        "stores optimizer.lr as categorical choice(1, 2), and hydra.sweeper.params.optimizer.lr "
        "is float from 0.0001 to 0.003, log (Optuna keeps a parameter's kind, and a choice's "
        "options, for the whole study)"
    )
    linear = stored("optimizer.lr", 1e-3, FloatDistribution(1e-4, 3e-3))
    said = trial_problem(linear, SPACE, 1)
    assert said.startswith("stores optimizer.lr as float from 0.0001 to 0.003, and")
    wider = stored("attention.k", 4, CategoricalDistribution([4, 8, 16]))
    said = trial_problem(wider, SPACE, 1)
    assert said.startswith("stores attention.k as categorical choice(4, 8, 16), and")


def test_a_stored_trial_optuna_would_not_write_is_named() -> None:
    two_values = complete({"optimizer.lr": 1e-3}, {"optimizer.lr": LR}, [0.5, 0.4])
    assert trial_problem(two_values, SPACE, 1) == "holds 2 value(s) for the study's 1 direction(s)"
    outside = complete({"optimizer.lr": 1e-3}, {"optimizer.lr": LR}, [0.5])
    outside.params["optimizer.lr"] = 5.0  # as an edited file would hold it
    assert trial_problem(outside, SPACE, 1).startswith("is not one Optuna writes (The value 5.0")
    running = complete({"optimizer.lr": 1e-3}, {"optimizer.lr": LR}, [0.5])
    running.state = TrialState.RUNNING  # finished at, yet running
    assert "datetime_complete" in trial_problem(running, SPACE, 1)


@pytest.mark.parametrize(
    ("planted", "said"),
    [
        ({"constraints": "oops"}, "holds constraints ['o', 'o', 'p', 's'], which are not all"),
        ({"constraints": 5}, "holds constraints Optuna cannot read ('int' object is not"),
        ({"constraints:memory": "high"}, "holds constraints ['high'], which are not all"),
        ({"constraints": [float("nan")]}, "holds constraints [nan], which are not all"),
        ({"constraints": [0.0, True]}, "holds constraints [0.0, True], which are not all"),
    ],
)
def test_a_stored_trial_whose_constraints_are_no_finite_numbers_is_named(
    planted: dict, said: str
) -> None:
    """Optuna 5 reads a trial's constraints (``FrozenTrial.constraints``: its system attributes
    ``constraints``, a list, and ``constraints:<name>``) only in ``best_trial``,
    ``best_trials`` and TPE's split: a planted ``"oops"`` passed the checks and the search
    failed in a ``TypeError`` once every trial had run."""

    def with_attrs(system_attrs: dict) -> optuna.trial.FrozenTrial:
        lr = {"optimizer.lr": 1e-3}
        distributions = {"optimizer.lr": LR}
        return create_trial(
            params=lr, distributions=distributions, value=0.5, system_attrs=system_attrs
        )

    feasible = {"constraints": [0.0, -1.5], "constraints:memory": 2.0}
    assert trial_problem(with_attrs(feasible), SPACE, 1) is None
    assert trial_problem(with_attrs(planted), SPACE, 1).startswith(said)


def test_a_study_whose_trials_optuna_cannot_load_is_one_line() -> None:
    class Unreadable:
        study_name = "planted"

        def get_trials(self, deepcopy: bool) -> list:
            raise IndexError("tuple index out of range")

    with pytest.raises(ConfigError) as refused:
        check_stored_trials(Unreadable(), "sqlite:///x/optuna.db", SPACE, ["maximize"])
    assert str(refused.value) == (
        "study planted in x/optuna.db (hydra.sweeper.storage) holds a trial Optuna cannot read "
        "(IndexError: tuple index out of range): it is kept as it is; choose another "
        "hydra.sweeper.study_name or hydra.sweep.dir"
    )


def test_a_study_whose_last_write_was_cut_off_is_read_as_sqlite_recovers_it(
    tmp_path: Path,
) -> None:
    """A search killed while it wrote to its study leaves sqlite's journal beside it: the
    read-only check failed on it (``attempt to write a readonly database``) and refused the
    study as "not an Optuna study", so the search could not continue. sqlite now rolls the cut
    write back, as Optuna's own open would, and the study holds what it held before."""
    import signal
    import subprocess
    import sys

    path = studies.made_study(tmp_path)
    cut_off = f"""
import os, signal, sqlite3
database = sqlite3.connect({str(path)!r}, isolation_level=None)
database.execute("pragma cache_size=1")  # spill to the file: the journal becomes hot
database.execute("begin")
for number in range(20000):
    database.execute("insert into trial_user_attributes(trial_id, key, value_json) values "
                     "(1, ?, '0')", (str(number),))
os.kill(os.getpid(), signal.SIGKILL)
"""
    killed = subprocess.run([sys.executable, "-c", cut_off], check=False)
    assert killed.returncode == -signal.SIGKILL
    journal = path.with_name("optuna.db-journal")
    assert journal.stat().st_size > 0
    check_storage_file(f"sqlite:///{path}")
    assert not journal.exists()
    study = optuna.load_study(study_name=studies.STUDY, storage=f"sqlite:///{path}")
    assert len(study.trials) == 3 and study.trials[0].user_attrs == {}
