"""Callbacks and a checkpoint plugin that make a real run fail, stop or stall at a given step:
a signal, a crash, a diverged loss, a disk that fills up mid-write, a pause. A run imports one by
name (:func:`tests.support.presets.plug`: ``+callbacks.crash._target_=tests.support.faults.
CrashAtStep``), also a console script run as a process (:func:`tests.support.runners.run_cli`
puts the repository on ``PYTHONPATH``)."""

from __future__ import annotations

import errno
import io
import os
import signal
from pathlib import Path
from typing import Any

import lightning as L
import torch

from vitattn.runs.checkpoint_io import AtomicCheckpointIO


class SigtermAtStep(L.Callback):
    """Send this process SIGTERM when the global step reaches ``step`` (a pre-empted job)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


class SigtermInValidation(L.Callback):
    """Send this process SIGTERM during the validation after training step ``step``: at its end
    (``batch`` unset: the signal lands late, after the step's last validation batch, as its
    checkpoints are written) or after its validation batch ``batch`` (in the middle of it)."""

    def __init__(self, step: int, batch: int | None = None) -> None:
        self.step = step
        self.batch = batch

    def _due(self, trainer: L.Trainer) -> bool:
        fitting = trainer.state.fn == "fit" and not trainer.sanity_checking
        return fitting and trainer.global_step == self.step

    def on_validation_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self.batch is not None and self._due(trainer) and batch_idx == self.batch:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_validation_end(self, trainer: L.Trainer, *args: Any) -> None:
        if self.batch is None and self._due(trainer):
            os.kill(os.getpid(), signal.SIGTERM)


class SigkillAtStep(L.Callback):
    """SIGKILL this process when the global step reaches ``step`` (a power cut, the OOM killer):
    nothing is saved for it."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class SigintAtStep(L.Callback):
    """Press Ctrl-C (send SIGINT) ``times`` times when the global step reaches ``step``."""

    def __init__(self, step: int, times: int = 1) -> None:
        self.step = step
        self.times = times

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            for _ in range(self.times):
                os.kill(os.getpid(), signal.SIGINT)


