"""One process per run directory: a lock held while a command writes a run directory.

Two processes writing one run directory (a second ``resume=true`` into a run that is still
training, a fine-tune into it) would interleave checkpoints, TensorBoard events and
``metrics.json``. A command therefore holds ``<run>/.vitattn.lock`` (``filelock``: an ``flock``
the kernel drops when the holder dies, so a lock left by a killed process blocks nothing) from
before Hydra writes until it exits, and records who holds it in ``<run>/.vitattn.lock.json``
(PID, start time, command) for the one line that refuses the next; when it gives the lock back,
that record is put back as it was before the command (none, or an earlier holder's), so a
command that was refused leaves the directory byte for byte as it found it. While it holds the
directory it also keeps a little space there (``.vitattn.reserve``, ``layout.RESERVE``) for
the last word of a run that fills the disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from vitattn.errors import VitattnError
from vitattn.runs.files import (
    CLOEXEC,
    NOFOLLOW,
    UnreadableFileError,
    confine,
    one_line,
    open_regular,
    read_json,
    refuse_link,
    unsafe,
    write_bytes,
    write_text,
)
from vitattn.runs.layout import HOLDER, LOCK, RESERVE, refuse_planted_links
from vitattn.runs.process import HolderRecord, free_reserve, this_process
from vitattn.utils.config import MAX_LABEL, cut_apart

RESERVE_BYTES = 64 << 10
"""Space set aside while a run holds its directory, given back when the disk fills up so that
``metrics.json`` can still say how the run ended; removed when the run ends."""
MAX_COMMAND = 4096
"""Characters of the command line a holder's record keeps."""
PROBE_WAIT = 1.0
"""Seconds a command waits for a run directory's lock before it is refused as in use: a summary
asking whether a run is still running (:func:`held_elsewhere`) holds it, shared, for an instant,
and a run starting then is not refused for it."""
MAX_RECORD = 64 << 10
"""Bytes of a holder's record found in a directory that a command keeps, to put back when it
ends (its own records are a few hundred); a larger file is refused before anything is written."""


class RunDirectoryInUseError(VitattnError):
    """Another live process holds the run directory's lock."""


def ddp_worker() -> bool:
    """Whether this process is a DDP worker Lightning started beside the rank-zero one
    (``LOCAL_RANK`` not 0), in a run directory that process made and holds."""
    return os.environ.get("LOCAL_RANK", "0") != "0"


