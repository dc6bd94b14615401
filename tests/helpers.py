"""Callbacks that tests plug into real runs through Hydra overrides (``+callbacks.x._target_``)."""

from __future__ import annotations

import os
import signal
from typing import Any

import lightning as L
import torch


class SigtermAtStep(L.Callback):
    """Send this process SIGTERM when the global step reaches ``step`` (a pre-empted job)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


class NanLossAtStep(L.Callback):
    """Make the parameters NaN after ``step`` steps, so the next loss is NaN (a diverged run)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any):
        if trainer.global_step == self.step:
            with torch.no_grad():
                for parameter in pl_module.parameters():
                    parameter.fill_(float("nan"))
