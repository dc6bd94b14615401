"""Running a Hydra task: one-line errors, no half-written run directories, ``metrics.json``.

The counterpart of lightning-hydra-template's ``task_wrapper``: :func:`run_task` calls a task
(``train``, ``evaluate``, ``finetune``, ``benchmark``) and decides what a failure leaves behind.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import DictConfig

from vitattn.errors import FailedJob, TrainingError, VitattnError, fail, own_refusal
from vitattn.runs.continuation import kept_metrics
from vitattn.runs.disk import (
    disk_full,
    full_disk_message,
    quiet_full_disk_in_threads,
    refused_log_file,
)
from vitattn.runs.files import (
    UnreadableFileError,
    UnsafeWriteError,
    check_confined,
    make_folder,
    open_regular,
    read_json,
    remove_file,
    replacing,
    set_aside_unreadable,
)
from vitattn.runs.layout import ATTEMPTS_FILE, HOLDER, HYDRA_DIR, LOCK, METRICS, RunDir, RunState
from vitattn.runs.lock import RunDirectoryInUseError, hold_run_directory, release_run_directory
from vitattn.runs.process import FileBefore, RunDirectoryBefore, free_reserve, this_process
from vitattn.runs.results import write_json
from vitattn.utils.config import sweep_job

log = logging.getLogger(__name__)
T = TypeVar("T")


HYDRA_WRITES = (HYDRA_DIR,)
"""What Hydra writes into a run directory before the task runs, besides ``*.log`` files."""
HYDRA_FILES = tuple(
    f"{HYDRA_DIR}/{name}" for name in ("config.yaml", "hydra.yaml", "overrides.yaml")
)
"""The files Hydra writes into a run's ``.hydra/`` (each rewritten whole)."""
LOCK_FILES = (LOCK, HOLDER)
MAX_KEPT = 16 << 20
"""The most bytes of a file :func:`remember_run_directory` keeps to put back: Hydra's files are
a few kilobytes, and a log larger than this is put back by cutting it to its size."""


def remember_missing_parents(run_dir: Path) -> None:
    """Record the folders above ``run_dir`` (a single run's, as the command composes it) that
    are not there yet: Hydra makes them with the run's directory."""
    missing = []
    for parent in run_dir.expanduser().absolute().parents:
        if parent.exists() or parent.is_symlink():
            break
        missing.append(parent)
    this_process().missing_parents = tuple(missing)


def remove_missing_parents(output_dir: Path) -> None:
    """Remove the folders :func:`remember_missing_parents` recorded above ``output_dir``, the
    deepest first, each only if it is empty (something else made since lives there: kept)."""
    recorded = this_process().missing_parents
    for parent in recorded:
        if parent not in output_dir.absolute().parents:
            return
        try:
            parent.rmdir()
        except OSError:
            return


def remember_run_directory(run_dir: Path | None) -> None:
    """Record what ``run_dir`` (``hydra.run.dir`` of a single run) holds before Hydra writes:
    each file Hydra writes there (:class:`FileBefore`), in memory. A link at such a name is not
    read (it is removed if the run is refused)."""
    process = this_process()
    if run_dir is None:
        process.before = None
        return
    path = run_dir.expanduser().absolute()
    if not path.is_dir():
        process.before = RunDirectoryBefore(path, existed=False)
        return
    hydra_dir = path / HYDRA_DIR
    files = {}
    for relative in _written_names(path):
        before = _file_before(path / relative)
        if before is not None:
            files[relative] = before
    process.before = RunDirectoryBefore(
        path, existed=True, files=files, hydra_dir=hydra_dir.is_dir() and not hydra_dir.is_symlink()
    )


def _written_names(path: Path) -> list[str]:
    """The paths in the run directory ``path`` Hydra writes before the task runs: its
    ``.hydra/`` files (not through a link at ``.hydra``) and ``*.log`` files. The lock's files
    are the lock's (:mod:`vitattn.runs.lock`): the lock is held on its file, which must stay the
    same file (a new one let a second process take the directory), and the holder's record is
    put back as the lock is given back."""
    hydra_dir = path / HYDRA_DIR
    hydra = list(HYDRA_FILES) if hydra_dir.is_dir() and not hydra_dir.is_symlink() else []
    logs = [entry.name for entry in path.iterdir() if entry.suffix == ".log"]
    return [*hydra, *sorted(logs)]


def _file_before(path: Path) -> FileBefore | None:
    """``path`` as it is, if it is a regular file (``None`` for a link or anything else)."""
    try:
        status = path.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(status.st_mode):
        return None
    content = None
    if status.st_size <= MAX_KEPT:
        with open_regular(path, max_bytes=MAX_KEPT) as file:
            content = file.read(MAX_KEPT + 1)
    return FileBefore(
        identity=(status.st_dev, status.st_ino),
        size=status.st_size,
        mode=stat.S_IMODE(status.st_mode),
        times=(status.st_atime_ns, status.st_mtime_ns),
        content=content,
    )


