"""The summary of a sweep, printed and written when ``vitattn-train -m`` ends.

:class:`SweepSummary` is a Hydra callback (``hydra.callbacks`` in ``configs/train.yaml``): at the
end of a multirun it runs :func:`vitattn.analysis.summary.summarize` on the sweep directory, as
``scripts/plot_curves.py <sweep>`` would, and prints ``summary.md`` and the files written. A
summary that cannot be made is a warning: the sweep's jobs have run and their results stand.

Hydra does not call ``on_multirun_end`` when a job failed (it raises once all jobs have run), yet
that is when a table naming the failed jobs helps most: the summary is then made as the command
exits.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from vitattn.runs.files import one_line

log = logging.getLogger(__name__)


class SweepSummary(Callback):
    """Summarize the sweep directory once all its jobs have run (single runs are untouched)."""

    def __init__(self) -> None:
        self._pending: Path | None = None
        self._baseline: str | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            self._pending = Path(str(config.hydra.sweep.dir))
        except Exception:  # no sweep directory to name: on_multirun_end will say so
            return
        self._baseline = baseline_of(config)
        atexit.register(self._at_exit)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        atexit.unregister(self._at_exit)
        self._pending = None
        try:
            sweep_dir = Path(str(config.hydra.sweep.dir))
        except Exception as error:
            log.warning("no sweep summary: no sweep directory (%s)", error)
            return
        summarize_sweep(sweep_dir, baseline_of(config))

    def _at_exit(self) -> None:
        sweep_dir, self._pending = self._pending, None
        # a Ctrl-C during the summary means the user wants out, not a table
        if sweep_dir is not None and holds_a_run(sweep_dir):
            with contextlib.suppress(KeyboardInterrupt):
                summarize_sweep(sweep_dir, self._baseline)


def holds_a_run(sweep_dir: Path) -> bool:
    """Whether a job of the sweep in ``sweep_dir`` started (a sweep refused before its first
    job, a search whose study file is not one, has nothing to summarize: its one line is the
    last word)."""
    from vitattn.runs.layout import find_runs

    try:
        return bool(find_runs([sweep_dir]))
    except OSError:
        return False


def baseline_of(config: DictConfig) -> str | None:
    """``summary.baseline`` of the sweep's config: the setting the others are compared with."""
    value = OmegaConf.select(config, "summary.baseline", default=None)
    return None if value is None else str(value)


def summarize_sweep(sweep_dir: Path, baseline: str | None = None) -> bool:
    """Write the summary of ``sweep_dir`` (compared with ``baseline``) and print it; on any error,
    log a warning and return ``False`` instead of raising."""
    try:
        # Imported here: matplotlib and TensorBoard are needed only once a sweep is over.
        from vitattn.analysis.summary import report, summarize

        text = report(summarize([sweep_dir], baseline=baseline))
    except Exception as error:  # the sweep has run whatever happens here
        log.warning(
            "no summary of %s: %s: %s (try: python scripts/plot_curves.py %s)",
            sweep_dir,
            type(error).__name__,
            one_line(error),
            sweep_dir,
        )
        return False
    print(f"\nSweep summary ({sweep_dir}):\n{text}", flush=True)
    return True
