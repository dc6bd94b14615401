"""The CIFAR-10 data module on the real subset, its augmentation and its failures."""

from __future__ import annotations

import contextlib
import functools
import gzip
import http.server
import io
import logging
import os
import pickle
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from vitattn.data.augment import normalize, random_crop, random_horizontal_flip
from vitattn.data.cifar10 import FOLDER, CIFAR10DataModule, read_batch_file
from vitattn.data.download import ARCHIVE, LOCK
from vitattn.errors import ConfigError, DataError


@pytest.fixture(scope="module")
def datamodule(data_dir: Path) -> CIFAR10DataModule:
    dm = CIFAR10DataModule(data_dir, batch_size=64, val_fraction=0.1, augment_seed=0)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_reads_the_subset_as_uint8(datamodule: CIFAR10DataModule) -> None:
    train_x, train_y = datamodule.train_set.tensors
    val_x, _ = datamodule.val_set.tensors
    test_x, test_y = datamodule.test_set.tensors
    assert len(train_x) + len(val_x) == 5085
    assert len(val_x) == round(0.1 * 5085)
    assert len(test_x) == 1017
    assert train_x.dtype == torch.uint8 and train_x.shape[1:] == (3, 32, 32)
    assert train_y.dtype == torch.int64 and set(train_y.tolist()) == set(range(10))
    assert set(test_y.tolist()) == set(range(10))


def test_split_is_seeded_and_disjoint(data_dir: Path, datamodule: CIFAR10DataModule) -> None:
    again = CIFAR10DataModule(data_dir, val_fraction=0.1)
    again.setup("fit")
    torch.testing.assert_close(again.val_set.tensors[0], datamodule.val_set.tensors[0])
    other = CIFAR10DataModule(data_dir, val_fraction=0.1, split_seed=1)
    other.setup("fit")
    assert not torch.equal(other.val_set.tensors[1], datamodule.val_set.tensors[1])
    train_images = {bytes(x.numpy()) for x in datamodule.train_set.tensors[0]}
    assert not any(bytes(x.numpy()) in train_images for x in datamodule.val_set.tensors[0][:200])


def test_loaders_yield_whole_batches(datamodule: CIFAR10DataModule) -> None:
    images, labels = next(iter(datamodule.train_dataloader()))
    assert images.shape == (64, 3, 32, 32) and images.dtype == torch.uint8
    assert labels.shape == (64,)
    batches = list(datamodule.train_dataloader())
    assert all(len(b[1]) == 64 for b in batches)  # drop_last keeps shapes fixed
    seen = sum(len(b[1]) for b in datamodule.val_dataloader())
    assert seen == len(datamodule.val_set)


def test_a_batch_larger_than_a_processs_share_is_refused_as_the_fit_starts(
    data_dir: Path,
) -> None:
    """Each of 2 DDP processes takes 2,289 of the 4,577 training images: with a batch of 3,000
    its loader held no batch (the last, partial one is dropped) and the run trained 0 steps,
    then said it completed (data audit, 2026-12-02). Where ``trainer.devices`` is a number the
    command refuses it before the run (``tests/test_train.py``); else the loader does."""
    datamodule = CIFAR10DataModule(data_dir, batch_size=3000)
    datamodule.setup("fit")

    class Trainer:
        world_size, global_rank, overfit_batches = 2, 0, 0

    datamodule.trainer = Trainer()  # type: ignore[assignment]
    with pytest.raises(ConfigError, match=r"^data.batch_size=3000 is larger than the 2289 "):
        datamodule.train_dataloader()
    Trainer.world_size = 1
    assert len(datamodule.train_dataloader()) == 1


def test_grayscale_is_long_range_arenas(data_dir: Path) -> None:
    """Luma as LRA's input pipeline makes it, TensorFlow's ``rgb_to_grayscale`` on 8-bit images
    (written here from TensorFlow's definition: the weighted sum of x / 255, times 255.5,
    truncated): white is 255, the top of the lookup's 256 intensities (torchvision's made it 254,
    and 27% of the pixels one level lower; data audit, 2026-12-02). Its mean and std are the
    training split's, not the validation images'."""
    from vitattn.data.cifar10 import lra_grayscale

    corners = torch.tensor([[255, 255, 255], [0, 0, 0], [255, 0, 0], [0, 255, 0], [0, 0, 255]])
    pixels = corners.to(torch.uint8).T.reshape(1, 3, 1, 5)
    assert lra_grayscale(pixels).flatten().tolist() == [255, 0, 76, 149, 29]
    plain = CIFAR10DataModule(data_dir, val_fraction=0.1)
    plain.setup("fit")
    gray = CIFAR10DataModule(data_dir, val_fraction=0.1, grayscale=True)
    gray.setup("fit")
    rgb = plain.train_set.tensors[0][:64].to(torch.float32) / 255
    weights = torch.tensor([0.2989, 0.5870, 0.1140]).reshape(1, 3, 1, 1)
    expected = ((rgb * weights).sum(1, keepdim=True) * 255.5).to(torch.uint8)
    assert torch.equal(gray.train_set.tensors[0][:64], expected)
    luma = gray.train_set.tensors[0].float() / 255
    torch.testing.assert_close(gray.mean, luma.mean().reshape(1))
    torch.testing.assert_close(gray.std, luma.std().reshape(1))


def test_augmentation_keeps_shapes_and_is_seeded(data_dir: Path) -> None:
    images = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8)
    outputs = []
    for _ in range(2):
        dm = CIFAR10DataModule(data_dir, augment_seed=123)
        outputs.append(dm.augment(images))
    assert outputs[0].shape == images.shape and outputs[0].dtype == torch.uint8
    torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=0)
    different = CIFAR10DataModule(data_dir, augment_seed=124).augment(images)
    assert not torch.equal(different, outputs[0])


