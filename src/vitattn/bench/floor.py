"""The least time a call can take on a device (its floor), and the operations it dispatches.

A call's floor in ms is the larger of its FLOPs over the device's peak FLOP/s and its least bytes
moved over the device's memory bandwidth (:mod:`vitattn.bench.devices`):

* **FLOPs** are counted by ``torch.utils.flop_counter`` (matrix products, fused attention, the
  formulas registered for the fused paths' operators) where it can count the call; where it
  cannot (FlexAttention's operator, which the count runs with ``torch.compile`` stood down, on a
  torch whose eager FlexAttention the counter cannot trace), from the mechanism's formula
  (:data:`FORWARD_FLOPS`, forward; a backward does each product's two gradient products, twice
  the forward's FLOPs);
* **least bytes** (:func:`least_bytes`): one rule for every mechanism. Whatever it computes, a
  call must read its inputs and write its output once; a forward+backward also reads the output's
  gradient and writes each input's. The mechanism's own must-move tensors are its parameters and
  the buffers it saves (Linformer's projections, Performer's and the random features' draws,
  Reformer's rotations, BigBird's random blocks), read once, and in training the gradients of
  those that learn, written once. Its intermediates are not counted: a fused kernel keeps them
  on chip; nor are buffers it does not save, which follow from its knobs (local attention's
  gather layout: FlexAttention computes the same mask from indices).

The share of the floor is ``floor_ms / measured_ms`` in percent (100%: at the device's limit).
:func:`count_dispatches` counts the operators a call dispatches (a dispatch mode: every aten
operator that reaches a kernel, views included, forward and backward) and, for compiled code, the
kernels Inductor generated that it runs (:class:`GeneratedKernelCounter`), which no dispatch mode
sees.
"""

from __future__ import annotations

import math
import sys
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vitattn.bench.devices import DeviceSpec
from vitattn.utils.dispatch import PassThroughMode

Kernel = Any  # an attention kernel: its attributes are read, by name, per mechanism


@dataclass(frozen=True)
class Floor:
    """The floor of one call: its FLOPs, least bytes and the time each would take at best."""

    flops: float
    least_bytes: float
    compute_ms: float
    memory_ms: float
    flops_source: str  # "counted" (torch.utils.flop_counter) or "formula"

    @property
    def ms(self) -> float:
        return max(self.compute_ms, self.memory_ms)

    @property
    def bound(self) -> str:
        """What limits the call at best: ``compute`` or ``memory``."""
        return "compute" if self.compute_ms >= self.memory_ms else "memory"

    def share(self, measured_ms: float | None) -> float | None:
        """The floor as a percentage of ``measured_ms``."""
        return share_of_floor(self.ms, measured_ms)


PAST_THE_FLOOR = 110.0
"""A share of the floor, in percent, above which a call is said to have run faster than its
floor allows: its device's figures (a measured peak or bandwidth too low) or its FLOPs (too many)
are wrong, and so are that run's floors. The margin is for the timing's noise."""


def past_the_floor(attention: str, seq_len: int, *shares: float | None) -> str | None:
    """One line for a call measured faster than its floor (:data:`PAST_THE_FLOOR`), else
    ``None``; ``shares`` are its forward's and forward+backward's shares of their floors."""
    highest = max((share for share in shares if share is not None), default=None)
    if highest is None or highest <= PAST_THE_FLOOR:
        return None
    return (
        f"{attention} at n={seq_len} ran at {highest:.0f}% of its floor, faster than the "
        "device's figures allow: the floors of this run are too high (a measured peak or "
        "bandwidth too low, or FLOPs counted too many)"
    )


def share_of_floor(floor_ms: float | None, measured_ms: float | None) -> float | None:
    """``floor_ms`` as a percentage of ``measured_ms`` (100: the call runs at its floor)."""
    if floor_ms is None or not measured_ms or measured_ms <= 0:
        return None
    return 100.0 * floor_ms / measured_ms


def floor_of(
    flops: float, least: float, spec: DeviceSpec, dtype: torch.dtype, source: str
) -> Floor:
    """The :class:`Floor` of a call doing ``flops`` and moving ``least`` bytes on ``spec``."""
    return Floor(flops, least, 1e3 * flops / spec.peak(dtype), 1e3 * least / spec.bandwidth, source)


