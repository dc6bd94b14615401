"""Lightning callbacks that the contracts rely on (throughput, a validation at the last step)."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import lightning as L


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
