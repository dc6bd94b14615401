"""Checkpoints written whole or not at all: a Lightning ``CheckpointIO`` plugin.

Lightning's own writer hands the finished bytes to fsspec, whose local "transaction" writes a
temporary file in the system's temporary directory and moves it into place. When that directory
is on another filesystem (node-local ``/tmp`` on a cluster) the move is a copy into the target
file, so a kill during the copy leaves a truncated ``last.ckpt``, the very file ``resume=true``
reads; a full disk leaves one too, and the temporary file stays in ``/tmp``.

:class:`AtomicCheckpointIO` writes ``.<name>.partial`` *next to* the checkpoint, flushes and
fsyncs it, and renames it over the checkpoint with ``os.replace``, which is atomic within one
directory: until the new file is complete the previous one stays valid. Any write error
removes the partial file and ends the run in one line (:class:`CheckpointWriteError`) that says
the previous checkpoint is intact; a full disk is named as such also when torch's writer reports
it as a ``RuntimeError`` without an errno (:func:`vitattn.runs.disk.disk_full`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import IO, Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from vitattn.errors import TrainingError
from vitattn.runs.disk import disk_full, space_left
from vitattn.runs.files import PARTIAL, make_folder, remove_file, replacing

log = logging.getLogger(__name__)


class CheckpointWriteError(TrainingError):
    """A checkpoint could not be written (a full disk, a quota, a vanished directory)."""


def remove_partial_checkpoints(directory: str | Path) -> list[Path]:
    """Delete the partial files a killed process left in ``directory``; return them."""
    folder = Path(directory)
    if not folder.is_dir():
        return []
    stale = sorted(folder.glob(f".*{PARTIAL}"))
    for path in stale:
        remove_file(path)
    return stale


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to a partial file in the checkpoint's directory, fsync, ``os.replace``."""

    def __init__(self) -> None:
        super().__init__()
        self.folders: set[Path] = set()

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        self.remember_folder(Path(path).parent)
        target = Path(path)
        try:
            make_folder(target.parent)
            with replacing(target, fsync=True) as handle:  # never through a planted link
                self.write(checkpoint, handle)
            _fsync_directory(target.parent)
        except (OSError, RuntimeError) as error:
            full = disk_full(error, target.parent)
            if not full and not isinstance(error, OSError):
                raise  # torch's writer failed for another reason: not ours to explain
            kept = (
                f"the previous {target.name} is intact"
                if target.is_file()
                else f"there was no earlier {target.name}"
            )
            reason = "No space left on device" if full else (error.strerror or str(error))
            space = f", {space_left(target.parent)}" if full else ""
            raise CheckpointWriteError(
                f"could not write checkpoint {target} ({reason}{space}); {kept}; free space in "
                f"{target.parent} (or set hydra.run.dir elsewhere) and resume"
            ) from error

    def write(self, checkpoint: dict[str, Any], handle: IO[bytes]) -> None:
        """Serialise ``checkpoint`` into the open partial file (what tests replace to inject a
        failure in the middle of a write)."""
        torch.save(checkpoint, handle)

    def remember_folder(self, folder: Path) -> None:
        """A folder this plugin writes or reads checkpoints in: the only places it deletes in."""
        self.folders.add(folder.resolve())

    def load_checkpoint(
        self, path: Any, map_location: Any = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Lightning's read of a checkpoint (a resume, a test), checked as vitattn reads one
        (:func:`vitattn.runs.checkpoints.check_contents`), and with every path in its callbacks'
        state that is no checkpoint file in the checkpoint's own folder dropped
        (:func:`~vitattn.runs.trust.confine_callback_state`), with one warning line, before
        Lightning sees it: a checkpoint never makes Lightning delete a file outside its run, or
        a user's own file in it."""
        from vitattn.runs.checkpoints import check_contents
        from vitattn.runs.trust import confine_callback_state

        if map_location is None:
            checkpoint = super().load_checkpoint(path, weights_only=weights_only)
        else:
            checkpoint = super().load_checkpoint(path, map_location, weights_only)
        check_contents(checkpoint, path)
        folder = Path(path).expanduser().resolve().parent
        self.remember_folder(folder)
        dropped = confine_callback_state(checkpoint, folder)
        if dropped:
            log.warning(
                "%s: its callback state names %d path(s) that are no checkpoint file (.ckpt) in "
                "%s (%s); they were dropped, and nothing but the run's checkpoints is read or "
                "deleted",
                path,
                len(dropped),
                folder,
                ", ".join(dropped[:3]),
            )
        return checkpoint

    def remove_checkpoint(self, path: Any) -> None:
        """Delete a checkpoint file Lightning replaced, only a ``.ckpt`` directly in a folder
        this plugin wrote or read checkpoints in (after resolving ``..`` and links:
        :func:`~vitattn.runs.trust.checkpoint_of`), and never a folder."""
        from vitattn.runs.trust import checkpoint_of

        target = Path(path)
        if not any(checkpoint_of(target, folder) for folder in self.folders) or target.is_dir():
            log.warning("%s was not deleted: it is not a checkpoint file of this run", target)
            return
        remove_file(target)


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (where the platform allows opening a directory)."""
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
