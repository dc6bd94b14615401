"""A run's TensorBoard event file written through the descriptor it was made with.

TensorBoard's event writer (``tensorboard.summary.writer.event_file_writer``, through its
``gfile`` stub when TensorFlow is absent) opens the event file *by name* for every batch of
records it appends (``io.open(name, "ab")``). In a run directory someone else can write, a
symbolic link planted at that name, or at the run's folder, while the run trains would carry
every later record into a file outside the run. :class:`PinnedSummaryWriter` is torch's
``SummaryWriter`` whose event file, once made inside the run directory (checked by
:func:`vitattn.runs.files.check_confined`), is opened once more without following a link and
then written through that descriptor alone (:class:`PinnedFile`): the records go where the file
was made, whatever is planted at its name since.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter

from vitattn.runs.files import check_confined, open_for_append


class PinnedFile:
    """The ``write``/``flush``/``close`` of the file object TensorBoard's ``RecordWriter``
    writes to, on the file opened once by :func:`vitattn.runs.files.open_for_append` (``path``
    as a regular file of one name, appended to, never through a link), unbuffered as
    TensorBoard's own: each record reaches the file as it comes, for a live view."""

    def __init__(self, path: Path) -> None:
        self.file = open_for_append(path, "ab", buffering=0)

    @property
    def closed(self) -> bool:
        return self.file.closed

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:  # an unbuffered write may take part of it
            view = view[self.file.write(view) :]

    def flush(self) -> None:
        """Nothing is buffered."""

    def close(self) -> None:
        self.file.close()


def pin_event_file(event_writer: Any) -> None:
    """Make ``event_writer`` (TensorBoard's ``EventFileWriter``, just made) append through a
    :class:`PinnedFile` of its event file instead of reopening it by name."""
    event_writer.flush()  # what its gfile holds is on disk before the descriptor takes over
    pinned = PinnedFile(Path(event_writer._file_name))
    event_writer._general_file_writer = pinned
    event_writer._async_writer._writer._writer = pinned  # its RecordWriter's file object


class PinnedSummaryWriter(SummaryWriter):
    """torch's ``SummaryWriter`` whose event files, each made inside the run directory, are
    written through their descriptors (:func:`pin_event_file`); a writer closed and written to
    again makes its next file the same way."""

    def _get_file_writer(self) -> Any:
        if self.all_writers is None or self.file_writer is None:
            check_confined(Path(self.log_dir) / "events.out.tfevents")
            writer = super()._get_file_writer()
            pin_event_file(writer.event_writer)
            return writer
        return super()._get_file_writer()
