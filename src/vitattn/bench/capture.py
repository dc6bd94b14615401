"""q, k, v with the structure of real images: those of every attention layer of a trained
checkpoint (:func:`vitattn.attention.common.probe.capture_qkv` on its network), or CIFAR-10 pixel
tokens with their 2-D positions under random projections (no checkpoint needed)."""

from __future__ import annotations

from typing import Any

import hydra
import torch
from omegaconf import DictConfig

from vitattn.attention.common.probe import QKV, attention_layers, capture_qkv
from vitattn.errors import ConfigError
from vitattn.utils import checks


def real_images(data_cfg: DictConfig, count: int) -> torch.Tensor:
    """The first ``count`` test images, as the model sees them in evaluation."""
    return test_images(hydra.utils.instantiate(data_cfg), count)


def test_images(datamodule: Any, count: int) -> torch.Tensor:
    """The first ``count`` test images of ``datamodule``, as the model sees them."""
    checks.integer("images", count)
    datamodule.prepare_data()
    datamodule.setup("test")
    images, labels = datamodule.test_set.tensors
    batch = (images[:count], labels[:count])
    return datamodule.on_after_batch_transfer(batch, 0)[0]


def checkpoint_qkv(ckpt_path: str, data_cfg: DictConfig, images: int) -> list[QKV]:
    """Load ``ckpt_path`` (a ``vitattn-train`` checkpoint) and capture q, k, v on real images,
    read with the data settings it was trained with where ``data_cfg`` leaves them ``null``."""
    # Imported here, not above: they import Lightning, which takes seconds, and only the modes
    # that read a checkpoint need them.
    from vitattn.data.as_trained import as_trained
    from vitattn.loading import load_trained

    trained = load_trained(ckpt_path)
    module = trained.module
    if not attention_layers(module.net):
        raise ConfigError(f"ckpt_path={ckpt_path}: its network has no attention layers to inspect")
    datamodule = hydra.utils.instantiate(as_trained(data_cfg, trained.data_settings))
    module.check_data(datamodule, checkpoint=ckpt_path)  # a matmul's shapes refused it after
    batch = test_images(datamodule, images)
    return capture_qkv(module.net, batch.to(next(module.parameters()).device))


POSITION_DIM = 32
"""Width of the 2-D sin-cos position code of each pixel token in :func:`pixel_qkv`."""


def pixel_qkv(
    data_cfg: DictConfig, images: int, heads: int, head_dim: int, *, seed: int = 0
) -> QKV:
    """q, k, v of ``images`` test images, one token per pixel (n = 1024): each token is its
    normalised RGB value next to a 2-D sin-cos code of its position, standardised, and projected
    by random Gaussian matrices (one per q, k, v; entries N(0, 1/width)), so q, k, v have unit
    variance per coordinate and the smoothness of images: neighbouring pixels' queries and keys
    are alike, as in a pixel-level model's first layer. ``(images, heads, 1024, head_dim)``."""
    from vitattn.models.vit import sincos_2d_position_embedding

    pixels = real_images(data_cfg, images).float()  # (B, C, 32, 32)
    batch, _, side, _ = pixels.shape
    colours = pixels.flatten(2).transpose(1, 2)  # (B, n, C)
    positions = sincos_2d_position_embedding(side, POSITION_DIM).reshape(1, side * side, -1)
    tokens = torch.cat([colours, positions.expand(batch, -1, -1)], dim=-1)
    tokens = (tokens - tokens.mean(dim=(0, 1))) / tokens.std(dim=(0, 1)).clamp_min(1e-6)
    generator = torch.Generator().manual_seed(seed)
    width = tokens.shape[-1]

    def project() -> torch.Tensor:
        weights = torch.randn(width, heads * head_dim, generator=generator) / width**0.5
        return (tokens @ weights).view(batch, side * side, heads, head_dim).transpose(1, 2)

    return project(), project(), project()
