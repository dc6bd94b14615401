"""Hyperparameters to every logger, and to TensorBoard's HPARAMS view with our metric tags."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lightning.pytorch.loggers import Logger, TensorBoardLogger

HPARAM_METRICS = ("val/acc", "val/loss", "test/acc", "train/images_per_sec")
"""Scalars the HPARAMS view shows next to each run's hyperparameters."""


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"model": {"heads": 8}}`` to ``{"model/heads": 8}``; lists become strings."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}/"))
        elif value is None or isinstance(value, bool | int | float | str):
            flat[name] = value
        else:
            flat[name] = str(value)
    return flat


def log_hyperparameters(loggers: Iterable[Logger], hparams: Mapping[str, Any]) -> None:
    """Record ``hparams`` (nested) with every logger.

    Lightning's TensorBoardLogger writes the HPARAMS-plugin summary only together with metric
    values, which would put a fake point on the curves; here the summary names the metric tags
    and TensorBoard reads their values from the run's own scalars.
    """
    from torch.utils.tensorboard.summary import hparams as hparams_summary

    flat = {k: ("null" if v is None else v) for k, v in flatten(hparams).items()}
    for logger in loggers:
        logger.log_hyperparams(flat)
        if isinstance(logger, TensorBoardLogger):
            writer = logger.experiment._get_file_writer()
            if writer is None:  # not rank 0 of a multi-process run: rank 0 writes the summary
                continue
            for summary in hparams_summary(flat, dict.fromkeys(HPARAM_METRICS, 0.0)):
                writer.add_summary(summary)
