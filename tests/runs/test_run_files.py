"""A run's files are written whole, never through a symbolic link, and a malformed file read
back is one line naming it: :mod:`vitattn.runs.files` and the writers built on it."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.support.trees import KEPT, tree_digest
from vitattn.errors import ConfigError, TrainingError
from vitattn.runs import files
from vitattn.runs.checkpoint_io import AtomicCheckpointIO
from vitattn.runs.continuation import ATTEMPTS, set_aside
from vitattn.runs.disk import QuietOnFullDiskFileHandler, refused_log_file
from vitattn.runs.files import (
    UnreadableFileError,
    UnsafeWriteError,
    inside,
    open_for_append,
    open_regular,
    read_json,
    read_yaml,
    save_figure,
    set_aside_unreadable,
    whole_number,
    write_bytes,
    write_text,
    write_with,
)
from vitattn.runs.layout import planted_entries
from vitattn.runs.lock import hold_run_directory, in_use_message
from vitattn.runs.process import this_process
from vitattn.runs.results import write_csv, write_json
from vitattn.runs.task import ATTEMPTS_FILE, record_failure


@pytest.fixture
def run(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    return folder


def plant(link: Path, target: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, link)
    return link


def assert_one_line(error: BaseException, *named: Path) -> str:
    text = str(error)
    assert "\n" not in text
    for path in named:
        assert str(path) in text
    return text


def read_malformed(read: Callable[..., Any], path: Path, content: str) -> UnreadableFileError:
    """What ``read`` raises reading ``path`` that holds ``content`` for a mapping, once it is
    one line naming the file."""
    path.write_text(content)
    with pytest.raises(UnreadableFileError) as raised:
        read(path, dict)
    assert_one_line(raised.value, path)
    return raised.value


# --- writing -----------------------------------------------------------------------------------


def test_a_write_replaces_a_link_at_the_target_and_never_writes_through_it(
    run: Path, elsewhere: Path
) -> None:
    before = tree_digest(elsewhere)
    target = plant(run / "metrics.json", elsewhere / "kept.txt")
    write_json(target, {"status": "completed", "steps": 8})
    assert not target.is_symlink()
    assert json.loads(target.read_text()) == {"status": "completed", "steps": 8}
    assert tree_digest(elsewhere) == before
    assert sorted(p.name for p in run.iterdir()) == ["metrics.json"]  # no temporary left


@pytest.mark.parametrize(
    "write",
    [
        lambda path: write_json(path, {"a": 1}),
        lambda path: write_csv(path, [{"a": 1}]),
        lambda path: write_text(path, "text"),
        lambda path: write_bytes(path, b"bytes"),
        lambda path: write_with(path, lambda handle: np.savez_compressed(handle, a=np.ones(2))),
    ],
    ids=["json", "csv", "text", "bytes", "npz"],
)
def test_a_link_at_the_temporary_is_refused_in_one_line(run: Path, elsewhere: Path, write) -> None:
    before = tree_digest(elsewhere)
    partial = plant(run / ".out.partial", elsewhere / "kept.txt")
    with pytest.raises(UnsafeWriteError) as raised:
        write(run / "out")
    said = assert_one_line(raised.value, partial)
    assert "symbolic link" in said and str(elsewhere / "kept.txt") in said
    assert isinstance(raised.value, TrainingError)  # a run that meets it keeps its directory
    assert tree_digest(elsewhere) == before
    assert partial.is_symlink() and not (run / "out").exists()


def test_a_dangling_link_at_the_temporary_creates_nothing_where_it_points(
    run: Path, tmp_path: Path
) -> None:
    plant(run / ".metrics.json.partial", tmp_path / "created-outside")
    with pytest.raises(UnsafeWriteError):
        write_json(run / "metrics.json", {})
    assert not (tmp_path / "created-outside").exists()


def test_a_stale_temporary_of_a_killed_process_is_replaced(run: Path) -> None:
    (run / ".metrics.json.partial").write_text('{"half": ')
    write_json(run / "metrics.json", {"whole": True})
    assert json.loads((run / "metrics.json").read_text()) == {"whole": True}
    assert not (run / ".metrics.json.partial").exists()


def test_two_writers_of_one_file_at_once_each_write_it_whole(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes writing one file at once (a sweep's summary and a summary script): the
    second removed the first's temporary as a killed process's and wrote its own; the first
    then renamed the second's, half written, over the file, or failed in
    ``FileNotFoundError``. The second now waits for the first (the first's ``flock``)."""
    target = run / "summary.csv"
    first_begun, first_may_end, second_waits = (threading.Event() for _ in range(3))
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with files.replacing(target, text=True) as handle:
                handle.write("first, half")
                handle.flush()
                first_begun.set()
                first_may_end.wait(30)
                handle.write(" and whole\n")
        except BaseException as error:
            errors.append(error)

    def second() -> None:
        try:
            write_text(target, "second, whole\n")
        except BaseException as error:
            errors.append(error)

    sleep = time.sleep

    def noting_the_wait(seconds: float) -> None:
        second_waits.set()
        sleep(seconds)

    monkeypatch.setattr(time, "sleep", noting_the_wait)
    writers = [threading.Thread(target=first), threading.Thread(target=second)]
    writers[0].start()
    assert first_begun.wait(30)
    writers[1].start()
    while writers[1].is_alive() and not second_waits.is_set():
        sleep(0.01)
    assert not target.exists()  # the second waits; it wrote nothing yet
    first_may_end.set()
    for writer in writers:
        writer.join(30)
    assert errors == []
    assert target.read_text() == "second, whole\n"
    assert [path.name for path in run.iterdir()] == ["summary.csv"]


