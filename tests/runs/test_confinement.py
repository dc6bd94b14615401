"""Writes and deletions in a run directory this process holds check that the directory, and
every folder between it and the file, is still what it was when it was taken
(:func:`vitattn.runs.files.check_confined`); TensorBoard's event file is written through the
descriptor it was made with (:mod:`vitattn.runs.pinned_events`). The commands themselves:
``tests/test_replaced_run_folder.py``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from vitattn.runs.files import (
    UnsafeWriteError,
    check_confined,
    confine,
    remove_file,
    unconfine,
    write_text,
)


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Path]:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    confine(run)
    yield run
    unconfine(run)


def test_a_write_in_the_held_directory_as_it_was_taken_goes_through(held: Path) -> None:
    write_text(held / "checkpoints" / "a.txt", "a")
    (held / "new").mkdir()
    write_text(held / "new" / "b.txt", "b")
    assert (held / "checkpoints" / "a.txt").read_text() == "a"
    assert (held / "new" / "b.txt").read_text() == "b"


def test_a_folder_replaced_by_a_link_refuses_writes_and_deletions(
    held: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "kept.txt").write_text("kept")
    (held / "checkpoints").rename(held / "checkpoints.real")
    (held / "checkpoints").symlink_to(victim)
    with pytest.raises(UnsafeWriteError) as raised:
        write_text(held / "checkpoints" / "kept.txt", "overwritten")
    assert str(raised.value) == (
        f"{held / 'checkpoints'} was replaced while this command wrote in it, and is now a "
        f"symbolic link (to {victim}): vitattn wrote and deleted nothing more there (kept.txt "
        "included); restore the folder, or run again elsewhere"
    )
    with pytest.raises(UnsafeWriteError):
        remove_file(held / "checkpoints" / "kept.txt")
    assert (victim / "kept.txt").read_text() == "kept"
    assert sorted(p.name for p in victim.iterdir()) == ["kept.txt"]


def test_the_held_directory_replaced_or_moved_away_refuses_writes(
    held: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    held.rename(tmp_path / "moved")
    with pytest.raises(UnsafeWriteError, match="and is gone: "):
        check_confined(held / "metrics.json")
    held.symlink_to(elsewhere)
    with pytest.raises(UnsafeWriteError, match=r"and is now a symbolic link \(to "):
        write_text(held / "metrics.json", "{}")
    assert list(elsewhere.iterdir()) == []
    held.unlink()
    held.mkdir()  # a new folder of the name: another directory than the one taken
    with pytest.raises(UnsafeWriteError, match="and is now another folder: "):
        check_confined(held / "metrics.json")


def test_paths_outside_or_given_back_are_not_checked(held: Path, tmp_path: Path) -> None:
    (held / "checkpoints").rename(held / "checkpoints.real")
    (held / "checkpoints").symlink_to(tmp_path)
    check_confined(tmp_path / "elsewhere.txt")  # not in a held directory
    unconfine(held)
    check_confined(held / "checkpoints" / "x")  # given back: no longer checked
    confine(held)  # the fixture's unconfine is then a no-op


def test_an_event_file_is_written_through_its_descriptor_whatever_is_planted_at_its_name(
    held: Path, tmp_path: Path
) -> None:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    from vitattn.runs.pinned_events import PinnedSummaryWriter

    victim = tmp_path / "victim.txt"
    victim.write_text("kept")
    writer = PinnedSummaryWriter(log_dir=str(held))
    writer.add_scalar("a", 1.0, 1)
    writer.flush()
    (events,) = held.glob("events.out.tfevents.*")
    events.rename(events.with_name(events.name + ".real"))
    events.symlink_to(victim)
    writer.add_scalar("a", 2.0, 2)
    writer.close()
    assert victim.read_text() == "kept"
    moved = events.with_name(events.name + ".real")
    values = [e.step for e in EventFileLoader(str(moved)).Load() if e.summary.value]
    assert values == [1, 2]


def test_an_event_file_of_two_names_is_refused(held: Path, tmp_path: Path) -> None:
    from vitattn.runs.pinned_events import PinnedFile

    (held / "events").write_bytes(b"")
    os.link(held / "events", tmp_path / "second-name")
    with pytest.raises(UnsafeWriteError):
        PinnedFile(held / "events")