def test_random_crop_is_a_window_of_the_padded_image() -> None:
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(1, 256, (32, 3, 8, 8), dtype=torch.uint8)
    cropped = random_crop(images, padding=2, generator=generator)
    padded = torch.nn.functional.pad(images, (2, 2, 2, 2))
    for image, crop in zip(padded, cropped, strict=True):
        windows = [image[:, r : r + 8, c : c + 8] for r in range(5) for c in range(5)]
        assert any(torch.equal(crop, w) for w in windows)
    assert (cropped == 0).any()  # some crops reach into the zero padding


def test_flip_mirrors_about_half() -> None:
    generator = torch.Generator().manual_seed(0)
    images = torch.arange(1000 * 4, dtype=torch.float32).reshape(1000, 1, 1, 4)
    flipped = random_horizontal_flip(images, generator)
    mirrored = (flipped == images.flip(-1)).all(dim=(1, 2, 3))
    kept = (flipped == images).all(dim=(1, 2, 3))
    assert (mirrored ^ kept).all()
    assert 400 < int(mirrored.sum()) < 600


def test_normalize_standardises() -> None:
    images = torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)
    out = normalize(images, torch.tensor([0.5, 0.5, 0.5]), torch.tensor([0.5, 0.5, 0.5]))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.ones(2, 3, 4, 4))


def test_augmentation_only_while_training(datamodule: CIFAR10DataModule) -> None:
    batch = next(iter(datamodule.val_dataloader()))
    images, labels = datamodule.on_after_batch_transfer(batch, 0)  # no trainer: evaluation path
    expected = normalize(batch[0], datamodule.mean, datamodule.std)
    torch.testing.assert_close(images, expected)
    assert labels is batch[1]


def copy_subset(data_dir: Path, tmp_path: Path) -> Path:
    shutil.copytree(data_dir / FOLDER, tmp_path / FOLDER)
    return tmp_path


def test_truncated_batch_file_is_named(data_dir: Path, tmp_path: Path) -> None:
    root = copy_subset(data_dir, tmp_path)
    damaged = root / FOLDER / "data_batch_3"
    damaged.write_bytes(damaged.read_bytes()[:5000])
    with pytest.raises(DataError, match=r"data_batch_3 is truncated or not a CIFAR-10 batch file"):
        CIFAR10DataModule(root).setup("fit")


def test_foreign_batch_file_is_named(data_dir: Path, tmp_path: Path) -> None:
    root = copy_subset(data_dir, tmp_path)
    with (root / FOLDER / "test_batch").open("wb") as handle:
        pickle.dump({"data": [[1, 2, 3]], "labels": [0]}, handle)
    with pytest.raises(DataError, match=r"test_batch is truncated or not a CIFAR-10 batch file"):
        CIFAR10DataModule(root).setup("test")


class StridedView:
    """Pickles as ``numpy.ndarray(shape, uint8, one byte, 0, strides)``: an array of ``shape``
    over a single byte, strides of 0, built by a global the batch files need."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def __reduce__(self) -> tuple:
        import numpy as np

        return (np.ndarray, (self.shape, np.dtype("u1"), b"\0", 0, (0,) * len(self.shape)))


BATCH_BOMBS = {
    "a memo index of 2**28": b"\x80\x04Nr" + (1 << 28).to_bytes(4, "little") + b".",
    "40 MiB of empty sets": b"\x80\x04" + b"\x8f" * ((40 << 20) - 3) + b".",
    "a view of one byte as a million images": pickle.dumps(
        {"data": StridedView((1_000_000, 3072)), "labels": StridedView((1_000_000,))}, protocol=4
    ),
    "a row repeated 1.5 million times": pickle.dumps(
        {"data": [[0] * 3072] * 1_500_000, "labels": [0] * 1_500_000}, protocol=4
    ),
}


@pytest.mark.parametrize("kind", sorted(BATCH_BOMBS))
def test_a_batch_file_bomb_is_one_line_under_a_memory_cap(kind: str, tmp_path: Path) -> None:
    """A few bytes that would have the reader set aside gigabytes are refused before they are:
    9 bytes naming memo index 2**28 (C's unpickler makes room for twice as many pointers, 4 GiB),
    and 6 MB of one row referenced 1.5 million times (4.6 GB as an array). The reader runs in a
    child capped 700 MB above what importing it takes; on the code before, both ended in
    ``MemoryError`` there (and took 5 GB without the cap)."""
    import subprocess
    import sys

    from tests.support.bombs import capped

    path = tmp_path / "data_batch_1"
    path.write_bytes(BATCH_BOMBS[kind])
    script = (
        "import sys; from vitattn.data.cifar10 import read_batch_file; from pathlib import Path\n"
        "try: read_batch_file(Path(sys.argv[1]))\n"
        "except Exception as error: print(type(error).__name__, error)"
    )
    child = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True, text=True, timeout=120, preexec_fn=capped(4_500_000_000),
    )  # fmt: skip
    assert child.returncode == 0, child.stderr
    said = child.stdout.strip()
    assert said.startswith(f"DataError {path} is truncated or not a CIFAR-10 batch file (")
    assert "MemoryError" not in said and "\n" not in said
    expected = {
        "a memo index of 2**28": "its pickle names memo index 268,435,456",
        "a row repeated 1.5 million times": "its pickle has more than 1,048,576 operations",
        "40 MiB of empty sets": "its pickle has more than 1,048,576 operations",
        "a view of one byte as a million images": "its data claims 3,072,000,000 bytes, more "
        "than the file holds",
    }[kind]
    assert expected in said


SHORT_OF_MEMORY = """
import resource, sys
from pathlib import Path
from vitattn.data.cifar10 import read_batch_file
from vitattn.errors import DataError

used = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (used + 2**20, resource.RLIM_INFINITY))
try:
    read_batch_file(Path(sys.argv[1]))
