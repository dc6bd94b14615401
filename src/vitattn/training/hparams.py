"""The hyper-parameters a run records, and the columns of TensorBoard's HPARAMS view.

A run records (as its HPARAMS session, and in Lightning's ``hparams.yaml``) its curated settings:
the attention and its knobs with the values its kernel used (a knob the config leaves ``null`` is
computed from the token count), the model's size, parameters, learning rate, batch size, seed and
precision, and each setting its sweep varies. No ``_target_``, paths or URLs.

The view's columns are another matter. TensorBoard takes them from the experiment summary of one
run of the log directory, any one, so every job of a sweep declares the same columns, from what
the jobs share: the sweep's overrides (:class:`Sweep`). They are the few every run shows
(:data:`TRAINING_COLUMNS`), the knobs of each attention the sweep trains, and every setting the
sweep varies; only those are marked as differing (:func:`view_columns`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from vitattn.utils.config import CONFIG_DIR, chosen_option, group_options, sweep_job
from vitattn.utils.metric_names import KNOB_PREFIX

if TYPE_CHECKING:
    from torch import nn

MODEL_SIZE = ("embed_dim", "depth", "heads", "patch_size", "pool")
"""The model settings a run records (with the token count and the MLP width)."""

IMPLEMENTATION_KNOBS = ("impl", "sdpa_backend", "tile_memory")
"""Knobs that choose how a mechanism computes, not what: columns only where a sweep varies them."""

TRAINING_COLUMNS = (
    "attention",
    "data/shift",
    "seed",
    "params",
    "model/tokens",
    "model/embed_dim",
    "model/depth",
    "model/heads",
    "optimizer/lr",
    "data/batch_size",
    "trainer/precision",
)
"""The columns every training run shows, besides the knobs and what its sweep varies. The data
variant is one (``none`` most often): a fine-tuning run's test accuracy, on the rotated images,
shares a column with a training run's, and TensorBoard may show either task's columns (it reads
the layout of one run of the log directory)."""

FINETUNING_COLUMNS = (
    "attention",
    "seed",
    "params",
    "params/trainable",
    "lora/rank",
    "lora/alpha",
    "data/shift",
    "optimizer/lr",
    "data/batch_size",
)
"""The columns every fine-tuning run shows."""

CHECKPOINT = "~checkpoint"
"""The setting naming the checkpoint an evaluation tested (:func:`checkpoint_name`); the ``~``
sorts it after the settings every run has, as the knobs are."""

EVALUATION_COLUMNS = (*TRAINING_COLUMNS, CHECKPOINT)
"""The columns every evaluation shows: training's, so that where TensorBoard reads an
evaluation's layout for the log directory the training runs beside it keep theirs, then the
checkpoint tested."""

MAX_COLUMNS = 40
"""At most this many columns: the shown ones, then the varied ones, then the knobs."""


@dataclass(frozen=True)
class Sweep:
    """What a job knows of its sweep: the override keys its jobs vary (``attention``, ``seed``,
    ``optimizer.lr``) and the attention options they train. Empty for a single run."""

    varied: tuple[str, ...] = ()
    attentions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Hyperparameters:
    """A run's settings (its HPARAMS session, ``values``), the view's ``columns`` (name to an
    example value, for the type) and the columns its sweep varies (``varied``: marked as
    differing)."""

    values: dict[str, Any]
    columns: dict[str, Any]
    varied: frozenset[str] = field(default_factory=frozenset)


def knob_name(knob: str) -> str:
    """The name of an attention knob's setting: ``landmarks`` -> ``~attention/landmarks``."""
    return f"{KNOB_PREFIX}{knob}"


def attention_knobs(attention: Mapping[str, Any] | None) -> dict[str, Any]:
    """The knobs of an attention config (``_target_`` and ``_partial_`` left out) by name."""
    return {str(k): v for k, v in (attention or {}).items() if not str(k).startswith("_")}


def resolved_knobs(attention: Mapping[str, Any] | None, model: nn.Module) -> dict[str, Any]:
    """``~attention/<knob>`` for each knob of ``model``'s attention config, with the value its
    kernel used where the config leaves it ``None`` (``AttentionKernel.resolved_knobs``)."""
    knobs = attention_knobs(attention)
    # The first attention kernel, known by its method: this room imports none of vitattn.attention.
    kernel = next((m for m in model.modules() if hasattr(m, "resolved_knobs")), None)
    if kernel is not None:
        knobs = kernel.resolved_knobs(knobs)
    return {knob_name(name): value for name, value in knobs.items()}


def option_knobs(option: str, config_dir: Path = CONFIG_DIR) -> dict[str, Any]:
    """``~attention/<knob>`` of ``configs/attention/<option>.yaml`` with its defaults; ``{}`` for
    an option without a file."""
    path = config_dir / "attention" / f"{option}.yaml"
    if not path.is_file():
        return {}
    config = OmegaConf.to_container(OmegaConf.load(path))
    assert isinstance(config, dict)
    return {knob_name(name): value for name, value in attention_knobs(config).items()}


