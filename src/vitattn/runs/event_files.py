"""A run's TensorBoard event files, checked within bounds before TensorBoard reads them.

TensorBoard's reader (without TensorFlow: ``tensorboard.compat.tensorflow_stub``'s
``PyRecordReader_New``) trusts each record's 8-byte length: it asks Python for that many bytes
before it reads them, so a 200-byte file whose second record claims 2^40 bytes is a
``MemoryError`` (30 GB too; under a 3 GB address-space cap, measured in issue 43). It keeps
every scalar (vitattn asks for all of them), about 215 bytes of memory per scalar record, and
reads about 0.7 MB of scalar records a second (20 MB: 29 s, 124 MB). A FIFO named like an event
file blocks its ``open`` for ever; a file that is not events it reads as nothing, in silence.

So, before TensorBoard opens a run's event files (:func:`check_event_files`), each file it
would read (:func:`is_event_file`) is:

* a regular file, opened without following a link (``O_NOFOLLOW``, and ``O_NONBLOCK`` so a
  FIFO does not block);
* within :data:`MAX_EVENT_BYTES` and :data:`MAX_EVENT_RECORDS`, all of a run's files together;
* framed as TFRecords (uint64 length, uint32 masked CRC-32C of the length, the data, uint32
  masked CRC of the data), every record's length CRC checked and every record at most
  :data:`MAX_RECORD_BYTES`. The last record may be cut short (a run killed while its writer
  flushed leaves one; TensorBoard reads the records before it), but it too declares at most
  :data:`MAX_RECORD_BYTES`, so nothing asks for more.

A refusal is one line naming the file (:class:`vitattn.runs.files.UnreadableFileError`). The
files are checked, then read by name: a file swapped in between is not checked (the run's
folder is someone else's to write while vitattn reads it, as with any reader of a shared disk).
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
from pathlib import Path
from typing import IO

from vitattn.runs.files import CLOEXEC, NOFOLLOW, UnreadableFileError, one_line

MAX_EVENT_BYTES = 512 << 20
"""The most bytes of event files read from one run: five times the largest run vitattn's presets
write (``experiment=vit_best``: 156 validations of eight attention images of about 70 KB each,
90 MB; a run of the tiny settings writes 421 KB). TensorBoard reads scalar records at about
0.7 MB/s and keeps about 4.5 times their bytes in memory, so :data:`MAX_EVENT_RECORDS` bounds a
file of scalars well before this does."""
MAX_EVENT_RECORDS = 1 << 22
"""The most records (one per scalar, image or summary logged) read from one run: ten times the
400,000 of ``experiment=vit_best`` logging five scalars at each of its 78,000 steps. TensorBoard
keeps about 215 bytes per scalar record: at most 0.9 GB."""
MAX_RECORD_BYTES = 64 << 20
"""The largest record read: a record of an image vitattn logs takes about 70 KB."""
HEADER = struct.Struct("<QI")
"""A record's header: its data's length and the masked CRC-32C of those 8 bytes."""
FOOTER = 4
"""A record's last bytes: the masked CRC-32C of its data."""


def is_event_file(name: str) -> bool:
    """Whether TensorBoard reads the file ``name`` of a run's folder as events (its
    ``io_wrapper.IsSummaryEventsFile``): ``tfevents`` in the name, not ending ``.profile-empty``."""
    return "tfevents" in name and not name.endswith(".profile-empty")


def event_files(folder: Path) -> list[Path]:
    """The entries of ``folder`` TensorBoard would read as event files, links not followed, in
    order of their names (the order TensorBoard reads them in)."""
    with os.scandir(folder) as entries:
        return sorted(Path(entry.path) for entry in entries if is_event_file(entry.name))


def check_event_files(
    folder: Path, max_bytes: int | None = None, max_records: int | None = None
) -> list[Path]:
    """The event files of ``folder`` (:func:`event_files`), each checked as the module says, all
    of them together within ``max_bytes`` and ``max_records`` (default :data:`MAX_EVENT_BYTES`
    and :data:`MAX_EVENT_RECORDS`, read when called); the first that is not is one line naming
    it (:class:`UnreadableFileError`)."""
    max_bytes = MAX_EVENT_BYTES if max_bytes is None else max_bytes
    max_records = MAX_EVENT_RECORDS if max_records is None else max_records
    total = records = 0
    files = event_files(folder)
    for path in files:
        with open_event_file(path) as handle:
            total += os.fstat(handle.fileno()).st_size
            if total > max_bytes:
                raise UnreadableFileError(
                    path, f"brings the run's event files to {total} bytes, more than {max_bytes}"
                )
            records = count_records(path, handle, records, max_records)
    return files


def open_event_file(path: Path) -> IO[bytes]:
    """``path`` opened for reading: a regular file, never through a link, and without blocking
    on a FIFO (refused in one line)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW | CLOEXEC)
    except OSError as error:
        if path.is_symlink():
            target = one_line(os.readlink(path))
            raise UnreadableFileError(
                path, f"is a symbolic link (to {target}), not a file"
            ) from None
        raise UnreadableFileError(
            path, f"cannot be read ({error.strerror or error})", "make it readable, or remove it"
        ) from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise UnreadableFileError(path, f"is {kind}, where TensorBoard's events belong")
    return os.fdopen(descriptor, "rb")


def count_records(path: Path, handle: IO[bytes], counted: int, max_records: int) -> int:
    """``counted`` (the records of a run's files before this one) and the records of the event
    file ``handle`` (``path``, which errors name), read header by header through a memory map,
    their data skipped: each header's CRC must match and each record declare at most
    :data:`MAX_RECORD_BYTES`; a last record cut short ends the count. More than ``max_records``
    in all is one line. The CRC of each length is computed once (records of
    n distinct lengths take n^2 / 2 bytes or more, so at most about 32,000 within
    :data:`MAX_EVENT_BYTES`)."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    size = os.fstat(handle.fileno()).st_size
    if size == 0:
        return counted
    position, records = 0, counted
    crcs: dict[int, int] = {}  # by length: a file's records take few lengths (the CRC is Python)
    with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        while position + HEADER.size <= size:
            length, crc = HEADER.unpack_from(data, position)
            if length not in crcs:
                crcs[length] = masked_crc32c(data[position : position + 8])
            if crcs[length] != crc:
                raise UnreadableFileError(
                    path, f"has a record at byte {position} whose length fails its CRC: not events"
                )
            if length > MAX_RECORD_BYTES:
                left = size - position - HEADER.size
                raise UnreadableFileError(
                    path,
                    f"has a record at byte {position} declaring {length} bytes, more than "
                    f"{MAX_RECORD_BYTES} (and {left} are left in the file)",
                )
            records += 1
            if records > max_records:
                raise UnreadableFileError(
                    path, f"brings the run's events to more than {max_records} records"
                )
            position += HEADER.size + length + FOOTER
    return records
