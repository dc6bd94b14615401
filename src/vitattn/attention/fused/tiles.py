"""What the fused kernels share: strided tiles of a head, stacks of small matrices, block sizes,
the split of a reduction over the sequence, and ``tl.dot``'s precision.

Whether the kernels are compiled for a GPU or interpreted on a CPU is decided when Triton is
imported (``TRITON_INTERPRET``): :data:`INTERPRETED`.
"""

# ruff: noqa: N803 (Triton's convention: pointers and sizes in capitals, as in its tutorials)
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

INTERPRETED: bool = bool(triton.knobs.runtime.interpret)
"""Whether these kernels run in Triton's interpreter (CPU tensors) rather than on a GPU."""

PROGRAMS_PER_SM = 4
"""Programs the reductions over n aim for per streaming multiprocessor."""

SMALL_SHARED_MEMORY = 128 * 1024
"""Bytes of shared memory per block below which a GPU gets half the rows per block: the
operands of ``tl.dot`` are staged there, and at 64 rows the largest kernels need up to 96 KiB,
more than a T4 (64 KiB) or an L4 (99 KiB) gives; at 32 rows they need at most 56 KiB (compiled
ahead of time for sm_75)."""

INTERPRETER_SPLITS = 2
"""Splits of a reduction over n in the interpreter, whose programs run one after another: two,
so that a CPU's tests (a few blocks of rows) merge partial sums and carry a sum over blocks
within a split, as a GPU's do."""


@triton.jit
def program_head(HEADS):
    """(index, b, h): the batch-head this program works on, by the grid's first axis."""
    head = tl.program_id(0)
    return head, head // HEADS, head % HEADS


@triton.jit
def split_span(ROWS_PER_SPLIT, N):
    """(start, end): the rows of this program's split, by the grid's second axis."""
    start = tl.program_id(1) * ROWS_PER_SPLIT
    return start, tl.minimum(start + ROWS_PER_SPLIT, N)


