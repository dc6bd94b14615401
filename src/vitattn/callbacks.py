"""Lightning callbacks that the contracts rely on: throughput, a validation at the last step, a
checkpoint when the run is interrupted, and a stop when the loss stops being finite."""

from __future__ import annotations

import logging
import time
from collections import deque
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitattn.utils.errors import TrainingError

log = logging.getLogger(__name__)


class ImagesPerSecond(L.Callback):
    """Log ``train/images_per_sec`` every step, averaged over a window of recent steps.

    A step's time runs from the end of the previous training step to the end of this one, so
    it includes fetching and augmenting the batch; time spent in validation is left out. The
    first ``warmup_steps`` steps (allocator, kernel selection, compilation) are not counted.
    No device synchronisation is added: over a window the queue of GPU work evens out.

    ``overall`` is images over seconds of all counted steps, the figure for ``metrics.json``.
    """

    def __init__(self, window: int = 20, warmup_steps: int = 5) -> None:
        super().__init__()
        self.window = window
        self.warmup_steps = warmup_steps
        self._recent: deque[tuple[int, float]] = deque(maxlen=window)
        self._last_end: float | None = None
        self._steps_seen = 0
        self.images = 0
        self.seconds = 0.0

    @property
    def overall(self) -> float | None:
        return self.images / self.seconds if self.seconds > 0 else None

    def _restart_clock(self, *_: Any) -> None:
        self._last_end = time.perf_counter()

    on_train_epoch_start = _restart_clock
    on_validation_end = _restart_clock

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        now = time.perf_counter()
        last, self._last_end = self._last_end, now
        self._steps_seen += 1
        if last is None or self._steps_seen <= self.warmup_steps:
            return
        size = len(batch[1]) * trainer.world_size
        self._recent.append((size, now - last))
        self.images += size
        self.seconds += now - last
        rate = sum(s for s, _ in self._recent) / sum(t for _, t in self._recent)
        pl_module.log("train/images_per_sec", rate, on_step=True, on_epoch=False)


def fit_summary(trainer: L.Trainer, seconds: float) -> dict[str, Any]:
    """What ``metrics.json`` reports of a finished ``fit``: the last training loss, the run's
    images/s (:class:`ImagesPerSecond`'s ``overall``), steps, epochs, seconds, and on a GPU the
    peak of allocated memory."""
    throughput = next((c for c in trainer.callbacks if isinstance(c, ImagesPerSecond)), None)
    summary: dict[str, Any] = {
        "train/loss": trainer.callback_metrics.get("train/loss"),
        "train/images_per_sec": throughput.overall if throughput is not None else None,
        "steps": trainer.global_step,
        "epochs": trainer.current_epoch,
        "seconds": round(seconds, 2),
    }
    device = trainer.strategy.root_device
    if device.type == "cuda":
        summary["peak_memory_gb"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
    return summary


class ValidateAtEnd(L.Callback):
    """Make the last training step a validation step.

    With step-based validation (``val_check_interval`` steps, ``check_val_every_n_epoch=null``)
    Lightning validates only at multiples of the interval, so the final weights would have no
    ``val/acc`` and no checkpoint. Asking the loop to stop after the last batch makes it run one
    more validation first (the same path early stopping takes), which also saves ``last.ckpt``.
    """

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        last_step = 0 < trainer.max_steps <= trainer.global_step
        max_epochs = trainer.max_epochs
        last_epoch = max_epochs is not None and 0 < max_epochs <= trainer.current_epoch + 1
        last_batch_of_epoch = batch_idx + 1 >= trainer.num_training_batches
        if last_step or (last_epoch and last_batch_of_epoch):
            trainer.should_stop = True


class CheckpointOnInterrupt(L.Callback):
    """Save ``last.ckpt`` when SIGTERM stops the run (a pre-empted job, ``kill``, SLURM's time
    limit), so that ``vitattn-train ckpt_path=<run>/checkpoints/last.ckpt`` continues it.

    Lightning finishes the current training step and then stops. The checkpoint is written at the
    end of that step, the point where Lightning's own step checkpoints are written, so that the
    resumed run continues with the next batch and step number. (Ctrl-C can interrupt a step
    half-way; it keeps the last regular checkpoint.)
    """

    def __init__(self, dirpath: str | Path, filename: str = "last") -> None:
        self.path = Path(dirpath) / f"{filename}.ckpt"
        self._saved_at_step: int | None = None

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if trainer.received_sigterm and self._saved_at_step != trainer.global_step:
            trainer.save_checkpoint(self.path)
            self._saved_at_step = trainer.global_step
            log.warning(
                "SIGTERM: stopping after step %d; saved %s (continue with: vitattn-train "
                "ckpt_path=%s)",
                trainer.global_step,
                self.path,
                self.path,
            )

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if isinstance(exception, SIGTERMException) and self._saved_at_step is None:
            # The signal came after this step's on_train_batch_end: the weights are those of a
            # finished step, but the resumed run will count the step once more.
            trainer.save_checkpoint(self.path)
            log.warning("SIGTERM: saved %s at step %d", self.path, trainer.global_step)


class NanGuard(L.Callback):
    """Stop the run when the training loss is NaN or infinite, before anything saves those
    weights: the last checkpoint written before it stays the last good one.

    A flag on the device collects non-finite losses at every step without a host-device sync;
    it is read every ``check_every_n_steps`` steps and always before a validation (which is when
    checkpoints are written).
    """

    def __init__(self, check_every_n_steps: int = 20) -> None:
        self.check_every_n_steps = max(1, int(check_every_n_steps))
        self._bad: torch.Tensor | None = None

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
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
        last = Path(trainer.default_root_dir) / "checkpoints" / "last.ckpt"
        kept = f"; the last good weights are in {last}" if last.is_file() else ""
        raise TrainingError(
            f"train/loss became NaN or infinite by step {trainer.global_step}{kept}; lower "
            "optimizer.lr, set trainer.gradient_clip_val, or train in fp32 (trainer.precision)"
        )
