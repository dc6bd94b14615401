"""TensorBoard as a researcher reads it after a sweep: one run per directory, named by it, the
curves first, the results in the HPARAMS view.

:class:`RunTensorBoard` is Lightning's ``TensorBoardLogger`` with five differences:

* the event files go straight into the run directory, so TensorBoard names each run by its
  directory (``train/multiruns/<stamp>/attention=linear,seed=1``), with no ``/tensorboard``
  suffix;
* the x-axis is the number of optimizer steps done, the count checkpoints and ``metrics.json``
  use: Lightning logs a step's metrics (and a validation's) with the count *before* the step, so
  this logger adds one;
* no ``epoch`` curve and no ``test/`` dots: the test figures are one value per run, shown in the
  HPARAMS view and in ``metrics.json`` (:func:`log_results`), not as lone points in front of the
  training curves (TensorBoard orders groups of tags alphabetically);
* one ``train/lr`` curve where the optimizer's parameter groups share their learning rate
  (Lightning's ``LearningRateMonitor`` draws one per group: ``train/lr/decay``,
  ``train/lr/no_decay``);
* a custom-scalars layout that puts ``train/loss`` and ``val/loss`` in one chart and the
  per-layer fidelity curves in another.

The HPARAMS view (:func:`log_hyperparameters`, :func:`log_results`) lives in the run itself, so
TensorBoard lists one run per job. Each run writes

* its *session*, with an empty group name: TensorBoard then names the trial by its run (the
  Trial ID is the run's directory, not a hash of its settings);
* an *experiment summary* (``hparams_config``): without one TensorBoard takes every scalar of a
  session's run as a metric (every curve). With it, the metrics are the results alone
  (:data:`RESULTS`, written once at the end under ``~summary/``, a group that sorts after
  ``train`` and ``val``), in that order, with short display names; TensorBoard shows the first
  five, which every run has (a resumed one too: its costs are carried in its checkpoints), so
  the parallel-coordinates view draws a line per run when it opens. Its settings are the
  columns of :mod:`vitattn.training.hparams`, the same for every job of a sweep (TensorBoard
  reads the summary of one run, any): those its sweep varies are marked as differing, which
  TensorBoard shows first, then the others by name (the first five when the view opens).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

from vitattn.runs.files import check_written_in_place, make_folder, one_line, write_text
from vitattn.utils.config import flatten

if TYPE_CHECKING:
    from vitattn.training.hparams import Hyperparameters

SUMMARY_GROUP = "~summary"
"""Tag group of the results written once per run; ``~`` sorts it after the training curves."""

RESULTS = {
    "test/acc": "acc_test",
    "val/acc_best": "acc_best_val",
    "train/images_per_sec": "images_per_sec",
    "gflop_per_image": "gflop_per_image",
    "seconds": "seconds",
    "peak_memory_gb": "peak_memory_gb",
    "val/acc": "acc_final_val",
    "train/compile_seconds": "compile_seconds",
}
"""``metrics.json`` keys shown as results in the HPARAMS view, and their tags there (under
``~summary/``), in the view's order: TensorBoard shows the first five, which every training run
has (peak memory is measured on a GPU only). Its table puts them after five settings, ten em
each: at 1600 px the first result, test acc, is the one in sight."""

FINETUNING_RESULTS = {
    "test/acc": "acc_test",
    "test/acc_base": "acc_test_base",
    "val/acc_best": "acc_best_val",
    "train/images_per_sec": "images_per_sec",
    "seconds": "seconds",
    "test/acc_merged": "acc_test_merged",
    "peak_memory_gb": "peak_memory_gb",
    "val/acc": "acc_final_val",
}
"""A fine-tuning run's results: also the base model's and the merged model's test accuracy."""

EVALUATION_RESULTS = {"test/acc": "acc_test"}
"""A ``vitattn-eval`` run's result: the checkpoint's test accuracy, under the tag training's has,
so that its row's test acc sits in the same column as the training runs'."""

TASK_RESULTS = (RESULTS, FINETUNING_RESULTS, EVALUATION_RESULTS)
"""Every task's results: each task's HPARAMS layout holds them all (:func:`view_results`)."""


def view_results(results: Mapping[str, str]) -> dict[str, str]:
    """The metrics of the HPARAMS view's layout for a task of ``results``: those, in their order,
    then the other tasks' (:data:`TASK_RESULTS`). TensorBoard reads the layout of one run of the
    log directory (any) for all of them, so a fine-tuning run beside training runs lost its base
    and merged test accuracy where it read a training run's (audit)."""
    others = {key: tag for task in TASK_RESULTS for key, tag in task.items()}
    return {**results, **{key: tag for key, tag in others.items() if key not in results}}