except DataError as error:
    print(error)
"""


def test_a_process_short_of_memory_does_not_blame_the_batch_file(data_dir: Path) -> None:
    """A process whose address space is capped (``ulimit -v``: a login node's; torch alone
    takes about 4 GB of it) ran out of memory reading a good batch file, and was told the file
    was truncated or foreign, and to replace the folder (audit). A real ``MemoryError``: a
    child process capped 1 MiB above what it uses reads a 3 MB batch file."""
    batch = data_dir / FOLDER / "data_batch_1"
    said = subprocess.run(
        [sys.executable, "-c", SHORT_OF_MEMORY, str(batch)],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout.strip()  # fmt: skip
    assert said.startswith(f"reading {batch} ran out of memory (this process may use "), said
    assert said.endswith("wrong with it: run where more memory is free, or raise the limit")
    assert "replace" not in said and "truncated" not in said


def test_a_batch_file_past_the_size_bound_is_refused_unread(tmp_path: Path) -> None:
    from vitattn.data.download import MAX_MEMBER_BYTES

    path = tmp_path / "data_batch_1"
    with path.open("wb") as handle:
        handle.truncate(MAX_MEMBER_BYTES + 1)  # sparse: no byte of it on disk
    refusal = r"\(ValueError: it is 41943041 bytes, more than the 41943040 a batch file may hold\)"
    with pytest.raises(DataError, match=refusal):
        read_batch_file(path)


def test_a_batch_file_that_is_a_fifo_is_named_so_without_waiting(tmp_path: Path) -> None:
    path = tmp_path / "data_batch_1"
    os.mkfifo(path)  # "is missing" until 2026-11-30
    with pytest.raises(DataError, match=r"\(ValueError: it is not a regular file \(a FIFO\)\)"):
        read_batch_file(path)


def test_missing_file_is_named(data_dir: Path, tmp_path: Path) -> None:
    root = copy_subset(data_dir, tmp_path)
    (root / FOLDER / "data_batch_5").unlink()
    with pytest.raises(DataError, match=r"data_batch_5 is missing"):
        CIFAR10DataModule(root).setup("fit")


def test_read_batch_file_matches_official_layout(data_dir: Path) -> None:
    images, labels = read_batch_file(data_dir / FOLDER / "test_batch")
    with (data_dir / FOLDER / "test_batch").open("rb") as handle:
        raw = pickle.load(handle, encoding="latin1")
    first = torch.as_tensor(raw["data"][0])
    assert torch.equal(images[0, 0].flatten(), first[:1024])  # red plane first
    assert torch.equal(images[0, 2].flatten(), first[2048:])
    assert labels.tolist() == list(raw["labels"])


def test_no_data_and_no_network_names_the_directory(tmp_path: Path) -> None:
    # Port 9 on loopback refuses at once: the same failure as a machine without network.
    dm = CIFAR10DataModule(tmp_path / "empty", url="http://127.0.0.1:9/cifar-10-python.tar.gz")
    with pytest.raises(DataError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert f"data.data_dir={tmp_path / 'empty'} holds no cifar-10-batches-py/" in message
    assert "VITATTN_DATA_DIR" in message and "\n" not in message


@contextlib.contextmanager
def archive_url(
    folder: Path, handler: type[http.server.BaseHTTPRequestHandler] | None = None
) -> Iterator[str]:
    """Serve ``folder`` from loopback for the block; the archive's URL."""
    handler_class = handler or http.server.SimpleHTTPRequestHandler
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler_class, directory=str(folder))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/cifar-10-python.tar.gz"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_concurrent_first_runs_download_once(served: Path, tmp_path: Path) -> None:
    """Three processes (DDP ranks, parallel sweep jobs) start on an empty data directory at once:
    one downloads, the others wait for it; all read the complete folder."""
    import subprocess
    import sys
    import time

    transfers: list[str] = []  # archives sent whole

    class SlowHandler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(1.0)  # keep the download open while the others start
            # torchvision's redirect check opens the URL too and hangs up after the headers,
            # so only a request that got the whole file counts as a download.
            try:
                super().do_GET()
            except ConnectionError:
                return
            transfers.append(self.path)

        def log_message(self, *args: object) -> None:
            pass

    target = tmp_path / "shared_dir"
    with archive_url(served, SlowHandler) as url:
        script = (
            "import sys; from vitattn.data.cifar10 import CIFAR10DataModule as D; "
            f"d = D({str(target)!r}, url={url!r}); d.prepare_data(); d.setup('test'); "
            "print(len(d.test_set))"
        )
        jobs = [
            subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
            for _ in range(3)
        ]
        outputs = [job.communicate(timeout=120)[0].strip() for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0, 0]
    assert outputs == ["1017"] * 3
    assert transfers == ["/cifar-10-python.tar.gz"]  # downloaded once
    assert not list(target.glob(".unpacking-*"))  # the staging folder is gone


