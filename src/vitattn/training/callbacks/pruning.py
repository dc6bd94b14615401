"""An Optuna search's learning curves and pruning: report the monitored metric at each validation
to the job's trial (its intermediate values, which optuna-dashboard draws), with a pruner or
without, and stop the fit when the study's pruner (``hydra.sweeper.pruner``, e.g. Optuna's
``MedianPruner``: below the median of earlier trials at the same step) says so.

optuna-integration's ``PyTorchLightningPruningCallback`` raises ``TrialPruned`` out of the fit
and reports at each epoch; vitattn validates every ``val_check_interval`` steps and writes a
pruned run's ``metrics.json`` like any other, so this callback reports at the step and stops the
fit as early stopping does.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning as L

from vitattn.utils import metric_names

log = logging.getLogger(__name__)


class OptunaPruning(L.Callback):
    """Report ``monitor`` to the job's Optuna trial at each validation and stop a trial its
    pruner prunes (none: never); does nothing in a job that is not a trial of a search whose
    study it reaches (a storage, one objective)."""

    def __init__(self, monitor: str = metric_names.PRUNING_MONITORED) -> None:
        self.monitor = monitor
        self.trial: Any = None
        self.pruned_at: int | None = None
        """The step the trial was pruned at, else ``None``."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        from vitattn.runs.optuna_sweeper import job_trial

        if stage == "fit" and trainer.is_global_zero:
            self.trial = job_trial()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or self.pruned_at is not None:
            return
        value, step = trainer.callback_metrics.get(self.monitor), trainer.global_step
        prune = False
        if self.trial is not None and value is not None:
            self.trial.report(float(value), step)
            prune = self.trial.should_prune()
        if trainer.world_size > 1:
            prune = trainer.strategy.broadcast(prune)
        if prune:
            self.pruned_at, trainer.should_stop = step, True
            log.info("pruned at step %d: %s=%.4f trails the study's pruner", step, self.monitor,
                     float(value))  # fmt: skip


def pruned_at(trainer: L.Trainer) -> int | None:
    """The step at which an :class:`OptunaPruning` callback stopped ``trainer``'s fit, else
    ``None``."""
    found = (c.pruned_at for c in trainer.callbacks if isinstance(c, OptunaPruning))
    return next((step for step in found if step is not None), None)
