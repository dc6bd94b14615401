"""``OptunaSearch``: vitattn's Hydra sweeper on Optuna >= 4 (ask and tell), registered in
Hydra's ConfigStore as ``hydra/sweeper=vitattn_optuna`` with its samplers as
``hydra/sweeper/sampler=tpe|random|grid|cmaes|nsgaii|gp``. The search itself is
:mod:`vitattn.runs.optuna_sweeper`; Hydra imports this module whenever it starts, so Optuna is
imported only once a search runs (the ``[sweep]`` extra). No ``from __future__ import
annotations``: Hydra's plugin scan loads this module where a dataclass cannot resolve string
hints."""

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from omegaconf import MISSING

from vitattn.runs.optuna_space import SAMPLERS


@dataclass
class OptunaSearchConf:
    """``hydra.sweeper`` of an Optuna search (``configs/hparams_search/optuna.yaml``)."""

    _target_: str = "hydra_plugins.vitattn_optuna.optuna_search.OptunaSearch"
    defaults: list[Any] = field(default_factory=lambda: [{"sampler": "tpe"}])
    sampler: Any = MISSING
    """``_target_`` of an ``optuna.samplers`` class and its settings (built by Hydra)."""
    pruner: Any = None
    """``_target_`` of an ``optuna.pruners`` class (e.g. MedianPruner) to stop trials early;
    each job builds it too, from its own ``hydra.sweeper.pruner``."""
    direction: Any = "minimize"
    directions: Any = None
    """A list of directions, one per metric of ``optimized_metric`` (wins over direction)."""
    storage: Any = None
    study_name: str | None = None
    """The study's name in ``storage``, which a storage needs (null is refused there: Optuna
    would name each new study anew, and the search could not be continued)."""
    n_trials: int = 20
    """Finished trials (complete or pruned) the study holds once the search ends."""
    n_jobs: int = 1
    """Trials launched at once (the launcher runs them, in parallel where it can)."""
    params: dict[str, str] | None = None


class OptunaSearch(Sweeper):
    """Hydra's side of the search: the settings, the launcher, one-line refusals."""

    def __init__(self, **settings: Any) -> None:
        from vitattn.runs.optuna_sweeper import SearchSettings

        self.settings = SearchSettings(**settings)
        self.config: Any = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        from hydra.core.plugins import Plugins

        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function
        )

    def sweep(self, arguments: list[str]) -> None:
        from vitattn.cli.console import hold_sweep_directory
        from vitattn.errors import FailedJob, VitattnError, fail
        from vitattn.runs.optuna_sweeper import Search

        hold_sweep_directory(Path(str(self.config.hydra.sweep.dir)))
        try:
            failures = Search(self.settings, self.config, self.launcher).run(arguments)
        except VitattnError as error:
            fail(Path(sys.argv[0]).name, error)
            sys.exit(1)
        from hydra.core.utils import JobStatus

        for job, why in failures:  # as Hydra's basic sweeper: a failed job fails the command
            if isinstance(job._return_value, FailedJob):
                # its one line, the last word: raised, Hydra would print a line after it that
                # offers a stack trace there is none of
                print(f"Error executing job with overrides: {job.overrides}", file=sys.stderr)
                print(job._return_value, file=sys.stderr, flush=True)
                sys.exit(1)
            if job.status == JobStatus.COMPLETED:  # its run gave the search no value to tell
                print(f"Error executing job with overrides: {job.overrides}", file=sys.stderr)
                fail(Path(sys.argv[0]).name, why)
                sys.exit(1)
            _ = job.return_value  # anything else: Hydra's report, with its traceback


store = ConfigStore.instance()
store.store(group="hydra/sweeper", name="vitattn_optuna", node=OptunaSearchConf, provider="vitattn")
SAMPLER_SETTINGS = {"tpe": {"n_startup_trials": 10}, "nsgaii": {"population_size": 50}}
"""Settings of a group's sampler beyond its seed, at Optuna's defaults: there to be set from the
command line without a ``+`` (``hydra.sweeper.sampler.n_startup_trials=3``)."""
for name, sampler in SAMPLERS.items():
    settings = SAMPLER_SETTINGS.get(name, {})
    node = {"_target_": f"optuna.samplers.{sampler}", "seed": None, **settings}
    if name == "grid":
        node["_partial_"] = True  # its search_space is the search's: given when the search runs
    store.store(group="hydra/sweeper/sampler", name=name, node=node, provider="vitattn")
