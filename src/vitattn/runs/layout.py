"""A run directory's layout and state: the names of its files, here and only here, and the one
rule that says whether a run completed, was interrupted, failed, was cut, or is new.

A run directory (one per run, one per job of a sweep; ``docs/runs.md``) holds Hydra's
``.hydra/`` (``config.yaml``, ``overrides.yaml``, ``hydra.yaml``), ``metrics.json`` (the run's
figures and its ``status``), ``checkpoints/`` (with ``last.ckpt``), a completed run's
``failed_attempts.json`` (continuations of it that failed), the lock of the process writing it,
and its event files and log. A sweep directory keeps failed or cut attempts of its jobs in
``.attempts/``. Everything that reads a run's state asks :meth:`RunDir.state` (or, with the
metrics already read, :func:`run_state`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitattn.runs.files import UnreadableFileError, read_json, read_yaml, unsafe

METRICS = "metrics.json"
ATTEMPTS_FILE = "failed_attempts.json"
"""Beside a completed run's ``metrics.json``: the continuations of it that failed."""
HYDRA_DIR = ".hydra"
CONFIG = "config.yaml"
OVERRIDES = "overrides.yaml"
HYDRA_CONFIG = "hydra.yaml"
CHECKPOINTS = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"
MERGED_CHECKPOINT = "merged.ckpt"
"""A fine-tune's adapters folded into the weights, a plain checkpoint for ``vitattn-eval``."""
LOCK = ".vitattn.lock"
HOLDER = ".vitattn.lock.json"
RESERVE = ".vitattn.reserve"
ATTEMPTS_DIR = ".attempts"
"""Folder of a sweep directory where failed or cut attempts of its jobs are kept."""

MULTIRUN = "multirun.yaml"
"""Hydra's record of a sweep, at the top of its directory, written before its first job."""

WRITTEN_THROUGH = (MULTIRUN, "hparams.yaml")
"""Files libraries write at the top of a run or sweep directory by opening them as they are
(Hydra's ``multirun.yaml``, Lightning's ``hparams.yaml``); besides these, every name that starts
with ``.`` (``.hydra``, ``.vitattn.lock``, ``.<name>.partial``, ``.attempts``),
``events.out.tfevents.`` (TensorBoard's) or ``optuna.db`` (a search's study and its journal),
and every ``*.log``."""

RESULTS = ("test/acc", "val/acc")
"""Figures only a run that reached its end records without a ``status`` (earlier versions)."""


class RunState(enum.StrEnum):
    """What a run directory says of its run."""

    COMPLETED = "completed"
    INTERRUPTED = "interrupted"
    """Stopped (a signal, a kill) after a checkpoint: resumable from ``last.ckpt``."""
    FAILED = "failed"
    PRUNED = "pruned"
    """Stopped early by an Optuna search's pruner: final, as a completed run is."""
    CUT = "cut"
    """Files, but no result and no checkpoint to resume from."""
    NEW = "new"


def run_state(metrics: Mapping[str, Any], run_dir: Path) -> RunState:
    """The one rule for a run's state, from its ``metrics.json`` (``metrics``, ``{}`` where there
    is none) and its directory: the status it records (completed or failed); else, without a
    status, the results an earlier version recorded (completed); else a ``last.ckpt`` to resume
    from (interrupted); else any file (cut); else new."""
    status = metrics.get("status")
    if status in (RunState.COMPLETED, RunState.FAILED, RunState.PRUNED):
        return RunState(status)
    if status is None and any(metrics.get(key) is not None for key in RESULTS):
        return RunState.COMPLETED
    if (run_dir / CHECKPOINTS / LAST_CHECKPOINT).is_file():
        return RunState.INTERRUPTED
    if run_dir.is_dir() and any(run_dir.iterdir()):
        return RunState.CUT
    return RunState.NEW


def _under(*parts: str) -> property:
    """A :class:`RunDir` property: the path ``parts`` inside the run directory."""
    return property(lambda run: run.path.joinpath(*parts))


