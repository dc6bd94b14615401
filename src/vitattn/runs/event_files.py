"""A run's TensorBoard event files, checked within bounds before TensorBoard reads them.

TensorBoard's reader (without TensorFlow: ``tensorboard.compat.tensorflow_stub``'s
``PyRecordReader_New``) trusts each record's 8-byte length: it asks Python for that many bytes
before it reads them. It keeps every scalar (vitattn asks for all of them) and a few KB per
distinct tag, reads records at pure Python's pace, opens a FIFO named like an event file and
waits for ever, and reads a file that is not events as nothing, in silence (what each costs, as
measured: docs/runs.md, "Event files").

So, before TensorBoard opens a run's event files (:func:`check_event_files`), each file it
would read (:func:`is_event_file`) is:

* a regular file, opened without following a link (``O_NOFOLLOW``, and ``O_NONBLOCK`` so a
  FIFO does not block);
* within :data:`MAX_EVENT_BYTES`, :data:`MAX_EVENT_RECORDS` and :data:`MAX_EVENT_TAGS`, all of
  a run's files together;
* framed as TFRecords (uint64 length, uint32 masked CRC-32C of the length, the data, uint32
  masked CRC of the data), every record's length CRC checked and every record at most
  :data:`MAX_RECORD_BYTES`. The last record may be cut short (a run killed while its writer
  flushed leaves one; TensorBoard reads the records before it), but it too declares at most
  :data:`MAX_RECORD_BYTES`, so nothing asks for more;
* made of TensorBoard ``Event`` protos (each complete record parsed, once, for its tags).

A refusal is one line naming the file (:class:`vitattn.runs.files.UnreadableFileError`). The
files are checked, then read by name: a file swapped in between is not checked (the run's
folder is someone else's to write while vitattn reads it, as with any reader of a shared disk).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from vitattn.runs.files import UnreadableFileError, open_regular

MAX_EVENT_BYTES = 512 << 20
"""The most bytes of event files read from one run: five times the largest run vitattn's presets
write (``experiment=vit_best``, mostly its attention images: docs/runs.md). Scalars are bounded
by :data:`MAX_EVENT_RECORDS` well before this."""
MAX_EVENT_RECORDS = 1 << 21
"""The most records (one per scalar, image or summary logged) read from one run, 2,097,152: a run
logs three or four scalars a step (the tiny settings: 51 records for 8 steps), so
a long preset run writes a few hundred thousand on a CPU, which logs every step (docs/runs.md
has the figures), and TensorBoard holds this many in well under a GB."""
MAX_EVENT_TAGS = 10_000
"""The most distinct tags read from one run: the tiny settings log 21; each layer past the first
adds three (its fidelity, entropy gap and attention image), about 400 at the largest depth
vitattn builds, 128; TensorBoard holds a few KB per tag."""
MAX_RECORD_BYTES = 64 << 20
"""The largest record read: a record of an image vitattn logs takes about 70 KB."""
HEADER = struct.Struct("<QI")
"""A record's header: its data's length and the masked CRC-32C of those 8 bytes."""
FOOTER = 4
"""A record's last bytes: the masked CRC-32C of its data."""


@dataclass
class Tally:
    """What a run's event files checked so far hold, and the bounds they are held to."""

    max_records: int
    max_tags: int
    records: int = 0
    tags: set[str] = field(default_factory=set)


def is_event_file(name: str) -> bool:
    """Whether TensorBoard reads the file ``name`` of a run's folder as events (its
    ``io_wrapper.IsSummaryEventsFile``): ``tfevents`` in the name, not ending ``.profile-empty``."""
    return "tfevents" in name and not name.endswith(".profile-empty")


def event_files(folder: Path) -> list[Path]:
    """The entries of ``folder`` TensorBoard would read as event files, links not followed, in
    order of their names (the order TensorBoard reads them in); none where there is no folder."""
    if not folder.is_dir():
        return []
    with os.scandir(folder) as entries:
        return sorted(Path(entry.path) for entry in entries if is_event_file(entry.name))


def check_event_files(
    folder: Path,
    max_bytes: int | None = None,
    max_records: int | None = None,
    max_tags: int | None = None,
) -> list[Path]:
    """The event files of ``folder`` (:func:`event_files`), each checked as the module says, all
    of them together within ``max_bytes``, ``max_records`` and ``max_tags`` (default
    :data:`MAX_EVENT_BYTES`, :data:`MAX_EVENT_RECORDS` and :data:`MAX_EVENT_TAGS`, read when
    called); the first that is not is one line naming it (:class:`UnreadableFileError`)."""
    max_bytes = MAX_EVENT_BYTES if max_bytes is None else max_bytes
    tally = Tally(
        MAX_EVENT_RECORDS if max_records is None else max_records,
        MAX_EVENT_TAGS if max_tags is None else max_tags,
    )
    total = 0
    files = event_files(folder)
    for path in files:
        with open_regular(path, max_bytes=None) as handle:
            total += os.fstat(handle.fileno()).st_size
            if total > max_bytes:
                raise UnreadableFileError(
                    path, f"brings the run's event files to {total} bytes, more than {max_bytes}"
                )
            check_records(path, handle, tally)
    return files


class LengthCrcs(dict[int, int]):
    """The masked CRC-32C of each record length's 8 bytes, computed once per length: TensorBoard's
    CRC is pure Python, and a file's records take few lengths (records of n distinct lengths take
    n^2 / 2 bytes or more, so at most about 32,000 within :data:`MAX_EVENT_BYTES`)."""

    def __missing__(self, length: int) -> int:
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

        self[length] = masked_crc32c(struct.pack("<Q", length))
        return self[length]


def check_records(path: Path, handle: IO[bytes], tally: Tally) -> None:
    """Check the records of the event file ``handle`` (``path``, which errors name), adding them
    to ``tally``: each header's CRC must match (:func:`record_length`), each record be an
    ``Event``; a last record cut short ends the file (its data is not read). More records or tags
    than ``tally`` allows, all files together, is one line. Read with plain reads, not a memory
    map: a file cut short by its writer meanwhile is a short read, not a ``SIGBUS``."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto.event_pb2 import Event

    size = os.fstat(handle.fileno()).st_size
    position = 0
    crcs = LengthCrcs()
    while position + HEADER.size <= size:
        header = handle.read(HEADER.size)
        if len(header) < HEADER.size:
            return  # cut short since its size was read
        length = record_length(path, header, position, size, crcs)
        start, position = position, position + HEADER.size + length + FOOTER
        tally.records += 1
        if tally.records > tally.max_records:
            raise UnreadableFileError(
                path, f"brings the run's events to more than {tally.max_records} records"
            )
        record = handle.read(length + FOOTER) if position <= size else b""
        if len(record) < length + FOOTER:
            return  # a cut last record is left to TensorBoard, which stops there
        try:
            event = Event.FromString(record[:length])
        except DecodeError:
            raise UnreadableFileError(
                path, f"has a record at byte {start} that is not a TensorBoard event"
            ) from None
        tally.tags.update(value.tag for value in event.summary.value)
        if len(tally.tags) > tally.max_tags:
            raise UnreadableFileError(
                path, f"brings the run's events to more than {tally.max_tags} tags"
            )


def record_length(path: Path, header: bytes, position: int, size: int, crcs: LengthCrcs) -> int:
    """The data length the record ``header`` (at ``position`` of a file of ``size`` bytes)
    declares, its CRC checked and its size within :data:`MAX_RECORD_BYTES`."""
    length, crc = HEADER.unpack(header)
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
    return length