def hold_run_directory(run_dir: Path, program: str) -> None:
    """Take ``run_dir``'s lock until :func:`release_run_directory` or the process exits; refuse
    in one line, naming the holder, when another live process has it, and, before anything is
    written, a directory with a symbolic link where a file is written through
    (:func:`vitattn.runs.layout.refuse_planted_links`: the lock itself, which ``filelock``
    opens as it is, the log, ``.hydra/``, a temporary)."""
    from filelock import FileLock, Timeout

    held = this_process().held
    path = run_dir.expanduser().absolute()
    if path in held or ddp_worker():
        return  # its rank-zero process holds the directory
    made = [folder for folder in (path, *path.parents) if not folder.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        remove_made([], made)
        raise
    refuse_planted_links(path)  # filelock, Hydra and the log open their files as they are
    for name in (LOCK, HOLDER, RESERVE):  # a folder there was filelock's IsADirectoryError
        if (path / name).exists() and not (path / name).is_file():
            remove_made([], made)
            raise unsafe(path / name)
    lock_made = not (path / LOCK).exists()
    lock = FileLock(str(path / LOCK), timeout=PROBE_WAIT)
    try:
        lock.acquire()
    except Timeout:
        raise RunDirectoryInUseError(in_use_message(path)) from None
    except OSError:
        refuse_link(path / LOCK)  # planted since: filelock's O_NOFOLLOW refused it
        remove_made([path / LOCK] if lock_made else [], made)
        raise
    try:
        record_before = read_record(path / HOLDER)
    except BaseException:
        lock.release()
        remove_made([path / LOCK] if lock_made else [], made)
        raise
    held[path] = lock
    this_process().records_before[path] = record_before
    confine(path)  # from here on, every write and deletion in it checks it is still this one
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    holder = {
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "program": program,
        "command": cut_apart(command, MAX_COMMAND),
    }
    try:
        write_text(path / HOLDER, json.dumps(holder) + "\n")
        write_reserve(path)
    except BaseException:
        this_process().release(path)  # the record put back as it was
        remove_made([path / LOCK] if lock_made else [], made)
        raise


def read_record(path: Path) -> HolderRecord | None:
    """The holder's record at ``path`` (``None`` where there is none): its bytes, read without
    following a link, at most :data:`MAX_RECORD` of them, and its file's mode and owner;
    anything else there is one line (:class:`UnreadableFileError`)."""
    too_big = f"more than a holder's record (at most {MAX_RECORD})"
    try:
        opened = open_regular(
            path, max_bytes=MAX_RECORD, too_big=too_big, advice="remove it", missing_ok=True
        )
    except FileNotFoundError:
        return None
    with opened as handle:
        status = os.fstat(handle.fileno())
        content = handle.read(MAX_RECORD + 1)[:MAX_RECORD]
        return HolderRecord(content, status.st_mode, status.st_uid, status.st_gid)


def remove_made(files: Sequence[Path], folders: Sequence[Path] = ()) -> None:
    """Remove what a refused :func:`hold_run_directory` made: ``files``, then ``folders`` (from
    the deepest), each only as it was made, a file and an empty folder; what another process put
    there since stays."""
    for file in files:
        with contextlib.suppress(OSError):
            if file.is_file() and not file.is_symlink() and file.stat().st_size == 0:
                file.unlink()
    for folder in folders:  # listed from the deepest
        with contextlib.suppress(OSError):
            folder.rmdir()  # only an empty one


def write_reserve(path: Path) -> None:
    """Set :data:`RESERVE_BYTES` aside in ``path`` (nothing where the disk is already full)."""
    try:
        write_bytes(path / RESERVE, bytes(RESERVE_BYTES))
    except OSError:  # already full: nothing to set aside
        free_reserve(path)


def in_use_message(path: Path) -> str:
    """The refusal: the directory, and the holder's PID and start time where recorded (a holder
    file that cannot be read, or holds something else, names no holder)."""
    try:
        holder = read_json(path / HOLDER, dict)
        who = one_line(f"{holder['program']} (PID {holder['pid']}, started {holder['started']})")
        who = cut_apart(who, MAX_LABEL)  # the holder file's text: a line, however long it is
    except (UnreadableFileError, KeyError):
        who = "another process"
    return (
        f"{path} is in use by {who}: one process per run directory; wait for it to end or stop "
        "it (a killed process leaves no lock behind)"
    )


def held_elsewhere(run_dir: Path) -> bool:
    """Whether another live process holds ``run_dir``'s lock now: a shared ``flock`` of its
    lock file is tried, and given back at once where it is free. The file is opened to read
    only, never through a link, never created or changed, so a summary of someone else's
    sweep asks this too; a lock file that is missing or not a regular file is held by none."""
    path = run_dir.expanduser().absolute()
    if path in this_process().held:
        return False
    flags = os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK | CLOEXEC
    try:
        descriptor = os.open(path / LOCK, flags)
    except OSError:  # none, a link (ELOOP), unreadable: no lock of a run
        return False
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return False
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:  # a filesystem without flock: none is held through it
            return False
        return False  # the shared lock goes with the descriptor
    finally:
        os.close(descriptor)


def release_run_directory(run_dir: Path) -> None:
    """Give ``run_dir``'s lock back (a sweep's job when it ends); its files stay, unlocked."""
    this_process().release(run_dir.expanduser().absolute())


def release_all() -> None:
    """Give back every lock this process holds."""
    this_process().release_all()
