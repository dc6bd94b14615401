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
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitattn.runs.files import (
    PARTIAL,
    UnreadableFileError,
    kind_of,
    one_line,
    parse_yaml,
    read_json,
    read_text,
    read_yaml,
    unsafe,
    what_is_at,
)
from vitattn.utils.checks import is_number

log = logging.getLogger(__name__)

METRICS = "metrics.json"
ATTEMPTS_FILE = "failed_attempts.json"
"""Beside a completed run's ``metrics.json``: the continuations of it that failed."""
HYDRA_DIR = ".hydra"
CONFIG = "config.yaml"
OVERRIDES = "overrides.yaml"
HYDRA_CONFIG = "hydra.yaml"
HPARAMS = "hparams.yaml"
"""The run's hyperparameters as it used them (:mod:`vitattn.training.hparams`, written by the
TensorBoard logger)."""
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

RESULTS = ("test/acc", "val/acc")
"""Figures only a run that reached its end records without a ``status`` (earlier versions)."""


class RunState(str, enum.Enum):
    """What a run directory says of its run; a string, its value (``enum.StrEnum`` is Python
    3.11's, and the project runs on 3.10)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    COMPLETED = "completed"
    INTERRUPTED = "interrupted"
    """Stopped (a signal, a kill) after a checkpoint: resumable from ``last.ckpt``."""
    FAILED = "failed"
    PRUNED = "pruned"
    """Stopped early by an Optuna search's pruner: final, as a completed run is."""
    CUT = "cut"
    """Files, but no result and no checkpoint to resume from."""
    RUNNING = "running"
    """Interrupted or cut by its files, but a live process holds its lock now (training, or
    being resumed): what a summary shows (:meth:`vitattn.analysis.records.Run.state`); the one
    rule (:func:`run_state`) reads files alone."""
    NEW = "new"


def run_state(metrics: Mapping[str, Any], run_dir: Path) -> RunState:
    """The one rule for a run's state, from its ``metrics.json`` (``metrics``, ``{}`` where there
    is none) and its directory. Completed: the status it records (or, without a status, the
    results an earlier version recorded) says so and the run's files agree
    (:func:`files_agree`); failed or pruned: its status says so; else a ``last.ckpt`` to resume from
    (interrupted); else any file (cut); else new."""
    status = metrics.get("status")
    legacy = status is None and any(metrics.get(key) is not None for key in RESULTS)
    if (status == RunState.COMPLETED or legacy) and files_agree(run_dir):
        return RunState.COMPLETED
    if status in (RunState.FAILED, RunState.PRUNED):
        return RunState(status)
    if _regular_file(run_dir / CHECKPOINTS / LAST_CHECKPOINT):
        return RunState.INTERRUPTED
    if run_dir.is_dir() and any(run_dir.iterdir()):
        return RunState.CUT
    return RunState.NEW