def _put_back(output_dir: Path, before: RunDirectoryBefore) -> None:
    """Put what Hydra wrote into the existing run directory ``output_dir`` back as ``before``
    recorded it; remove what it did not hold, links at those names among them."""
    hydra_dir = output_dir / HYDRA_DIR
    if hydra_dir.is_symlink():
        remove_file(hydra_dir)
    names = dict.fromkeys([*_written_names(output_dir), *before.files])
    for relative in names:
        path = output_dir / relative
        check_confined(path)
        was = before.files.get(relative)
        if was is None:
            if path.is_symlink() or path.is_file():
                remove_file(path)
            continue
        if _appended(path, relative, was):
            descriptor = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                os.ftruncate(descriptor, was.size)
            finally:
                os.close(descriptor)
        elif was.content is not None:
            if path.is_symlink() or (path.exists() and not path.is_file()):
                remove_file(path)
            with replacing(path) as handle:
                handle.write(was.content)
                os.fchmod(handle.fileno(), was.mode)
        else:
            log.warning(
                "%s could not be put back as it was (replaced while the run was refused)", path
            )
            continue
        os.utime(path, ns=was.times, follow_symlinks=False)
    if not before.hydra_dir and hydra_dir.is_dir() and not hydra_dir.is_symlink():
        with contextlib.suppress(OSError):  # not empty: something else lives there, keep it
            hydra_dir.rmdir()


def _appended(path: Path, relative: str, was: FileBefore) -> bool:
    """Whether ``path`` is the log ``was`` recorded, only appended to since."""
    if not relative.endswith(".log"):
        return False
    try:
        now = path.lstat()
    except FileNotFoundError:
        return False
    same = stat.S_ISREG(now.st_mode) and (now.st_dev, now.st_ino) == was.identity
    return same and now.st_size >= was.size


def _remove_hydra_entries(output_dir: Path) -> None:
    for entry in _hydra_entries(output_dir):
        check_confined(entry)
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _hydra_entries(path: Path) -> list[Path]:
    """What a command writes into a run directory before its task runs: Hydra's ``.hydra/``
    and log files, and the run directory's lock (:mod:`vitattn.runs.lock`); a symbolic
    link at such a name too (removed, never read or written through)."""
    return [
        entry
        for entry in path.iterdir()
        if (entry.name in HYDRA_WRITES and (entry.is_dir() or entry.is_symlink()))
        or (
            (entry.is_file() or entry.is_symlink())
            and (entry.suffix == ".log" or entry.name in LOCK_FILES)
        )
    ]


def remove_unstarted_run(output_dir: Path) -> None:
    """Undo what Hydra wrote for a run refused before it started, and nothing else.

    A directory this command created is removed. An existing one (``hydra.run.dir`` of a run
    being resumed, remembered by :func:`remember_run_directory`) gets its ``.hydra/`` folder and
    ``*.log`` files back as they were, and everything else stays as it is. Without such a record
    only Hydra's ``.hydra/`` and ``*.log`` are removed, and the directory itself only if that
    leaves it empty.
    """
    if not output_dir.is_dir():
        return
    before = this_process().before
    if before is not None and before.path == output_dir.absolute():
        if not before.existed:  # removed while held: no other command can have taken it yet
            shutil.rmtree(output_dir, ignore_errors=True)
            release_run_directory(output_dir)
            remove_missing_parents(output_dir)
            return
        _put_back(output_dir, before)
        return
    release_run_directory(output_dir)  # the space its lock set aside kept it from being empty
    _remove_hydra_entries(output_dir)
    try:
        output_dir.rmdir()
    except OSError:  # not empty: something else lives there, keep it
        return
    remove_missing_parents(output_dir)


