"""An Optuna sampler a search can be given by name (``hydra.sweeper.sampler._target_=
tests.support.samplers.KillAtAsk``) that kills the search's process as it asks for a trial."""

from __future__ import annotations

import os
import signal
from typing import Any

from optuna.samplers import RandomSampler


class KillAtAsk(RandomSampler):
    """Random values, and SIGKILL of this process as the search asks for trial ``number``: in
    ``before_trial``, once Optuna has stored that trial, running, and before ``ask`` returns it
    (a search killed between two asks of one batch). The other settings of the sampler's group
    (the TPE preset's) are taken and not used."""

    def __init__(self, number: int, seed: int | None = None, **unused: Any) -> None:
        super().__init__(seed=seed)
        self.number = number

    def before_trial(self, study: Any, trial: Any) -> None:
        if trial.number == self.number:
            os.kill(os.getpid(), signal.SIGKILL)
        super().before_trial(study, trial)