@triton.jit
def tile(PTR, b, h, n, N, cols, WIDTH, s_b, s_h, s_n, s_d):
    """Rows ``n`` and columns ``cols`` of head (b, h) of a (batch, heads, N, WIDTH) tensor of any
    strides, in fp32; zero outside it."""
    mask = (n < N)[:, None] & (cols < WIDTH)[None, :]
    where = PTR + b * s_b + h * s_h + n[:, None] * s_n + cols[None, :] * s_d
    return tl.load(where, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def put_tile(PTR, value, b, h, n, N, cols, WIDTH, s_b, s_h, s_n, s_d):
    """:func:`tile`'s inverse: ``value`` written there in the tensor's dtype."""
    mask = (n < N)[:, None] & (cols < WIDTH)[None, :]
    where = PTR + b * s_b + h * s_h + n[:, None] * s_n + cols[None, :] * s_d
    tl.store(where, value.to(PTR.dtype.element_ty), mask=mask)


@triton.jit
def matrix(PTR, index, cols, vcols, D, DV):
    """The ``index``-th (D, DV) matrix of a contiguous fp32 stack, zero-padded to the block."""
    mask = (cols < D)[:, None] & (vcols < DV)[None, :]
    return tl.load(PTR + index * D * DV + cols[:, None] * DV + vcols[None, :], mask=mask, other=0.0)


@triton.jit
def put_matrix(PTR, value, index, cols, vcols, D, DV):
    """:func:`matrix`'s inverse."""
    mask = (cols < D)[:, None] & (vcols < DV)[None, :]
    tl.store(PTR + index * D * DV + cols[:, None] * DV + vcols[None, :], value, mask=mask)


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` of positive ints, on the host: ``triton.cdiv`` is a constexpr function
    there, microseconds a call, and a forward+backward makes a dozen."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The least power of two of at least ``n`` (a positive int), on the host (see :func:`cdiv`)."""
    return 1 << (n - 1).bit_length()


WARPS_AND_STAGES = ((4, 3), (8, 3), (4, 2), (8, 2))
"""The (warps, pipeline stages) :func:`tuned` tries on a GPU; the first is Triton's default.
At d = 64 and four warps some kernels spill registers that eight do not (docs/check.md); which
is faster depends on the GPU and the shape."""


TUNING_MS = (5, 20)
"""Warm-up and measured milliseconds per configuration when :func:`tuned` times them (Triton's
own default, 25 and 100, would add seconds to every new shape)."""


ROW_HALVES = (1, 2)
"""The steps through a split's rows that :func:`tuned` tries with ``halves``: the host's
``BLOCK_N`` rows at a time, or half as many, whose tiles take fewer registers per thread (more
warps per multiprocessor, no spills: docs/check.md)."""


def steps_of_16_rows_or_more(
    configs: list[triton.Config], named_args: dict[str, Any], **constants: Any
) -> list[triton.Config]:
    """The configurations whose step through the rows (``BLOCK_N // HALVES``) is at least
    ``tl.dot``'s least side, 16: :func:`tuned`'s pruning with ``halves`` (a GPU of little shared
    memory takes 32 rows or fewer per block, :func:`blocks`)."""
    return [c for c in configs if constants["BLOCK_N"] // c.kwargs.get("HALVES", 1) >= 16]


def configurations(halves: bool, interpreted: bool) -> list[triton.Config]:
    """The configurations :func:`tuned` tries, Triton's default first: on a GPU each of
    :data:`WARPS_AND_STAGES` (and with ``halves`` at each of :data:`ROW_HALVES`); in the
    interpreter, which runs no warps or stages, only the first."""
    pairs = WARPS_AND_STAGES[:1] if interpreted else WARPS_AND_STAGES
    steps = ROW_HALVES if halves and not interpreted else ROW_HALVES[:1]
    return [
        triton.Config({"HALVES": step} if halves else {}, num_warps=warps, num_stages=stages)
        for step in steps
        for warps, stages in pairs
    ]


def tuned(*key: str, halves: bool = False) -> Callable[[Any], Any]:
    """``triton.autotune`` over :data:`WARPS_AND_STAGES` (and with ``halves`` over
    :data:`ROW_HALVES`, the kernel's ``HALVES``), once per value of the arguments named ``key``
    (and the tensors' dtypes): on a GPU each new key times every configuration at its first call
    (those that do not fit the GPU's registers or shared memory are passed over), then launches
    the fastest; the timings are kept in Triton's cache on disk, so a later process of the same
    kernels and key does not time them again. Block sizes stay the host's, which sizes the
    buffers by them (``HALVES`` only shortens the step of a loop over rows within them); the
    kernels only write their outputs, so a timing run changes nothing. In the interpreter only
    the first configuration, and no timing."""
    configs = configurations(halves, INTERPRETED)
    warmup, rep = TUNING_MS

    def bench(call: Callable[[], Any], quantiles: tuple[float, ...]) -> Any:
        from triton.testing import do_bench

        return do_bench(call, warmup=warmup, rep=rep, quantiles=quantiles)

    return triton.autotune(
        configs=configs,
        key=list(key),
        do_bench=bench,
        cache_results=True,
        prune_configs_by={"early_config_prune": steps_of_16_rows_or_more} if halves else None,
    )


def blocks(d: int, dv: int, device: torch.device, widest: int = 0) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_D, BLOCK_DV): feature blocks are powers of two of at least 16 (the least
    side of ``tl.dot``); rows per block shrink as the widest block (or ``widest``) widens,
    keeping a tile's registers bounded, and halve on a GPU of little shared memory
    (:data:`SMALL_SHARED_MEMORY`)."""
    block_d = max(16, next_power_of_2(d))
    block_dv = max(16, next_power_of_2(dv))
    width = max(block_d, block_dv, widest)
    block_n = 64 if width <= 64 else 32 if width <= 128 else 16
    if device.type == "cuda" and _shared_memory(device.index or 0) < SMALL_SHARED_MEMORY:
        block_n = max(16, block_n // 2)
    return block_n, block_d, block_dv


@functools.cache
def _shared_memory(index: int) -> int:
    return torch.cuda.get_device_properties(index).shared_memory_per_block_optin


@functools.cache
def _multiprocessors(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def split_rows(n: int, heads: int, block_n: int, device: torch.device) -> tuple[int, int]:
    """(splits, rows per split) of a reduction over ``n`` rows for ``heads`` batch-heads: enough
    programs to fill the GPU (:data:`PROGRAMS_PER_SM` per multiprocessor), each a whole number of
    blocks; :data:`INTERPRETER_SPLITS` in the interpreter."""
    row_blocks = cdiv(n, block_n)
    if device.type == "cuda":
        wanted = PROGRAMS_PER_SM * _multiprocessors(device.index or 0)
        splits = max(1, min(row_blocks, cdiv(wanted, heads)))
    else:
        splits = min(row_blocks, INTERPRETER_SPLITS)
    rows_per_split = cdiv(row_blocks, splits) * block_n
    return cdiv(n, rows_per_split), rows_per_split


def precision(device: torch.device) -> str:
    """``tl.dot``'s precision for fp32 values on ``device`` under torch's float32 matmul
    precision: TF32 where torch would use it (not ``highest``, compute capability 8 or more)."""
    if torch.get_float32_matmul_precision() == "highest" or INTERPRETED:
        return "ieee"
    major, _ = torch.cuda.get_device_capability(device)
    return "tf32" if major >= 8 else "ieee"


def strides(x: torch.Tensor) -> tuple[int, int, int, int]:
    """A (batch, heads, n, d) tensor's strides, the kernels' arguments after its pointer."""
    b, h, n, d = x.stride()
    return b, h, n, d
