"""A run's TensorBoard event files are checked within bounds before TensorBoard reads them
(issue 43): each hostile file is one line naming it, before TensorBoard asks for a byte of it.

The event files are real ones, written by TensorBoard's own writer (the one torch's
``SummaryWriter`` uses); the hostile records are framed by hand, with valid CRCs where a test
says so, so that only the bound under test refuses them."""

from __future__ import annotations

import contextlib
import os
import signal
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

from tests.support import bombs
from vitattn.analysis.events import read_scalar_events
from vitattn.runs import event_files
from vitattn.runs.event_files import check_event_files, is_event_file
from vitattn.runs.files import UnreadableFileError

STEPS = 5


def write_events(folder: Path, steps: int = STEPS, tag: str = "val/acc") -> Path:
    """A real event file in ``folder``: TensorBoard's writer, ``tag`` at ``steps`` steps."""
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    before = set(folder.iterdir()) if folder.is_dir() else set()
    writer = EventFileWriter(str(folder))
    for step in range(steps):
        value = summary_pb2.Summary.Value(tag=tag, simple_value=step / 10)
        event = event_pb2.Event(step=step, wall_time=1e9 + step)
        event.summary.CopyFrom(summary_pb2.Summary(value=[value]))
        writer.add_event(event)
    writer.close()
    (path,) = set(folder.iterdir()) - before
    return path


def refused(folder: Path, named: Path, **bounds: int) -> str:
    """The one line :func:`check_event_files` refuses ``folder`` with, which names ``named``."""
    with pytest.raises(UnreadableFileError) as raised:
        check_event_files(folder, **bounds)
    text = str(raised.value)
    assert "\n" not in text and text.startswith(f"{named}: "), text
    return text


@contextlib.contextmanager
def within(seconds: int) -> Iterator[None]:
    """Fail instead of hanging where the block takes longer than ``seconds`` (a FIFO's open)."""

    def expired(*_: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_runs_event_files_are_checked_then_read(tmp_path: Path) -> None:
    path = write_events(tmp_path)
    assert check_event_files(tmp_path) == [path]
    events = read_scalar_events(tmp_path)
    assert [(step, value) for step, _, value in events["val/acc"]] == [
        (step, pytest.approx(step / 10)) for step in range(STEPS)
    ]


def test_the_files_checked_are_those_tensorboard_reads() -> None:
    from tensorboard.backend.event_processing.io_wrapper import IsSummaryEventsFile

    names = [
        "events.out.tfevents.1795735332.vm.13719.0",
        "my.tfevents.file",
        "events.out.tfevents.1.host.profile-empty",
        "events.out",
        "metrics.json",
    ]
    assert [is_event_file(name) for name in names] == [IsSummaryEventsFile(n) for n in names]
    assert [is_event_file(name) for name in names] == [True, True, False, False, False]


def test_a_length_of_2_40_bytes_is_one_line_before_tensorboard_asks_for_them(
    tmp_path: Path,
) -> None:
    """TensorBoard's reader asks Python for a record's declared length before reading it: this
    200-byte file was a ``MemoryError`` (a 2 GB claim took 2 GB of address space)."""
    path = bombs.length_bomb(write_events(tmp_path))
    said = refused(tmp_path, path)
    assert f"declaring {1 << 40} bytes, more than {event_files.MAX_RECORD_BYTES}" in said


def test_lengths_that_fail_their_crc_are_one_line(tmp_path: Path) -> None:
    """Garbage after the records (TensorBoard stopped there in silence, curves lost)."""
    path = write_events(tmp_path)
    size = path.stat().st_size
    with path.open("ab") as handle:
        handle.write(b"not events at all, " * 20)
    said = refused(tmp_path, path)
    assert f"has a record at byte {size} whose length fails its CRC: not events" in said


def test_a_record_that_is_not_an_event_is_one_line(tmp_path: Path) -> None:
    path = write_events(tmp_path)
    size = path.stat().st_size
    junk = b"\xff" * 12
    length = struct.pack("<Q", len(junk))
    with path.open("ab") as handle:  # framed as a record, CRCs valid
        handle.write(length + struct.pack("<I", masked_crc32c(length)) + junk)
        handle.write(struct.pack("<I", masked_crc32c(junk)))
    said = refused(tmp_path, path)
    assert f"has a record at byte {size} that is not a TensorBoard event" in said


def test_a_runs_tags_are_bounded(tmp_path: Path) -> None:
    """TensorBoard holds about 3.4 KB per tag: 20 MB of distinct tags took 1.65 GB."""
    write_events(tmp_path, tag="val/acc")
    write_events(tmp_path, tag="val/loss")
    files = check_event_files(tmp_path, max_tags=2)  # in TensorBoard's order, by name: a
    assert len(files) == 2  # writer's counter past 9 within the second sorts first
    said = refused(tmp_path, files[-1], max_tags=1)
    assert "brings the run's events to more than 1 tags" in said


def test_a_file_cut_in_its_last_record_is_read_as_tensorboard_reads_it(tmp_path: Path) -> None:
    """A run killed while its writer flushed leaves its last record cut: the records before it
    are read, as TensorBoard reads them; the cut one declares a record's length, not more."""
    path = write_events(tmp_path)
    path.write_bytes(path.read_bytes()[:-10])
    assert check_event_files(tmp_path) == [path]
    assert [step for step, _, _ in read_scalar_events(tmp_path)["val/acc"]] == [0, 1, 2, 3]


def test_a_runs_event_files_are_bounded_together(tmp_path: Path) -> None:
    first = write_events(tmp_path)
    second = tmp_path / f"{first.name}.1"
    second.write_bytes(first.read_bytes())
    size = first.stat().st_size
    assert check_event_files(tmp_path, max_bytes=2 * size) == [first, second]
    said = refused(tmp_path, second, max_bytes=2 * size - 1)
    assert f"brings the run's event files to {2 * size} bytes, more than {2 * size - 1}" in said
    records = STEPS + 1  # the file's version, then the scalars
    assert check_event_files(tmp_path, max_records=2 * records) == [first, second]
    said = refused(tmp_path, second, max_records=2 * records - 1)
    assert f"brings the run's events to more than {2 * records - 1} records" in said


def test_the_cap_of_a_run_is_read_when_called(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_events(tmp_path)
    monkeypatch.setattr(event_files, "MAX_EVENT_BYTES", path.stat().st_size - 1)
    with pytest.raises(UnreadableFileError, match="more than"):
        read_scalar_events(tmp_path)


def test_a_fifo_a_link_or_a_folder_is_one_line(tmp_path: Path) -> None:
    real = write_events(tmp_path / "elsewhere")
    for name, plant, problem in [
        ("fifo", os.mkfifo, "is not a regular file (a FIFO)"),
        ("link", lambda path: path.symlink_to(real), f"is a symbolic link (to {real})"),
        ("folder", Path.mkdir, "is not a regular file (a folder)"),
    ]:
        run = tmp_path / name
        run.mkdir()
        planted = run / "events.out.tfevents.1.host.1.0"
        plant(planted)
        with within(10):  # TensorBoard opened a FIFO and waited for ever for a writer
            said = refused(run, planted)
            with pytest.raises(UnreadableFileError):
                read_scalar_events(run)
        assert problem in said
