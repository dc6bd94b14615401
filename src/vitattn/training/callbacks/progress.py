"""Lightning's progress bar, with the training loss read only when the bar refreshes."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import TQDMProgressBar

from vitattn.utils import checks


class ProgressBar(TQDMProgressBar):
    """Lightning's progress bar, showing ``train/loss`` read only when the bar refreshes.

    A metric logged with ``prog_bar=True`` is turned into a Python number by Lightning at the end
    of every step, which on a GPU waits for the step to finish. ``train/loss`` is therefore
    logged without it, and read here from the callback metrics every ``refresh_rate`` steps.
    """

    SHOWN = ("train/loss",)

    def __init__(
        self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False
    ) -> None:
        # Lightning's bar takes a negative rate and shows nothing, as 0 does
        refresh_rate = checks.integer("refresh_rate", refresh_rate, 0, hint=" (0: no bar)")
        super().__init__(refresh_rate, process_position, leave)

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        for name in self.SHOWN:
            value = trainer.callback_metrics.get(name)
            if isinstance(value, torch.Tensor) and trainer.training:
                metrics[name] = f"{value.item():.3f}"
        return metrics
