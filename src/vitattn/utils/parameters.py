"""The optimizer's parameter groups of a network: one definition, used by the LightningModule
that trains it and by the resume check that reads a checkpoint's optimizer state against a
network built on the meta device (no memory)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn


def parameter_groups(net: nn.Module) -> list[dict[str, Any]]:
    """Weight decay on matrices only: biases, norms and embeddings are not decayed (timm). Each
    group is ``params`` (in ``net.named_parameters()`` order), its ``name`` and, for the
    ``no_decay`` group, ``weight_decay=0``; parameters that do not require a gradient are left
    out."""
    skip = getattr(net, "no_weight_decay", set)()
    decay, no_decay = [], []
    for name, param in net.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim <= 1 or name in skip else decay).append(param)
    # The names label the learning-rate curves (train/lr/decay, train/lr/no_decay; one
    # train/lr while they are equal: vitattn.training.logger.merge_equal_learning_rates).
    return [
        {"params": decay, "name": "decay"},
        {"params": no_decay, "weight_decay": 0.0, "name": "no_decay"},
    ]


def parameter_names(net: nn.Module, prefix: str = "") -> dict[int, str]:
    """The name of each parameter of ``net`` by ``id``, with ``prefix`` (``net.``)."""
    return {id(param): f"{prefix}{name}" for name, param in net.named_parameters()}
