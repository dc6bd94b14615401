"""q, k, v of every attention layer of a trained checkpoint, on real CIFAR-10 images
(:func:`vitattn.attention.common.probe.capture_qkv` on the checkpoint's network)."""

from __future__ import annotations

from typing import Any

import hydra
import torch
from omegaconf import DictConfig

from vitattn.attention.common.probe import QKV, attention_layers, capture_qkv
from vitattn.utils.errors import ConfigError


def real_images(data_cfg: DictConfig, count: int) -> torch.Tensor:
    """The first ``count`` test images, as the model sees them in evaluation."""
    datamodule: Any = hydra.utils.instantiate(data_cfg)
    datamodule.prepare_data()
    datamodule.setup("test")
    images, labels = datamodule.test_set.tensors
    if count < 1:
        raise ConfigError(f"images={count} is not valid; choose a positive number of images")
    batch = (images[:count], labels[:count])
    return datamodule.on_after_batch_transfer(batch, 0)[0]


def checkpoint_qkv(ckpt_path: str, data_cfg: DictConfig, images: int) -> list[QKV]:
    """Load ``ckpt_path`` (a ``vitattn-train`` checkpoint) and capture q, k, v on real images,
    read with the data settings it was trained with where ``data_cfg`` leaves them ``null``."""
    # Imported here, not above: they import Lightning, which takes seconds, and only the modes
    # that read a checkpoint need them.
    from vitattn.data.as_trained import as_trained
    from vitattn.loading import load_classifier

    module = load_classifier(ckpt_path)
    if not attention_layers(module.net):
        raise ConfigError(f"ckpt_path={ckpt_path}: its network has no attention layers to inspect")
    batch = real_images(as_trained(data_cfg, ckpt_path), images)
    return capture_qkv(module.net, batch.to(next(module.parameters()).device))