class FailingCheckpointIO(AtomicCheckpointIO):
    """Fail the ``failing_save``-th write of ``last.ckpt`` half-way through: with a full disk
    (``ENOSPC``), or by SIGKILL of the whole process (``how="kill"``)."""

    def __init__(self, failing_save: int = 2, how: str = "enospc") -> None:
        super().__init__()
        self.failing_save = failing_save
        self.how = how
        self.saves_of_last = 0
        self._fail_this_write = False

    def save_checkpoint(self, checkpoint: dict, path: Any, storage_options: Any = None) -> None:
        if Path(path).name == "last.ckpt":
            self.saves_of_last += 1
            self._fail_this_write = self.saves_of_last == self.failing_save
        super().save_checkpoint(checkpoint, path, storage_options)

    def write(self, checkpoint: dict, handle: Any) -> None:
        if not self._fail_this_write:
            super().write(checkpoint, handle)
            return
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        handle.write(buffer.getvalue()[: buffer.tell() // 2])
        handle.flush()
        if self.how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class RecordingCheckpointIO(AtomicCheckpointIO):
    """Append the global step of every write of ``last.ckpt`` to the file ``record``, one line
    each: how many times a run saved what."""

    def __init__(self, record: str) -> None:
        super().__init__()
        self.record = Path(record)

    def save_checkpoint(self, checkpoint: dict, path: Any, storage_options: Any = None) -> None:
        super().save_checkpoint(checkpoint, path, storage_options)
        if Path(path).name == "last.ckpt":
            with self.record.open("a") as record:
                record.write(f"{checkpoint['global_step']}\n")


PAUSE_SECONDS = "TESTS_PAUSE_SECONDS"
"""The environment variable that sets :class:`PauseAfterStep`'s pause where its settings do not:
the process a test kills pauses, a continuation with the same settings does not wait."""


class PauseAfterStep(L.Callback):
    """Sleep ``seconds`` (by default ``$TESTS_PAUSE_SECONDS``, else not at all) after every
    training step from ``step`` on: a run that stays busy long enough for another process to
    meet it."""

    def __init__(self, step: int, seconds: float | None = None) -> None:
        self.step = step
        self.seconds = float(os.environ.get(PAUSE_SECONDS, "0")) if seconds is None else seconds

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step >= self.step:
            import time

            time.sleep(self.seconds)


WAIT_FOR = "TESTS_WAIT_FOR"
"""The environment variable naming the file :class:`WaitAtStep` waits for; a process without it
(a continuation with the same settings) does not wait."""
MOST_WAITED = 300.0
"""The most seconds :class:`WaitAtStep` waits for its file: a test that never gives it ends."""


class WaitAtStep(L.Callback):
    """At the end of training step ``step``, create the file ``reached`` and wait until the file
    ``release`` (by default the one named by ``$TESTS_WAIT_FOR``) exists, at most
    :data:`MOST_WAITED` seconds: a run held at a known point, by events and not by time, while
    another process meets it. Without either it only marks ``reached``."""

    def __init__(self, step: int, reached: str, release: str | None = None) -> None:
        self.step = step
        self.reached = Path(reached)
        self.release = release

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step != self.step:
            return
        self.reached.touch()
        release = self.release or os.environ.get(WAIT_FOR)
        if not release:
            return
        import time

        deadline = time.monotonic() + MOST_WAITED
        while not Path(release).exists() and time.monotonic() < deadline:
            time.sleep(0.1)


class CrashAtStep(L.Callback):
    """Raise an unexpected ``RuntimeError`` at global step ``step`` (a bug in the middle of a
    run)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError(f"boom at step {self.step}")


class NanLossAtStep(L.Callback):
    """Make the parameters NaN after ``step`` steps, so the next loss is NaN (a diverged run)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any):
        if trainer.global_step == self.step:
            with torch.no_grad():
                for parameter in pl_module.parameters():
                    parameter.fill_(float("nan"))


class InfiniteLossAtStep(L.Callback):
    """From global step ``step`` on, the training step returns a loss of +inf (its logits are
    finite, the loss overflows): the other way a run diverges."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any
    ) -> None:
        if trainer.global_step != self.step:
            return
        training_step = pl_module.training_step

        def infinite(*step_args: Any, **step_kwargs: Any) -> Any:
            loss = training_step(*step_args, **step_kwargs)
            return loss * float("inf")

        pl_module.training_step = infinite  # type: ignore[method-assign]


class SwapStudyAtStart(L.Callback):
    """Replace the Optuna study file at ``study`` with another study, ``other`` (someone who can
    write the sweep directory, while a trial of the search trains)."""

    def __init__(self, study: str, other: str) -> None:
        self.study, self.other = Path(study), Path(other)

    def on_train_start(self, trainer: L.Trainer, *args: Any) -> None:
        os.replace(self.other, self.study)


class FloodStudyAtSetup(L.Callback):
    """Add ``trials`` failed trials to the Optuna study file at ``study`` as the fit is set up
    (someone who can write the sweep directory, while the search runs): before the pruner's
    callback reads the study where this one comes first."""

    def __init__(self, study: str, trials: int) -> None:
        self.study, self.trials = Path(study), trials

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        from tests.support.studies import add_trials

        add_trials(self.study, self.trials, params=1)


class ReplaceFolderAtStep(L.Callback):
    """When the global step reaches ``step``, in the run whose directory is ``run``, move the
    folder ``folder`` (where there is one) aside to ``<folder>.real`` and put a symbolic link to
    ``target`` at its name: someone who can write the run directory, while the run trains."""

    def __init__(self, run: str, folder: str, target: str, step: int) -> None:
        self.run, self.folder, self.target, self.step = Path(run), Path(folder), target, step

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        from hydra.core.hydra_config import HydraConfig

        if trainer.global_step != self.step:
            return
        if Path(HydraConfig.get().runtime.output_dir).absolute() != self.run.absolute():
            return  # another job of the sweep
        if self.folder.is_dir() and not self.folder.is_symlink():
            self.folder.rename(self.folder.with_name(self.folder.name + ".real"))
        self.folder.symlink_to(self.target)


class ReplaceEventFileAtStep(L.Callback):
    """When the global step reaches ``step``, move the run's TensorBoard event file aside (to
    ``<name>.real``) and put a symbolic link to the file ``target`` at its name."""

    def __init__(self, target: str, step: int) -> None:
        self.target, self.step = target, step

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step != self.step:
            return
        for events in Path(trainer.default_root_dir).glob("events.out.tfevents.*"):
            events.rename(events.with_name(events.name + ".real"))
            events.symlink_to(self.target)
