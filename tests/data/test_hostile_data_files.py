"""A CIFAR-10 data folder and its download edited as an attacker (or an accident) would: each
is refused in one line naming what is wrong, and nothing the user has is changed."""

from __future__ import annotations

import functools
import http.server
import logging
import os
import pickle
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.in_process import run_in_process
from tests.support.runners import refusal_message
from vitattn.data.cifar10 import FOLDER, CIFAR10DataModule
from vitattn.data.download import LOCK
from vitattn.errors import DataError


@contextmanager
def counted_server(folder: Path) -> Iterator[tuple[str, list[str]]]:
    """Serve ``folder`` on loopback for the block: the archive's URL and the paths requested."""
    requests: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def send_head(self) -> Any:
            requests.append(f"{self.command} {self.path}")
            return super().send_head()

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(folder))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/cifar-10-python.tar.gz", requests
    finally:
        server.shutdown()
        server.server_close()


def empty_batch() -> bytes:
    """A batch file's pickle whose data is an empty array of 3,072 columns."""
    return pickle.dumps({"data": np.zeros((0, 3072), np.uint8), "labels": []})


def test_a_users_older_corrupt_archive_is_not_written_over(served: Path, tmp_path: Path) -> None:
    """A data directory holds a cut ``cifar-10-python.tar.gz`` and, from an earlier attempt, the
    user's ``cifar-10-python.tar.gz.corrupt``: the cut archive is moved aside to a name that is
    free, and the user's file keeps its bytes."""
    target = tmp_path / "data"
    target.mkdir()
    (target / "cifar-10-python.tar.gz").write_bytes(b"a download cut short")
    older = target / "cifar-10-python.tar.gz.corrupt"
    older.write_bytes(b"the user's own file, kept for a bug report")
    with counted_server(served) as (url, _):
        dm = CIFAR10DataModule(target, url=url)
        dm.prepare_data()
    assert older.read_bytes() == b"the user's own file, kept for a bug report"
    assert (target / "cifar-10-python.tar.gz.corrupt.1").read_bytes() == b"a download cut short"


def test_an_archive_is_left_where_it_is_when_every_name_aside_is_taken(tmp_path: Path) -> None:
    """Where ``<name>.corrupt`` and all its numbered names are the user's files, the archive
    that does not verify stays where it is and none of them changes."""
    from vitattn.data.download import MAX_ASIDE, move_aside

    archive = tmp_path / "cifar-10-python.tar.gz"
    archive.write_bytes(b"cut")
    taken = [tmp_path / f"{archive.name}.corrupt"]
    taken += [tmp_path / f"{archive.name}.corrupt.{n}" for n in range(1, MAX_ASIDE + 1)]
    for number, path in enumerate(taken):
        path.write_text(str(number))
    assert move_aside(archive) is None
    assert archive.read_bytes() == b"cut"
    assert [path.read_text() for path in taken] == [str(n) for n in range(len(taken))]


@pytest.mark.parametrize("kind", ["a regular file", "a dangling link"])
def test_a_batch_folder_that_is_no_folder_is_named_before_any_download(
    kind: str, served: Path, tmp_path: Path
) -> None:
    """``<data_dir>/cifar-10-batches-py`` that is a regular file (or a link to nothing) is
    refused in one line naming it as no folder, before anything is downloaded."""
    target = tmp_path / "data"
    target.mkdir()
    blocker = target / FOLDER
    if kind == "a regular file":
        blocker.write_text("mine")
    else:
        blocker.symlink_to(tmp_path / "nowhere")
    with counted_server(served) as (url, requests), pytest.raises(DataError) as refused:
        CIFAR10DataModule(target, url=url).prepare_data()
    message = str(refused.value)
    assert str(blocker) in message and "\n" not in message, message
    assert "NotADirectoryError" not in message and "downloading" not in message, message
    assert requests == [], requests
    assert blocker.is_symlink() or blocker.read_text() == "mine"


LOCK_KINDS = ("a link to the user's file", "the user's file", "a folder", "a FIFO")


def plant_lock(lock: Path, kind: str, victim: Path) -> None:
    """``lock`` made as ``kind``; ``victim`` (outside the data directory) is the user's file."""
    if kind == "a link to the user's file":
        lock.symlink_to(victim)
    elif kind == "the user's file":
        lock.write_bytes(victim.read_bytes())
    elif kind == "a folder":
        lock.mkdir()
    else:
        os.mkfifo(lock)


