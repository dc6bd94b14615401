"""A real small file system for a test: a tmpfs mounted in the test's folder (root only)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(mount: Path, options: str) -> Iterator[Path]:
    """A tmpfs at ``mount`` (made here) with ``options`` (``size=200k``, ``nr_inodes=3``: the
    root folder counts as one), unmounted after; the test is skipped where mounting is not
    allowed."""
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


def fill(folder: Path) -> None:
    """Write into ``folder`` until its file system has no byte left."""
    with open(folder / "fill", "wb", buffering=0) as handle, contextlib.suppress(OSError):
        while True:
            handle.write(bytes(4096))
