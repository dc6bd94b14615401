"""Building each object of a composed config once, on nothing, before a run starts: the classes,
torch and Lightning check their settings' ranges as they build, and the first refusal is one
:class:`~vitattn.errors.ConfigError` line naming its group."""

from __future__ import annotations

import contextlib
import copy
import logging
import warnings
from collections.abc import Callable, Collection, Container, Iterator, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vitattn.errors import ConfigError, own_refusal, refused, refusing
from vitattn.training.instantiators import bare_trainer
from vitattn.utils import metric_names


def built_with_torch_alone(given: Collection[str]) -> set[str]:
    """The groups that torch alone builds or checks (no Lightning) and that the groups ``given``
    on the command line need: the network and its attention where either is given, the
    optimizer where it or the schedule is, the schedule, and the data settings (the data module
    is Lightning's; its settings' class is not: ``cli.validation.SETTINGS_CHECKS``)."""
    given = set(given)
    groups: set[str] = given & {"data"}
    if given & {"model", "attention"}:
        groups |= {"model", "attention"}
    if given & {"optimizer", "scheduler"}:
        groups.add("optimizer")
    return groups | (given & {"scheduler"})


def build_optimizer(cfg: DictConfig) -> Any:
    """The configured optimizer, over one parameter of nothing."""
    import hydra
    import torch

    return hydra.utils.instantiate(cfg.optimizer)(params=[torch.nn.Parameter(torch.zeros(1))])


def build_schedule(cfg: DictConfig, optimizer: Any) -> None:
    """The configured schedule, over ``optimizer`` and 100 steps."""
    import hydra

    hydra.utils.instantiate(cfg.scheduler)(optimizer=optimizer, total_steps=100)


def check_buildable_with_torch(cfg: DictConfig, groups: Collection[str]) -> None:
    """Build, once and on nothing, those of the network (``model``), the optimizer and the
    schedule that ``groups`` names (:func:`built_with_torch_alone`): torch alone builds them, so
    a range typed on the command line is refused in one line before the data module and the
    trainer import Lightning (seconds on a small machine). :func:`check_buildable` builds every
    object after."""
    import hydra
    import torch

    with quiet_lightning():
        if "model" in groups and cfg.get("model"):
            # On the meta device: no memory and no initialisation, built again for real by
            # check_buildable. Only vitattn's own refusals are taken here: an operation the meta
            # device lacks is no mistake of the settings.
            try:
                with torch.device("meta"):
                    hydra.utils.instantiate(cfg.model)
            except Exception as error:
                if own_refusal(error) is not None:
                    raise refused("model", error) from error
        if "optimizer" in groups and cfg.get("optimizer"):
            with refusing("optimizer"):
                optimizer = build_optimizer(cfg)
            if "scheduler" in groups and cfg.get("scheduler"):
                with refusing("scheduler"):
                    build_schedule(cfg, optimizer)


def check_buildable(cfg: DictConfig, skip: Container[str] = ()) -> None:
    """Build, once and on nothing, each object of a config that has one: the data module (and
    check where its data are to be: ``check_place``), the LightningModule (which checks it can
    read the data), an optimizer, the schedule and the trainer, but those of the groups
    ``skip`` (the bench trains with a trainer of its own); the first refusal is one
    :class:`ConfigError` naming its group."""
    import hydra

    built: dict[str, Any] = {}

    def build_data() -> None:
        built["data"] = hydra.utils.instantiate(cfg.data)
        check_place = getattr(built["data"], "check_place", None)
        if callable(check_place):  # where the data are to be, before the run directory exists
            check_place()

    def build_model() -> None:
        module = hydra.utils.instantiate(cfg.module)
        check_data = getattr(module, "check_data", None)
        if callable(check_data) and "data" in built:  # the network can read the images
            check_data(built["data"])

    def build_optimizer_once() -> None:
        built["optimizer"] = build_optimizer(cfg)

    builders: list[tuple[str, Callable[[], Any]]] = [
        ("data", build_data),
        ("model", build_model),
        ("optimizer", build_optimizer_once),
        ("scheduler", lambda: build_schedule(cfg, built["optimizer"])),
        ("trainer", lambda: bare_trainer(cfg.trainer)),
        ("callbacks", lambda: built.update(callbacks=build_callbacks(cfg))),
    ]
    groups = {"model": "module"}  # the model is built through the module that holds it
    with quiet_lightning():  # the real run prints Lightning's messages; this trial build must not
        for group, build in builders:
            if group in skip or not cfg.get(groups.get(group, group)):
                continue
            if group == "scheduler" and "optimizer" not in built:
                continue
            with refusing(group):
                build()
    if "callbacks" not in skip:
        check_figure_names(cfg, built.get("callbacks", {}))
        check_trainer_flags(cfg, built.get("callbacks", {}))


