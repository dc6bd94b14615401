"""``ContinuingOptunaSweeper``: Hydra's Optuna sweeper continuing a stored study when the same
search runs again (:mod:`vitattn.runs.optuna_sweeper`). Defined only where the ``[sweep]``
extra (hydra-optuna-sweeper) is installed: Hydra imports every plugin module when it starts."""

from __future__ import annotations

from typing import Any

try:
    from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
except ImportError:  # no [sweep] extra: no Optuna search either
    OptunaSweeper = None

if OptunaSweeper is not None:

    class ContinuingOptunaSweeper(OptunaSweeper):
        """``OptunaSweeper`` that continues its stored study toward ``n_trials`` finished trials
        in all, numbering jobs on."""

        def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
            from vitattn.runs.optuna_sweeper import continue_study

            super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
            continue_study(self.sweeper, config)