def test_a_writer_that_waits_too_long_is_one_line_and_changes_nothing(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = run / "summary.csv"
    target.write_text("before\n")
    monkeypatch.setattr(files, "WRITER_WAIT", 0.2)
    with files.replacing(target, text=True) as handle:
        handle.write("first, half")
        with pytest.raises(files.FileBusyError) as raised:
            write_text(target, "second\n")
        said = assert_one_line(raised.value, files.partial_path(target))
        assert said.endswith(
            "waited 0.2 s for it and wrote nothing: run again when that process has ended"
        )
        assert target.read_text() == "before\n"
    assert target.read_text() == "first, half"


def test_a_writer_killed_mid_write_leaves_a_temporary_the_next_write_takes_over(
    run: Path,
) -> None:
    """SIGKILL: the kernel drops the killed writer's ``flock``, so its temporary is a
    leftover, emptied and written anew."""
    target = run / "metrics.json"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from vitattn.runs.files import replacing\n"
            "with replacing(Path(sys.argv[1]), text=True) as handle:\n"
            "    handle.write('{\"half\": '); handle.flush(); print('begun', flush=True)\n"
            "    time.sleep(60)\n",
            str(target),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline() == "begun\n"
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    assert files.partial_path(target).read_text() == '{"half": '
    write_json(target, {"whole": True})
    assert json.loads(target.read_text()) == {"whole": True}
    assert not files.partial_path(target).exists()


def test_a_filesystem_without_flock_still_writes(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some network and FUSE mounts refuse ``flock`` (``ENOLCK``, ``EOPNOTSUPP``): a write there
    goes on unlocked, as every write did before, and a leftover temporary is written anew."""
    import errno

    def no_flock(descriptor: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(files.fcntl, "flock", no_flock)
    files.partial_path(run / "metrics.json").write_text('{"half": ')
    write_json(run / "metrics.json", {"whole": True})
    assert json.loads((run / "metrics.json").read_text()) == {"whole": True}
    assert [path.name for path in run.iterdir()] == ["metrics.json"]


def test_a_hard_link_at_the_temporary_is_refused_and_its_file_kept(
    run: Path, elsewhere: Path
) -> None:
    os.link(elsewhere / "kept.txt", files.partial_path(run / "out"))
    with pytest.raises(UnsafeWriteError, match="a hard link"):
        write_text(run / "out", "x")
    assert (elsewhere / "kept.txt").read_bytes() == KEPT and not (run / "out").exists()


def test_a_folder_at_the_temporary_is_refused(run: Path) -> None:
    (run / ".out.partial").mkdir()
    with pytest.raises(UnsafeWriteError, match="not a regular file"):
        write_text(run / "out", "x")


def test_a_folder_at_the_target_is_refused_before_anything_is_written(run: Path) -> None:
    """A folder planted at ``check.md`` or ``optimization_results.yaml`` ended the command in
    ``IsADirectoryError`` from ``os.replace``, its work done."""
    (run / "out").mkdir()
    with pytest.raises(UnsafeWriteError, match="out is not a regular file") as raised:
        write_text(run / "out", "x")
    assert_one_line(raised.value, run / "out")
    assert sorted(p.name for p in run.iterdir()) == ["out"] and not any((run / "out").iterdir())


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(run: Path) -> None:
    (run / "out").write_text("before")

    def half_then_fail(handle: io.BufferedWriter) -> None:
        handle.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_with(run / "out", half_then_fail)
    assert (run / "out").read_text() == "before"
    assert sorted(p.name for p in run.iterdir()) == ["out"]


def test_a_figure_is_written_whole_in_its_format(run: Path, elsewhere: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plt.figure()
    plant(run / "curve.png", elsewhere / "kept.txt")
    save_figure(figure, run / "curve.png", dpi=20)
    plt.close(figure)
    assert (run / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (elsewhere / "kept.txt").read_bytes() == KEPT


def test_a_checkpoint_is_never_written_through_a_planted_temporary(
    run: Path, elsewhere: Path
) -> None:
    checkpoints = run / "checkpoints"
    partial = plant(checkpoints / ".last.ckpt.partial", elsewhere / "kept.txt")
    io_plugin = AtomicCheckpointIO()
    with pytest.raises(UnsafeWriteError) as raised:
        io_plugin.save_checkpoint({"state_dict": {}}, checkpoints / "last.ckpt")
    assert_one_line(raised.value, partial)
    assert (elsewhere / "kept.txt").read_bytes() == KEPT
    assert partial.is_symlink()  # left for the user to see, not removed
    partial.unlink()
    io_plugin.save_checkpoint({"state_dict": {"w": torch.ones(1)}}, checkpoints / "last.ckpt")
    assert torch.load(checkpoints / "last.ckpt", weights_only=True)["state_dict"]["w"] == 1


def test_a_log_handler_built_on_a_link_writes_nothing_and_keeps_the_refusal(
    run: Path, elsewhere: Path
) -> None:
    link = plant(run / "train.log", elsewhere / "kept.txt")
    handler = QuietOnFullDiskFileHandler(str(link))  # as Hydra builds it: it must not raise
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        logging.getLogger("vitattn.test").warning("through the link?")
        with pytest.raises(UnsafeWriteError) as raised:
            refused_log_file()
    finally:
        root.removeHandler(handler)
        handler.close()
    assert_one_line(raised.value, link)
    assert (elsewhere / "kept.txt").read_bytes() == KEPT
    refused_log_file()  # no such handler left: nothing to refuse


# --- the log, the lock, links planted before a command -------------------------------------


def test_the_log_is_appended_to_but_never_through_a_link(run: Path, elsewhere: Path) -> None:
    log_file = run / "train.log"
    with open_for_append(log_file) as handle:
        handle.write("one\n")
    with open_for_append(log_file) as handle:
        handle.write("two\n")
    assert log_file.read_text() == "one\ntwo\n"
    plant(run / "eval.log", elsewhere / "kept.txt")
    with pytest.raises(UnsafeWriteError) as raised:
        open_for_append(run / "eval.log")
    assert_one_line(raised.value, run / "eval.log")
    handler = QuietOnFullDiskFileHandler(str(log_file))
    handler.emit(logging.makeLogRecord({"msg": "three"}))
    handler.close()
    assert log_file.read_text() == "one\ntwo\nthree\n"
    assert (elsewhere / "kept.txt").read_bytes() == KEPT


@pytest.mark.parametrize(
    "name",
    [
        "train.log",
        ".vitattn.lock",
        ".vitattn.lock.json",
        ".metrics.json.partial",
        ".hydra",
        ".hydra/config.yaml",
        "hparams.yaml",
        "multirun.yaml",
        "optuna.db",
        "events.out.tfevents.1.host.2.0",
        "csv/metrics.csv",
        "checkpoints/.last.ckpt.partial",
    ],
)
def test_a_link_where_a_file_is_written_through_is_refused_before_the_lock(
    run: Path, elsewhere: Path, name: str
) -> None:
    link = plant(run / name, elsewhere / "kept.txt")
    assert planted_entries(run) == [link]
    with pytest.raises(UnsafeWriteError) as raised:
        hold_run_directory(run, "vitattn-train")
    assert_one_line(raised.value, link)
    assert [p.name for p in run.iterdir()] == [Path(name).parts[0]]  # no lock taken or written
    assert (elsewhere / "kept.txt").read_bytes() == KEPT


@pytest.mark.parametrize(
    "name",
    [
        "kept.txt",  # not a file vitattn writes
        "metrics.json",  # a file vitattn replaces
        "checkpoints/last.ckpt",
        "checkpoints",  # a folder: checkpoints -> <another run>/checkpoints
        "csv",
        "attention",
        ".hydra",
        "tensorboard/deeper/folder",
    ],
)
def test_a_run_holds_no_link_at_all(run: Path, elsewhere: Path, name: str) -> None:
    target = elsewhere / "kept.txt" if "." in Path(name).name else elsewhere
    link = plant(run / name, target)
    assert planted_entries(run) == [link]
    with pytest.raises(UnsafeWriteError) as raised:
        hold_run_directory(run, "vitattn-train")
    assert_one_line(raised.value, link)
    assert not (run / ".vitattn.lock").exists()
    assert sorted(elsewhere.iterdir()) == [elsewhere / "kept.txt"]
    assert (elsewhere / "kept.txt").read_bytes() == KEPT


def test_the_log_is_appended_to_only_as_the_one_name_of_a_regular_file(
    run: Path, elsewhere: Path
) -> None:
    """A hard link to a file outside the run is neither appended to nor truncated, and a FIFO
    is refused at once (opened as it is, it waits for a reader for ever)."""
    victim = elsewhere / "kept.txt"
    os.link(victim, run / "linked.log")
    os.mkfifo(run / "fifo.log")
    for name, what in [("linked.log", "a hard link"), ("fifo.log", "not a regular file (a FIFO)")]:
        for mode in ("a", "w"):
            with pytest.raises(UnsafeWriteError, match=re.escape(f"is {what}")) as raised:
                open_for_append(run / name, mode)
            assert_one_line(raised.value, run / name)
    assert victim.read_bytes() == KEPT
    with open_for_append(run / "train.log", "w") as log:
        log.write("one\n")
    with open_for_append(run / "train.log") as log:
        log.write("two\n")
    assert (run / "train.log").read_text() == "one\ntwo\n"
    assert planted_entries(run) == [run / "fifo.log", run / "linked.log"]


def test_a_linked_run_directory_is_refused(tmp_path: Path, run: Path) -> None:
    link = tmp_path / "linked"
    link.symlink_to(run)
    assert planted_entries(link) == [link]


def test_the_lock_holder_file_is_written_whole_and_read_leniently(run: Path) -> None:
    for content in ("[]", "{", '{"pid": 1}', "null", '"text"'):
        (run / ".vitattn.lock.json").write_text(content)
        assert f"{run} is in use by another process" in in_use_message(run)
    (run / ".vitattn.lock.json").write_text(
        json.dumps({"program": "x\ny", "pid": 7, "started": "now"})
    )
    assert "\n" not in in_use_message(run)
    (run / ".vitattn.lock.json").write_text(
        json.dumps({"program": "x" * (1 << 20), "pid": 7, "started": "now"})
    )
    assert len(in_use_message(run)) < 500  # was the megabyte, in one line


# --- reading ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[]", "holds a list where a mapping belongs"),
        ("{", "is not JSON (Expecting property name"),
        ("", "is not JSON (Expecting value"),
        ("null", "holds nothing (null) where a mapping belongs"),
        ("3", "holds a number where a mapping belongs"),
        ("[" * 100_000, "is nested more than 64 deep"),
        ('{"steps": ' + "9" * 5000 + "}", "is not JSON (Exceeds the limit (4300 digits)"),
    ],
)
def test_malformed_json_is_one_line_naming_the_file(run: Path, content: str, problem: str) -> None:
    path = run / "metrics.json"
    error = read_malformed(read_json, path, content)
    assert str(error).startswith(f"{path}: {problem}")
    assert isinstance(error, ConfigError)


def test_a_file_that_is_not_a_regular_text_file_is_one_line(run: Path) -> None:
    (run / "bytes.json").write_bytes(b"\xff\xfe")
    (run / "folder.json").mkdir()
    os.mkfifo(run / "fifo.json")  # a reader that opened it as it is would wait forever
    for name, problem in [
        ("bytes.json", "is not UTF-8 text"),
        ("folder.json", "is not a regular file"),
        ("fifo.json", "is not a regular file"),
        ("missing.json", "cannot be read (No such file or directory)"),
    ]:
        with pytest.raises(UnreadableFileError, match=re.escape(problem)) as raised:
            read_json(run / name, dict)
        assert_one_line(raised.value, run / name)


def test_every_reader_opens_a_file_one_way(run: Path, elsewhere: Path) -> None:
    """:func:`open_regular`, which the run files, the arrays, the event files, the lock's record
    and the data's batch files are opened by: what is there is named, a FIFO is refused without
    waiting for a writer, a device without reading it, a link unless it is followed, a file past
    its bound with the caller's words, a missing file as the caller asks."""
    (elsewhere / "kept.txt").write_bytes(b"12345")
    link = plant(run / "link.txt", elsewhere / "kept.txt")
    (run / "folder").mkdir()
    os.mkfifo(run / "fifo")
    (run / "big").write_bytes(b"123456")
    for path, options, problem in [
        (run / "fifo", {}, "is not a regular file (a FIFO)"),
        (Path("/dev/zero"), {"follow_links": True}, "is not a regular file (a device)"),
        (run / "folder", {}, "is not a regular file (a folder)"),
        (link, {}, f"is a symbolic link (to {elsewhere / 'kept.txt'}), not a file"),
        (run / "big", {"max_bytes": 5, "too_big": "more than five"}, "is 6 bytes, more than five"),
        (run / "missing", {}, "cannot be read (No such file or directory)"),
    ]:
        with pytest.raises(UnreadableFileError, match=re.escape(problem)) as raised:
            open_regular(path, **options)
        assert_one_line(raised.value, path)
    with open_regular(link, follow_links=True, max_bytes=5) as handle:
        assert handle.read() == b"12345"
    with pytest.raises(FileNotFoundError):
        open_regular(run / "missing", missing_ok=True)


def test_a_link_is_read_only_where_that_is_asked(run: Path, elsewhere: Path) -> None:
    (elsewhere / "list.json").write_text("[1]")
    link = plant(run / "failed_attempts.json", elsewhere / "list.json")
    assert read_json(link, list) == [1]
    with pytest.raises(UnreadableFileError, match="is a symbolic link"):
        read_json(link, list, follow_links=False)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("a: [", "is not valid YAML at line 2, column 1: did not find expected node content"),
        ("- a\n", "holds a list where a mapping belongs"),
        ("", "is empty where a mapping belongs"),
        ("!!python/object:os.system {}", "is not valid YAML"),
        ("a: " + "9" * 5000, "is not plain data (Exceeds the limit (4300 digits)"),
        # explicit tags PyYAML's constructors fail on, in a traceback until 2026-11-29
        ("x: !!bool foo", "is not plain data (KeyError: 'foo')"),
        ("- !!timestamp 99999-01-01", "is not plain data (AttributeError: "),
        ("study_name: !!int ''", "is not plain data (IndexError: "),
        ("a: !!float ''", "is not plain data (IndexError: "),
        # values PyYAML's safe loader builds and no writer of run files writes, which ended a
        # summary in json.dumps's TypeError until 2026-12-02 (red team)
        ("attention:\n  when: 2026-01-01", "holds a date (datetime.date(2026, 1, 1)), which"),
        ("a: 2026-01-01 10:00:00", "holds a date and time (datetime.datetime(2026, 1, 1, 10, 0)"),
        ("attention:\n  blob: !!binary aGVsbG8=", "holds binary data (b'hello'), which vitattn"),
        ("a: !!set {x}", "holds a set ({'x'}), which vitattn never writes: only text, numbers"),
        ("? 2026-01-01\n: a", "holds a date (datetime.date(2026, 1, 1))"),
    ],
)
def test_malformed_yaml_is_one_line_naming_the_file(run: Path, content: str, problem: str) -> None:
    path = run / "config.yaml"
    assert str(read_malformed(read_yaml, path, content)).startswith(f"{path}: {problem}")