DISPLAY_NAMES = {
    "acc_best_val": "best val acc",
    "acc_final_val": "final val acc",
    "acc_test": "test acc",
    "acc_test_base": "base test acc",
    "acc_test_merged": "merged test acc",
    "images_per_sec": "images/s",
    "gflop_per_image": "GFLOP/image",
    "peak_memory_gb": "peak GiB",
    "compile_seconds": "compile s",
    "model/tokens": "tokens",
    "model/mlp_dim": "MLP dim",
    "optimizer/lr": "lr",
    "data/batch_size": "batch size",
    "trainer/precision": "precision",
    "params/trainable": "trainable params",
    "~checkpoint": "checkpoint",
}
"""Column headers of the HPARAMS view, short enough not to wrap inside a word. Other columns
show their last part (``~attention/conv_kernel``: ``conv kernel``)."""

DROPPED_PREFIXES = ("test/",)
DROPPED_KEYS = ("epoch",)

LAYOUT = {
    "vitattn": {
        "loss": ["Multiline", ["train/loss", "val/loss"]],
        "accuracy": ["Multiline", ["train/acc", "val/acc"]],
        "fidelity": ["Multiline", [r"val/fidelity(/.*)?"]],
        "entropy gap": ["Multiline", [r"val/entropy_gap(/.*)?"]],
    }
}
"""The CUSTOM SCALARS tab: curves that belong in one chart."""


LEARNING_RATE = "train/lr"
"""The learning-rate curves' tag: ``LearningRateMonitor`` logs ``train/lr/<parameter group>``."""


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
    @rank_zero_experiment
    def experiment(self) -> Any:
        """Lightning's writer, as a :class:`PinnedSummaryWriter`: its event files written
        through the descriptors they were made with, never reopened by name."""
        if self._experiment is None:
            from vitattn.runs.pinned_events import PinnedSummaryWriter

            if self.root_dir:
                make_folder(Path(self.root_dir))
            self._experiment = PinnedSummaryWriter(log_dir=self.log_dir, **self._kwargs)
        writer = self._experiment
        if not self._layout_written:
            writer.add_custom_scalars(LAYOUT)
            self._layout_written = True
        return writer

    @rank_zero_only
    def save(self) -> None:
        """Lightning's save (the events flushed, ``hparams.yaml`` written once, by name), where
        the run directory is still the one this process took
        (:func:`vitattn.runs.files.check_confined`)."""
        check_written_in_place(Path(self.log_dir) / self.NAME_HPARAMS_FILE)
        super().save()

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        kept = {
            key: value
            for key, value in metrics.items()
            if key not in DROPPED_KEYS and not key.startswith(DROPPED_PREFIXES)
        }
        kept = merge_equal_learning_rates(kept)
        if kept:
            super().log_metrics(kept, None if step is None else step + self.step_offset)