@pytest.mark.slow
def test_a_server_that_never_answers_fails_after_the_timeout(tmp_path: Path) -> None:
    import socket

    # A listening socket that is never accepted: the connection opens, no byte ever comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/cifar-10-python.tar.gz"
        dm = CIFAR10DataModule(tmp_path / "empty", url=url, download_timeout=0.5)
        with pytest.raises(DataError) as info:
            dm.prepare_data()  # a download that ignored the timeout would hang: pytest-timeout
    message = str(info.value)
    assert f"downloading {url} failed" in message and "timed out" in message
    assert "\n" not in message
    assert socket.getdefaulttimeout() is None  # the process's default is restored


@pytest.mark.parametrize("timeout", [0, -1, "soon", True])
def test_bad_download_timeout_is_a_one_line_error(timeout: object, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^data\.download_timeout=.* is not valid; choose a"):
        CIFAR10DataModule(tmp_path, download_timeout=timeout)


@pytest.mark.parametrize("workers", [-1, 10_000])
def test_more_data_workers_than_cpus_is_a_one_line_error(workers: int, tmp_path: Path) -> None:
    """Each worker is a copy of the training process, kept alive for the run: hundreds of them
    (a typo) would fill the memory before the first step."""
    with pytest.raises(
        ConfigError, match=rf"^data\.num_workers={workers} is not valid; choose 0\.\."
    ):
        CIFAR10DataModule(tmp_path, num_workers=workers)
    CIFAR10DataModule(tmp_path, num_workers=1)


@pytest.mark.parametrize("name", [FOLDER, "cifar"])
def test_the_batches_folder_given_as_the_data_dir_names_its_parent(
    name: str, data_dir: Path, tmp_path: Path
) -> None:
    """``VITATTN_DATA_DIR=.../cifar-10-batches-py``, one level too deep: the run downloaded the
    archive into the folder, to nest a second copy inside it (or said only that the download
    failed, on a machine without network). Now one line names the parent, and the folder is
    left as it was (no lock, no staging folder)."""
    given = shutil.copytree(data_dir / FOLDER, tmp_path / name)
    before = sorted(p.name for p in given.iterdir())
    url = "http://127.0.0.1:9/cifar-10-python.tar.gz"  # refused at once, were it tried
    with pytest.raises(DataError) as info:
        CIFAR10DataModule(given, url=url).prepare_data()
    assert str(info.value) == (
        f"data.data_dir={given} is a {FOLDER}/ folder itself (it holds batches.meta); give the "
        f"directory that holds it: data.data_dir={tmp_path} (or VITATTN_DATA_DIR={tmp_path})"
    )
    assert sorted(p.name for p in given.iterdir()) == before


def place_batches_folder(data_dir: Path) -> str:
    (data_dir / "batches.meta").touch()
    return f"data.data_dir={data_dir} is a {FOLDER}/ folder itself"


def place_nothing_without_download(data_dir: Path) -> str:
    return f"data.data_dir={data_dir} holds no {FOLDER}/ and data.download=false"


def place_a_linked_lock(data_dir: Path) -> str:
    (data_dir / LOCK).symlink_to(data_dir / "elsewhere")
    return f"{data_dir / LOCK} is a symbolic link, not the empty lock file"


@pytest.mark.parametrize(
    ("place", "overrides"),
    [
        (place_batches_folder, []),
        (place_nothing_without_download, ["data.download=false"]),
        (place_a_linked_lock, []),
    ],
)
def test_a_data_directory_refused_is_named_before_the_run_directory_exists(
    place: Callable[[Path], str], overrides: list[str], tmp_path: Path
) -> None:
    """What ``prepare_data`` refuses without downloading or reading anything is refused by
    ``vitattn-train``'s checks before the run (``check_place``): until 2026-12-01 the run
    directory was made first (and removed), Lightning seeded and the data module prepared."""
    from tests.support.runners import assert_one_line_refusal
    from vitattn.train import validate

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    message = place(data_dir)
    overrides = [f"data.data_dir={data_dir}", "data.url=http://127.0.0.1:9/x.tar.gz", *overrides]
    run_dir = tmp_path / "run"
    assert_one_line_refusal("train", overrides, validate, f"^{re.escape(message)}", run_dir)
    assert sorted(p.name for p in data_dir.iterdir()) in ([], ["batches.meta"], [LOCK])


def test_download_disabled_names_the_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"holds no cifar-10-batches-py/ and data.download=false"):
        CIFAR10DataModule(tmp_path, download=False).prepare_data()


