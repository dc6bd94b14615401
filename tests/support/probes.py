"""Callbacks that record what a real run did, for a test to read once it ends: its final
weights, the dtypes of a training step, the test images each process evaluated, the labels of
the batches it trained on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint


class SaveFinalWeights(L.Callback):
    """Save the module's weights as they are when training ends, to ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        torch.save({"global_step": trainer.global_step, **pl_module.state_dict()}, self.path)


class ComputeDtypeProbe(L.Callback):
    """Write to ``path`` (JSON) the dtypes of one training step: the parameters', and of the
    first attention kernel's q and output, as the kernel receives and returns them."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.seen: dict[str, str] = {}
        self._handle: Any = None

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any
    ) -> None:
        from vitattn.attention.common.base import AttentionKernel

        if self._handle is not None or self.seen:
            return
        kernel = next(m for m in pl_module.modules() if isinstance(m, AttentionKernel))

        def record(module: Any, inputs: tuple, output: torch.Tensor) -> None:
            self.seen = {
                "parameters": str(next(pl_module.parameters()).dtype),
                "q": str(inputs[0].dtype),
                "attention_output": str(output.dtype),
            }
            self._handle.remove()

        self._handle = kernel.register_forward_hook(record)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        Path(self.path).write_text(json.dumps(self.seen))


class CountTestImages(L.Callback):
    """Write to ``<path>.rank<k>`` how many test images this process evaluated."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.images = 0

    def on_test_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        self.images += len(batch[1])

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        Path(f"{self.path}.rank{trainer.global_rank}").write_text(str(self.images))


class RecordAugmentSeed(L.Callback):
    """Write to ``<path>.rank<k>`` the seed this process's augmentation generator started from,
    once its first training batch is augmented."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        seed = trainer.datamodule.generator(pl_module.device).initial_seed()
        Path(f"{self.path}.rank{trainer.global_rank}").write_text(str(seed))


class LogsItsOwnFigure(L.Callback):
    """A user's own callback: logs ``figure`` (0.5) at the end of each validation, a name
    vitattn does not know of."""

    def __init__(self, figure: str) -> None:
        self.figure = figure

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pl_module.log(self.figure, 0.5)


class SaveLoggedNames(L.Callback):
    """Write to ``path`` (JSON) the names of Lightning's ``callback_metrics`` when training
    ends: what a callback's ``monitor`` can find."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        Path(self.path).write_text(json.dumps(sorted(trainer.callback_metrics)))


class SaveTrainingLabels(L.Callback):
    """Write to ``path`` (JSON), when training ends, the labels of every training batch in the
    order they trained, with the epoch of each: which images each step saw. On several
    processes, each writes its own to ``<path>.rank<k>``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.batches: list[dict[str, Any]] = []

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        labels = batch[1]
        if labels.ndim > 1:  # mixed: soft labels
            labels = labels.argmax(-1)
        self.batches.append({"epoch": trainer.current_epoch, "labels": labels.tolist()})

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        path = self.path if trainer.world_size == 1 else f"{self.path}.rank{trainer.global_rank}"
        Path(path).write_text(json.dumps(self.batches))


class FirstValidationBest(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint``, told a ``val/acc`` that falls at each validation
    (``1 - step / 1000``), so that the first validation's checkpoint is the best and the last
    one is not: what a run whose best weights come before its end is, without waiting for one
    to overfit. (Setting ``trainer.callback_metrics`` from another callback does not hold:
    Lightning rebuilds them from the logged results whenever they are read.)"""

    def _monitor_candidates(self, trainer: L.Trainer) -> dict[str, torch.Tensor]:
        candidates = super()._monitor_candidates(trainer)
        if "val/acc" in candidates:
            candidates["val/acc"] = torch.tensor(1.0 - trainer.global_step / 1000)
        return candidates
