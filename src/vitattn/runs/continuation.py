"""Re-running a sweep into its directory continues it.

Hydra cannot continue a multirun (its issue #3328): the same command starts every job afresh.
vitattn's sweeps name each job's directory by what differs (``attention=linear,seed=1``), so a
re-run with ``hydra.sweep.dir=<the sweep>`` and the same overrides meets its own jobs again, and
each job is dealt with by what its directory says (:meth:`vitattn.runs.layout.RunDir.state`):

* **completed** (``metrics.json`` says so): kept byte for byte and not trained again. Hydra
  writes ``.hydra/`` and the job's log before the task runs, so the job's ``hydra.output_subdir``
  and log file are resolved here (:func:`output_subdir`, :func:`log_file`) to nothing for such a
  job, and the task returns the recorded metrics (:func:`kept_metrics`);
* **interrupted** (a ``checkpoints/last.ckpt`` and no completed ``metrics.json``: stopped by a
  signal, or killed): resumed from ``last.ckpt`` exactly as ``resume=true`` resumes a run
  (:func:`checkpoint_to_resume`);
* **failed**, or cut before its first checkpoint: set aside in
  ``<sweep>/.attempts/<job>/<n>/`` (kept, not deleted) and run again;
* never started: run.

Before anything runs, every job directory that exists is checked against the config the command
would give that job now; one that differs is refused in one line (:func:`check_continuation`).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from vitattn.errors import ConfigError
from vitattn.runs.checkpoints import read_checkpoint
from vitattn.runs.files import (
    UnsafeWriteError,
    inside,
    one_line,
    read_json,
    read_yaml,
    refuse_link,
)
from vitattn.runs.layout import (
    ATTEMPTS_DIR,
    HYDRA_DIR,
    RunDir,
    RunState,
    check_run_files,
    planted_entries,
)
from vitattn.runs.lock import RunDirectoryInUseError, held_elsewhere, in_use_message
from vitattn.utils.config import cut_apart, job_directory_name, sweep_job

ATTEMPTS = ATTEMPTS_DIR

SET_ASIDE = (RunState.FAILED, RunState.CUT)
"""Jobs set aside in ``.attempts/`` and run again."""

IGNORED_KEYS = ("summary",)
"""Settings a re-run may change without changing what its jobs compute."""

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"

log = logging.getLogger(__name__)

MULTIRUN = "multirun.yaml"
"""The file Hydra writes in a sweep directory as a sweep starts."""


def _kept(output_dir: str, mode: Any) -> bool:
    return str(mode).endswith("MULTIRUN") and RunDir(Path(output_dir)).state() is RunState.COMPLETED


def output_subdir(output_dir: str, mode: Any) -> str | None:
    """``hydra.output_subdir``: ``.hydra``, or nothing for a completed job of a re-run sweep."""
    return None if _kept(output_dir, mode) else HYDRA_DIR


def log_file(output_dir: str, task_name: str, mode: Any) -> str:
    """The job's log file, or ``os.devnull`` for a completed job of a re-run sweep."""
    return os.devnull if _kept(output_dir, mode) else str(Path(output_dir) / f"{task_name}.log")


def kept_metrics(run_dir: Path, multirun: bool) -> dict[str, Any] | None:
    """The recorded metrics of a completed sweep job, which is not run again."""
    if multirun and RunDir(run_dir).state() is RunState.COMPLETED:
        return RunDir(run_dir).metrics()
    return None


def checkpoint_to_resume(run_dir: Path, multirun: bool) -> Path | None:
    """``last.ckpt`` of an interrupted sweep job, to continue it from."""
    if multirun and RunDir(run_dir).state() is RunState.INTERRUPTED:
        return RunDir(run_dir).last_checkpoint
    return None


