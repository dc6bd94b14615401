"""Building each object of a composed config once, on nothing, before a run starts: the classes,
torch and Lightning check their settings' ranges as they build, and the first refusal is one
:class:`~vitattn.errors.ConfigError` line naming its group."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from omegaconf import DictConfig

from vitattn.errors import ConfigError, VitattnError
from vitattn.training.instantiators import bare_trainer


def refused(group: str, error: BaseException) -> ConfigError:
    """The one line for an object that would not build from the ``group`` settings."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, VitattnError):
            return ConfigError(str(seen))
        if seen.__cause__ is None:
            break
        seen = seen.__cause__
    root = seen or error
    reason = next(iter(str(root).strip().splitlines()), "") or type(root).__name__
    return ConfigError(f"{group}: these settings are refused ({type(root).__name__}: {reason})")


def check_buildable(cfg: DictConfig) -> None:
    """Build, once and on nothing, each object of a config that has one: the data module, the
    LightningModule (which checks it can read the data), an optimizer, the schedule and the
    trainer; the first refusal is one :class:`ConfigError` naming its group."""
    import hydra
    import torch

    built: dict[str, Any] = {}

    def build_data() -> None:
        built["data"] = hydra.utils.instantiate(cfg.data)

    def build_model() -> None:
        module = hydra.utils.instantiate(cfg.module)
        check_data = getattr(module, "check_data", None)
        if callable(check_data) and "data" in built:  # the network can read the images
            check_data(built["data"])

    def build_optimizer() -> None:
        built["optimizer"] = hydra.utils.instantiate(cfg.optimizer)(
            params=[torch.nn.Parameter(torch.zeros(1))]
        )

    def build_scheduler() -> None:
        schedule = hydra.utils.instantiate(cfg.scheduler)
        schedule(optimizer=built["optimizer"], total_steps=100)

    builders: list[tuple[str, Callable[[], Any]]] = [
        ("data", build_data),
        ("model", build_model),
        ("optimizer", build_optimizer),
        ("scheduler", build_scheduler),
        ("trainer", lambda: bare_trainer(cfg.trainer)),
    ]
    groups = {"model": "module"}  # the model is built through the module that holds it
    with quiet_lightning():  # the real run prints Lightning's messages; this trial build must not
        for group, build in builders:
            if not cfg.get(groups.get(group, group)):
                continue
            if group == "scheduler" and "optimizer" not in built:
                continue
            try:
                build()
            except Exception as error:
                raise refused(group, error) from error


@contextlib.contextmanager
def quiet_lightning() -> Iterator[None]:
    """Lightning's log records and warnings held back for the duration of the block."""
    loggers = [logging.getLogger(name) for name in ("lightning", "lightning.pytorch")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