TRAINER_FLAGS = {
    "enable_checkpointing": "ModelCheckpoint",
    "enable_progress_bar": "ProgressBar",
}
"""Trainer flags that Lightning refuses as ``false`` beside a callback of the class named."""


def check_trainer_flags(cfg: DictConfig, callbacks: dict[str, Any]) -> None:
    """``trainer.enable_checkpointing=false`` or ``enable_progress_bar=false`` beside callbacks
    that checkpoint or draw a bar, and a run without loggers beside a learning-rate monitor:
    one line naming them (Lightning refused the trainer, in a line that left its cause out,
    once the run directory was made; red team)."""
    from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint, ProgressBar

    classes = {"ModelCheckpoint": ModelCheckpoint, "ProgressBar": ProgressBar}
    for flag, kind in TRAINER_FLAGS.items():
        if OmegaConf.select(cfg, f"trainer.{flag}", default=None) is not False:
            continue
        named = [name for name, c in callbacks.items() if isinstance(c, classes[kind])]
        if named:
            dropped = " ".join(f"~callbacks.{name}" for name in named)
            raise ConfigError(
                f"trainer.{flag}=false is refused by Lightning beside the callbacks that use it "
                f"({', '.join(named)}); drop them with it: {dropped}"
            )
    monitors = [name for name, c in callbacks.items() if isinstance(c, LearningRateMonitor)]
    if not cfg.get("logger") and monitors:  # ~logger: Lightning refused it once the run began
        dropped = " ".join(f"~callbacks.{name}" for name in monitors)
        raise ConfigError(
            f"a run without loggers (~logger) has no curve for callbacks.{monitors[0]} to draw "
            f"the learning rate in; drop it with them: {dropped}"
        )


TRIAL_OUTPUT_DIR = "/nonexistent/vitattn-trial-build"
"""What ``paths.output_dir`` stands for in a trial build before Hydra runs (which sets it to
the run's directory): the callbacks' paths under it resolve, and no callback writes as it is
built."""


def build_callbacks(cfg: DictConfig) -> dict[str, Any]:
    """Build each callback of ``cfg.callbacks`` once, nothing to call it: Lightning's and
    vitattn's check their settings as they are built (``ModelCheckpoint(mode='maximum')``,
    ``save_top_k=-5``), which otherwise failed once the run had started, in a line that named
    neither. The first refusal is one line naming ``callbacks.<name>``; a callback with a value
    only the running app resolves (``${hydra:...}``, but ``paths.output_dir``) is left out.
    Returns the callbacks built, by name."""
    import hydra
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    trial = copy.deepcopy(cfg)
    paths = trial.get("paths")
    if isinstance(paths, DictConfig) and "output_dir" in paths:
        try:
            paths.output_dir  # noqa: B018 (resolved, or not before Hydra runs)
        except OmegaConfBaseException:
            with open_dict(paths):
                paths.output_dir = TRIAL_OUTPUT_DIR
    built: dict[str, Any] = {}
    for name, node in trial.callbacks.items():
        if not isinstance(node, DictConfig) or "_target_" not in node:
            continue
        try:
            OmegaConf.to_container(node, resolve=True)
        except OmegaConfBaseException:
            continue
        try:
            built[str(name)] = hydra.utils.instantiate(node)
        except Exception as error:
            own = own_refusal(error)  # a callback's own check names its setting: where it is
            if own is not None and str(own).split("=", 1)[0] in node:
                raise ConfigError(f"callbacks.{name}.{own}") from error
            raise refused(f"callbacks.{name}", error) from error
    return built