@pytest.mark.parametrize("value", ["1e999", "NaN", "-Infinity", "-3", "2.5", '"8"', "true"])
def test_a_count_must_be_a_whole_number(run: Path, value: str) -> None:
    path = run / "metrics.json"
    path.write_text(f'{{"status": "completed", "steps": {value}}}')
    metrics = read_json(path, dict)
    with pytest.raises(UnreadableFileError, match=r'"steps" is .*, not a count') as raised:
        whole_number(metrics, "steps", path)
    assert_one_line(raised.value, path)


def test_counts_as_vitattn_writes_them(run: Path) -> None:
    path = run / "metrics.json"
    assert whole_number({"steps": 8, "epochs": 2.0, "other": None}, "steps", path) == 8
    assert whole_number({"epochs": 2.0}, "epochs", path) == 2
    assert whole_number({"other": None}, "other", path) == 0
    assert whole_number({}, "steps", path) == 0


# --- recording a failure ----------------------------------------------------------------------


def completed_run(run: Path) -> Path:
    """A completed run's files as the state rule reads them: its config and ``metrics.json``."""
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text("seed: 1\n")
    metrics = run / "metrics.json"
    write_json(metrics, {"status": "completed", "steps": 8})
    return metrics


@pytest.mark.parametrize("content", ["[1,", "{}", "\xff"])
def test_an_unreadable_attempts_file_is_set_aside_and_the_failure_recorded(
    run: Path, content: str
) -> None:
    metrics = completed_run(run)
    results = metrics.read_bytes()
    (run / ATTEMPTS_FILE).write_text(content, encoding="latin-1")
    record_failure(metrics, RuntimeError("boom"))
    (recorded,) = json.loads((run / ATTEMPTS_FILE).read_text())
    assert recorded["error"] == "RuntimeError: boom"
    aside = run / f"{ATTEMPTS_FILE}.unreadable-1"
    assert aside.read_text(encoding="latin-1") == content  # kept as it was
    assert metrics.read_bytes() == results  # the completed run's results stand
    (run / ATTEMPTS_FILE).write_text("[")
    record_failure(metrics, RuntimeError("again"))
    assert (run / f"{ATTEMPTS_FILE}.unreadable-2").read_text() == "["


