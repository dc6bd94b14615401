"""A full disk, recognised whatever the writer raises, and a log file that goes quiet on one.

Python's own writes raise ``OSError(ENOSPC)``; torch's checkpoint writer turns that into a
``RuntimeError`` (``[enforce fail at inline_container.cc] ... unexpected pos``) that carries no
errno. :func:`disk_full` recognises both: the errno anywhere in the exception's chain, or a
``RuntimeError`` of a writer with (almost) no space left where it wrote. And a log file on the
full disk must not print ``--- Logging error ---`` with a traceback for every line logged after:
:class:`QuietOnFullDiskFileHandler` stops writing its file instead (the console keeps logging);
nor may TensorBoard's writer thread print one (:func:`quiet_full_disk_in_threads`).
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

from vitattn.runs.files import UnsafeWriteError, open_for_append

FULL = (errno.ENOSPC, errno.EDQUOT)
NEARLY_NOTHING = 1 << 20
"""Below this many free bytes, a write that failed without an errno failed for want of space."""


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def file_system_of(path: Path) -> os.statvfs_result | None:
    """``statvfs`` of the file system holding ``path`` (its nearest existing parent); ``None``
    where it cannot be read."""
    for candidate in [path, *path.parents]:
        if candidate.exists():
            try:
                return os.statvfs(candidate)
            except OSError:
                return None
    return None


def free_bytes(path: Path) -> int | None:
    """Free bytes on the filesystem holding ``path`` (as :func:`shutil.disk_usage` counts
    them: those an unprivileged process may take)."""
    stats = file_system_of(path)
    return None if stats is None else stats.f_bavail * stats.f_frsize


def short_of_space(path: Path, needed: int) -> bool:
    """Whether the file system holding ``path`` has fewer than ``needed`` bytes free; ``False``
    where that cannot be known, and on file systems with no size of their own (``/proc``:
    nothing to fill)."""
    stats = file_system_of(path)
    return stats is not None and stats.f_blocks > 0 and stats.f_bavail * stats.f_frsize < needed


def disk_full(error: BaseException, path: Path) -> bool:
    """Whether ``error``, raised while writing under ``path``, means the disk is full."""
    chain = _chain(error)
    if any(isinstance(e, OSError) and e.errno in FULL for e in chain):
        return True
    if any(isinstance(e, RuntimeError | OSError) for e in chain):
        free = free_bytes(path)
        return free is not None and free < NEARLY_NOTHING
    return False


def space_left(path: Path) -> str:
    """``"12 KiB free"`` on ``path``'s filesystem, for a message; ``"1.0 MiB free, no file
    entry (inode) free"`` where its files' count is at its limit."""
    free = free_bytes(path)
    if free is None:
        return "free space unknown"
    said = f"{byte_size(free)} free"
    if no_inode_left(path):
        said += ", no file entry (inode) free"
    return said


def byte_size(count: int) -> str:
    """``count`` bytes in words, in the largest binary unit it reaches: ``"340.5 MiB"``,
    ``"12 bytes"``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} bytes"


def no_inode_left(path: Path) -> bool:
    """Whether the file system holding ``path`` counts its files and has room for no more."""
    stats = file_system_of(path)
    return stats is not None and stats.f_files > 0 and stats.f_favail == 0


def full_disk_message(path: Path) -> str:
    """The one line for a run that stopped on a full disk."""
    return (
        f"no space left on the device of {path} ({space_left(path)}); the checkpoints written "
        "before are intact; free space (or set hydra.run.dir elsewhere) and resume"
    )


def quiet_full_disk_in_threads() -> None:
    """Say nothing when a background writer (TensorBoard's event-file thread) dies of a full
    disk: the main thread meets the same error at its next write and reports it in one line.
    Every other exception in a thread is reported as before."""
    previous = threading.excepthook
    if getattr(previous, "quiet_on_full_disk", False):
        return

    def hook(args: Any) -> None:
        if isinstance(args.exc_value, OSError) and args.exc_value.errno in FULL:
            return
        previous(args)

    hook.quiet_on_full_disk = True  # type: ignore[attr-defined]
    threading.excepthook = hook


class QuietOnFullDiskFileHandler(logging.FileHandler):
    """A ``logging.FileHandler`` that stops writing its file when the disk is full, instead of
    printing a traceback for each record it can no longer write, and never opens its file
    through a symbolic link: a link at ``train.log`` leaves it writing nothing, and the refusal
    in :attr:`refused` for the task to end the run with (:func:`refused_log_file`)."""

    stopped = False
    refused: UnsafeWriteError | None = None

    def _open(self) -> Any:  # logging's name
        try:
            return open_for_append(Path(self.baseFilename), self.mode, self.encoding, self.errors)
        except UnsafeWriteError as error:  # Hydra builds the handler: no one-line error there
            self.refused, self.stopped = error, True
            return open(os.devnull, "w")  # the stream it closes; it writes nothing

    def emit(self, record: logging.LogRecord) -> None:
        if not self.stopped:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        error = sys.exc_info()[1]
        if isinstance(error, OSError) and error.errno in FULL:
            self.stopped = True
            return
        super().handleError(record)

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as error:
            if error.errno not in FULL:
                raise
            self.stopped = True

    def close(self) -> None:
        try:
            super().close()
        except OSError as error:
            if error.errno not in FULL:
                raise


def refused_log_file() -> None:
    """Raise the :class:`UnsafeWriteError` of a log file handler that met a symbolic link where
    its file is (one Hydra configured after every check before it ran)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, QuietOnFullDiskFileHandler) and handler.refused is not None:
            raise handler.refused
