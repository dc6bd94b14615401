"""Lightning callbacks that the contracts rely on: throughput, a validation at the last step, a
checkpoint when SIGTERM or Ctrl-C interrupts the run, and a stop when the loss stops being
finite."""

from __future__ import annotations

import logging
import os
import signal
import statistics
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitattn.errors import TrainingError
from vitattn.runs.layout import RunDir

log = logging.getLogger(__name__)


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
    """

    def __init__(self, window: int = 20, warmup_steps: int = 5) -> None:
        super().__init__()
        self.window = max(1, int(window))
        self.warmup_steps = warmup_steps
        self.rates: list[float] = []
        self.load_avg_start: float | None = None
        self._recent: deque[float] = deque(maxlen=self.window)
        self._last_end: float | None = None
        self._steps_seen = 0
        self._dirty = False

    @property
    def median(self) -> float | None:
        """The median images/s over the fit's steady steps; ``None`` without any."""
        return statistics.median(self.rates) if self.rates else None

    @property
    def steady_steps(self) -> int:
        """How many steps ``median`` is over."""
        return len(self.rates)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.rates, self._last_end, self._steps_seen, self._dirty = [], None, 0, False
        self._recent.clear()
        self.load_avg_start = load_average()

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
        if last is None or dirty or self._steps_seen <= self.warmup_steps or now <= last:
            return
        rate = len(batch[1]) * trainer.world_size / (now - last)
        self.rates.append(rate)
        self._recent.append(rate)
        if len(self._recent) == self.window:
            median = statistics.median(self._recent)
            pl_module.log("train/images_per_sec", median, on_step=True, on_epoch=False)


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


class RandomStateInCheckpoint(L.Callback):
    """Keep torch's global random state (CPU and CUDA) in every checkpoint, and restore it when a
    fit resumes from one, so that what draws from it while training continues with the numbers
    an uninterrupted run would draw: Performer's and RFA's redrawn features, Reformer's
    rotations. (The data's shuffling and augmentation have generators of their own, saved by the
    data module.) Lightning restores callbacks only when a fit resumes, not when a checkpoint's
    weights are loaded for evaluation or fine-tuning."""

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        torch.set_rng_state(state_dict["torch"])
        cuda = state_dict.get("cuda", [])
        if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)


def _exit_at_once(signum: int, frame: Any) -> None:
    print("\nCtrl-C again: exiting at once, without saving", file=sys.stderr, flush=True)
    os._exit(128 + signal.SIGINT)


class CheckpointOnInterrupt(L.Callback):
    """Save ``last.ckpt`` when SIGTERM or Ctrl-C stops the run, so that ``vitattn-train
    resume=true hydra.run.dir=<run>`` continues it exactly where it stopped.

    SIGTERM (a pre-empted job, ``kill``, SLURM's time limit): Lightning's handler flags it, the
    current step finishes (or the current validation batch), and Lightning raises
    ``SIGTERMException`` at the end of the step. The checkpoint is written at that point, after
    the step's bookkeeping and before the next batch is fetched and augmented, so the resumed run
    continues with the next batch, step number and random draws.

    Ctrl-C (SIGINT): while fitting, this callback's handler replaces Python's
    ``KeyboardInterrupt`` and raises the same flag, so the first Ctrl-C stops the run the same
    way (``interrupted`` tells the two apart); a second Ctrl-C exits at once with status 130,
    saving nothing more.
    """

    def __init__(self, dirpath: str | Path, filename: str = "last") -> None:
        self.path = Path(dirpath) / f"{filename}.ckpt"
        self.interrupted = False
        self._saved_at_step: int | None = None
        self._previous_handler: Any = None

    @property
    def signal_name(self) -> str:
        return "Ctrl-C" if self.interrupted else "SIGTERM"

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_first_sigint(signum: int, frame: Any) -> None:
            self.interrupted = True
            # Lightning's own SIGTERM flag: its loops stop at the end of the step (or the
            # validation batch), where a checkpoint resumes exactly.
            trainer._signal_connector.received_sigterm = True
            signal.signal(signal.SIGINT, _exit_at_once)
            print(
                "\nCtrl-C: stopping after this step and saving checkpoints/last.ckpt "
                "(Ctrl-C again exits at once)",
                file=sys.stderr,
                flush=True,
            )

        self._previous_handler = signal.signal(signal.SIGINT, on_first_sigint)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._previous_handler is not None:
            signal.signal(signal.SIGINT, self._previous_handler)
            self._previous_handler = None

    def _save(self, trainer: L.Trainer) -> None:
        if self._saved_at_step == trainer.global_step:
            return
        trainer.save_checkpoint(self.path)
        self._saved_at_step = trainer.global_step
        log.warning(
            "%s: stopping after step %d; saved %s", self.signal_name, trainer.global_step, self.path
        )

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.received_sigterm:
            self._save(trainer)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if isinstance(exception, SIGTERMException):
            # The signal came after this step's on_train_batch_end: Lightning stopped at the end
            # of the step, which is where the checkpoint belongs.
            self._save(trainer)


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
        last = RunDir(Path(trainer.default_root_dir)).last_checkpoint
        kept = f"; the last good weights are in {last}" if last.is_file() else ""
        raise TrainingError(
            f"train/loss became NaN or infinite by step {trainer.global_step}{kept}; lower "
            "optimizer.lr, set trainer.gradient_clip_val, or train in fp32 (trainer.precision)"
        )


class ProgressBar(TQDMProgressBar):
    """Lightning's progress bar, showing ``train/loss`` read only when the bar refreshes.

    A metric logged with ``prog_bar=True`` is turned into a Python number by Lightning at the end
    of every step, which on a GPU waits for the step to finish. ``train/loss`` is therefore
    logged without it, and read here from the callback metrics every ``refresh_rate`` steps.
    """

    SHOWN = ("train/loss",)

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        for name in self.SHOWN:
            value = trainer.callback_metrics.get(name)
            if isinstance(value, torch.Tensor) and trainer.training:
                metrics[name] = f"{value.item():.3f}"
        return metrics
