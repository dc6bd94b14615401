"""Hydra's Optuna sweeper, continuing a stored study when a search is run again.

``hydra-optuna-sweeper`` loads a stored study (``load_if_exists``) but then asks for
``n_trials`` *more* trials and numbers its jobs from 0 again, so a search cut after 2 of 20
trials and run again would run 20 more and write its first jobs over the directories of the
first run's (``0_...``, ``1_...``). ``ContinuingOptunaSweeper`` (in
``hydra_plugins.vitattn_optuna``, where Hydra looks for plugins) is that sweeper with three
changes, made by :func:`continue_study` before it starts:

* ``n_trials`` counts the study's finished trials (complete or pruned): a re-run asks for the
  rest only;
* jobs are numbered on from the study's trials (job ``n`` is trial ``n``), so no job directory
  of an earlier run is written again;
* a trial left running by a killed process is marked failed (the run directory's lock rules out
  a live one), and its directory is kept as it is.

``configs/hparams_search/optuna.yaml`` stores the study in the sweep directory
(``sqlite:///<sweep>/optuna.db``, study ``vitattn``) unless ``hydra.sweeper.storage`` says
otherwise; with ``storage: null`` the study lives in memory and nothing is continued.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class NumberedOnLauncher:
    """A launcher whose jobs are numbered from ``offset`` on; everything else is the wrapped
    launcher's."""

    def __init__(self, launcher: Any, offset: int) -> None:
        self.launcher = launcher
        self.offset = offset

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        return self.launcher.launch(job_overrides, initial_job_idx=initial_job_idx + self.offset)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.launcher, name)


def stored_trials(storage: Any, study_name: str | None) -> list[Any]:
    """The trials of the stored study, marking those left running as failed; ``[]`` when there
    is no storage or no such study yet."""
    import optuna

    if not storage or not study_name:
        return []
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:  # a new study
        return []
    for trial in study.trials:
        if trial.state == optuna.trial.TrialState.RUNNING:
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
            log.info("trial %d was cut off: marked failed, its directory kept", trial.number)
    return study.trials


def continue_study(impl: Any, config: Any) -> None:
    """Make a set-up ``OptunaSweeperImpl`` continue its stored study (see the module's
    docstring): fewer trials to ask for, jobs numbered on."""
    import optuna

    Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)  # the sqlite file
    trials = stored_trials(impl.storage, impl.study_name)
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    done = sum(trial.state in finished for trial in trials)
    if trials:
        log.info(
            "continuing study %s: %d of %d trials finished, jobs numbered from %d",
            impl.study_name,
            done,
            impl.n_trials,
            len(trials),
        )
    impl.n_trials = max(0, impl.n_trials - done)
    impl.launcher = NumberedOnLauncher(impl.launcher, len(trials))
