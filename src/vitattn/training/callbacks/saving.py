"""``last.ckpt`` written at most once a step, whichever callback asks for it."""

from __future__ import annotations

import weakref
from pathlib import Path

import lightning as L

_SAVED: weakref.WeakKeyDictionary[L.Trainer, dict[Path, int]] = weakref.WeakKeyDictionary()
"""For each trainer, the global step at which each of its own writes of a checkpoint happened."""


def save_resumable(trainer: L.Trainer, path: Path) -> None:
    """Write the whole state (to resume from) to ``path``, unless this trainer wrote it there at
    this global step already.

    Two callbacks may want the same step: a run without validation stopped by SIGTERM at a step
    where its checkpoint was due (:class:`~vitattn.training.callbacks.CheckpointWithoutValidation`
    and :class:`~vitattn.training.callbacks.CheckpointOnInterrupt`). The second write would hold
    the same step (its loop counters a batch further on, where a resume from either continues
    alike), paid for in a pre-empted job's grace period. Every rank takes the same decision, so a
    collective save stays collective."""
    saved = _SAVED.setdefault(trainer, {})
    if saved.get(path) == trainer.global_step:
        return
    # the whole state, to resume from; said here, else Lightning logs that it was not set
    # ("`weights_only` was not set, defaulting to `False`")
    trainer.save_checkpoint(path, weights_only=False)
    saved[path] = trainer.global_step