class RunCSVLogger(CSVLogger):
    """Lightning's ``CSVLogger`` (``logger=csv``: ``<run>/csv/metrics.csv``), which opens its
    files by name at every save, saving only where the run directory is still the one this
    process took and no link is at their names
    (:func:`vitattn.runs.files.check_written_in_place`).

    A row's step is the count of optimizer steps done, as :class:`RunTensorBoard`'s curves
    count them: Lightning logs a step's training and validation rows at the count before it
    (the second step's loss at 1), and its test at the count after the fit, so the first are
    given :attr:`step_offset` more and the test's rows (``test/`` keys only) are kept at theirs.
    Until 2026-12-02 the CSV's steps were Lightning's, one less than TensorBoard's, and the test
    row one past the last training row.

    Lightning's writer deletes ``metrics.csv`` as it starts. A run resumed from a checkpoint
    at step ``purge_step`` keeps the rows it logged before that step instead, and drops those a
    killed run logged past its checkpoint, as TensorBoard's ``purge_step`` does; a file that
    cannot be read as such rows (:func:`rows_before`) is set aside, named in the log, not
    deleted."""

    step_offset = 1
    """Added to Lightning's step in the fit's rows: the count of optimizer steps done."""

    def __init__(self, *args: Any, purge_step: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.purge_step = purge_step

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        tested = all(key.startswith("test/") for key in metrics if key not in DROPPED_KEYS)
        offset = 0 if tested else self.step_offset
        super().log_metrics(metrics, None if step is None else step + offset)

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        if self._experiment is not None or self.purge_step is None:
            return super().experiment
        path = Path(self.log_dir) / "metrics.csv"
        kept = rows_before(path, self.purge_step)
        writer = super().experiment  # Lightning's writer: metrics.csv deleted
        if kept is not None:
            columns, lines = kept
            write_text(path, "".join(f"{line}\n" for line in lines))  # the header first
            writer.metrics_keys = columns  # Lightning appends its rows under that header
        return writer

    @rank_zero_only
    def save(self) -> None:
        for name in ("metrics.csv", "hparams.yaml"):
            check_written_in_place(Path(self.log_dir) / name)
        super().save()


MAX_CSV_COLUMNS = 10_000
"""The most columns of a CSV log a resume carries over: one per tag, as many as a run's event
files may hold (:data:`vitattn.runs.event_files.MAX_EVENT_TAGS`)."""
MAX_CSV_CELLS = 2_000_000
"""The most cells (rows times columns) of a CSV log a resume carries over: a run of 50,000 steps
logging every step writes 100,000 rows of about 20 columns. Lightning's writer reads the file
back whole, a dictionary of every column per row, when a new column comes."""


def rows_before(path: Path, step: int) -> tuple[list[str], list[str]] | None:
    """The columns of the CSV file at ``path`` (what Lightning's CSV logger writes) and its
    lines, its header first, then the rows logged before ``step``, as they are; ``None`` where
    there is no file. Each row is parsed alone for its step and dropped or kept as its text, so
    what is held is at most the file's text. A file that the bounded reader refuses
    (:func:`vitattn.runs.files.read_text`: a link, past its size), or whose rows are not such
    (no ``step`` column, a step that is not a count, a row wider than its header, more than
    :data:`MAX_CSV_COLUMNS` columns or :data:`MAX_CSV_CELLS` cells), is set aside as
    ``metrics.csv.unreadable-<n>`` with a warning, and ``None`` returned."""
    import csv
    import io
    import logging

    from vitattn.runs.files import UnreadableFileError, read_text, set_aside_unreadable

    if not path.exists() and not path.is_symlink():
        return None
    try:
        lines = io.StringIO(read_text(path, follow_links=False))
        header = lines.readline().rstrip("\r\n")
        columns = next(csv.reader([header]), [])
        if "step" not in columns or len(columns) > MAX_CSV_COLUMNS:
            raise ValueError(f"a header of {len(columns)} columns, without step or too many")
        at, kept = columns.index("step"), [header]
        for count, line in enumerate((line.rstrip("\r\n") for line in lines), start=1):
            row = next(csv.reader([line]), [])
            if count * len(columns) > MAX_CSV_CELLS or len(row) > len(columns) or len(row) <= at:
                raise ValueError(f"row {count} is not one of Lightning's CSV logger")
            if not row[at].isdigit() or not row[at].isascii():
                raise ValueError(f"row {count} has a step that is not a count")
            if int(row[at]) < step:
                kept.append(line)
    except (UnreadableFileError, ValueError, csv.Error) as error:
        aside = set_aside_unreadable(path)
        logging.getLogger(__name__).warning(
            "%s could not be carried over (%s): set aside as %s", path, one_line(error), aside.name
        )
        return None
    return columns, kept


def merge_equal_learning_rates(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``train/lr/<group>`` values all equal (groups that differ by weight decay alone) as one
    ``train/lr``; differing ones are kept per group."""
    groups = [key for key in metrics if key.startswith(f"{LEARNING_RATE}/")]
    if len(groups) < 2 or len({float(metrics[key]) for key in groups}) > 1:
        return dict(metrics)
    merged = {key: value for key, value in metrics.items() if key not in groups}
    merged[LEARNING_RATE] = metrics[groups[0]]
    return merged


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


def encode_png(pixels: Any) -> bytes:
    """``(H, W, 3)`` uint8 ``pixels`` as PNG bytes, compressed fast (zlib level 1): the default
    level makes encoding most of an image's cost, for files a few kilobytes smaller."""
    import io

    from PIL import Image

    encoded = io.BytesIO()
    Image.fromarray(pixels).save(encoded, format="PNG", compress_level=1)
    return encoded.getvalue()


def add_png(writer: Any, tag: str, png: bytes, height: int, width: int, step: int) -> None:
    """An image summary of already encoded ``png`` bytes (``height`` x ``width``, RGB) under
    ``tag``: what ``SummaryWriter.add_image`` writes, without encoding the pixels again."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    picture = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=png)
    writer._get_file_writer().add_summary(
        Summary(value=[Summary.Value(tag=tag, image=picture)]), step
    )


def hparams_summary(tag: str, content: Any) -> Any:
    """A summary of the HPARAMS plugin's ``content`` (``HParamsPluginData``) under ``tag``: what
    ``tensorboard.plugins.hparams.summary_v2`` builds, without TensorFlow."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import metadata

    value = Summary.Value(
        tag=tag, metadata=metadata.create_summary_metadata(content), tensor=metadata.NULL_TENSOR
    )
    return Summary(value=[value])


def session_end() -> Any:
    """The summary that ends an HPARAMS session with status "Success"."""
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    end = plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS)
    return hparams_summary(
        metadata.SESSION_END_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=end)
    )


