"""TensorBoard as a researcher reads it after a sweep: one run per directory, named by it, the
curves first, the results in the HPARAMS view.

:class:`RunTensorBoard` is Lightning's ``TensorBoardLogger`` with four differences:

* the event files go straight into the run directory, so TensorBoard names each run by its
  directory (``train/multiruns/<stamp>/attention=linear,seed=1``), with no ``/tensorboard``
  suffix;
* the x-axis is the number of optimizer steps done, the count checkpoints and ``metrics.json``
  use: Lightning logs a step's metrics (and a validation's) with the count *before* the step, so
  this logger adds one;
* no ``epoch`` curve and no ``test/`` dots: the test figures are one value per run, shown in the
  HPARAMS view and in ``metrics.json`` (:func:`log_results`), not as lone points in front of the
  training curves (TensorBoard orders groups of tags alphabetically);
* a custom-scalars layout that puts ``train/loss`` and ``val/loss`` in one chart and the
  per-layer fidelity curves in another.

The HPARAMS view lists the curated settings of :mod:`vitattn.utils.hparams` next to the run's
results (:data:`RESULTS`, written once at the end under ``~summary/``, a group that sorts after
``train`` and ``val``). Both go to ``<run>/hparams``, a run of their own: TensorBoard takes the
metrics of a session from the scalars of its run, so the session's metrics are then the results
alone. No experiment summary is written: TensorBoard then builds the table from the sessions of
all runs, with a column for every setting any run has, and shows first the settings that differ
between runs (in a sweep over ``model.heads``, the heads).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

from vitattn.utils.hparams import flatten

SUMMARY_GROUP = "~summary"
"""Tag group of the results written once per run; ``~`` sorts it after the training curves."""

RESULTS = {
    "val/acc_best": "acc_best_val",
    "val/acc": "acc_final_val",
    "test/acc": "acc_test",
    "train/images_per_sec": "images_per_sec",
    "peak_memory_gb": "peak_memory_gb",
    "seconds": "seconds",
}
"""``metrics.json`` keys shown as results in the HPARAMS view, and their tags there (under
``~summary/``). TensorBoard orders a session's metrics by tag and shows the first five: these
tags put best, final and test accuracy, then speed, first. (GFLOP/image is a setting there.)"""

FINETUNING_RESULTS = {
    **RESULTS,
    "test/acc_base": "acc_test_base",
    "test/acc_merged": "acc_test_merged",
}
"""A fine-tuning run's results: also the base model's and the merged model's test accuracy."""

HPARAMS_RUN = "hparams"
"""The folder of a run directory holding its HPARAMS session and results. A run of its own, so
that the HPARAMS view's metrics are the results alone, not every curve of the run (TensorBoard
takes a session's metrics from the scalars of its run and the runs below it)."""

DROPPED_PREFIXES = ("test/",)
DROPPED_KEYS = ("epoch",)

LAYOUT = {
    "vitattn": {
        "loss": ["Multiline", ["train/loss", "val/loss"]],
        "accuracy": ["Multiline", ["train/acc", "val/acc"]],
        "fidelity": ["Multiline", [r"val/fidelity/.*"]],
        "entropy": ["Multiline", [r"val/entropy/.*"]],
    }
}
"""The CUSTOM SCALARS tab: curves that belong in one chart."""


def summary_tag(key: str, results: Mapping[str, str] = FINETUNING_RESULTS) -> str:
    """The tag under which ``metrics.json``'s ``key`` is written for the HPARAMS view."""
    return f"{SUMMARY_GROUP}/{results.get(key, key.replace('/', '_'))}"


