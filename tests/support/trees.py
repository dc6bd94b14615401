"""Directory trees as tests compare and copy them: a digest of every file, a run's copy, and the
file outside a run that a hostile file must leave as it is."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

KEPT = b"a colleague's file: its bytes must stay as they are\n"
"""What a file outside a run holds (``elsewhere/kept.txt``): a hostile file must leave it so."""


def copy_run(run: Path, target: Path) -> Path:
    """A copy of the run directory ``run`` at ``target``, without its lock files (a copy is no
    process's); ``target``."""
    shutil.copytree(run, target)
    for lock in target.glob(".vitattn.lock*"):
        lock.unlink()
    return target


def tree_digest(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root``: equal digests, equal trees."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }
