"""Running a Hydra task: one-line errors, no half-written run directories, ``metrics.json``.

The counterpart of lightning-hydra-template's ``task_wrapper``: :func:`run_task` calls a task
(``train``, ``evaluate``, ``finetune``, ``benchmark``) and decides what a failure leaves behind.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import DictConfig

from vitattn.utils.cli import fail
from vitattn.utils.errors import TrainingError, VitattnError
from vitattn.utils.results import write_json

log = logging.getLogger(__name__)
T = TypeVar("T")


def remove_unstarted_run(output_dir: Path) -> None:
    """Delete what Hydra wrote for a run that failed before it started, and nothing else.

    Only Hydra's ``.hydra/`` folder and ``*.log`` files are removed, and the directory itself only
    if that leaves it empty: a run pointed at an existing directory keeps everything it had.
    """
    if not output_dir.is_dir():
        return
    for entry in output_dir.iterdir():
        if entry.name == ".hydra" and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.suffix == ".log" and entry.is_file():
            entry.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty: something else lives there, keep it
        output_dir.rmdir()


def user_error(error: BaseException) -> VitattnError | None:
    """The :class:`VitattnError` behind ``error``, also when Hydra's ``instantiate`` wrapped it."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, VitattnError):
            return seen
        seen = seen.__cause__
    return None


def run_task(program: str, task: Callable[[DictConfig], T], cfg: DictConfig) -> T:
    """Call ``task(cfg)``; a :class:`VitattnError` ends it with one line and exit status 1.

    Such errors are raised before the task writes anything, so the run directory Hydra made is
    removed; a :class:`TrainingError` comes later and keeps the directory, with a
    ``metrics.json`` that records the failure. A job of a multirun always keeps its directory
    with such a ``metrics.json`` (``status: failed`` and the error), so that sweep summaries can
    name it, and the error is re-raised: Hydra records the job as failed and the other jobs go on.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    try:
        return task(cfg)
    except Exception as raised:
        error = user_error(raised)
        if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
            output_dir = Path(HydraConfig.get().runtime.output_dir)
            record_failure(output_dir / "metrics.json", error or raised)
            if error is None:
                raise
            fail(program, error)
            raise error from None
        if error is None:
            raise
        fail(program, error)
        if HydraConfig.initialized():
            output_dir = Path(HydraConfig.get().runtime.output_dir)
            if isinstance(error, TrainingError):  # the run has logs and checkpoints: keep them
                record_failure(output_dir / "metrics.json", error)
            else:
                remove_unstarted_run(output_dir)
        sys.exit(1)


def record_failure(path: Path, error: BaseException) -> None:
    """Write ``{"status": "failed", "error": ...}`` to ``path`` unless the run wrote metrics."""
    if path.exists():
        return
    message = str(error) if isinstance(error, VitattnError) else f"{type(error).__name__}: {error}"
    with contextlib.suppress(OSError):  # an unwritable directory must not hide the real error
        path.parent.mkdir(parents=True, exist_ok=True)
        write_metrics(path, {"status": "failed", "error": message})


def write_metrics(path: Path, metrics: Mapping[str, Any]) -> None:
    """Write ``metrics.json`` (numbers as plain floats, NaN as null)."""
    write_json(path, dict(metrics))
    log.info("wrote %s", path)
