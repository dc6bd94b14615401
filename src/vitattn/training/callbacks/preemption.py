"""A SLURM job warned of its pre-emption or time limit saves at its step and is requeued.

Hydra's submitit launcher asks SLURM to send ``SIGUSR2`` (``SUBMITIT_PREEMPT_SIGNAL``) some time
before a job is stopped (``--signal=USR2@<signal_delay_s>``). submitit's own handler requeues the
job at once, in the middle of a step, with nothing saved since the last checkpoint.
:class:`RequeueOnPreemption` takes that signal while the job fits: it asks the run to stop at the
end of the current step, where :class:`vitattn.training.callbacks.CheckpointOnInterrupt` writes
``last.ckpt`` (as for SIGTERM), then requeues the job with ``scontrol requeue``, as Lightning's
SLURM support does. The requeued job runs the same sweep job again, in the same directory, and
a sweep job with a ``last.ckpt`` continues from it (:mod:`vitattn.runs.continuation`).

A plain SIGTERM (SLURM's pre-emption without a warning signal, or ``scancel``) is
``CheckpointOnInterrupt``'s: ``last.ckpt`` at the step; a partition that requeues pre-empted jobs
(``--requeue``) then runs the job again, and it continues the same way.

Outside SLURM (no ``SLURM_JOB_ID``) this callback does nothing.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from typing import Any

import lightning as L

log = logging.getLogger(__name__)

SUBMITIT_SIGNAL = "SUBMITIT_PREEMPT_SIGNAL"


def warning_signal() -> signal.Signals:
    """The signal SLURM sends before stopping a submitit job: ``SIGUSR2`` unless submitit's
    ``SUBMITIT_PREEMPT_SIGNAL`` names another."""
    return signal.Signals[f"SIG{os.environ.get(SUBMITIT_SIGNAL, 'USR2')}"]


def slurm_job_id() -> str | None:
    """The job to requeue: ``<array job>_<task>`` in a job array, else ``SLURM_JOB_ID``."""
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array is not None and "SLURM_ARRAY_TASK_ID" in os.environ:
        return f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


def requeue(job_id: str) -> bool:
    """``scontrol requeue <job_id>``; whether SLURM took it."""
    try:
        done = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True)
    except OSError as error:
        log.warning("could not requeue SLURM job %s: %s", job_id, error)
        return False
    if done.returncode != 0:
        log.warning("scontrol requeue %s failed: %s", job_id, done.stderr.strip())
        return False
    log.warning("requeued SLURM job %s: it continues from checkpoints/last.ckpt", job_id)
    return True


class RequeueOnPreemption(L.Callback):
    """Under SLURM, turn the pre-emption warning signal into a stop at the end of the step
    (``last.ckpt`` written there) and a requeue of the job (see the module's docstring)."""

    def __init__(self) -> None:
        self.warned = False
        self._previous: Any = None
        self._signal: signal.Signals | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if slurm_job_id() is None or threading.current_thread() is not threading.main_thread():
            return
        self._signal = warning_signal()

        def on_warning(signum: int, frame: Any) -> None:
            self.warned = True
            trainer._signal_connector.received_sigterm = True  # stop after this step
            print(
                f"\n{signal.Signals(signum).name}: pre-empted; saving checkpoints/last.ckpt "
                "after this step, then requeueing",
                file=sys.stderr,
                flush=True,
            )

        self._previous = signal.signal(self._signal, on_warning)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        # Lightning raises SIGTERMException at the end of the step the warning came in, after
        # CheckpointOnInterrupt saved last.ckpt for it (on_train_batch_end).
        self._restore_handler()
        if self.warned and trainer.is_global_zero:
            job_id = slurm_job_id()
            if job_id is not None:
                requeue(job_id)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore_handler()

    def _restore_handler(self) -> None:
        if self._signal is not None:
            signal.signal(self._signal, self._previous or signal.SIG_DFL)
            self._signal = None
