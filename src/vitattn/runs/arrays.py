"""A run's ``.npz`` files (``attention/maps.npz``), read within a bound: each member's declared
shape and dtype are read from its ``.npy`` header, and checked against the sizes the archive
declares and :data:`MAX_ARRAY_BYTES`, before any array is inflated.

An ``.npz`` is a zip archive, and deflate inflates a thousandfold: a few MB of zeros can
declare gigabytes (issue 43: 3.4 MB to 3.5 GB). ``np.load`` inflates whatever the header asks
for, so the headers are read first here, through :mod:`zipfile`, and a refusal is one line
naming the file (:class:`vitattn.runs.files.UnreadableFileError`).
"""

from __future__ import annotations

import math
import zipfile
import zlib
from pathlib import Path
from typing import Any

from vitattn.runs.files import UnreadableFileError, one_line, open_regular

MAX_ARRAY_BYTES = 256 << 20
"""The most bytes the arrays of one ``.npz`` may take once inflated, all members together: far
above what vitattn writes (``docs/runs.md`` gives the largest measured)."""
MAX_MEMBERS = 64
"""The most arrays in one ``.npz`` (vitattn's maps hold five)."""


def read_npz(path: Path) -> dict[str, Any]:
    """The arrays of the ``.npz`` at ``path`` by name, read with ``allow_pickle=False`` once
    every member is known to be an ``.npy`` whose header declares no objects and a size that
    agrees with the archive's, all within :data:`MAX_ARRAY_BYTES`. A link, a file that is not
    regular or larger than :data:`MAX_READ`, or anything else is one line naming ``path``."""
    from numpy.lib import format as npy

    try:
        with open_regular(path) as handle, zipfile.ZipFile(handle) as archive:
            members = archive.infolist()
            if len(members) > MAX_MEMBERS:
                raise UnreadableFileError(path, f"holds {len(members)} arrays, not a run's few")
            declared = sum(member.file_size for member in members)
            if declared > MAX_ARRAY_BYTES:
                raise UnreadableFileError(
                    path, f"declares {declared} bytes of arrays, more than {MAX_ARRAY_BYTES}"
                )
            for member in members:
                _check_header(path, archive, member)
            arrays = {}
            for member in members:
                with archive.open(member) as stream:
                    arrays[member.filename[:-4]] = npy.read_array(stream, allow_pickle=False)
            return arrays
    except UnreadableFileError:
        raise
    except (OSError, EOFError, ValueError, RuntimeError, zlib.error, zipfile.BadZipFile) as error:
        # RuntimeError: an encrypted member, NotImplementedError a compression zipfile lacks
        raise UnreadableFileError(
            path, f"is not a .npz of arrays ({one_line(error)[:200]})"
        ) from None


def _check_header(path: Path, archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> None:
    """Refuse ``member`` unless it is a plain ``<name>.npy`` whose header declares a dtype
    without objects and a shape whose bytes fit in what the archive declares for it."""
    from numpy.lib import format as npy

    name = member.filename
    if not name.endswith(".npy") or "/" in name or member.is_dir():
        raise UnreadableFileError(path, f"holds {name!r}, not an .npy array")
    with archive.open(member) as stream:  # inflates the header's few bytes only
        version = npy.read_magic(stream)
        read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, _, dtype = read_header(stream)
    if dtype.hasobject:
        raise UnreadableFileError(path, f"{name} holds Python objects, not numbers")
    size = math.prod(shape) * dtype.itemsize
    if size > member.file_size:
        raise UnreadableFileError(
            path, f"{name} declares shape {shape} ({size} bytes) in {member.file_size} bytes"
        )
