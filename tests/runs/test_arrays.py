"""A run's ``.npz`` read within a bound (``vitattn.runs.arrays``): headers are checked before
anything is inflated, and every refusal is one line naming the file."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from numpy.lib import format as npy

from tests.support.bombs import zip_bomb
from vitattn.runs.arrays import MAX_ARRAY_BYTES, read_npz
from vitattn.runs.files import UnreadableFileError


def npz_with(path: Path, members: dict[str, bytes]) -> Path:
    """An ``.npz`` (a deflated zip) of ``members`` as they are."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def npy_bytes(array: np.ndarray, shape: tuple[int, ...] | None = None) -> bytes:
    """``array`` as ``.npy`` bytes, its header declaring ``shape`` if given."""
    buffer = io.BytesIO()
    header = npy.header_data_from_array_1_0(array)
    if shape is not None:
        header["shape"] = shape
    npy.write_array_header_1_0(buffer, header)
    buffer.write(array.tobytes())
    return buffer.getvalue()


def test_arrays_as_vitattn_writes_them_are_read(tmp_path: Path) -> None:
    path = tmp_path / "maps.npz"
    np.savez_compressed(path, rollout=np.ones((2, 3), np.float32), attention=np.str_("linear"))
    content = read_npz(path)
    assert content["rollout"].shape == (2, 3) and str(content["attention"]) == "linear"


@pytest.mark.parametrize(
    ("members", "problem"),
    [
        ({"a.npy": npy_bytes(np.zeros(4, np.float32), (10**9,))}, "declares shape (1000000000,)"),
        ({"a.npy": npy_bytes(np.array([None, 1], dtype=object))}, "holds Python objects"),
        ({"../a.npy": npy_bytes(np.zeros(1))}, "not an .npy array"),
        ({"a.txt": b"text"}, "not an .npy array"),
        ({f"a{i}.npy": npy_bytes(np.zeros(1)) for i in range(65)}, "holds 65 arrays"),
        ({"a.npy": b"not an npy"}, "is not a .npz of arrays"),
    ],
)
def test_a_member_that_is_not_as_written_is_one_line(
    tmp_path: Path, members: dict[str, bytes], problem: str
) -> None:
    path = npz_with(tmp_path / "maps.npz", members)
    with pytest.raises(UnreadableFileError) as raised:
        read_npz(path)
    assert str(raised.value).startswith(f"{path}: ") and problem in str(raised.value)
    assert "\n" not in str(raised.value)


def _central_entry(data: bytearray) -> int:
    return data.index(b"PK\x01\x02")  # the first member's entry in the central directory


def encrypted(data: bytearray) -> None:
    data[_central_entry(data) + 8] |= 1  # "encrypted": zipfile asks for a password


def compressed_unknown(data: bytearray) -> None:
    start = _central_entry(data) + 10
    data[start : start + 2] = (99).to_bytes(2, "little")  # AES, which zipfile lacks


def corrupt_deflate(data: bytearray) -> None:
    name_length = int.from_bytes(data[26:28], "little")
    extra_length = int.from_bytes(data[28:30], "little")
    start = 30 + name_length + extra_length  # the first member's deflated bytes
    data[start : start + 8] = b"\xff" * 8


@pytest.mark.parametrize("change", [encrypted, compressed_unknown, corrupt_deflate])
def test_a_damaged_archive_is_one_line(tmp_path: Path, change: Callable[[bytearray], None]) -> None:
    """Errors zipfile and zlib raise outside ``OSError`` and ``BadZipFile`` (``RuntimeError``,
    ``NotImplementedError``, ``zlib.error``) were tracebacks that ended the whole summary."""
    path = tmp_path / "maps.npz"
    np.savez_compressed(path, images=np.arange(4096, dtype=np.float32))
    data = bytearray(path.read_bytes())
    change(data)
    path.write_bytes(bytes(data))
    with pytest.raises(UnreadableFileError, match=r"is not a \.npz of arrays") as raised:
        read_npz(path)
    assert "\n" not in str(raised.value)


def test_a_zip_bomb_is_refused_from_its_declared_size(tmp_path: Path) -> None:
    path = zip_bomb(tmp_path / "maps.npz", inflated=4 * MAX_ARRAY_BYTES)
    with pytest.raises(UnreadableFileError, match=r"declares .* bytes of arrays, more than"):
        read_npz(path)


def test_a_link_and_a_non_zip_are_one_line(tmp_path: Path) -> None:
    target = tmp_path / "real.npz"
    np.savez(target, a=np.zeros(1))
    (tmp_path / "link.npz").symlink_to(target)
    with pytest.raises(UnreadableFileError, match="is a symbolic link"):
        read_npz(tmp_path / "link.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(UnreadableFileError, match=r"is not a \.npz of arrays"):
        read_npz(tmp_path / "text.npz")
