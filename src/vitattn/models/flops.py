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

from vitattn.attention.common import autotune
from vitattn.utils.datasheets import datasheet
from vitattn.utils.recompiles import eager_only

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


def count_gflop(call: Callable[[], Any], quiet: bool = False) -> float | None:
    """GFLOP of ``call()`` (matrix products, convolutions and fused attention, forward and any
    backward it runs); ``None`` (and a warning, unless ``quiet``) where counting fails."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        counter = FlopCounterMode(display=False, custom_mapping=cpu_attention_formulas())
        with eager_only(), counter, autotune.untimed():  # count the call, not impl=auto's timing
            call()
        return counter.get_total_flops() / 1e9
    except Exception as error:  # a kernel the counter cannot trace: the run goes on without it
        if not quiet:
            log.warning("could not count FLOPs (%s: %s)", type(error).__name__, error)
        return None


def gflop_per_image(net: nn.Module, example: torch.Tensor) -> float | None:
    """GFLOP of one forward+backward pass of ``net`` on one image shaped like ``example``
    (``(1, C, H, W)``), counted on a copy so that ``net``'s state (a counter of random-feature
    redraws, say) is untouched; ``None`` (and a warning) where counting fails.

    The copy is counted on ``example``'s device, wherever ``net`` lies: a Lightning fit on a GPU
    hands its network back on the CPU, and the FLOPs wanted are those of the device the example
    names (whose kernels, e.g. ``impl=auto``'s choice, may differ from the CPU's)."""
    try:
        probe = copy.deepcopy(net).to(example.device).train()
    except Exception as error:
        log.warning("could not count FLOPs (%s: %s)", type(error).__name__, error)
        return None

    def forward_backward() -> None:
        probe(example.clone()).float().sum().backward()

    # In a fork of torch's generators: a training forward of a kernel that redraws (performer,
    # random_feature, reformer) draws from them, and the run's stream must not depend on it.
    cuda = [example.device.index or 0] if example.device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        return count_gflop(forward_backward)


def sixteen_bit_dtype(precision: str) -> str | None:
    """The dtype a Lightning ``precision`` ("bf16-mixed", "16-mixed", "bf16-true", "32-true")
    multiplies in on the tensor cores' 16-bit path: ``bfloat16``, ``float16``, or ``None``."""
    if precision.startswith("bf16"):
        return "bfloat16"
    if precision.startswith("16"):
        return "float16"
    return None


def peak_tflops(device: torch.device, precision: str) -> float | None:
    """The dense 16-bit tensor-core peak of ``device`` in ``precision``'s dtype, from its
    datasheet (:mod:`vitattn.utils.datasheets`, the table the bench's floors read too), or
    ``None`` where there is none to compare with: a CPU, an unlisted GPU, a precision that does
    not run on the tensor cores' 16-bit path, or a part without a path in that dtype (bf16 on a
    T4 or a V100)."""
    dtype = sixteen_bit_dtype(precision)
    if device.type != "cuda" or dtype is None:
        return None
    sheet = datasheet(torch.cuda.get_device_name(device))
    return None if sheet is None else sheet.tflops.get(dtype)


def model_flops_utilisation(
    gflop_per_image: float | None,
    images_per_sec: float | None,
    device: torch.device,
    precision: str,
) -> float | None:
    """MFU: the model FLOPs achieved per second over the device's peak (:func:`peak_tflops`)."""
    peak = peak_tflops(device, precision)
    if not (peak and gflop_per_image and images_per_sec):
        return None
    return gflop_per_image * 1e9 * images_per_sec / (peak * 1e12)