def test_download_unpacks_the_archive(
    served: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The real download path (``download_bounded``), served from loopback: it says how much has
    come at each tenth of the length the server announced, the last line the whole."""
    size = (served / "cifar-10-python.tar.gz").stat().st_size
    with archive_url(served) as url, caplog.at_level(logging.INFO, "vitattn.data.download"):
        dm = CIFAR10DataModule(tmp_path / "downloaded", url=url)
        dm.prepare_data()
        dm.setup("test")
    assert len(dm.test_set) == 1017
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("downloaded")]
    assert 5 <= len(progress) <= 10, progress
    assert progress[-1] == f"downloaded {size / 1e6:.1f} MB of {size / 1e6:,.1f} MB (100%)"


def test_a_mirrors_batch_files_are_compared_with_the_official_md5s(
    served: Path,
    data_dir: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mirror's archive (here the subset, from loopback) is checked by member names; once
    unpacked, its batch files are compared with the official MD5s (torchvision's list) and
    those that differ are named in a warning, the files kept. The subset's six files all
    differ. The official 170 MB archive is not at hand, so for the other two cases torchvision's
    list is set to the subset's own MD5s: all of them, and the line says the files are official;
    one changed, and it names that one. Until 2026-12-02 nothing was said (data audit F5)."""
    import hashlib

    from torchvision.datasets import CIFAR10

    def downloaded(name: str) -> list[str]:
        caplog.clear()
        with archive_url(served) as url, caplog.at_level(logging.INFO, "vitattn.data.download"):
            CIFAR10DataModule(tmp_path / name, url=url).prepare_data()
        assert (tmp_path / name / FOLDER / "test_batch").is_file()  # kept
        return [r.getMessage() for r in caplog.records if "the archive from" in r.getMessage()]

    (line,) = downloaded("subset")
    everything = "data_batch_1, data_batch_2, data_batch_3, data_batch_4, data_batch_5, test_batch"
    assert f"is not the official CIFAR-10: {everything} do not have the official MD5" in line

    def md5(name: str) -> str:
        return hashlib.md5((data_dir / FOLDER / name).read_bytes()).hexdigest()

    monkeypatch.setattr(CIFAR10, "train_list", [[n, md5(n)] for n, _ in CIFAR10.train_list])
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", md5("test_batch")]])
    (line,) = downloaded("as_official")
    assert line.endswith("holds the official CIFAR-10 batch files (MD5s)")
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", "0" * 32]])
    (line,) = downloaded("one_differs")
    assert "is not the official CIFAR-10: test_batch does not have the official MD5" in line


def test_a_run_says_how_many_images_it_read_and_warns_where_they_are_not_cifar10s(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One line before a run says how many images were read and where; a warning where they
    are not the whole of CIFAR-10 (here the subset), and an information line where they are
    (the sets replaced by 45,000, 5,000 and 10,000 stand-ins). Until 2026-12-02 a run on a
    partial set said nothing of it (data audit F5)."""
    from torch.utils.data import TensorDataset

    from vitattn.training.fitting import tell_of_the_images

    dm = CIFAR10DataModule(data_dir)
    dm.setup("fit")
    with caplog.at_level(logging.INFO, logger="vitattn.training.fitting"):
        tell_of_the_images(dm)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        f"CIFAR-10 at {data_dir / FOLDER}: 5,085 training images (4,577 to train on, 508 to "
        "validate on) and 1,017 test images, not the whole of CIFAR-10 (50,000 training and "
        "10,000 test images): its figures do not compare with CIFAR-10's"
    )
    caplog.clear()
    dm.train_set, dm.val_set, dm.test_set = (
        TensorDataset(torch.zeros(n, 1)) for n in (45_000, 5_000, 10_000)
    )
    with caplog.at_level(logging.INFO, logger="vitattn.training.fitting"):
        tell_of_the_images(dm)
    (record,) = caplog.records
    assert record.levelno == logging.INFO and record.getMessage().endswith(
        "50,000 training images (45,000 to train on, 5,000 to validate on) and 10,000 test images"
    )


@pytest.fixture(scope="module")
def cut(served: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder serving the first half of the archive: a download cut off half-way."""
    folder = tmp_path_factory.mktemp("cut")
    whole = (served / "cifar-10-python.tar.gz").read_bytes()
    (folder / "cifar-10-python.tar.gz").write_bytes(whole[: len(whole) // 2])
    return folder


def leftovers(data_dir: Path) -> list[str]:
    """Everything in ``data_dir`` but the unpacked folder and the empty lock file a download
    leaves (filelock keeps it): archives, staging, anything in the lock."""
    lock = data_dir / LOCK
    if lock.exists():
        assert lock.is_file() and not lock.is_symlink() and lock.stat().st_size == 0
    return sorted(p.name for p in data_dir.iterdir() if p.name not in (FOLDER, LOCK))


def test_a_cut_download_keeps_nothing_and_the_retry_succeeds(
    served: Path, cut: Path, tmp_path: Path
) -> None:
    target = tmp_path / "data"
    # A mirror has no MD5 to check against: the full listing of the archive catches the cut.
    with archive_url(cut) as url, pytest.raises(DataError) as info:
        CIFAR10DataModule(target, url=url).prepare_data()
    message = str(info.value)
    assert f"the download from {url} is unusable" in message and "\n" not in message
    assert "cifar-10-python.tar.gz is not a complete .tar.gz" in message
    assert leftovers(target) == []  # no partial archive, no staging folder
    with archive_url(served) as url:
        retry = CIFAR10DataModule(target, url=url)
        retry.prepare_data()
        retry.setup("test")
    assert len(retry.test_set) == 1017
    assert leftovers(target) == []


class UnannouncedHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the archive without its length (as a server streaming it does): nothing to check
    the space against before it comes."""

    def send_header(self, keyword: str, value: str) -> None:
        if keyword.lower() != "content-length":
            super().send_header(keyword, value)

    def log_message(self, *args: object) -> None:
        pass


def said_for_a_full_disk(target: Path, url: str, own_device: bool = True) -> DataError:
    """The error ``prepare_data`` into ``target`` from ``url`` ends in, its line checked to name
    the data directory and the space left there (as measured now, on a device of the test's
    own; else a figure: others write there), to advise moving it, and to leave nothing."""
    from vitattn.runs.disk import space_left

    with pytest.raises(DataError) as info:
        CIFAR10DataModule(target, url=url).prepare_data()
    message = str(info.value)
    assert message.startswith(f"data.data_dir={target} "), message
    space = re.escape(space_left(target)) if own_device else r"[0-9.]+ (GiB|MiB|KiB|bytes) free"
    said = rf": {space} on its device, and the download from {re.escape(url)} needs"
    assert re.search(said, message), message
    assert "set data.data_dir (or VITATTN_DATA_DIR) to a directory with room" in message
    assert "Errno" not in message and "\n" not in message
    assert leftovers(target) == []  # no partial archive, no staging folder
    return info.value


@pytest.mark.parametrize("size", ["8m", "28m"])
def test_a_data_directory_that_fills_says_its_space_and_what_the_download_needs(
    served: Path, tmp_path: Path, size: str
) -> None:
    """A real full disk, a tmpfs of 8 MiB (the 17 MB archive of the subset does not fit) or of
    28 MiB (it does; its 19 MB of files, unpacked beside it, do not), the length not announced:
    it said ``failed (OSError: [Errno 28] No space left on device)`` and advised putting the
    folder in the full directory (audit)."""
    from tests.support.mounts import tmpfs

    with (
        tmpfs(tmp_path / "small", f"size={size}") as mount,
        archive_url(served, UnannouncedHandler) as url,
    ):
        message = str(said_for_a_full_disk(mount / "data", url))
    from vitattn.data.download import SpaceNeeded

    assert "ran out of space while CIFAR-10 was downloaded and unpacked there" in message
    assert f"needs {SpaceNeeded()};" in message  # nothing announced: the official archive's
    assert "about 340.2 MiB (the archive, 162.6 MiB, and its unpacked files, 177.6 MiB)" in message


def test_a_download_announced_larger_than_the_space_left_is_refused_before_it_comes(
    served: Path, tmp_path: Path
) -> None:
    """The archive and its unpacked files, 36 MB, on a tmpfs of 20 MiB, its length announced."""
    from tests.support.mounts import tmpfs

    with tmpfs(tmp_path / "small", "size=20m") as mount, archive_url(served) as url:
        error = said_for_a_full_disk(mount / "data", url)
    from vitattn.data.download import SpaceNeeded, TooLittleSpaceError

    assert isinstance(error.__cause__, TooLittleSpaceError)  # from the headers, no byte read
    message = str(error)
    needed = SpaceNeeded()
    needed.announced((served / ARCHIVE).stat().st_size)
    assert "has too little space for CIFAR-10, so nothing was downloaded" in message
    assert f"needs {needed};" in message


def test_an_enospc_write_of_the_download_is_the_same_line(
    served: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no tmpfs can be mounted: the archive's write fails with ENOSPC after its first
    megabyte, as on a full disk."""
    import errno

    from vitattn.data import download

    real = download.write_new

    def full_after_a_chunk(path: Path, source: io.RawIOBase, size: int) -> None:
        real(path, io.BytesIO(source.read(download.CHUNK)), download.CHUNK)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(download, "write_new", full_after_a_chunk)
    with archive_url(served) as url:
        message = str(said_for_a_full_disk(tmp_path / "data", url, own_device=False))
    from vitattn.data.download import SpaceNeeded

    needed = SpaceNeeded()
    needed.announced((served / ARCHIVE).stat().st_size)
    assert "ran out of space while CIFAR-10 was downloaded and unpacked there" in message
    assert f"needs {needed};" in message


def test_a_corrupt_archive_in_the_data_dir_is_moved_aside(
    served: Path, cut: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "data"
    target.mkdir()
    shutil.copy(cut / "cifar-10-python.tar.gz", target)  # an older, cut download
    with archive_url(served) as url, caplog.at_level(logging.WARNING):
        dm = CIFAR10DataModule(target, url=url)
        dm.prepare_data()
        dm.setup("test")
    assert len(dm.test_set) == 1017
    assert leftovers(target) == ["cifar-10-python.tar.gz.corrupt"]
    assert "moved it aside to" in caplog.text


def test_a_mirrors_archive_with_a_flipped_bit_is_refused_and_nothing_is_kept(
    served: Path, tmp_path: Path
) -> None:
    """A bit flipped inside a member's data: the tar's headers and lengths hold, and gzip checks
    its checksum only at the stream's end, which the tar's own end did not reach. The archive
    was unpacked, and ``test_batch`` read with other pixels (audit); a mirror has no MD5."""

    plain = gzip.decompress((served / ARCHIVE).read_bytes())
    with tarfile.open(fileobj=io.BytesIO(plain)) as tar:
        batch = tar.getmember(f"{FOLDER}/test_batch")
    inside = plain[batch.offset_data + batch.size // 2 :][:32]
    # deflate's stored blocks copy the bytes: the flip lands in the data, not in the coding
    stored = bytearray(gzip.compress(plain, compresslevel=0))
    at = stored.find(inside)
    assert at > 0 and stored.find(inside, at + 1) == -1
    stored[at + 16] ^= 0x01
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / ARCHIVE).write_bytes(bytes(stored))
    target = tmp_path / "data"
    with archive_url(mirror) as url, pytest.raises(DataError) as info:
        CIFAR10DataModule(target, url=url).prepare_data()
    message = str(info.value)
    assert "is not a complete .tar.gz (BadGzipFile: CRC check failed" in message, message
    assert "\n" not in message and leftovers(target) == []


def test_a_complete_archive_in_the_data_dir_is_used_without_a_download(
    served: Path, tmp_path: Path
) -> None:
    target = tmp_path / "data"
    target.mkdir()
    shutil.copy(served / "cifar-10-python.tar.gz", target)
    dm = CIFAR10DataModule(target, url="http://127.0.0.1:9/cifar-10-python.tar.gz")  # no network
    dm.prepare_data()
    dm.setup("test")
    assert len(dm.test_set) == 1017


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    """A tar header: a file of five bytes, or a folder, link or device (no data)."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o755
    info.size = len(b"pwned") if kind == tarfile.REGTYPE else 0
    return info


def filter_bypass(victim: Path) -> list[tarfile.TarInfo]:
    """The members that get past tarfile's ``data`` filter on Python releases before June
    2025's fixes (CVE-2025-4517): folders of 247 characters reached through one-letter links,
    so that the path the filter resolves outgrows what ``os.path.realpath`` follows, a link
    that climbs out from there, a file written through it into ``victim``, and a hard link to
    ``victim/kept.txt`` written over."""
    long, steps, path = "d" * 247, "abcdefghijklmnop", ""
    members = []
    for step in steps:
        members.append(member(f"{path}/{long}".lstrip("/"), tarfile.DIRTYPE))
        members.append(member(f"{path}/{step}".lstrip("/"), tarfile.SYMTYPE, long))
        path = f"{path}/{long}".lstrip("/")
    deep = "/".join([*steps, "l" * 254])
    members.append(member(deep, tarfile.SYMTYPE, "../" * len(steps)))
    climb = "../" * (len(steps) + 1)  # from the target to the root, where it is 17 deep or less
    members.append(member("escape", tarfile.SYMTYPE, f"{deep}/{climb}{str(victim).lstrip('/')}"))
    members += [
        member("escape/PWNED"),
        member("over", tarfile.LNKTYPE, "escape/kept.txt"),
        member("over"),
    ]
    return members


def hostile_archive(folder: Path, data_dir: Path, kind: str) -> Path:
    """``folder/cifar-10-python.tar.gz``: the real subset plus one hostile member of ``kind``
    (a name that climbs out, an absolute name, a link leaving the target and a file written
    through it, a character device, links past tarfile's filter, a file not of CIFAR-10, a
    batch file twice, a regular file named ``data_batch_5/`` in its place), or without
    ``data_batch_5``."""
    import io

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cifar-10-python.tar.gz"
    victim = folder.parent / "victim"
    hostile = {
        "../../PWNED": [member("../../PWNED")],
        "/absolute": [member(str(folder.parent / "PWNED"))],
        "a link out": [
            member(f"{FOLDER}/out", tarfile.SYMTYPE, "../../../victim"),
            member(f"{FOLDER}/out/kept.txt"),
        ],
        "a hard link out": [member(f"{FOLDER}/hard", tarfile.LNKTYPE, "../../../victim/kept.txt")],
        "a device": [member(f"{FOLDER}/null", tarfile.CHRTYPE)],
        "past the data filter": filter_bypass(victim),
        "a foreign file": [member(f"{FOLDER}/notes.txt")],
        "a batch file twice": [member(f"{FOLDER}/test_batch")],
        "a batch file missing": [],
        "a name of 10,000 characters": [member(f"{FOLDER}/" + "n" * 10_000)],
        "a batch file named as a folder": [member(f"{FOLDER}/data_batch_5/")],
    }[kind]
    with tarfile.open(path, "w:gz") as archive:
        for file in sorted((data_dir / FOLDER).iterdir()):
            replaced = kind in ("a batch file missing", "a batch file named as a folder")
            if not (replaced and file.name == "data_batch_5"):
                archive.add(file, arcname=f"{FOLDER}/{file.name}")
        for info in hostile:
            archive.addfile(info, io.BytesIO(b"pwned") if info.isreg() else None)
    return folder


HOSTILE_MEMBERS = [
    "../../PWNED",
    "/absolute",
    "a link out",
    "a hard link out",
    "a device",
    "past the data filter",
    "a foreign file",
    "a batch file twice",
    "a batch file missing",
    "a name of 10,000 characters",
    "a batch file named as a folder",
]


@pytest.mark.parametrize("kind", HOSTILE_MEMBERS)
def test_a_hostile_archive_writes_nothing_outside_its_target(
    kind: str, data_dir: Path, tmp_path: Path
) -> None:
    """Only the CIFAR-10 folder and its files are unpacked: any other member is refused in one
    line naming the archive, and nothing outside the target is written. On the code before,
    tarfile's ``data`` filter let "past the data filter" write ``victim/PWNED`` and write over
    ``victim/kept.txt`` (Python 3.11.7), unpacked the absolute name inside the target, and kept
    the foreign file and the archive without ``data_batch_5``."""
    from tests.support.trees import tree_digest
    from vitattn.data.download import unpack_archive

    served = hostile_archive(tmp_path / "served", data_dir, kind)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "kept.txt").write_text("keep")
    target = tmp_path / "a" / "b"
    target.mkdir(parents=True)
    before = {name: tree_digest(tmp_path / name) for name in ("served", "victim")}
    archive = served / "cifar-10-python.tar.gz"
    with pytest.raises(DataError, match=rf"^{archive} was not unpacked: ") as refused:
        unpack_archive(archive, target)
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 1000
    assert {name: tree_digest(tmp_path / name) for name in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "served", "victim"]
    assert not (tmp_path / "PWNED").exists() and not (tmp_path.parent / "PWNED").exists()


def test_a_bomb_of_a_member_is_refused_at_its_header(data_dir: Path, tmp_path: Path) -> None:
    """A member of a few hundred kilobytes compressed that claims more bytes than a batch file
    may hold is refused before one of them is unpacked; on the code before, it was written
    whole (a 2 GiB one filled the data directory and was kept)."""
    from vitattn.data.download import MAX_MEMBER_BYTES, unpack_archive

    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        bomb = tarfile.TarInfo(f"{FOLDER}/data_batch_1")
        bomb.size = MAX_MEMBER_BYTES + 1
        tar.addfile(bomb, io.BytesIO(bytes(bomb.size)))
    assert archive.stat().st_size < MAX_MEMBER_BYTES // 100
    target = tmp_path / "target"
    target.mkdir()
    with pytest.raises(DataError, match=r"data_batch_1' holds 41,943,041 bytes, more than the"):
        unpack_archive(archive, target)
    assert [p.stat().st_size for p in target.rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("kind", ["../../PWNED", "a link out", "past the data filter"])
def test_a_mirrors_hostile_archive_is_refused_and_nothing_is_kept(
    kind: str, data_dir: Path, tmp_path: Path
) -> None:
    """The download path end to end, from a mirror (no MD5 to check): the archive is refused,
    nothing is written outside the data directory, and nothing is kept in it."""
    served = hostile_archive(tmp_path / "served", data_dir, kind)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "kept.txt").write_text("keep")
    target = tmp_path / "data"
    with archive_url(served) as url, pytest.raises(DataError, match="was not unpacked") as refused:
        CIFAR10DataModule(target, url=url).prepare_data()
    assert "\n" not in str(refused.value)
    assert (victim / "kept.txt").read_text() == "keep" and len(list(victim.iterdir())) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "served", "victim"]
    assert leftovers(target) == [] and not (target / FOLDER).exists()


def gzipped(path: Path, *blocks: bytes | tuple[bytes, int]) -> Path:
    """``path`` gzipped (fast) from ``blocks``, each bytes or ``(bytes, times)``."""
    with gzip.open(path, "wb", compresslevel=1) as archive:
        for block in blocks:
            data, times = block if isinstance(block, tuple) else (block, 1)
            for _ in range(times):
                archive.write(data)
    return path


def test_a_header_claiming_more_than_an_archive_inflates_to_is_refused_unread(
    tmp_path: Path,
) -> None:
    """tarfile reads a PAX header's record whole, whatever size its header claims: 2 GiB of it
    took 5 GB of memory and the archive was accepted (red team). The inflated stream is bounded
    (here a record of 400 MiB, 2 MB gzipped): reading stops at the bound, in one line."""
    from vitattn.data.download import MAX_ARCHIVE_BYTES, unpack_archive

    pax = tarfile.TarInfo("././@PaxHeader")
    pax.type, pax.size = tarfile.XHDTYPE, 400 << 20
    zeros = (bytes(1 << 20), 400)
    archive = gzipped(tmp_path / "a.tar.gz", pax.tobuf(tarfile.USTAR_FORMAT), zeros)
    target = tmp_path / "target"
    target.mkdir()
    with pytest.raises(DataError) as refused:
        unpack_archive(archive, target)
    assert str(refused.value).startswith(f"{archive} was not unpacked: it asks to read ")
    assert f"a CIFAR-10 archive inflates to at most {MAX_ARCHIVE_BYTES:,}" in str(refused.value)


@pytest.mark.parametrize("kind", ["65 folder entries", "a sparse member"])
def test_an_archive_of_many_members_or_a_sparse_one_is_refused(
    kind: str, data_dir: Path, tmp_path: Path
) -> None:
    """2,048,000 entries of the folder took 4 min and 1.65 GB and were accepted; a sparse
    member's map of a million blocks took 2 GB to read (red team)."""
    from vitattn.data.download import unpack_archive

    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        if kind == "65 folder entries":
            for _ in range(65):
                tar.addfile(member(FOLDER, tarfile.DIRTYPE))
        else:
            sparse = member(f"{FOLDER}/readme.html", tarfile.GNUTYPE_SPARSE)
            sparse.sparse = [(0, 5)]
            tar.addfile(sparse, io.BytesIO(b"pwned"))
        for file in sorted((data_dir / FOLDER).iterdir()):
            tar.add(file, arcname=f"{FOLDER}/{file.name}")
    target = tmp_path / "target"
    target.mkdir()
    said = {"65 folder entries": "more than 64 members", "a sparse member": "is sparse"}[kind]
    with pytest.raises(DataError, match=said):
        unpack_archive(archive, target)


@pytest.mark.parametrize(
    ("val_fraction", "limit_val_batches", "said"),
    [
        (
            0.0001,
            None,
            "data.val_fraction=0.0001 holds out 1 of the 5085 training images for validation: "
            "val/acc moves in steps of 100 points and picks the best checkpoint; "
            "data.val_fraction=0.02 holds out 100",
        ),
        (0.019, None, "holds out 97 of the 5085 training images"),
        (0.019, 2, "holds out 97 of the 5085 training images"),
        (0.0001, 0, None),  # a run that never validates picks nothing by it
        (0.02, None, None),
        (0.1, None, None),
    ],
)
def test_a_validation_set_of_few_images_is_one_warning(
    data_dir: Path,
    val_fraction: float,
    limit_val_batches: int | None,
    said: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tiny ``data.val_fraction`` held out one image: ``val/acc`` of 0 or 1 chose the best
    checkpoint without a word. Below 100 images one warning says so and what holds out 100
    (0.02 of the subset's 5085: 102), as the data are read before a run starts."""
    from omegaconf import OmegaConf

    from vitattn.training.fitting import warn_of_few_validation_images

    dm = CIFAR10DataModule(data_dir, val_fraction=val_fraction)
    dm.setup("fit")
    trainer_cfg = OmegaConf.create({"limit_val_batches": limit_val_batches})
    with caplog.at_level(logging.WARNING, logger="vitattn.training.fitting"):
        warn_of_few_validation_images(trainer_cfg, dm)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if said is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and said in warnings[0] and "\n" not in warnings[0]


def test_a_data_set_too_small_for_a_validation_of_100_says_so() -> None:
    from vitattn.data.cifar10 import few_validation_images

    said = few_validation_images(0.5, 30, 60)
    assert said.endswith("the data set is too small to hold out 100")
    assert "steps of 3.33 points" in said