def display_name(name: str) -> str:
    """A column's header in the HPARAMS view: :data:`DISPLAY_NAMES`, else its last part."""
    return DISPLAY_NAMES.get(name, name.rsplit("/", 1)[-1].replace("_", " "))


def hparam_type(value: Any) -> int:
    """The HPARAMS data type of a setting's value (``None`` is written as the string "null")."""
    from tensorboard.plugins.hparams import api_pb2

    if isinstance(value, bool):
        return api_pb2.DATA_TYPE_BOOL
    if isinstance(value, int | float):
        return api_pb2.DATA_TYPE_FLOAT64
    return api_pb2.DATA_TYPE_STRING


def experiment_summary(
    columns: Mapping[str, Any], results: Mapping[str, str], varied: Iterable[str] = ()
) -> Any:
    """The HPARAMS view's layout (what ``hparams_config_pb`` builds, with display names and the
    ``differs`` mark): a column per setting of ``columns`` (name to an example value, for its
    type), those of ``varied`` marked as differing (TensorBoard shows them first), and the
    ``results`` as metrics, in their order."""
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    differing = set(varied)
    experiment = api_pb2.Experiment(
        hparam_infos=[
            api_pb2.HParamInfo(
                name=name,
                display_name=display_name(name),
                type=hparam_type(value),
                differs=name in differing,
            )
            for name, value in columns.items()
        ],
        metric_infos=[
            api_pb2.MetricInfo(
                name=api_pb2.MetricName(tag=summary_tag(key, results)),
                display_name=display_name(tag),
            )
            for key, tag in results.items()
        ],
    )
    return hparams_summary(
        metadata.EXPERIMENT_TAG, plugin_data_pb2.HParamsPluginData(experiment=experiment)
    )


def run_writer(logger: TensorBoardLogger) -> Any:
    """The ``SummaryWriter`` of the run's curves. The session and the results go into the same
    event file as the curves: TensorBoard follows only the newest event file of a run while it
    is written (unless started with ``--reload_multifile``), so a second file would freeze the
    curves of a live run."""
    return logger.experiment


def log_hyperparameters(
    loggers: Iterable[Any], hparams: Hyperparameters, results: Mapping[str, str] = RESULTS
) -> None:
    """Record the run's settings (``hparams.values``) with every logger; for TensorBoard, as the
    HPARAMS view's session of this run, named by the run, with the view's layout
    (:func:`experiment_summary`: the columns of ``hparams``, the ``results`` then the other
    task's as metrics, :func:`view_results`)."""
    from tensorboard.plugins.hparams import summary_v2 as hp

    flat = {k: ("null" if value is None else value) for k, value in flatten(hparams.values).items()}
    for logger in loggers:
        logger.log_hyperparams(flat)  # TensorBoard: kept for hparams.yaml, no summary written
        if isinstance(logger, TensorBoardLogger) and rank_zero_only.rank == 0:
            file_writer = run_writer(logger)._get_file_writer()
            summary = experiment_summary(hparams.columns, view_results(results), hparams.varied)
            file_writer.add_summary(summary)
            # An empty trial id: TensorBoard names the session's group by its run.
            file_writer.add_summary(hp.hparams_pb(flat, trial_id=""))
            file_writer.flush()


def log_results(
    loggers: Iterable[Any],
    metrics: Mapping[str, Any],
    step: int,
    results: Mapping[str, str] = RESULTS,
) -> None:
    """Write the run's ``results`` (values of ``metrics.json``) once, where the HPARAMS view
    reads them (the run's scalars under :data:`SUMMARY_GROUP`), and end its session."""
    for logger in loggers:
        if not isinstance(logger, TensorBoardLogger) or rank_zero_only.rank != 0:
            continue
        writer = run_writer(logger)
        for key in results:
            value = metrics.get(key)
            if value is not None:
                writer.add_scalar(summary_tag(key, results), float(value), step)
        writer._get_file_writer().add_summary(session_end(), step)
        writer.flush()