def tensor_bytes(tensors: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def least_bytes(
    module: nn.Module, inputs: Sequence[torch.Tensor], output: torch.Tensor, training: bool
) -> int:
    """The fewest bytes a call of ``module`` on ``inputs`` must move (the module docstring's
    rule): inputs read and output written; in training also the output's gradient read and each
    input's written; the module's parameters and saved buffers read (each tensor once), and in
    training the gradients of its parameters that learn written."""
    saved = module.state_dict(keep_vars=True).values()
    state = list({id(t): t for t in saved if isinstance(t, torch.Tensor)}.values())
    learned = [p for p in module.parameters() if p.requires_grad]
    moved = tensor_bytes(inputs) + tensor_bytes([output]) + tensor_bytes(state)
    if training:
        moved += tensor_bytes([output]) + tensor_bytes(inputs) + tensor_bytes(learned)
    return moved


def floor_line(figures: dict[str, Any] | None) -> str:
    """The device figures the floors are taken against, as a line before a table."""
    if not figures:
        return ""
    rate = figures.get("rate", figures["dtype"])
    products = figures["dtype"] if rate == figures["dtype"] else f"{figures['dtype']} as {rate}"
    return (
        f"Floor: the larger of FLOPs / {figures['peak_tflops']:.4g} TFLOP/s ({products}) "
        f"and least bytes / {figures['bandwidth_gb_s']:.4g} GB/s, {figures['name']}: "
        f"{figures['source']} (docs/bench.md); % of floor = floor / median time.\n\n"
    )


# ---------------------------------------------------------------------- FLOPs by formula
# Forward FLOPs of one (batch element, head) of n tokens of head dimension d: the matrix
# products of the mechanism's definition, a multiply-add counted as two.


def _softmax(kernel: Kernel, n: int, d: int) -> float:
    return 4.0 * n * n * d  # q k^T and (weights) v


def _kernelised(kernel: Kernel, n: int, d: int) -> float:
    return 4.0 * n * d * d + 2.0 * n * d  # phi(k)^T v, phi(q) (that), phi(q) . sum phi(k)


def _linformer(kernel: Kernel, n: int, d: int) -> float:
    k = kernel.k
    return 4.0 * k * n * d + 4.0 * n * k * d  # E k and F v, then softmax over k keys


def _performer(kernel: Kernel, n: int, d: int) -> float:
    m = kernel.num_features
    return 4.0 * n * d * m + 4.0 * n * m * d + 2.0 * n * m  # features of q, k; linear attention


def _random_feature(kernel: Kernel, n: int, d: int) -> float:
    frequencies = kernel.num_features  # 2 D features: cos and sin of D frequencies
    return 4.0 * n * d * frequencies + 4.0 * n * (2 * frequencies) * d


def _nystrom(kernel: Kernel, n: int, d: int) -> float:
    m, iters = kernel.landmarks, kernel.pinv_iters
    kernels = 2.0 * n * m * d * 2 + 2.0 * m * m * d  # Q K~^T, Q~ K^T, Q~ K~^T
    pinv = 4 * 2.0 * m**3 * iters  # Newton-Schulz: four m x m products per iteration
    # kernel_3 V, the pseudoinverse by that (m x m by m x d), kernel_1 by the result
    return kernels + pinv + 2.0 * m * n * d + 2.0 * m * m * d + 2.0 * n * m * d


def _pairs(keys_per_query: float, n: int, d: int) -> float:
    return 4.0 * n * keys_per_query * d


def _local(kernel: Kernel, n: int, d: int) -> float:
    if kernel.window_shape == "2d":
        side = math.isqrt(n)
        keys = min(kernel.window, side) ** 2
    else:
        keys = min(kernel.window, n)
    globals_ = kernel.global_tokens or 0
    return _pairs(keys + globals_, n, d) + 4.0 * globals_ * n * d  # global queries see all


def _bigbird(kernel: Kernel, n: int, d: int) -> float:
    block, global_blocks = kernel.block, kernel.global_blocks
    keys = block * (kernel.window_blocks + kernel.num_random + global_blocks)
    return _pairs(keys, n, d) + 4.0 * global_blocks * block * n * d


def _sparse(kernel: Kernel, n: int, d: int) -> float:
    stride = kernel.stride
    rows = -(-n // stride)
    column = rows * (kernel.summary if kernel.pattern == "fixed" else 1)
    if kernel.merged:
        return _pairs(stride + column, n, d)
    row_share = kernel.row_heads / kernel.heads
    return _pairs(row_share * stride + (1 - row_share) * column, n, d)


def _reformer(kernel: Kernel, n: int, d: int) -> float:
    chunk, hashes = min(kernel.chunk, n), kernel.hashes
    hashing = 2.0 * n * d * (kernel.buckets // 2) * hashes
    return hashing + hashes * _pairs(2 * chunk, n, d)  # each chunk sees itself and the previous


FORWARD_FLOPS: dict[str, Callable[[Kernel, int, int], float]] = {
    "softmax": _softmax,
    "linear": _kernelised,
    "efficient": _kernelised,
    "taylor": _kernelised,
    "linformer": _linformer,
    "performer": _performer,
    "random_feature": _random_feature,
    "nystrom": _nystrom,
    "local": _local,
    "bigbird": _bigbird,
    "sparse": _sparse,
    "reformer": _reformer,
}
"""Forward FLOPs per (batch element, head) of each registered mechanism (docs/bench.md)."""


def formula_flops(
    attention: str, kernel: Kernel, shape: Sequence[int], training: bool
) -> float | None:
    """FLOPs of ``attention``'s kernel on q, k, v of ``shape`` (batch, heads, n, d) by its
    formula: the forward's, or three times it with the backward; ``None`` for no formula."""
    formula = FORWARD_FLOPS.get(attention)
    if formula is None:
        return None
    batch, heads, n, d = shape
    forward = batch * heads * formula(kernel, n, d)
    return 3 * forward if training else forward


# ---------------------------------------------------------------------- dispatches


class DispatchCounter(PassThroughMode):
    """Counts the operators dispatched while active (a higher-order operator is one), by name
    (``ops``) and in all (``count``); ``computing`` leaves out views (``view``, ``transpose``,
    ``expand``, ``detach``, ...), which launch nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.views = 0

    def observe(self, func: Any, out: Any) -> None:
        self.ops[str(getattr(func, "overloadpacket", func))] += 1
        self.views += bool(getattr(func, "is_view", False))

    @property
    def count(self) -> int:
        return sum(self.ops.values())

    @property
    def computing(self) -> int:
        return self.count - self.views


GENERATED = ("cpp_", "triton_")
"""How Inductor names the kernels it generates in a compiled call's wrapper module: C++ on a CPU
(``cpp_fused_mul_relu_0``), Triton on a GPU (``triton_poi_fused_...``)."""


class GeneratedKernelCounter:
    """Counts, while active, the kernels Inductor generated that compiled code runs: each call
    that a wrapper module Inductor wrote (a file in its cache folder) makes of one of its own
    kernels, a C++ function on a CPU or a Triton kernel's ``run`` on a GPU. The library calls the
    wrapper makes (``extern_kernels.mm``) reach the dispatcher and :class:`DispatchCounter`.

    Python's profiler hook, on every thread where Python allows it (3.12's
    ``threading.setprofile_all_threads``: a GPU tensor's backward runs on autograd's device
    thread); before 3.12, on this thread, where a CPU tensor's backward runs. A C++ wrapper
    (Inductor's ``cpp_wrapper``, off by default) calls its kernels unseen."""

    def __init__(self) -> None:
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        self.folder = cache_dir()
        self.names: Counter[str] = Counter()

    @property
    def count(self) -> int:
        return sum(self.names.values())

    def _generated(self, frame: Any, target: Any) -> str | None:
        """The name under which ``frame``'s module, if Inductor wrote it, holds ``target`` as
        one of its kernels."""
        if frame is None or not frame.f_code.co_filename.startswith(self.folder):
            return None
        for name, value in frame.f_globals.items():
            if value is target and name.startswith(GENERATED):
                return name
        return None

    def hook(self, frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":  # a C++ kernel, called from the wrapper
            name = self._generated(frame, arg)
        elif event == "call" and frame.f_code.co_name == "run":  # a Triton kernel's launcher
            name = self._generated(frame.f_back, frame.f_locals.get("self"))
        else:
            return
        if name is not None:
            self.names[name] += 1

    def __enter__(self) -> GeneratedKernelCounter:
        self._set(self.hook)
        return self

    def __exit__(self, *exc: object) -> None:
        self._set(None)

    @staticmethod
    def _set(hook: Any) -> None:
        every_thread = getattr(threading, "setprofile_all_threads", None)
        if every_thread is not None:
            every_thread(hook)
        else:
            sys.setprofile(hook)
            threading.setprofile(hook)


def count_dispatches(call: Callable[[], Any]) -> int:
    """How many operators ``call()`` dispatches (forward, and backward if it runs one), and
    how many kernels Inductor generated it runs where it is compiled."""
    with DispatchCounter() as counter, GeneratedKernelCounter() as generated:
        call()
    return counter.count + generated.count