def files_agree(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds what a run that completed leaves: its config
    (``.hydra/config.yaml``) as a file, and, where it has a ``checkpoints/`` folder (a run
    that saved none has none), a checkpoint in it. A lone ``metrics.json`` saying
    ``completed`` is not a completed run."""
    if not _regular_file(run_dir / HYDRA_DIR / CONFIG):
        return False
    checkpoints = run_dir / CHECKPOINTS
    if checkpoints.is_symlink():
        return False
    if not checkpoints.exists():
        return True
    return checkpoints.is_dir() and any(_regular_file(path) for path in checkpoints.glob("*.ckpt"))


def _regular_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


METRICS_TEXT = (
    "status",
    "error",
    "signal",
    "attention",
    "model",
    "ckpt_path",
    "test_ckpt_path",
    "merged_ckpt_path",
    "lora/target_modules",
    "data/shift",
    "degenerate",
)
"""The keys of ``metrics.json`` that hold text; ``lora/train_head`` holds true or false, the keys
of :data:`METRICS_ARRAYS` finite numbers in lists and mappings, and every other key a finite
number, or null."""
METRICS_FLAGS = ("lora/train_head",)
METRICS_ARRAYS = ("test/confusion_matrix", "test/acc_per_class")
LARGEST_METRIC = 1e40
"""The largest magnitude of a number in ``metrics.json``: above any that vitattn writes (a
figure a run logs is a float32, at most 3.4e38: a diverging run's loss; the counts are far
smaller), and far below where a summary's sums and figure axes overflow (a planted ``1e308``
ended a sweep's summary in ``arange: cannot compute length``; red team). The float ``1e40``,
as a file writes it: the integer ``10**40`` refused it, a little above."""


def typed_metrics(metrics: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """``metrics`` (read from the ``metrics.json`` at ``path``) if each value has the type
    vitattn writes there: text for :data:`METRICS_TEXT`, true or false for
    :data:`METRICS_FLAGS`, finite numbers in lists and mappings for :data:`METRICS_ARRAYS`, a
    single finite number for every other key (null for any: NaN and infinity are written so),
    each number within :data:`LARGEST_METRIC`;
    else one line naming ``path`` and the key (:class:`UnreadableFileError`)."""
    for key, value in metrics.items():
        if value is None:
            continue
        if key in METRICS_TEXT:
            fits, kind = isinstance(value, str), "text"
        elif key in METRICS_FLAGS:
            fits, kind = isinstance(value, bool), "true or false"
        elif key in METRICS_ARRAYS:
            fits, kind = _numbers(value), "finite numbers between -10^40 and 10^40"
        else:  # vitattn writes NaN and infinity as null (runs.results.plain_value)
            fits, kind = finite_number(value), "a finite number between -10^40 and 10^40"
        if not fits:
            shown = one_line(json.dumps(value))
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            raise UnreadableFileError(path, f'"{one_line(key)}" is {shown}, not {kind}')
    return dict(metrics)


def finite_number(value: Any) -> bool:
    """Whether ``value`` is an int or a finite float, not a bool, within
    :data:`LARGEST_METRIC` of zero."""
    return is_number(value) and abs(value) <= LARGEST_METRIC


def _numbers(value: Any) -> bool:
    """Whether ``value`` is a number, or lists and mappings of numbers (walked without
    recursion; the reader bounds their depth)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif not finite_number(item):
            return False
    return True


def read_metrics(path: Path) -> dict[str, Any]:
    """The ``metrics.json`` at ``path``, read by the bounded reader and typed
    (:func:`typed_metrics`)."""
    return typed_metrics(read_json(path, dict), path)


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
    hparams_file = _under(HPARAMS)
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


def planted_entries(run_dir: Path) -> list[Path]:
    """Every entry at or below ``run_dir`` (``run_dir`` itself if it is a link) that is not a
    folder or the one name of a regular file: a symbolic link, a hard link (a regular file with
    more than one name), a FIFO, a socket or a device; links never followed, in order of their
    paths. A run or sweep directory holds none: vitattn writes no link and no special file. A
    folder that is a link (``checkpoints -> <another run>/checkpoints``) would make a resume
    write and delete in another run; a file hard-linked to one outside the run is written in
    place by whatever appends to it (the log); a FIFO makes its writer or reader wait for ever.
    A folder named as a file being written (``.<name>.partial``) is one too: a resume removes
    the partial files a killed run left, and a folder there failed it half-way, with a
    traceback, its recorded config already rewritten."""
    if run_dir.is_symlink():
        return [run_dir]
    found: list[Path] = []
    pending = [run_dir]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name.startswith(".") and entry.name.endswith(PARTIAL):
                    found.append(Path(entry.path))
                pending.append(Path(entry.path))
            elif not entry.is_file(follow_symlinks=False) or _other_names(entry):
                found.append(Path(entry.path))  # a link, a special file or a hard link
    return sorted(found)


def _other_names(entry: os.DirEntry[str]) -> bool:
    """Whether the regular file ``entry`` has more names than this one (a hard link)."""
    try:
        return entry.stat(follow_symlinks=False).st_nlink > 1
    except OSError:  # gone since the folder was listed
        return False


def refuse_planted_links(run_dir: Path) -> None:
    """Refuse in one line naming it a link or a special file in a run or sweep directory
    (:func:`planted_entries`), before anything is read from it or written to it."""
    found = planted_entries(run_dir)
    if found:
        raise unsafe(found[0])


def refuse_links_read(run_dir: Path) -> None:
    """Refuse in one line (:class:`UnreadableFileError`) reading a run directory that holds a
    link or a special file (:func:`planted_entries`): a summary leaves such a run out, naming
    it."""
    found = planted_entries(run_dir)
    if found:
        raise UnreadableFileError(
            found[0], f"is {what_is_at(found[0])}, and a run holds none", "remove it"
        )


RUN_FILES = ((HYDRA_DIR, CONFIG), (HYDRA_DIR, OVERRIDES), (HYDRA_DIR, HYDRA_CONFIG), (METRICS,))
"""The YAML and JSON files of a run that a command reads before it starts."""


def check_run_files(run_dir: Path) -> None:
    """Refuse in one line, before a command reads or writes anything else of ``run_dir``: a
    link or special file in it (:func:`refuse_planted_links`), and a file of :data:`RUN_FILES`
    that the bounded reader refuses (too large, an anchor or alias, too deep, too many values,
    not the kind of content vitattn writes there; in ``metrics.json`` a value not of its key's
    type, :func:`typed_metrics`). An empty ``overrides.yaml`` is a run without
    any; what its items say is checked by the command that replays them
    (:func:`vitattn.cli.resume.recorded_overrides`)."""
    if not run_dir.is_dir():
        return
    refuse_planted_links(run_dir)
    for parts in RUN_FILES:
        path = run_dir.joinpath(*parts)
        if not path.exists():
            continue
        if path.suffix == ".json":
            read_metrics(path)  # each value of the type vitattn writes there, as summaries read it
            continue
        text = read_text(path, follow_links=False)
        if parts[-1] != OVERRIDES:
            parse_yaml(path, text, dict)
        elif text.strip():  # its items are checked by the command that replays them
            parse_yaml(path, text, object)


MAX_SEARCH_DEPTH = 32
"""How many folders deep below a directory it names a command looks for runs (a sweep's jobs
are one deep, sweeps of sweeps two or three): a tree nested past it is not walked."""


def find_runs(
    paths: Iterable[str | Path], marker: tuple[str, ...] = (HYDRA_DIR, CONFIG)
) -> list[Path]:
    """Every run directory at or below ``paths``: a directory holding ``marker`` (by default
    ``.hydra/config.yaml``; the LoRA table takes those with a ``metrics.json``), failed
    attempts set aside in ``.attempts/`` left out, in natural order of their paths
    (``seed=2`` before ``seed=10``). A link to a folder below them, which no search follows, is
    listed too, so that a summary leaves it out with a line saying so
    (:func:`refuse_links_read`) rather than without a word. The folders are walked without
    recursion, at most :data:`MAX_SEARCH_DEPTH` deep (a warning names a tree deeper than
    that: ``Path.rglob`` recursed once per level, a ``RecursionError`` at 1,500)."""
    pattern = "/".join(marker)
    found: list[Path] = []
    for given in paths:
        if not str(given).strip():  # an unset shell variable: not the working directory
            raise FileNotFoundError(f"{given!r} is not a directory; name run or sweep directories")
        path = Path(given)
        if not path.is_dir():
            raise FileNotFoundError(f"{path} is not a directory")
        if (path / pattern).is_file():
            found.append(path)
            continue
        runs, links = _search(path, pattern)
        found.extend(runs)
        found.extend(link for link in links if not any(link.is_relative_to(r) for r in runs))
    return sorted(dict.fromkeys(found), key=natural_key)


def _search(root: Path, pattern: str) -> tuple[list[Path], list[Path]]:
    """The folders below ``root`` holding ``pattern``, and the links to folders below it,
    ``.attempts/`` left out; links never followed."""
    runs: list[Path] = []
    links: list[Path] = []
    deeper = False
    pending = [(root, 0)]
    while pending:
        folder, depth = pending.pop()
        if depth and (folder / pattern).is_file():
            runs.append(folder)
        try:
            entries = list(os.scandir(folder))
        except OSError:  # gone, or not readable: nothing found there
            continue
        for entry in entries:
            if entry.name == ATTEMPTS_DIR:
                continue
            if entry.is_symlink():
                if os.path.isdir(entry.path):
                    links.append(Path(entry.path))
            elif entry.is_dir(follow_symlinks=False):
                if depth < MAX_SEARCH_DEPTH:
                    pending.append((Path(entry.path), depth + 1))
                else:
                    deeper = True
    if deeper:
        log.warning(
            "%s holds folders more than %d deep: runs below that are not looked for",
            one_line(root),
            MAX_SEARCH_DEPTH,
        )
    return runs, links


def natural_key(path: Path) -> list[list[Any]]:
    """``path`` as a sort key in which numbers compare as numbers (``seed=2`` before
    ``seed=10``)."""
    # re.split with a group alternates text and digits, so the lists compare element-wise.
    return [
        [int(piece) if piece.isdigit() else piece for piece in re.split(r"(\d+)", part)]
        for part in path.parts
    ]


MAX_SWEEP_OVERRIDES = 1_000
"""The most overrides a sweep's ``multirun.yaml`` may hold: every job parses them all (what a
planted flood cost each trial of a search: docs/runs.md)."""
MAX_OVERRIDE_CHARS = 10_000
"""The most characters of one override there (a ``choice(...)`` of many options)."""


def sweep_command_overrides(sweep_dir: Path) -> list[str]:
    """The overrides of the command that made the sweep in ``sweep_dir``, from its
    ``multirun.yaml`` (a job's own overrides hold its values alone); empty where it has none.
    Read as run files are (:func:`vitattn.runs.files.read_yaml`), never through a link, and of
    the shape Hydra writes: ``hydra.overrides.task`` a list of at most
    :data:`MAX_SWEEP_OVERRIDES` strings, each of at most :data:`MAX_OVERRIDE_CHARS` characters;
    else one line naming the file. An Optuna search writes none, so one there was planted, and
    each of its trials read it."""
    multirun = sweep_dir / MULTIRUN
    if not os.path.lexists(multirun):
        return []
    node: Any = read_yaml(multirun, follow_links=False)
    for key in ("hydra", "overrides", "task"):
        if node is None:
            return []
        if not isinstance(node, dict):
            raise UnreadableFileError(
                multirun, f"holds {kind_of(node)} where the mapping {key} belongs", "remove it"
            )
        node = node.get(key)
    overrides = node or []
    if not isinstance(overrides, list):
        raise UnreadableFileError(
            multirun,
            f"holds {kind_of(overrides)} as hydra.overrides.task, where a list of overrides "
            "belongs",
            "remove it",
        )
    if len(overrides) > MAX_SWEEP_OVERRIDES:
        raise UnreadableFileError(
            multirun,
            f"holds {len(overrides):,} overrides in hydra.overrides.task, more than the "
            f"{MAX_SWEEP_OVERRIDES:,} a sweep's command line may have",
            "remove it",
        )
    for override in overrides:
        if not isinstance(override, str) or len(override) > MAX_OVERRIDE_CHARS:
            what = kind_of(override) if not isinstance(override, str) else "a longer string"
            raise UnreadableFileError(
                multirun,
                f"holds {what} in hydra.overrides.task, where an override of at most "
                f"{MAX_OVERRIDE_CHARS:,} characters belongs",
                "remove it",
            )
    return list(overrides)
