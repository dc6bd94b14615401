"""``VitattnBasicSweeper``: Hydra's basic sweeper, registered as ``hydra/sweeper=vitattn_basic``
and chosen by ``configs/hydra/default.yaml`` for every sweep of vitattn's commands. It runs the
jobs as Hydra's does, its sweep directory held for the whole sweep, whoever named it
(:func:`vitattn.cli.console.hold_sweep_directory`); a job that failed with its own one line
(:class:`vitattn.errors.FailedJob`) ends the command on that line, with exit status 1, as
vitattn's Optuna search ends (its name ends in ``BasicSweeper``, so jobs are named as the basic
sweeper's: ``vitattn.utils.config``).

Raised out of the sweeper, hydra-core 1.3's ``run_and_report`` prints the line and then "Set the
environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.", offering a stack trace
there is none of (a ``CompactHydraException`` has none to show). Hydra's own fix (its pull
request 3358) is not released. This package holds vitattn's Hydra plugins; no Optuna is
imported here."""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore


@dataclass
class VitattnBasicSweeperConf(BasicSweeperConf):
    """``hydra.sweeper`` of a sweep: Hydra's basic sweeper's settings."""

    _target_: str = "hydra_plugins.vitattn_optuna.basic_sweep.VitattnBasicSweeper"


class VitattnBasicSweeper(BasicSweeper):
    """Hydra's basic sweeper; a failed job's one line ends the command (see the module)."""

    def sweep(self, arguments: list[str]) -> Any:
        from vitattn.cli.console import hold_sweep_directory
        from vitattn.errors import FailedJob

        hold_sweep_directory(Path(str(self.config.hydra.sweep.dir)))
        try:
            return super().sweep(arguments)
        except FailedJob as failed:  # Hydra printed "Error executing job with overrides: ..."
            print(failed, file=sys.stderr, flush=True)
            sys.exit(1)


ConfigStore.instance().store(
    group="hydra/sweeper", name="vitattn_basic", node=VitattnBasicSweeperConf, provider="vitattn"
)
