"""The hyper-parameters a run records: flat, curated names for the loggers' HPARAMS views."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vitattn.utils.config import CONFIG_DIR

MODEL_SIZE = ("embed_dim", "depth", "heads", "patch_size", "pool")
"""The model settings the HPARAMS view shows (with the token count and the MLP width)."""


def attention_knobs(attention: Mapping[str, Any] | None) -> dict[str, Any]:
    """``attention/<knob>`` for each setting of an attention config (``_target_`` and
    ``_partial_`` left out)."""
    return {f"attention/{k}": v for k, v in (attention or {}).items() if not str(k).startswith("_")}


def attention_knob_defaults(config_dir: Path = CONFIG_DIR) -> dict[str, Any]:
    """``attention/<knob>`` for every knob of every ``configs/attention`` option, with a default
    value (the first that is not ``None``): the knob columns of the HPARAMS view, the same for
    every run."""
    knobs: dict[str, Any] = {}
    for path in sorted((config_dir / "attention").glob("*.yaml")):
        config = OmegaConf.to_container(OmegaConf.load(path))
        assert isinstance(config, dict)
        for name, value in attention_knobs(config).items():
            if knobs.get(name) is None:
                knobs[name] = value
    return knobs


def model_size(net: Mapping[str, Any]) -> dict[str, Any]:
    """``model/<size>`` of a network config: width, depth, heads, patch, pooling, tokens, MLP."""
    image, patch = int(net.get("image_size", 32)), int(net.get("patch_size", 1))
    tokens = (image // patch) ** 2 + (1 if net.get("pool") == "cls" else 0)
    mlp = net.get("mlp_dim") or round(net.get("embed_dim", 0) * net.get("mlp_ratio", 0))
    sizes = {f"model/{k}": net.get(k) for k in MODEL_SIZE}
    return {**sizes, "model/tokens": tokens, "model/mlp_dim": mlp}


def training_hyperparameters(
    cfg: DictConfig, choices: Mapping[str, str | None], params: int
) -> dict[str, Any]:
    """What the HPARAMS view compares a training run by: the attention and its knobs, the model's
    size and parameters, learning rate, batch size, seed and precision (no ``_target_``, paths or
    URLs; GFLOP per image is a result)."""
    net = OmegaConf.to_container(cfg.model, resolve=True)
    assert isinstance(net, dict)
    return {
        "attention": choices.get("attention"),
        **attention_knobs(net.get("attention")),
        "model": choices.get("model"),
        **model_size(net),
        "params": params,
        "optimizer": choices.get("optimizer"),
        "optimizer/lr": cfg.optimizer.get("lr"),
        "optimizer/weight_decay": cfg.optimizer.get("weight_decay"),
        "data/batch_size": cfg.data.get("batch_size"),
        "seed": cfg.get("seed"),
        "trainer/precision": str(cfg.trainer.get("precision")),
    }


def finetuning_hyperparameters(
    cfg: DictConfig,
    data_cfg: DictConfig,
    net: Mapping[str, Any],
    lora: Mapping[str, Any],
    attention: str | None,
    counts: Any,
) -> dict[str, Any]:
    """What the HPARAMS view compares a fine-tuning run by: the base network's attention and
    size, the adapters' settings, the data variant, learning rate, batch size, seed and the
    parameter counts."""
    return {
        "attention": attention,
        **attention_knobs(net.get("attention")),
        **model_size(net),
        **{f"lora/{k}": v for k, v in lora.items()},
        "data/shift": data_cfg.get("shift"),
        "params": counts.total,
        "params/trainable": counts.trainable,
        "optimizer/lr": cfg.optimizer.get("lr"),
        "data/batch_size": data_cfg.get("batch_size"),
        "seed": cfg.get("seed"),
    }
