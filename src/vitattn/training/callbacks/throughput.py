"""The training speed of steady steps (``train/images_per_sec`` and the fit's median images/s),
and the fit's seconds and attempts, carried across a resume."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections import deque
from typing import Any

import lightning as L

from vitattn.utils import checks, metric_names
from vitattn.utils.checks import is_number


def load_average() -> float | None:
    """The machine's 1-minute load average (``os.getloadavg()[0]``) to 2 decimals; ``None`` where
    the system has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


class ImagesPerSecond(L.Callback):
    """The training speed of steady steps: ``train/images_per_sec`` in TensorBoard, and the fit's
    median (``median``, over ``steady_steps`` steps) for ``metrics.json``.

    A step's interval runs from the end of the previous training step to the end of this one, so
    it holds fetching, moving and augmenting its batch, the step itself and its logging. Only
    steady steps count: not the first ``warmup_steps`` of a fit (allocator, kernel selection,
    compilation), and not a step whose interval holds anything but training: a validation (with
    the attention probe, and the checkpoints written after it), a checkpoint written at any other
    time, or the start of an epoch (a new data iterator, the previous epoch's end). Such an
    interval is dropped whole, whichever callback ran when, as Lightning runs validation between
    one step's ``on_train_batch_end`` and the next step.

    Each steady step's rate is its images over its seconds. TensorBoard gets, at steady steps
    from the ``window``-th on, the median of the last ``window`` rates (Lightning repeats the last
    value at the steps in between); ``metrics.json`` gets the median over all of them. A few slow
    steps (a busy moment of the machine, a garbage collection) move neither, so the curve has no
    spikes. No device synchronisation is added: once the launch queue is full the host is paced
    by the device, and the median passes over the short steps that follow a host read of a
    device value.

    A resumed fit carries on from its checkpoint: each checkpoint holds the steady rates so far,
    the fit's seconds up to it and the attempts, so the median is over the steady steps of every
    attempt, ``seconds`` adds this attempt's to the earlier ones' and ``attempts`` counts them.
    Resumed from a checkpoint without them (an earlier version's), the earlier seconds are not
    known: :meth:`total_seconds` is ``None`` rather than this attempt's alone.

    What the first steps cost beyond the steady speed (:meth:`startup_seconds`: compilation in a
    compiled run, and what an eager run's first steps pay too) is their seconds from the start
    of training to the end of the last warm-up step, less the time their images take at the
    median steady rate, summed over the attempts (each compiles again).
    """

    logged = metric_names.THROUGHPUT_LOGGED
    """The name it logs (:mod:`vitattn.utils.metric_names`)."""
    summarized = metric_names.THROUGHPUT_SUMMARIZED
    """The names it adds to ``metrics.json``."""

    def __init__(self, window: int = 20, warmup_steps: int = 5) -> None:
        super().__init__()
        self.window = checks.integer("window", window, 1)
        self.warmup_steps = checks.integer("warmup_steps", warmup_steps, 0)
        self.rates: list[float] = []
        self.load_avg_start: float | None = None
        self._recent: deque[float] = deque(maxlen=self.window)
        self._last_end: float | None = None
        self._steps_seen = 0
        self._dirty = False
        self.earlier_rates: list[float] = []
        self.earlier_seconds: float | None = 0.0
        self.attempts = 1
        self._restored = False
        self._fit_started: float | None = None
        self.earlier_startup: float | None = 0.0
        self._train_started: float | None = None
        self._warmup_images = 0
        self._warmup_seconds: float | None = None

    @property
    def median(self) -> float | None:
        """The median images/s over the fit's steady steps; ``None`` without any."""
        return statistics.median(self.rates) if self.rates else None

    @property
    def steady_steps(self) -> int:
        """How many steps ``median`` is over."""
        return len(self.rates)

    def total_seconds(self) -> float | None:
        """The fit's seconds over all its attempts: each attempt's from its ``on_fit_start``
        (after the model and data are set up, and a checkpoint read) to now; ``None`` where the
        earlier attempts' are not known."""
        if self.earlier_seconds is None or self._fit_started is None:
            return None
        return self.earlier_seconds + time.perf_counter() - self._fit_started

    def startup_seconds(self) -> float | None:
        """The first ``warmup_steps`` steps' seconds beyond the steady rate (at least 0), summed
        over the attempts; ``None`` before this attempt's warm-up and steady steps are done, or
        where an earlier attempt's are not known."""
        median = self.median
        if self._warmup_seconds is None or median is None or self.earlier_startup is None:
            return None
        extra = max(0.0, self._warmup_seconds - self._warmup_images / median)
        return self.earlier_startup + extra

    def state_dict(self) -> dict[str, Any]:
        seconds = self.total_seconds()
        return {
            "rates": list(self.rates),
            "seconds": seconds,
            "attempts": self.attempts,
            "startup_seconds": self.startup_seconds(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """The costs of the attempts before this one; a value that is not what :meth:`state_dict`
        writes leaves them unknown."""
        rates, seconds = state_dict.get("rates"), state_dict.get("seconds")
        attempts = state_dict.get("attempts")
        self._restored = True
        self.attempts = attempts + 1 if _count(attempts) else 2
        numbers = isinstance(rates, list) and all(_positive(rate) for rate in rates)
        self.earlier_rates = [float(rate) for rate in rates] if numbers else []
        self.earlier_seconds = float(seconds) if _positive(seconds) or seconds == 0 else None
        startup = state_dict.get("startup_seconds")
        self.earlier_startup = float(startup) if _positive(startup) or startup == 0 else None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.ckpt_path is not None and not self._restored:
            self.earlier_seconds, self.attempts = None, 2  # resumed from a checkpoint without them
            self.earlier_startup = None
        self._last_end, self._steps_seen, self._dirty = None, 0, False
        self.rates = list(self.earlier_rates)
        self._recent.clear()
        self.load_avg_start = load_average()
        self._fit_started = time.perf_counter()
        self._train_started, self._warmup_images, self._warmup_seconds = None, 0, None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._train_started = time.perf_counter()

    def _not_training(self, *_: Any) -> None:
        self._dirty = True

    on_validation_start = _not_training
    on_test_start = _not_training
    on_save_checkpoint = _not_training
    on_train_epoch_start = _not_training

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
        dirty, self._dirty = self._dirty, False
        self._steps_seen += 1
        if self._steps_seen <= self.warmup_steps:
            self._warmup_images += len(batch[1]) * trainer.world_size
            if self._steps_seen == self.warmup_steps and self._train_started is not None:
                self._warmup_seconds = now - self._train_started
        if last is None or dirty or self._steps_seen <= self.warmup_steps or now <= last:
            return
        rate = len(batch[1]) * trainer.world_size / (now - last)
        self.rates.append(rate)
        self._recent.append(rate)
        if len(self._recent) == self.window:
            median = statistics.median(self._recent)
            pl_module.log("train/images_per_sec", median, on_step=True, on_epoch=False)


def _count(value: Any) -> bool:
    return is_number(value) and isinstance(value, int) and value >= 1


def _positive(value: Any) -> bool:
    return is_number(value) and math.isfinite(value) and value > 0