@pytest.mark.parametrize("kind", LOCK_KINDS)
def test_a_lock_file_that_is_not_the_empty_one_a_download_leaves_is_named_and_kept(
    kind: str, served: Path, tmp_path: Path
) -> None:
    """The download's lock, ``.cifar-10-batches-py.lock``, that is a link to a file outside,
    a file of the user's, a folder or a FIFO: one line naming it, before any request, and it
    (and what a link points to) is left as it was. The lock had been removed after every
    download, the user's file with it."""
    target = tmp_path / "data"
    target.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's notes")
    lock = target / LOCK
    plant_lock(lock, kind, victim)
    with counted_server(served) as (url, requests), pytest.raises(DataError) as refused:
        CIFAR10DataModule(target, url=url).prepare_data()
    message = str(refused.value)
    assert message.startswith(f"{lock} is "), message
    assert "not the empty lock file" in message and "\n" not in message, message
    assert requests == [], requests
    assert victim.read_text() == "the user's notes"
    assert os.path.lexists(lock) and sorted(os.listdir(target)) == [LOCK]
    if kind == "the user's file":
        assert lock.read_text() == "the user's notes"


def test_the_empty_lock_file_stays_after_a_download_and_is_used_again(
    served: Path, tmp_path: Path
) -> None:
    """A download leaves its lock file, empty, where filelock keeps it; a second download into
    the same directory (the folder removed) takes the same file."""
    target = tmp_path / "data"
    for _ in range(2):
        with counted_server(served) as (url, requests):
            CIFAR10DataModule(target, url=url).prepare_data()
        assert requests == ["GET /cifar-10-python.tar.gz"], requests
        assert sorted(os.listdir(target)) == sorted([LOCK, FOLDER])
        assert (target / LOCK).stat().st_size == 0
        shutil.rmtree(target / FOLDER)


