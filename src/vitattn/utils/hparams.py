"""Hyper-parameters for the loggers, and for TensorBoard's HPARAMS view with our metric tags."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

HPARAM_METRICS = ("val/acc", "val/loss", "test/acc", "train/images_per_sec")
"""Scalars the HPARAMS view shows next to each run's hyperparameters."""

TRAIN_GROUPS = ("attention", "model", "optimizer", "scheduler", "data", "trainer", "module")
"""Config groups whose settings a training run records."""


def flatten(tree: Mapping[str, Any], separator: str = "/", prefix: str = "") -> dict[str, Any]:
    """``{"model": {"heads": 8}}`` to ``{"model/heads": 8}``; values other than numbers,
    strings, booleans and ``None`` (lists, say) become strings."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, separator, f"{name}{separator}"))
        elif value is None or isinstance(value, bool | int | float | str):
            flat[name] = value
        else:
            flat[name] = str(value)
    return flat


def training_hyperparameters(
    cfg: DictConfig, choices: Mapping[str, str | None], params: int
) -> dict[str, Any]:
    """The flat settings a training run records: the options chosen for ``attention`` and
    ``model``, the parameter count, the seed, and every setting of :data:`TRAIN_GROUPS`."""
    knobs = {
        g: OmegaConf.to_container(cfg[g], resolve=True) if cfg.get(g) else None
        for g in TRAIN_GROUPS
    }
    # The model's attention and the module's net/optimizer/scheduler repeat groups listed above.
    knobs["model"] = {k: v for k, v in knobs["model"].items() if k != "attention"}
    knobs["module"] = {k: v for k, v in knobs["module"].items() if not isinstance(v, dict)}
    return {
        "attention": choices.get("attention"),
        "model": choices.get("model"),
        "params": params,
        "seed": cfg.get("seed"),
        **{k: v for k, v in flatten(knobs).items() if not k.endswith("_partial_")},
    }


def finetuning_hyperparameters(
    cfg: DictConfig,
    data_cfg: DictConfig,
    net: Mapping[str, Any],
    lora: Mapping[str, Any],
    attention: str | None,
    counts: Any,
) -> dict[str, Any]:
    """The flat settings a fine-tuning run records: the base network's (``net``, from its
    checkpoint), the adapters', the data settings used (``data_cfg``, those taken from the base
    filled in), the optimizer's, and the parameter counts."""
    network = {k: v for k, v in net.items() if k not in ("attention", "_target_")}
    groups = {
        "data": OmegaConf.to_container(data_cfg, resolve=True),
        "optimizer": OmegaConf.to_container(cfg.optimizer, resolve=True),
    }
    return {
        "attention": attention,
        "params": counts.total,
        "params/trainable": counts.trainable,
        "seed": cfg.get("seed"),
        "ckpt_path": str(cfg.ckpt_path),
        **flatten({"lora": dict(lora), "model": network, **groups}),
    }


def log_hyperparameters(loggers: Iterable[Any], hparams: Mapping[str, Any]) -> None:
    """Record ``hparams`` (nested) with every logger.

    Lightning's TensorBoardLogger writes the HPARAMS-plugin summary only together with metric
    values, which would put a fake point on the curves; here the summary names the metric tags
    and TensorBoard reads their values from the run's own scalars.
    """
    from lightning.pytorch.loggers import TensorBoardLogger
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