def model_size(net: Mapping[str, Any]) -> dict[str, Any]:
    """``model/<size>`` of a network config: width, depth, heads, patch, pooling, tokens, MLP."""
    image, patch = int(net.get("image_size", 32)), int(net.get("patch_size", 1))
    tokens = (image // patch) ** 2 + (1 if net.get("pool") == "cls" else 0)
    mlp = net.get("mlp_dim") or round(net.get("embed_dim", 0) * net.get("mlp_ratio", 0))
    sizes = {f"model/{k}": net.get(k) for k in MODEL_SIZE}
    return {**sizes, "model/tokens": tokens, "model/mlp_dim": mlp}


def this_sweep() -> Sweep:
    """The sweep the running Hydra job belongs to (:func:`sweep_of` its overrides); an empty
    :class:`Sweep` for a single run, or a task called outside a Hydra app."""
    from hydra.core.hydra_config import HydraConfig

    if not sweep_job():
        return Sweep()
    return sweep_of(sweep_overrides(HydraConfig.get()))


def sweep_overrides(hydra_config: Any) -> list[str]:
    """A sweep's overrides, the same for each of its jobs: those of its command, from the sweep's
    ``multirun.yaml`` (which Hydra's basic sweeper writes before its first job; a job's own
    overrides hold its values alone), and the sweeper's ``params`` (an Optuna search's space)."""
    from vitattn.runs.layout import sweep_command_overrides

    given = sweep_command_overrides(Path(hydra_config.sweep.dir))
    params = hydra_config.sweeper.get("params") or {}
    return [*given, *(f"{key}={value}" for key, value in params.items())]


def sweep_of(overrides: Sequence[str]) -> Sweep:
    """The :class:`Sweep` of a sweep's ``overrides``: the keys with more than one value (sweeps:
    ``seed=1,2``, ``choice(...)``, ``interval(...)``; ``hydra.*`` left out) and the attention
    options listed (``attention=softmax,nystrom`` or ``glob(...)``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    swept = [o for o in parsed if o.is_sweep_override() and not o.key_or_group.startswith("hydra")]
    attentions: list[str] = []
    for override in swept:
        if override.key_or_group != "attention":
            continue
        if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
            attentions += override.value().filter(group_options("attention"))
        elif override.is_discrete_sweep():
            attentions += list(override.sweep_string_iterator())
    varied = dict.fromkeys(override.key_or_group for override in swept)
    return Sweep(tuple(varied), tuple(dict.fromkeys(attentions)))


def setting_name(key: str) -> str:
    """The setting an override key sets: ``attention.landmarks`` -> ``~attention/landmarks``,
    ``optimizer.lr`` -> ``optimizer/lr``, a group (``model``) as it is."""
    if key.startswith("attention."):
        return knob_name(key.removeprefix("attention.").replace(".", "/"))
    return key.replace(".", "/")


def shown_setting(key: str) -> bool:
    """Whether an override key is a setting the view may show: no paths, URLs or ``_target_``."""
    last = key.rsplit(".", 1)[-1]
    return not (
        key.startswith(("hydra", "paths."))
        or "_target_" in key
        or last.endswith(("_path", "_dir", "url"))
    )


def varied_settings(cfg: DictConfig, keys: Iterable[str]) -> dict[str, Any]:
    """This run's value of each setting of ``keys`` that its sweep varies, by its name: a config
    group's choice (``model``: ``vit``), else the config's value (``optimizer.lr``)."""
    settings: dict[str, Any] = {}
    for key in filter(shown_setting, keys):
        choice = chosen_option(cfg, key)
        value = choice if choice is not None else OmegaConf.select(cfg, key, default=None)
        if isinstance(value, DictConfig | ListConfig):
            value = str(OmegaConf.to_container(value, resolve=True))
        settings[setting_name(key)] = value
    return settings


def view_columns(values: Mapping[str, Any], shown: Sequence[str], sweep: Sweep) -> dict[str, Any]:
    """The HPARAMS view's columns, name to an example value: ``shown`` (every run has them), each
    setting ``sweep`` varies, then the knobs of this run's attention (``values``) and of the
    sweep's other attentions; implementation knobs only where varied. At most
    :data:`MAX_COLUMNS`."""
    varied = [setting_name(key) for key in sweep.varied if shown_setting(key)]
    knobs = {name: value for name, value in values.items() if name.startswith(KNOB_PREFIX)}
    for option in sweep.attentions:
        for name, default in option_knobs(option).items():
            # A knob that another attention's config leaves null is a computed whole number.
            knobs.setdefault(name, 0 if default is None else default)
    columns = {name: values.get(name) for name in [*shown, *varied]}
    for name, value in knobs.items():
        if name in varied or name.removeprefix(KNOB_PREFIX) not in IMPLEMENTATION_KNOBS:
            columns.setdefault(name, value)
    return dict(list(columns.items())[:MAX_COLUMNS])


def recorded(cfg: DictConfig, values: Mapping[str, Any], shown: Sequence[str]) -> Hyperparameters:
    """A run's :class:`Hyperparameters`: its curated ``values`` and each setting its sweep varies
    (the curated value first: a resolved knob, not the ``null`` of an override), the columns
    with ``shown`` first."""
    sweep = this_sweep()
    settings = {**varied_settings(cfg, sweep.varied), **values}
    varied = frozenset(setting_name(key) for key in sweep.varied if shown_setting(key))
    return Hyperparameters(settings, view_columns(settings, shown, sweep), varied)


def training_hyperparameters(
    cfg: DictConfig, choices: Mapping[str, str | None], params: int, model: nn.Module
) -> Hyperparameters:
    """What the HPARAMS view compares a training run by: the attention and its knobs (as
    ``model``'s kernel resolved them), the model's size and parameters, learning rate, batch
    size, seed and precision (GFLOP per image is a result)."""
    net = OmegaConf.to_container(cfg.model, resolve=True)
    assert isinstance(net, dict)
    values = {
        "attention": choices.get("attention"),
        **resolved_knobs(net.get("attention"), model),
        "model": choices.get("model"),
        **model_size(net),
        "params": params,
        "optimizer": choices.get("optimizer"),
        "optimizer/lr": cfg.optimizer.get("lr"),
        "optimizer/weight_decay": cfg.optimizer.get("weight_decay"),
        "data/batch_size": cfg.data.get("batch_size"),
        "data/shift": cfg.data.get("shift"),
        "seed": cfg.get("seed"),
        "trainer/precision": str(cfg.trainer.get("precision")),
    }
    return recorded(cfg, values, TRAINING_COLUMNS)


def finetuning_hyperparameters(
    cfg: DictConfig,
    data_cfg: DictConfig,
    module: nn.Module,
    attention: str | None,
    counts: Any,
    lora: Mapping[str, Any],
) -> Hyperparameters:
    """What the HPARAMS view compares a fine-tuning run by: the base network's attention (its
    knobs resolved) and size, the adapters' settings as recorded (``lora``), the data variant,
    learning rate, batch size, seed and the parameter counts."""
    net = module.hparams.net
    values = {
        "attention": attention,
        **resolved_knobs(net.get("attention"), module),
        **model_size(net),
        **{f"lora/{k}": v for k, v in lora.items()},
        "data/shift": data_cfg.get("shift"),
        "params": counts.total,
        "params/trainable": counts.trainable,
        "optimizer/lr": cfg.optimizer.get("lr"),
        "data/batch_size": data_cfg.get("batch_size"),
        "seed": cfg.get("seed"),
    }
    return recorded(cfg, values, FINETUNING_COLUMNS)


def checkpoint_name(ckpt_path: str | Path, log_dir: str | Path) -> str:
    """The checkpoint at ``ckpt_path`` named without a path (HPARAMS shows no paths: DESIGN.md):
    under ``log_dir`` (``paths.log_dir``, where ``tensorboard --logdir outputs`` looks), its path
    from there, which starts with its training run's TensorBoard name
    (``train/runs/<stamp>_linear/checkpoints/last.ckpt``); elsewhere its run's folder name and
    what follows (``<run>/checkpoints/last.ckpt``), nothing above it."""
    path = Path(ckpt_path).expanduser().resolve()
    try:
        return path.relative_to(Path(log_dir).expanduser().resolve()).as_posix()
    except ValueError:
        run = path.parent.parent if path.parent.name == "checkpoints" else path.parent
        return path.relative_to(run.parent).as_posix()


def evaluation_hyperparameters(
    cfg: DictConfig,
    module: nn.Module,
    attention: str | None,
    trained_data: Mapping[str, Any],
    shift: str | None,
    params: int,
) -> Hyperparameters:
    """What the HPARAMS view compares an evaluation by: the checkpoint's network (its attention,
    knobs resolved, size and parameters) and the learning rate and batch size it was trained
    with (``trained_data``: the data settings saved in it), the data variant it is tested on
    (``shift``), the precision it is tested in, and the checkpoint (:func:`checkpoint_name`).
    The checkpoint does not carry its run's seed: the column is there (a number), the value
    not."""
    net = module.hparams.net
    optimizer = module.hparams.get("optimizer") or {}
    values = {
        "attention": attention,
        **resolved_knobs(net.get("attention"), module),
        **model_size(net),
        "params": params,
        "optimizer/lr": optimizer.get("lr"),
        "data/batch_size": trained_data.get("batch_size"),
        "data/shift": shift,
        "trainer/precision": str(cfg.trainer.get("precision")),
        CHECKPOINT: checkpoint_name(cfg.ckpt_path, cfg.paths.log_dir),
    }
    hyperparameters = recorded(cfg, values, EVALUATION_COLUMNS)
    # A number in the layout, whichever run's layout TensorBoard reads: training runs' seeds.
    columns = {**hyperparameters.columns, "seed": hyperparameters.columns.get("seed") or 0}
    return Hyperparameters(hyperparameters.values, columns, hyperparameters.varied)