def check_figure_names(cfg: DictConfig, callbacks: dict[str, Any]) -> None:
    """Each callback's ``monitor`` names a figure the run logs as it trains (Lightning stopped
    the run at its first validation), and a search's ``optimized_metric`` numbers of the run's
    ``metrics.json`` (each trial of a search failed, and the search ended with exit status 0);
    else one line naming the setting and what is valid. Not checked where the module or a
    callback may log names of its own (:func:`metric_names.logged_by`), or a callback was left
    out of the trial build; nor the ``monitor`` of one told to take a missing figure
    (``EarlyStopping(strict=False)``)."""
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    module = cfg.get("module")
    if not isinstance(module, DictConfig) or "_target_" not in module:
        return
    nodes = cfg.get("callbacks") or {}
    declared = {str(k) for k, v in nodes.items() if isinstance(v, DictConfig) and "_target_" in v}
    if declared - set(callbacks):  # one only the running app resolves: its names are unknown
        return
    try:
        module_class = get_class(str(module._target_))
    except Exception:  # not a class: check_types and the trial build name it
        return
    logged = metric_names.logged_by(module_class, callbacks.values())
    if logged is None:
        return
    for name, callback in callbacks.items():
        monitor = getattr(callback, "monitor", None)
        if getattr(callback, "strict", True) is False:
            continue
        valid = metric_names.monitorable(callback, logged)
        if isinstance(monitor, str) and not metric_names.matches(monitor, valid):
            raise ConfigError(
                f"callbacks.{name}.monitor={monitor} is not a figure this run logs; choose among: "
                f"{', '.join(valid)}"
            )
        if isinstance(monitor, str):
            check_layer(f"callbacks.{name}.monitor", monitor, valid, cfg)
    sweeper = OmegaConf.select(cfg, "hydra.sweeper._target_", default=None)
    if not str(sweeper).endswith("OptunaSearch"):  # read by a search only
        return
    given = cfg.get("optimized_metric")
    tested = bool(cfg.get("test", True))
    results = metric_names.in_results(module_class, logged, callbacks.values(), tested)
    for objective in [given] if isinstance(given, str) else list(given or []):
        if isinstance(objective, str) and not metric_names.matches(objective, results):
            raise ConfigError(
                f"optimized_metric={objective} is not a number of this run's metrics.json; "
                f"choose among: {', '.join(results)}"
            )


def check_layer(setting: str, figure: str, names: Sequence[str], cfg: DictConfig) -> None:
    """A per-layer figure of ``names`` (``val/fidelity/layer_<i>``) of a layer the network has:
    each is logged for ``i`` below ``model.depth``, where there is more than one layer. For a
    callback's ``monitor`` only: a search's ``optimized_metric`` may name a layer that some of
    its trials' networks have (``model.depth=choice(1,4)``), and the search fails the others."""
    layer = metric_names.layer_of(figure, names)
    depth = OmegaConf.select(cfg, "model.depth", default=None)
    if layer is None or not isinstance(depth, int) or isinstance(depth, bool):
        return
    if depth < 2:
        raise ConfigError(
            f"{setting}={figure} is a per-layer figure, which a network of model.depth={depth} "
            "does not log; choose its mean (drop /layer_<i>)"
        )
    if layer >= depth:
        raise ConfigError(
            f"{setting}={figure} names a layer the network has not; with "
            f"model.depth={depth} choose layer_0 to layer_{depth - 1}"
        )


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