def continue_interrupted_job(cfg: Any) -> None:
    """Point ``cfg.ckpt_path`` at ``last.ckpt`` when ``cfg`` is an interrupted job of a re-run
    sweep, so that it resumes as ``resume=true`` would resume it."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    if not HydraConfig.initialized() or cfg.get("ckpt_path"):
        return
    checkpoint = checkpoint_to_resume(Path(HydraConfig.get().runtime.output_dir), sweep_job())
    if checkpoint is not None:
        with open_dict(cfg):
            cfg.ckpt_path = str(checkpoint)
        log.info("continuing the interrupted job from %s", checkpoint)


@dataclass(frozen=True)
class PlannedJob:
    """A job of a sweep as the basic sweeper will launch it: its directory and overrides."""

    directory: Path
    overrides: list[str]


def planned_jobs(overrides: Sequence[str], sweep_dir: Path) -> list[PlannedJob]:
    """The jobs Hydra's basic sweeper makes of ``overrides`` (the command line, with vitattn's
    ``override_dirname.exclude_keys``), in its order, with the directory each job gets."""
    from hydra._internal.config_loader_impl import get_overrides_dirname
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    given = parser.parse_overrides(list(overrides))
    exclude: list[str] = []
    for override in given:
        if override.key_or_group == "hydra.job.config.override_dirname.exclude_keys":
            exclude = [str(key) for key in override.value()]
    [batch] = BasicSweeper.split_arguments(given, None)
    jobs = []
    for number, job in enumerate(batch):
        task = [o for o in parser.parse_overrides(job) if not _is_hydra(o.key_or_group)]
        dirname = get_overrides_dirname(task, exclude, item_sep=",", kv_sep="=")
        name = job_directory_name(dirname, number, BASIC_SWEEPER)
        jobs.append(PlannedJob(sweep_dir / name, [o.input_line for o in task]))
    return jobs


def _is_hydra(key: str) -> bool:
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


def stored_config(run_dir: Path) -> dict[str, Any] | None:
    """The config ``run_dir`` ran with (``.hydra/config.yaml``), or ``None`` where there is
    none; one that cannot be read is one line (:class:`UnreadableFileError`)."""
    path = RunDir(run_dir).config_file
    if not path.exists() and not path.is_symlink():
        return None
    return read_yaml(path, dict)


SHOWN_VALUE = 80
"""The most characters of a stored setting (read from a job's file) a refusal shows."""


def first_difference(old: Any, new: Any, prefix: str = "") -> str | None:
    """The first key (dotted) whose value differs, as ``key=old (now new)``; the key and the
    values escaped and cut (they come from a job's file: a line break would forge a line)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            found = first_difference(old.get(key), new.get(key), f"{prefix}{key}.")
            if found:
                return found
        return None
    if old != new:
        key = cut_apart(one_line(prefix.rstrip(".")), SHOWN_VALUE)
        before, now = (cut_apart(one_line(value), SHOWN_VALUE) for value in (old, new))
        return f"{key}={before} (now {now})"
    return None


def check_continuation(
    config_name: str, jobs: Sequence[PlannedJob], sweep_dir: Path, extra_dirs: Sequence[Path] = ()
) -> None:
    """Refuse in one line a re-run whose ``jobs`` (:func:`planned_jobs`; ``extra_dirs``, its
    ``--config-dir``) would give an existing job of ``sweep_dir`` other settings than it ran
    with. Reads only."""
    from hydra import compose

    from vitattn.utils.config import hydra_configs

    if not sweep_dir.is_dir():
        return
    for job in jobs:
        check_job_files(job.directory)
    existing = [job for job in jobs if stored_config(job.directory) is not None]
    for job in existing:
        with hydra_configs(extra_dirs):
            composed = compose(config_name, overrides=job.overrides)
        now = OmegaConf.to_container(composed, resolve=False)
        before = stored_config(job.directory)
        assert isinstance(now, dict) and before is not None
        for key in IGNORED_KEYS:
            now.pop(key, None)
            before.pop(key, None)
        difference = first_difference(before, now)
        if difference is not None:
            raise ConfigError(
                f"hydra.sweep.dir={sweep_dir} holds {job.directory.name}, run with other "
                f"settings: {difference}; re-run it with the command that made it, or give a "
                "new hydra.sweep.dir"
            )


MOST_ENTRIES_LOOKED_AT = 10_000
"""The most entries of a sweep directory :func:`kept_not_reused` looks at (one planted with
millions of folders is not walked)."""

SHOWN_JOBS = 3
"""The most job names a line about a sweep's folders shows."""


def kept_not_reused(jobs: Sequence[PlannedJob], sweep_dir: Path) -> str | None:
    """Where none of the ``jobs`` a re-run plans (:func:`planned_jobs`) exists in ``sweep_dir``
    but the sweep holds completed jobs, a line saying that those are kept and not reused; else
    ``None``.

    A job is known by its folder, named by the settings its sweep varies: the same jobs swept
    again with one more varied setting (a sweep of one seed given more seeds) are all named
    anew and trained again. Reads only: a folder that is a link, holds one (a hard link too:
    :func:`planted_entries`, as a summary leaves such a run out), or whose files cannot be read,
    is not counted; so a folder of hard links to one large file is not read thousands of times."""
    if not sweep_dir.is_dir():
        return None
    if any(job.directory.exists() or job.directory.is_symlink() for job in jobs):
        return None
    completed: list[str] = []
    with os.scandir(sweep_dir) as entries:
        for entry in itertools.islice(entries, MOST_ENTRIES_LOOKED_AT):
            if entry.name == ATTEMPTS or not entry.is_dir(follow_symlinks=False):
                continue
            if planted_entries(Path(entry.path)):
                continue
            if RunDir(Path(entry.path)).state() is RunState.COMPLETED:
                completed.append(entry.name)
    if not completed:
        return None
    shown = sorted(completed)[:SHOWN_JOBS]
    names = ", ".join(cut_apart(one_line(name), SHOWN_VALUE) for name in shown)
    more = f" and {len(completed) - len(shown)} more" if len(completed) > len(shown) else ""
    held = f"{len(completed)} completed job{'s' if len(completed) > 1 else ''}"
    return (
        f"hydra.sweep.dir={one_line(sweep_dir)} holds {held} ({names}{more}) and none of the "
        f"{len(jobs)} this sweep runs: they are kept, not reused; a job's folder is named by the "
        "settings its sweep varies, so varying one more (a second seed) names every job anew"
    )


def check_job_files(run_dir: Path) -> None:
    """Refuse in one line a job directory of a sweep being continued that holds a symbolic link
    anywhere or a file the bounded reader refuses (:func:`check_run_files`), whose place in
    ``.attempts/`` is a link, whose ``metrics.json`` cannot be read, or, for an interrupted
    job, whose ``last.ckpt`` carries code or configs vitattn does not build (read as a resume
    reads it, :func:`vitattn.runs.checkpoints.read_checkpoint`): reads only."""
    sweep = run_dir.parent
    for path in (sweep / ATTEMPTS, sweep / ATTEMPTS / run_dir.name):
        refuse_link(path)
        if path.exists() and not path.is_dir():
            raise UnsafeWriteError(
                f"{one_line(path)} is not a folder: vitattn sets a failed job aside in "
                f"{ATTEMPTS}/<job>/<attempt> of its sweep and wrote nothing there: move it away"
            )
    # where Hydra makes a folder or writes a file as the sweep starts (its FileExistsError and
    # IsADirectoryError were tracebacks)
    for path, folder in ((run_dir, True), (run_dir / HYDRA_DIR, True), (sweep / MULTIRUN, False)):
        if path.exists() and path.is_dir() is not folder:
            kind = "a folder" if folder else "a file"
            raise UnsafeWriteError(
                f"{one_line(path)} is not {kind}, where Hydra writes {kind} for the sweep, and "
                "nothing was written there: move it away"
            )
    if not run_dir.is_dir():
        return
    check_run_files(run_dir)
    run = RunDir(run_dir)
    if run.metrics_file.exists() or run.metrics_file.is_symlink():
        read_json(run.metrics_file, dict)
    if run.state() is RunState.INTERRUPTED:
        read_checkpoint(run.last_checkpoint)


def set_failed_jobs_aside(jobs: Sequence[PlannedJob], sweep_dir: Path) -> list[Path]:
    """Move the directories of the sweep's failed and cut ``jobs`` (:func:`planned_jobs`)
    aside (:func:`set_aside`), so that they run again; where they went. A job whose lock a live
    process holds (one the sweep's own lock does not rule out: a cluster's job whose sweep
    process was stopped) is refused in one line naming its holder, before any is moved."""
    if not sweep_dir.is_dir():
        return []
    failed = [job.directory for job in jobs if RunDir(job.directory).state() in SET_ASIDE]
    for directory in failed:  # a job still running elsewhere (a SLURM job whose sweep was cut)
        if held_elsewhere(directory):
            raise RunDirectoryInUseError(in_use_message(directory))
    return [set_aside(directory, sweep_dir) for directory in failed]


def set_aside(run_dir: Path, sweep_dir: Path | None = None) -> Path:
    """Move a failed or cut job's directory to ``<sweep>/.attempts/<job>/<n>``; its path. The
    move stays in the sweep (``sweep_dir``, by default the job's parent): a symbolic link at
    ``.attempts`` or ``.attempts/<job>``, or a job or place that resolves outside the sweep, is
    refused in one line (:class:`UnsafeWriteError`)."""
    sweep = run_dir.parent if sweep_dir is None else sweep_dir
    folder = sweep / ATTEMPTS / run_dir.name
    for path in (folder.parent, folder):
        refuse_link(path)
    if not inside(run_dir.parent, sweep):
        raise outside_the_sweep(run_dir, sweep)
    folder.mkdir(parents=True, exist_ok=True)
    numbers = (int(p.name) for p in folder.iterdir() if p.name.isdecimal() and len(p.name) <= 9)
    number = 1 + max(numbers, default=0)  # a planted name of 255 digits is no attempt's
    target = folder / str(number)
    if not inside(target, sweep / ATTEMPTS):  # a link planted since, or '..' in the name
        raise outside_the_sweep(target, sweep)
    try:
        os.rename(run_dir, target)  # in one sweep, one filesystem; never into an existing folder
    except OSError as error:
        raise UnsafeWriteError(
            f"{one_line(run_dir)} could not be set aside to {one_line(target)} "
            f"({type(error).__name__}: {one_line(error.strerror or error)}): move what is there "
            "away"
        ) from None
    return target


def outside_the_sweep(path: Path, sweep: Path) -> UnsafeWriteError:
    """The one line refusing to set a job aside where ``path`` is not in ``sweep``."""
    return UnsafeWriteError(
        f"{path} is outside the sweep {sweep} once symbolic links and '..' are resolved; a "
        "failed job is only set aside within its sweep: remove the link, or move the job away"
    )


OmegaConf.register_new_resolver("vitattn_output_subdir", output_subdir, replace=True)
OmegaConf.register_new_resolver("vitattn_log_file", log_file, replace=True)
