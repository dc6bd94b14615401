"""A run stopped by SIGTERM or Ctrl-C continues where it stopped: ``last.ckpt`` at the end of the
step, and torch's random state in every checkpoint."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitattn.training.callbacks.saving import save_resumable

log = logging.getLogger(__name__)


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
        self._counted_at_step_end = 0
        self._validated_after_step = False
        self._epochs_at_step_end: int | None = None
        self._loops_at_step_end: dict[str, Any] = {}
        self._loops_to_save: dict[str, Any] | None = None

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

    def _save(
        self, trainer: L.Trainer, counted: int | None = None, loops: dict[str, Any] | None = None
    ) -> None:
        """Write ``last.ckpt``; with ``counted``, as Lightning's count of the steps done for the
        loggers (``_batches_that_stepped``, what a resumed run logs its steps at); with
        ``loops``, with that state of the fit loop (its ``state_dict``) in place of the live
        one."""
        if self._saved_at_step == trainer.global_step:
            return
        epoch_loop = trainer.fit_loop.epoch_loop
        counted_now = epoch_loop._batches_that_stepped
        if counted is not None:
            epoch_loop._batches_that_stepped = counted
        self._loops_to_save = loops
        try:
            save_resumable(trainer, self.path)
        finally:
            epoch_loop._batches_that_stepped = counted_now
            self._loops_to_save = None
        self._saved_at_step = trainer.global_step
        log.warning(
            "%s: stopping after step %d; saved %s", self.signal_name, trainer.global_step, self.path
        )

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self._counted_at_step_end = trainer.fit_loop.epoch_loop._batches_that_stepped
        self._validated_after_step = False
        self._epochs_at_step_end = trainer.fit_loop.epoch_progress.total.processed
        self._loops_at_step_end = trainer.fit_loop.state_dict()
        if trainer.received_sigterm:
            self._save(trainer)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            self._validated_after_step = True

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if not isinstance(exception, SIGTERMException):
            return
        # The signal came after this step's on_train_batch_end: Lightning stopped at the end of
        # the step (or of a validation batch), which is where the checkpoint belongs. A step
        # followed by a validation is resumed as Lightning's own checkpoints written during that
        # validation are: the resumed run skips the validation and then counts the step for the
        # loggers. Where the signal landed late (in the validation's last batch, or after it),
        # Lightning counted the step before stopping; saved so, the step was counted twice and
        # every later step logged one too high. The count saved is the one
        # the step ended with.
        ended = self._epochs_at_step_end
        if ended is not None and trainer.fit_loop.epoch_progress.total.processed > ended:
            # The step was the epoch's last, and Lightning ended the epoch (FitLoop.on_advance_end)
            # before stopping. Saved so, the epoch was marked over while the training epoch
            # loop's batch progress still held its last batch: a run of max_steps resumed in the
            # next epoch as at that epoch's end (and trained on other batches than a run never
            # stopped), and a run of max_epochs, not restarted, did not count the step the count
            # above leaves out. The fit loop is saved as the step's end left it, which Lightning
            # resumes as its own checkpoints of a step's end: it ends the epoch, counts the step
            # and starts the next epoch at its first batch.
            self._save(trainer, loops=self._loops_at_step_end)
            return
        self._save(trainer, self._counted_at_step_end if self._validated_after_step else None)

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self._loops_to_save is not None:
            checkpoint["loops"]["fit_loop"] = self._loops_to_save


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