def full_disk(error: BaseException) -> TrainingError | None:
    """A write that failed on a full disk (whatever raised it), as the one line that says so."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    output_dir = Path(HydraConfig.get().runtime.output_dir)
    if not disk_full(error, output_dir):
        return None
    return TrainingError(full_disk_message(output_dir))


def run_task(program: str, task: Callable[[DictConfig], T], cfg: DictConfig) -> T:
    """Call ``task(cfg)``; a :class:`VitattnError` ends it with one line and exit status 1.

    Such errors are raised before the task writes anything, so what Hydra wrote for the run is
    undone (:func:`remove_unstarted_run`); a :class:`TrainingError` comes later and keeps the
    directory, with a ``metrics.json`` that records the failure. Any other exception is
    unexpected (a bug, a broken installation): one line names it and the run's log file, which
    alone holds the traceback, and the directory is kept with such a ``metrics.json``. A job of a
    multirun always keeps its directory with such a ``metrics.json`` (``status: failed`` and the
    error), so that sweep summaries can name it, prints its one line (an unexpected exception's
    names the log holding its traceback, as for a single run) and raises it as
    :class:`FailedJob`: Hydra records the job as failed, the other jobs go on, and the sweep
    ends on that line.
    """
    from hydra.core.hydra_config import HydraConfig

    quiet_full_disk_in_threads()
    job_dir = None
    if HydraConfig.initialized():
        multirun = sweep_job()
        kept = kept_metrics(Path(HydraConfig.get().runtime.output_dir), multirun)
        if kept is not None:  # a re-run sweep's job that completed before: its files stay
            log.info("%s completed before: kept", HydraConfig.get().runtime.output_dir)
            return kept  # type: ignore[return-value]
        try:
            refused_log_file()  # a link where Hydra opened the log: nothing went through it
            hold_run_directory(Path(HydraConfig.get().runtime.output_dir), program)
        except (RunDirectoryInUseError, UnsafeWriteError) as error:  # write nothing
            fail(program, error)
            if multirun:
                raise FailedJob(program, str(error)) from None
            sys.exit(1)
        job_dir = Path(HydraConfig.get().runtime.output_dir) if multirun else None
    try:
        return task(cfg)
    except Exception as raised:
        error = own_refusal(raised) or full_disk(raised)
        if sweep_job():
            output_dir = Path(HydraConfig.get().runtime.output_dir)
            record_failure(output_dir / METRICS, error or raised)
            line = str(error) if error is not None else unexpected(raised, log_traceback(raised))
            fail(program, line)
            raise FailedJob(program, line) from None
        if not HydraConfig.initialized():
            raise
        output_dir = Path(HydraConfig.get().runtime.output_dir)
        if error is None:
            record_failure(output_dir / METRICS, raised)
            fail(program, unexpected(raised, log_traceback(raised)))
        else:
            fail(program, error)
            if isinstance(error, TrainingError):  # the run has logs and checkpoints: keep them
                record_failure(output_dir / METRICS, error)
            else:
                remove_unstarted_run(output_dir)
        sys.exit(1)
    finally:
        if job_dir is not None:  # the next job of the sweep may run in this process
            release_run_directory(job_dir)


def log_traceback(error: BaseException) -> list[Path]:
    """Write ``error``'s traceback to the run's log files only (not the console); their paths."""
    record = log.makeRecord(
        log.name, logging.ERROR, __file__, 0, "unexpected error", (), (type(error), error, None)
    )
    record.exc_info = (type(error), error, error.__traceback__)
    files = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    for handler in files:
        handler.handle(record)
    return [Path(handler.baseFilename) for handler in files]


def unexpected(error: BaseException, logs: list[Path]) -> str:
    """The one line for an unexpected exception: what it was, and where its traceback is."""
    first = next(iter(str(error).strip().splitlines()), "")
    where = f"; the traceback is in {logs[0]}" if logs else ""
    return f"unexpected {type(error).__name__}: {first}{where}"


def record_failure(path: Path, error: BaseException) -> None:
    """Write ``{"status": "failed", "error": ...}`` to ``path`` (a ``metrics.json`` already
    there is an earlier invocation's: an interrupted run that this one continued). A completed
    run's ``metrics.json`` is never replaced: a continuation of it that fails is added to
    :data:`ATTEMPTS_FILE` beside it, and its results stand."""
    message = str(error) if isinstance(error, VitattnError) else f"{type(error).__name__}: {error}"
    failure = {"status": "failed", "error": message}
    try:  # an unwritable directory, or a planted link, must not hide the real error
        make_folder(path.parent)
        free_reserve(path.parent)  # the run is over: its reserve is room for this record
        if RunDir(path.parent).state() is RunState.COMPLETED:
            attempts = path.parent / ATTEMPTS_FILE
            failure["at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            write_json(attempts, [*earlier_attempts(attempts), failure])
            log.info("%s kept: its run had completed; this failure is in %s", path, attempts)
            return
        write_metrics(path, failure)
    except UnsafeWriteError as unsafe:
        log.warning("this failure is not recorded: %s", unsafe)
    except OSError:
        pass


def earlier_attempts(attempts: Path) -> list[Any]:
    """The failures :data:`ATTEMPTS_FILE` records. One that cannot be read, or a link (what it
    records is copied into the new record), is set aside (as
    ``failed_attempts.json.unreadable-<n>``, with a warning) and the record starts afresh."""
    if not attempts.is_file() and not attempts.is_symlink():
        return []
    try:
        return read_json(attempts, list, follow_links=False)
    except UnreadableFileError as error:
        aside = set_aside_unreadable(attempts)
        log.warning(
            "%s: %s; kept as %s, and a new record begins", attempts, error.problem, aside.name
        )
        return []


def write_metrics(path: Path, metrics: Mapping[str, Any]) -> None:
    """Write ``metrics.json`` (numbers as plain floats, NaN as null)."""
    write_json(path, dict(metrics))
    log.info("wrote %s", path)