@dataclass(frozen=True)
class RunDir:
    """A run directory: where each of its files is, what it records, and its state."""

    path: Path

    @classmethod
    def of_checkpoint(cls, checkpoint: Path) -> RunDir | None:
        """The run a checkpoint in its ``checkpoints/`` folder belongs to, else ``None``."""
        if checkpoint.parent.name != CHECKPOINTS:
            return None
        return cls(checkpoint.parent.parent)

    metrics_file = _under(METRICS)
    attempts_file = _under(ATTEMPTS_FILE)
    hydra_dir = _under(HYDRA_DIR)
    config_file = _under(HYDRA_DIR, CONFIG)
    overrides_file = _under(HYDRA_DIR, OVERRIDES)
    hydra_file = _under(HYDRA_DIR, HYDRA_CONFIG)
    checkpoints = _under(CHECKPOINTS)
    last_checkpoint = _under(CHECKPOINTS, LAST_CHECKPOINT)

    def metrics(self) -> dict[str, Any]:
        """What ``metrics.json`` records; ``{}`` where there is none or it cannot be read (the
        commands that act on a run refuse such a file first, in one line)."""
        if not self.metrics_file.exists():
            return {}
        try:
            return read_json(self.metrics_file, dict)
        except UnreadableFileError:
            return {}

    def state(self) -> RunState:
        """The run's state (:func:`run_state`)."""
        return run_state(self.metrics(), self.path)


def planted_links(run_dir: Path) -> list[Path]:
    """The symbolic links in ``run_dir`` at names that are written by opening them as they are:
    at its top, those :data:`WRITTEN_THROUGH` describes; everything in ``.hydra/`` and ``csv/``;
    ``.<name>.partial`` in ``checkpoints/``."""

    def links(folder: Path, chosen: Callable[[str], bool]) -> list[Path]:
        if folder.is_symlink() or not folder.is_dir():
            return []
        return sorted(p for p in folder.iterdir() if p.is_symlink() and chosen(p.name))

    found = links(run_dir, _written_at_the_top)
    found += links(run_dir / HYDRA_DIR, lambda name: True)
    found += links(run_dir / CHECKPOINTS, lambda name: name.startswith("."))
    found += links(run_dir / "csv", lambda name: True)  # Lightning's CSVLogger (logger=csv)
    return found


def _written_at_the_top(name: str) -> bool:
    return (
        name.startswith((".", "events.out.tfevents.", "optuna.db"))
        or name.endswith(".log")
        or name in WRITTEN_THROUGH
    )


def refuse_planted_links(run_dir: Path) -> None:
    """Refuse in one line a run or sweep directory holding a :func:`planted_links` link."""
    found = planted_links(run_dir)
    if found:
        raise unsafe(found[0])


def find_runs(
    paths: Iterable[str | Path], marker: tuple[str, ...] = (HYDRA_DIR, CONFIG)
) -> list[Path]:
    """Every run directory at or below ``paths``: a directory holding ``marker`` (by default
    ``.hydra/config.yaml``; the LoRA table takes those with a ``metrics.json``), failed
    attempts set aside in ``.attempts/`` left out, in natural order of their paths
    (``seed=2`` before ``seed=10``)."""
    pattern = "/".join(marker)
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.is_dir():
            raise FileNotFoundError(f"{path} is not a directory")
        if (path / pattern).is_file():
            found.append(path)
            continue
        found.extend(
            hit.parents[len(marker) - 1]
            for hit in path.rglob(pattern)
            if ATTEMPTS_DIR not in hit.relative_to(path).parts
        )
    return sorted(dict.fromkeys(found), key=natural_key)


def natural_key(path: Path) -> list[list[Any]]:
    """``path`` as a sort key in which numbers compare as numbers (``seed=2`` before
    ``seed=10``)."""
    # re.split with a group alternates text and digits, so the lists compare element-wise.
    return [
        [int(piece) if piece.isdigit() else piece for piece in re.split(r"(\d+)", part)]
        for part in path.parts
    ]


def sweep_command_overrides(sweep_dir: Path) -> list[str]:
    """The overrides of the command that made the sweep in ``sweep_dir``, from its
    ``multirun.yaml`` (a job's own overrides hold its values alone); empty where it has none.
    Read as run files are (:func:`vitattn.runs.files.read_yaml`)."""
    multirun = sweep_dir / MULTIRUN
    if not multirun.is_file():
        return []
    overrides = (read_yaml(multirun).get("hydra") or {}).get("overrides") or {}
    return [str(override) for override in overrides.get("task") or []]
