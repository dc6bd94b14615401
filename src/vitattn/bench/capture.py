"""q, k, v of every attention layer of a trained checkpoint, on real CIFAR-10 images.

A forward pre-hook on each block's kernel (``block.attn.kernel``, a
:class:`~vitattn.attention.common.multihead.MultiHeadAttention`'s mechanism) receives exactly the
``(q, k, v)`` the model attends with, after its learned projections.
"""

from __future__ import annotations

from typing import Any

import hydra
import torch
from omegaconf import DictConfig

from vitattn.attention.common.multihead import MultiHeadAttention
from vitattn.utils.errors import ConfigError

QKV = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


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


@torch.no_grad()
def capture_qkv(net: torch.nn.Module, images: torch.Tensor) -> list[QKV]:
    """``[(q, k, v) per layer]``, each ``(images, heads, tokens, head_dim)``, in layer order."""
    layers = [m for m in net.modules() if isinstance(m, MultiHeadAttention)]
    if not layers:
        raise ConfigError("the checkpoint's network has no MultiHeadAttention layers to inspect")
    captured: dict[int, QKV] = {}

    def hook_for(index: int) -> Any:
        def hook(_module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            q, k, v = args[:3]
            captured[index] = (q.detach().clone(), k.detach().clone(), v.detach().clone())

        return hook

    handles = [
        layer.kernel.register_forward_pre_hook(hook_for(i)) for i, layer in enumerate(layers)
    ]
    try:
        net.eval()
        net(images)
    finally:
        for handle in handles:
            handle.remove()
    return [captured[i] for i in range(len(layers))]


def checkpoint_qkv(ckpt_path: str, data_cfg: DictConfig, images: int) -> list[QKV]:
    """Load ``ckpt_path`` (a ``vitattn-train`` checkpoint) and capture q, k, v on real images,
    read with the data settings it was trained with where ``data_cfg`` leaves them ``null``."""
    # Imported here, not above: they import Lightning, which takes seconds, and only the modes
    # that read a checkpoint need them.
    from vitattn.data.as_trained import as_trained
    from vitattn.loading import load_classifier

    module = load_classifier(ckpt_path)
    batch = real_images(as_trained(data_cfg, ckpt_path), images)
    return capture_qkv(module.net, batch.to(next(module.parameters()).device))
