"""Lightning's model summary, taken so that a compiled network stays compiled."""

from __future__ import annotations

from typing import Any

import lightning as L

from vitattn.utils import checks
from vitattn.utils.recompiles import eager_only


class ModelSummary(L.pytorch.callbacks.ModelSummary):
    """Lightning's :class:`~lightning.pytorch.callbacks.ModelSummary` (each layer's parameters
    and, from the module's ``example_input_array``, its input and output sizes and FLOPs), with
    that example's forward run eager.

    Lightning counts the FLOPs under ``FlopCounterMode``; before torch 2.14 Dynamo, called under
    a dispatch mode, marks the code it was asked to compile as never to be compiled
    (pytorch/pytorch#190286). So with Lightning's summary among the callbacks, as by default,
    every ``model.compile`` run on such a torch trained eager and warned that it had (seen on
    torch 2.11, the image of the project's lent GPUs). Here the summary's forward runs with
    ``torch.compile`` stood down (:func:`vitattn.utils.recompiles.eager_only`), as the project's
    own FLOP count does, and Dynamo never sees it.
    """

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        # Lightning takes any integer and fails on one below -1 once the run has begun
        checks.integer("max_depth", max_depth, low=-1, hint=" (-1: every layer; 0: none)")
        super().__init__(max_depth=max_depth, **summarize_kwargs)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        with eager_only():
            super().on_fit_start(trainer, pl_module)
