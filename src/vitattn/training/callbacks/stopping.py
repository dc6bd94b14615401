"""Where a fit stops: at its last step with one more validation (and ``last.ckpt``; without
validation, ``last.ckpt`` alone), or at once with one line when the training loss stops being
finite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch

from vitattn.errors import TrainingError
from vitattn.runs.layout import RunDir
from vitattn.training.callbacks.saving import save_resumable
from vitattn.utils import checks


class ValidateAtEnd(L.Callback):
    """Make the last training step a validation step.

    With step-based validation (``val_check_interval`` steps, ``check_val_every_n_epoch=null``)
    Lightning validates only at multiples of the interval, so the final weights would have no
    ``val/acc`` and no checkpoint. Asking the loop to stop after the last batch makes it run one
    more validation first (the same path early stopping takes), which also saves ``last.ckpt``.
    With epoch-based validation (``check_val_every_n_epoch=k``) Lightning validates only in
    every k-th epoch, so a run ending in another epoch is let validate that once.
    """

    def on_train_batch_end(self, trainer: L.Trainer, *hook_args: Any) -> None:
        batch_idx = hook_args[-1]  # Lightning's (pl_module, outputs, batch, batch_idx)
        last_step = 0 < trainer.max_steps <= trainer.global_step
        max_epochs = trainer.max_epochs
        last_epoch = max_epochs is not None and 0 < max_epochs <= trainer.current_epoch + 1
        last_batch_of_epoch = batch_idx + 1 >= trainer.num_training_batches
        if last_step or (last_epoch and last_batch_of_epoch):
            trainer.should_stop = True
            if trainer.check_val_every_n_epoch is not None:
                trainer.check_val_every_n_epoch = 1  # read as the loop decides to validate


class CheckpointWithoutValidation(L.Callback):
    """``last.ckpt`` for a run that never validates (``+trainer.limit_val_batches=0``).

    vitattn's checkpoints are written at validation (``configs/callbacks/last_checkpoint.yaml``,
    :class:`ValidateAtEnd`), so such a run kept none: it could not be resumed, evaluated or
    fine-tuned. Without validation this callback writes ``last.ckpt`` where a validation would
    have come (every ``trainer.val_check_interval`` steps, or, for a share of an epoch, at each
    epoch's end) and after the last step, at the end of the step, where a resume continues
    exactly (as :class:`~vitattn.training.callbacks.CheckpointOnInterrupt` does). With
    validation it does nothing."""

    def __init__(self, dirpath: str | Path, filename: str = "last") -> None:
        self.path = Path(dirpath) / f"{filename}.ckpt"

    def on_train_batch_end(self, trainer: L.Trainer, *hook_args: Any) -> None:
        if trainer.limit_val_batches != 0:
            return
        batch_idx = hook_args[-1]  # Lightning's (pl_module, outputs, batch, batch_idx)
        if (batch_idx + 1) % trainer.accumulate_grad_batches:
            return  # in the middle of a step
        interval = trainer.val_check_interval  # in batches: the steps' times the accumulation
        if isinstance(interval, int) and trainer.check_val_every_n_epoch is None:
            due = trainer.global_step % max(1, interval // trainer.accumulate_grad_batches) == 0
        elif isinstance(interval, int):
            due = (batch_idx + 1) % interval == 0
        else:
            due = batch_idx + 1 >= trainer.num_training_batches
        last_step = 0 < trainer.max_steps <= trainer.global_step
        if due or last_step or trainer.should_stop:
            save_resumable(trainer, self.path)


class NanGuard(L.Callback):
    """Stop the run when the training loss is NaN or infinite, before anything saves those
    weights: the last checkpoint written before it stays the last good one.

    A flag on the device collects non-finite losses at every step without a host-device sync;
    it is read every ``check_every_n_steps`` steps and always before a validation (which is when
    checkpoints are written).
    """

    def __init__(self, check_every_n_steps: int = 20) -> None:
        self.check_every_n_steps = checks.integer("check_every_n_steps", check_every_n_steps, 1)
        self._bad: torch.Tensor | None = None

    def on_train_batch_end(self, trainer: L.Trainer, *hook_args: Any) -> None:
        outputs = hook_args[1]  # Lightning's (pl_module, outputs, batch, batch_idx)
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is None:
            return
        bad = ~torch.isfinite(loss.detach())
        self._bad = bad if self._bad is None else self._bad | bad
        if trainer.global_step % self.check_every_n_steps == 0:
            self._check(trainer)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":
            self._check(trainer)

    def _check(self, trainer: L.Trainer) -> None:
        if self._bad is None or not bool(self._bad):
            return
        last = RunDir(Path(trainer.default_root_dir)).last_checkpoint
        kept = f"; the last good weights are in {last}" if last.is_file() else ""
        raise TrainingError(
            f"train/loss became NaN or infinite by step {trainer.global_step}{kept}; lower "
            "optimizer.lr, set trainer.gradient_clip_val, or train in fp32 (trainer.precision)"
        )