class RunTensorBoard(TensorBoardLogger):
    """Lightning's ``TensorBoardLogger`` with the run directory as its log directory, steps
    counted after the step, no ``epoch`` or ``test/`` curves, and a custom-scalars layout.

    Args:
        save_dir: the run directory (``${paths.output_dir}``).
        kwargs: passed on to ``TensorBoardLogger`` (and from there to ``SummaryWriter``, e.g.
            ``purge_step`` when a run resumes).
    """

    step_offset = 1
    """Added to Lightning's step: the count of optimizer steps done."""

    def __init__(self, save_dir: str, **kwargs: Any) -> None:
        kwargs.setdefault("default_hp_metric", False)
        super().__init__(save_dir, name="", version="", **kwargs)
        self._layout_written = False

    @property
    def experiment(self) -> Any:
        writer = super().experiment
        if not self._layout_written and rank_zero_only.rank == 0:
            writer.add_custom_scalars(LAYOUT)
            self._layout_written = True
        return writer

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        kept = {
            key: value
            for key, value in metrics.items()
            if key not in DROPPED_KEYS and not key.startswith(DROPPED_PREFIXES)
        }
        if kept:
            super().log_metrics(kept, None if step is None else step + self.step_offset)


def summary_writers(loggers: Iterable[Any]) -> Iterator[Any]:
    """The ``SummaryWriter`` of each TensorBoard logger in ``loggers``, on rank zero. Only real
    TensorBoard loggers count: under ``fast_dev_run`` Lightning swaps in a ``DummyLogger``, and
    on other ranks a logger's experiment is a dummy; both answer every attribute with a no-op
    returning ``None``."""
    if rank_zero_only.rank != 0:
        return
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            yield logger.experiment


def session_end() -> Any:
    """The summary that ends an HPARAMS session with status "Success" (what
    ``tensorboard.plugins.hparams.summary.session_end_pb`` builds, without TensorFlow)."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    content = plugin_data_pb2.HParamsPluginData(
        session_end_info=plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS),
        version=metadata.PLUGIN_DATA_VERSION,
    )
    plugin = SummaryMetadata.PluginData(
        plugin_name=metadata.PLUGIN_NAME, content=content.SerializeToString()
    )
    return Summary(
        value=[
            Summary.Value(
                tag=metadata.SESSION_END_INFO_TAG, metadata=SummaryMetadata(plugin_data=plugin)
            )
        ]
    )


@contextmanager
def results_writer(logger: TensorBoardLogger) -> Iterator[Any]:
    """A ``SummaryWriter`` of ``<log dir>/hparams`` (:data:`HPARAMS_RUN`), closed on leaving:
    the session is written at the start and the results at the end of a run, a file each."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(Path(logger.log_dir) / HPARAMS_RUN))
    try:
        yield writer
    finally:
        writer.close()


def log_hyperparameters(loggers: Iterable[Any], hparams: Mapping[str, Any]) -> None:
    """Record the flat ``hparams`` with every logger; for TensorBoard, as the HPARAMS view's
    session of this run, in ``<run>/hparams`` (:data:`HPARAMS_RUN`)."""
    from tensorboard.plugins.hparams import summary_v2 as hp

    flat = {key: ("null" if value is None else value) for key, value in flatten(hparams).items()}
    for logger in loggers:
        logger.log_hyperparams(flat)  # TensorBoard: kept for hparams.yaml, no summary written
        if isinstance(logger, TensorBoardLogger) and rank_zero_only.rank == 0:
            with results_writer(logger) as writer:
                writer._get_file_writer().add_summary(hp.hparams_pb(flat))


def log_results(
    loggers: Iterable[Any],
    metrics: Mapping[str, Any],
    step: int,
    results: Mapping[str, str] = RESULTS,
) -> None:
    """Write the run's ``results`` (values of ``metrics.json``) once, where the HPARAMS view
    reads them (:data:`HPARAMS_RUN`, under :data:`SUMMARY_GROUP`), and end its session."""
    for logger in loggers:
        if not isinstance(logger, TensorBoardLogger) or rank_zero_only.rank != 0:
            continue
        with results_writer(logger) as writer:
            for key in results:
                value = metrics.get(key)
                if value is not None:
                    writer.add_scalar(summary_tag(key, results), float(value), step)
            writer._get_file_writer().add_summary(session_end(), step)
