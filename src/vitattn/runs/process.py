"""What this process holds of run directories: the locks it took (:mod:`vitattn.runs.lock`) and
what an existing run directory held before Hydra wrote into it (:mod:`vitattn.runs.task`).

One :class:`RunProcess` per process (:func:`this_process`): the console script records into it
before Hydra starts, the task reads it once the app runs, and its locks are given back when the
process exits. A test that runs a console script in its own process gives the command a fresh
one, as a new process would have (``this_process.cache_clear()``), instead of patching state.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vitattn.errors import VitattnError
from vitattn.runs.files import remove_file, replacing, unconfine
from vitattn.runs.layout import HOLDER, RESERVE


@dataclass(frozen=True)
class FileBefore:
    """A regular file of a run directory where Hydra is about to write, as it was: which file it
    was, its size, mode and times, and its bytes where it has at most
    :data:`vitattn.runs.task.MAX_KEPT` (a log is appended to, so it is put back by cutting it to
    its size, never copied: a sparse log of gigabytes stays a few bytes on disk)."""

    identity: tuple[int, int]
    """``(st_dev, st_ino)``."""
    size: int
    mode: int
    times: tuple[int, int]
    """``(st_atime_ns, st_mtime_ns)``."""
    content: bytes | None


@dataclass
class RunDirectoryBefore:
    """What an existing run directory held where Hydra is about to write, before this command.

    ``files`` records its ``.hydra/`` files and ``*.log`` files, by their path in it,
    so that a run refused after Hydra wrote them (a resume whose data is missing, say) can put
    them back byte for byte; ``hydra_dir``, whether its ``.hydra/`` folder was there;
    ``existed`` is ``False`` for a directory this command creates.
    """

    path: Path
    existed: bool
    files: dict[str, FileBefore] = field(default_factory=dict)
    hydra_dir: bool = False


@dataclass(frozen=True)
class HolderRecord:
    """A holder's record found in a run directory as a command took it: its bytes, and the
    mode and owner its file had, to put back as they were."""

    content: bytes
    mode: int
    uid: int
    gid: int


@dataclass
class RunProcess:
    """The run directories this process holds (``held``: their locks, by directory; a second
    request for one of them, the job of a sweep whose directory the command holds, is granted at
    once), the holder's record each had before (``records_before``, or ``None``), and
    the record of the run directory it is about to write (``before``)."""

    held: dict[Path, Any] = field(default_factory=dict)
    records_before: dict[Path, HolderRecord | None] = field(default_factory=dict)
    before: RunDirectoryBefore | None = None
    missing_parents: tuple[Path, ...] = ()
    """The folders above a single run's directory that were not there before this command
    (``outputs/train/runs`` of a first run), the deepest first: a run refused before it started
    removes those it leaves empty (:func:`vitattn.runs.task.remove_unstarted_run`)."""

    def release(self, path: Path) -> None:
        """Give ``path``'s lock back and the space set aside there, and put the holder's record
        back as it was before (:func:`put_record_back`); its other files stay, unlocked."""
        lock = self.held.pop(path, None)
        if lock is not None:
            try:
                put_record_back(path, self.records_before.pop(path, None))
            finally:
                free_reserve(path)
                unconfine(path)
                lock.release()

    def release_all(self) -> None:
        """Give back every lock this process holds."""
        for path in list(self.held):
            self.release(path)


def put_record_back(run_dir: Path, record: HolderRecord | None) -> None:
    """``run_dir``'s holder's record as it was before this process held the directory:
    ``record`` (its bytes, mode and, where this process may set it, owner), or no file where
    there was none. While the lock is still held, so that no other holder's record is touched;
    where that cannot be done (a full disk, a link planted since: nothing is written through
    it) this process's record stays."""
    holder = run_dir.expanduser().absolute() / HOLDER
    with contextlib.suppress(OSError, VitattnError):
        if record is None:
            if holder.is_file() and not holder.is_symlink():
                remove_file(holder)
            return
        with replacing(holder) as handle:
            os.fchmod(handle.fileno(), stat.S_IMODE(record.mode))
            with contextlib.suppress(OSError):  # another's file: only root may give it back
                os.fchown(handle.fileno(), record.uid, record.gid)
            handle.write(record.content)


def free_reserve(run_dir: Path) -> None:
    """Give the space a lock set aside in ``run_dir`` back to the filesystem (nothing where the
    directory was replaced since it was taken: :func:`vitattn.runs.files.check_confined`)."""
    with contextlib.suppress(VitattnError):
        remove_file(run_dir.expanduser().absolute() / RESERVE)


@functools.cache
def this_process() -> RunProcess:
    """This process's :class:`RunProcess`; its locks are given back when the process exits."""
    process = RunProcess()
    atexit.register(process.release_all)
    return process
