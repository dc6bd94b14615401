"""Optuna study files as a sweep directory may hold them: one a search of
``hparams_search=optuna`` made (its space, its direction), then edited with SQL as someone who
can write the sweep directory would edit it: a parameter of another kind, a choice past its
options, a complete trial without its value, a flood of trials, a mountain of JSON."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

STUDY = "vitattn"
"""``hydra.sweeper.study_name`` of ``configs/hparams_search/optuna.yaml``."""


def made_study(sweep: Path, trials: int = 3) -> Path:
    """``<sweep>/optuna.db`` holding ``trials`` complete trials of the search's space, as a
    search of ``hparams_search=optuna`` stores them; its path."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution
    from optuna.trial import create_trial

    sweep.mkdir(parents=True, exist_ok=True)
    path = sweep / "optuna.db"
    storage = optuna.storages.RDBStorage(f"sqlite:///{path}")
    study = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize")
    space = {
        "optimizer.lr": FloatDistribution(1e-4, 3e-3, log=True),
        "optimizer.weight_decay": FloatDistribution(0.0, 0.1),
        "attention.k": CategoricalDistribution([4, 8, 16, 32, 64]),
    }
    params = {"optimizer.lr": 1e-3, "optimizer.weight_decay": 0.05, "attention.k": 8}
    for number in range(trials):
        trial = create_trial(params=params, distributions=space, value=0.1 * number)
        study.add_trial(trial)
    storage.engine.dispose()  # no connection of this process left open on the file
    return path


def edit(path: Path, *statements: str) -> None:
    """Run SQL ``statements`` on the study file at ``path``."""
    with contextlib.closing(sqlite3.connect(path)) as database, database:
        for statement in statements:
            database.execute(statement)


def add_trials(path: Path, count: int, params: int = 3) -> None:
    """``count`` failed trials more, each with ``params`` parameters: a few bytes each on disk,
    and about ten kilobytes each once Optuna loads them."""
    edit(
        path,
        f"""insert into trials(number, study_id, state, datetime_start, datetime_complete)
        with recursive n(i) as (select 1000 union all select i + 1 from n where i < {999 + count})
        select i, 1, 'FAIL', '2026-11-29 00:00:00', '2026-11-29 00:00:01' from n""",
        f"""insert into trial_params(trial_id, param_name, param_value, distribution_json)
        with recursive p(j) as (select 0 union all select j + 1 from p where j < {params - 1})
        select trial_id, 'p' || j, 0.5,
        '{{"name": "FloatDistribution", "attributes": {{"low": 0.0, "high": 1.0, "step": null,
        "log": false}}}}'
        from trials, p where number >= 1000""",
    )