def test_a_linked_attempts_file_is_set_aside_unread(run: Path, elsewhere: Path) -> None:
    metrics = completed_run(run)
    (elsewhere / "secret.json").write_text('[{"secret": 1}]')
    plant(run / ATTEMPTS_FILE, elsewhere / "secret.json")
    record_failure(metrics, RuntimeError("boom"))
    (recorded,) = json.loads((run / ATTEMPTS_FILE).read_text())  # nothing copied from the link
    assert recorded["error"] == "RuntimeError: boom"
    assert (run / f"{ATTEMPTS_FILE}.unreadable-1").is_symlink()
    assert (elsewhere / "secret.json").read_text() == '[{"secret": 1}]'


def test_a_planted_temporary_loses_the_record_but_not_the_real_error(
    run: Path, elsewhere: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = completed_run(run)
    plant(run / f".{ATTEMPTS_FILE}.partial", elsewhere / "kept.txt")
    record_failure(metrics, RuntimeError("boom"))  # does not raise
    assert "this failure is not recorded" in caplog.text
    assert (elsewhere / "kept.txt").read_bytes() == KEPT
    assert not (run / ATTEMPTS_FILE).exists()


def test_a_malformed_metrics_file_is_not_a_completed_run(run: Path) -> None:
    (run / "metrics.json").write_text("[]")
    record_failure(run / "metrics.json", RuntimeError("boom"))
    assert json.loads((run / "metrics.json").read_text())["status"] == "failed"


def test_set_aside_numbers_on_and_keeps_the_file(run: Path) -> None:
    (run / "f.json").write_text("1")
    assert set_aside_unreadable(run / "f.json").name == "f.json.unreadable-1"
    (run / "f.json").write_text("2")
    (run / "f.json.unreadable-7").write_text("7")
    assert set_aside_unreadable(run / "f.json").name == "f.json.unreadable-8"
    assert (run / "f.json.unreadable-8").read_text() == "2"


def test_a_planted_number_too_long_for_a_name_is_passed_over(run: Path) -> None:
    """``metrics.csv.unreadable-999…9`` (232 digits) planted beside it: the next name was longer
    than a file system takes, and the resume ended in "unexpected OSError" (red team)."""
    (run / "metrics.csv").write_text("garbage")
    (run / f"metrics.csv.unreadable-{'9' * 232}").write_text("planted")
    assert set_aside_unreadable(run / "metrics.csv").name == "metrics.csv.unreadable-1"
    assert (run / "metrics.csv.unreadable-1").read_text() == "garbage"


def test_inside_resolves_links_and_dots(run: Path, elsewhere: Path) -> None:
    plant(run / "away", elsewhere)
    assert inside(run / "a" / "b", run)
    assert not inside(run / "away" / "x", run)
    assert not inside(run / ".." / "elsewhere", run)


def test_a_failed_job_is_never_moved_out_of_its_sweep(tmp_path: Path) -> None:
    sweep, away = tmp_path / "sweep", tmp_path / "away"
    (away / "job").mkdir(parents=True)
    sweep.mkdir()
    plant(sweep / "link", away)
    with pytest.raises(UnsafeWriteError, match="outside the sweep") as raised:
        set_aside(sweep / "link" / "job", sweep)
    assert_one_line(raised.value)
    assert (away / "job").is_dir() and not (sweep / ".attempts").exists()


def test_a_linked_attempts_folder_is_refused(tmp_path: Path) -> None:
    sweep, away = tmp_path / "sweep", tmp_path / "away"
    (sweep / "seed=1").mkdir(parents=True)
    away.mkdir()
    plant(sweep / ATTEMPTS, away)
    with pytest.raises(UnsafeWriteError) as raised:
        set_aside(sweep / "seed=1")
    assert_one_line(raised.value, sweep / ATTEMPTS)
    assert (sweep / "seed=1").is_dir() and list(away.iterdir()) == []


def test_undoing_a_refused_run_reads_and_writes_no_link(run: Path, elsewhere: Path) -> None:
    from vitattn.runs import task

    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text("a: 1\n")
    (run / "train.log").write_text("before\n")
    plant(run / "eval.log", elsewhere / "kept.txt")
    this_process.cache_clear()  # a command's own record, as a new process has
    task.remember_run_directory(run)
    (run / ".hydra" / "config.yaml").write_text("a: 2\n")  # what Hydra wrote, then a link
    (run / "train.log").unlink()  # planted while the refused command ran, pointing nowhere yet
    plant(run / "train.log", elsewhere / "created.txt")
    task.remove_unstarted_run(run)
    assert (run / ".hydra" / "config.yaml").read_text() == "a: 1\n"
    assert not (run / "train.log").is_symlink() and (run / "train.log").read_text() == "before\n"
    assert not (run / "eval.log").is_symlink()  # the planted link is gone, its target kept
    assert sorted(p.name for p in elsewhere.iterdir()) == ["kept.txt"]
    assert (elsewhere / "kept.txt").read_bytes() == KEPT
    this_process.cache_clear()
