"""Directory trees as tests compare and copy them: a digest of every file, a run's copy, and the
file outside a run that a hostile file must leave as it is."""

from __future__ import annotations

import hashlib
import json
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
        str(path.relative_to(root)): file_sha256(path)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def file_sha256(path: Path) -> str:
    """The sha256 of the file at ``path``, read in chunks (a planted gigabyte is not held)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def sweep_job(run: Path, status: str) -> tuple[Path, list[str]]:
    """The trained ``run`` moved in as the one job of a sweep beside it, its ``metrics.json``
    saying ``status``: the job's directory and the sweep's command."""
    from tests.support.presets import FEW_STEPS
    from vitattn.cli.console import name_jobs_by_what_differs
    from vitattn.cli.overrides import overrides_of
    from vitattn.runs.continuation import planned_jobs

    sweep = run.parent / "sweep"
    command = ["-m", *FEW_STEPS, f"hydra.sweep.dir={sweep}"]
    (job,) = planned_jobs(overrides_of(name_jobs_by_what_differs(command)), sweep)
    sweep.mkdir()
    run.rename(job.directory)
    metrics = json.loads((job.directory / "metrics.json").read_text())
    (job.directory / "metrics.json").write_text(json.dumps({**metrics, "status": status}))
    return job.directory, command