def test_a_planted_staging_link_is_unlinked_and_what_it_points_at_kept(
    served: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The next download removes, under the lock, the staging folders (``.unpacking-*``) a
    killed download left (tests/data/test_concurrent_downloads.py), and never through a link:
    ``.unpacking-evil``, a link to a folder outside holding the user's file, is unlinked and
    the folder kept; a dead staging folder holding a link to another of the user's files is
    removed, the link with it and the file kept. A file of that name is left as it is. Each
    removal is one warning naming it."""
    target = tmp_path / "data"
    target.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("the user's notes")
    (tmp_path / "other.txt").write_text("the user's other notes")
    evil = target / ".unpacking-evil"
    evil.symlink_to(outside, target_is_directory=True)
    dead = target / ".unpacking-dead"
    dead.mkdir()
    (dead / "cifar-10-python.tar.gz").write_bytes(b"half an archive")
    (dead / "inside").symlink_to(tmp_path / "other.txt")
    (target / ".unpacking-note").write_text("a file, not a staging folder")
    with counted_server(served) as (url, requests), caplog.at_level(logging.WARNING):
        CIFAR10DataModule(target, url=url).prepare_data()
    assert requests == ["GET /cifar-10-python.tar.gz"], requests
    assert sorted(os.listdir(target)) == sorted([LOCK, FOLDER, ".unpacking-note"])
    assert sorted(os.listdir(outside)) == ["victim.txt"]
    assert (outside / "victim.txt").read_text() == "the user's notes"
    assert (tmp_path / "other.txt").read_text() == "the user's other notes"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w for w in warned if str(dead) in w] == [
        f"removed {dead}, the staging folder of a download cut off while it held the lock"
    ]
    assert [w for w in warned if str(evil) in w] == [
        f"removed {evil}, a link named as a download's staging folder (not followed)"
    ]


@pytest.mark.slow
def test_a_planted_lock_link_is_refused_by_the_console_script(served: Path, tmp_path: Path) -> None:
    """Through ``vitattn-train`` with a data directory to download into, whose lock is a link
    to a file outside: one line naming the lock, no request, the file as it was."""
    target = tmp_path / "data"
    target.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's notes")
    (target / LOCK).symlink_to(victim)
    with counted_server(served) as (url, requests):
        result = run_in_process(
            "vitattn-train", "trainer=cpu", "trainer.max_steps=1", f"data.url={url}",
            f"hydra.run.dir={tmp_path / 'run'}", data_dir=target, check=False,
        )  # fmt: skip
    message = refusal_message("vitattn-train", result)
    assert message.startswith(f"{target / LOCK} is a symbolic link, not the empty lock"), message
    assert requests == [], requests
    assert victim.read_text() == "the user's notes" and (target / LOCK).is_symlink()


def test_labels_that_are_not_integers_are_refused(tmp_path: Path) -> None:
    """A batch file's labels are accepted only in the type the format gives them, integers:
    floats (``[1.7, 2.9]``) are refused in one line naming the file, not cast to classes."""
    from vitattn.data.cifar10 import read_batch_file

    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [1.7, 2.9]}))
    refused = r"data_batch_1 is truncated or not a CIFAR-10 batch file .*not integers"
    with pytest.raises(DataError, match=refused):
        read_batch_file(path)


def test_batch_files_of_no_images_are_named_not_the_validation_fraction(tmp_path: Path) -> None:
    """Batch files that each hold an empty array of 3,072 columns are refused in one line naming
    the first of them as holding no images, not the validation fraction the user never set."""
    folder = tmp_path / FOLDER
    folder.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (folder / name).write_bytes(empty_batch())
    with pytest.raises(DataError) as refused:
        CIFAR10DataModule(tmp_path).setup("fit")
    message = str(refused.value)
    assert "val_fraction" not in message and "\n" not in message, message
    assert message.startswith(f"{folder / 'data_batch_1'} is "), message
    assert "no images" in message, message


@pytest.mark.parametrize("announced", [True, False], ids=["announced", "unannounced"])
def test_a_mirror_that_sends_a_gigabyte_is_cut_off_at_what_an_archive_can_hold(
    announced: bool, tmp_path: Path
) -> None:
    """A mirror (``data.url`` not the official one) that answers with 1 GiB of zeros, its length
    announced or not (a server that never ends), is refused in one line once the download holds
    more than a CIFAR-10 archive can (:data:`MAX_DOWNLOAD_BYTES`), and nothing of it is kept."""
    from vitattn.data.download import MAX_DOWNLOAD_BYTES

    total = 1 << 30
    sent = [0]

    class Endless(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_HEAD(self) -> None:
            self.send_response(200)
            if announced:
                self.send_header("Content-Length", str(total))
            self.end_headers()

        def do_GET(self) -> None:
            self.do_HEAD()
            chunk = bytes(1 << 20)
            try:
                while sent[0] < total:
                    self.wfile.write(chunk)
                    sent[0] += len(chunk)
            except OSError:
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/cifar-10-python.tar.gz"
    target = tmp_path / "data"
    try:
        with pytest.raises(DataError) as refused:
            CIFAR10DataModule(target, url=url).prepare_data()
    finally:
        server.shutdown()
        server.server_close()
    assert sent[0] < MAX_DOWNLOAD_BYTES + (64 << 20), f"{sent[0]:,} bytes were taken"
    assert f"{MAX_DOWNLOAD_BYTES:,} bytes" in str(refused.value), refused.value
    assert "\n" not in str(refused.value)
    assert os.listdir(target) == [LOCK] and (target / LOCK).stat().st_size == 0  # no archive


EMPTY_TEST_COMMANDS = {
    "vitattn-eval": ("vitattn-eval", "trainer=cpu"),
    "vitattn-bench mode=approx": ("vitattn-bench", "mode=approx", "approx.images=2"),
    "vitattn-bench mode=spectrum": ("vitattn-bench", "mode=spectrum"),
}


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(EMPTY_TEST_COMMANDS))
def test_a_test_batch_of_no_images_is_one_line_naming_it(
    command: str, tiny_run: Path, data_dir: Path, tmp_path: Path
) -> None:
    """A data folder whose ``test_batch`` holds an empty array of 3,072 columns (the training
    files as they are): ``vitattn-eval`` and ``vitattn-bench mode=approx`` or ``mode=spectrum``
    refuse in one line naming ``test_batch``, before their run directory is made."""
    program, *args = EMPTY_TEST_COMMANDS[command]
    hostile = tmp_path / "data"
    shutil.copytree(data_dir / FOLDER, hostile / FOLDER)
    (hostile / FOLDER).chmod(0o755)
    test_batch = hostile / FOLDER / "test_batch"
    test_batch.chmod(0o644)
    test_batch.write_bytes(empty_batch())
    out = tmp_path / "out"
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    result = run_in_process(
        program, *args, f"ckpt_path={checkpoint}", f"hydra.run.dir={out}",
        data_dir=hostile, check=False,
    )  # fmt: skip
    assert "unexpected" not in result.stderr, result.stderr[-600:]
    message = refusal_message(program, result, creates=out)
    assert message.startswith(f"{test_batch} is "), message
    assert "no images" in message, message
