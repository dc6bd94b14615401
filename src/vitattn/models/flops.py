"""The cost of a training step in floating-point operations, counted by PyTorch itself.

``torch.utils.flop_counter.FlopCounterMode`` counts the FLOPs of every matrix product,
convolution and fused attention call of one forward and backward pass (a multiply-add counts
two). Element-wise work (softmax, exponentials, normalisations) is not counted, as in the usual
model-FLOPs figures; at short sequences the "efficient" mechanisms can cost more FLOPs than
softmax, and this number shows it.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

log = logging.getLogger(__name__)


Shape = tuple[int, ...]


def _cpu_sdpa_forward(q: Shape, k: Shape, v: Shape, *_: Any, **__: Any) -> int:
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(q, k, v)


def _cpu_sdpa_backward(grad: Shape, q: Shape, k: Shape, v: Shape, *_: Any, **__: Any) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad, q, k, v)


def cpu_attention_formulas() -> dict[Any, Callable[..., int]]:
    """Formulas for the CPU's fused attention kernel, which the counter does not know (it counts
    the CUDA ones): the same FLOPs as on a GPU, so figures compare across devices."""
    formulas: dict[Any, Callable[..., int]] = {}
    for name, formula in (
        ("_scaled_dot_product_flash_attention_for_cpu", _cpu_sdpa_forward),
        ("_scaled_dot_product_flash_attention_for_cpu_backward", _cpu_sdpa_backward),
    ):
        op = getattr(torch.ops.aten, name, None)
        if op is not None:
            formulas[op] = formula
    return formulas


def gflop_per_image(net: nn.Module, example: torch.Tensor) -> float | None:
    """GFLOP of one forward+backward pass of ``net`` on one image shaped like ``example``
    (``(1, C, H, W)``), counted on a copy so that ``net``'s state (a counter of random-feature
    redraws, say) is untouched; ``None`` (and a warning) where counting fails."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        probe = copy.deepcopy(net).train()
        counter = FlopCounterMode(display=False, custom_mapping=cpu_attention_formulas())
        with counter:
            out = probe(example.clone())
            out.float().sum().backward()
        return counter.get_total_flops() / 1e9
    except Exception as error:  # a kernel the counter cannot trace: the run goes on without it
        log.warning("could not count FLOPs (%s: %s)", type(error).__name__, error)
        return None
