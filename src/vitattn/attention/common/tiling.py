"""Tiles over (heads, tokens) for kernels that walk long sequences in cache-sized pieces.

The feature-map kernels (``performer``, ``random_feature``) with ``impl: chunked`` never build
their (n x features) matrices whole: they loop over tiles of a few MB, write each tile's features
into one reused buffer, and recompute them in the backward pass. On a CPU this keeps the
element-wise work in cache and allocates no large tensor (a fresh tensor above glibc's 32 MB
mmap threshold is new zeroed pages every time); on any device the memory saved for backward is
O(n d) instead of O(n features).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import Any

import torch

TILE_ELEMENTS = 1 << 21
"""Elements of one tile's (heads, rows, features) block on a CPU: 8 MB in fp32."""

GPU_TILE_MEMORY = 0.02
"""Default ``attention.tile_memory`` (performer, random_feature, local, bigbird): the share of a
GPU's free memory that one tile's block may take; 0 keeps the CPU's cache-sized tiles, and a CPU
ignores it. The mechanisms compute the same function either way. A GPU has no cache to fit:
what costs there is a launch per small tile, so the tile is as large as this budget allows (a
report-scale layer, batch 256 x 8 heads x 1024 tokens x 256 features, is a couple of tiles on a
80 GB GPU instead of hundreds)."""


@functools.cache
def _free_bytes(index: int) -> int:
    """Free memory of CUDA device ``index`` when first asked (a run's first forward), cached:
    asking at every call would cost a driver call per layer, and the answer would shrink as the
    run's own activations fill the memory."""
    return torch.cuda.mem_get_info(index)[0]


def memory_budget(device: torch.device, tile_memory: float, cpu_bytes: int) -> int:
    """Bytes one tile's block may take on ``device``: ``cpu_bytes`` (cache-sized) on a CPU, or
    where ``tile_memory`` is 0; on a GPU ``tile_memory`` of its free memory, never less."""
    if device.type != "cuda" or tile_memory <= 0:
        return cpu_bytes
    index = device.index if device.index is not None else torch.cuda.current_device()
    return max(cpu_bytes, int(tile_memory * _free_bytes(index)))


def tile_budget(device: torch.device, tile_memory: float, owner: str) -> int:
    """Elements (fp32) of one tile's block for ``owner`` (a mechanism's name) on ``device``; the
    first call per mechanism and device logs the choice."""
    budget = memory_budget(device, tile_memory, TILE_ELEMENTS * 4) // 4
    log_budget(owner, device, tile_memory, budget * 4)
    return budget


@functools.cache
def logged_budgets() -> set[tuple[str, str]]:
    """The (mechanism, device) pairs whose tiles this process has logged (:func:`log_budget`)."""
    return set()


@torch.compiler.assume_constant_result
def log_budget(owner: str, device: torch.device, tile_memory: float, budget_bytes: int) -> None:
    """Say once per mechanism and device how large its tiles are, and why.

    Under ``torch.compile`` this runs while the graph is traced, not in it: dynamo would trace
    into :func:`logged_budgets` (a fresh set each time) and break the graph to log."""
    if (owner, str(device)) in logged_budgets():
        return
    logged_budgets().add((owner, str(device)))
    why = (
        f"attention.tile_memory={tile_memory:g} of the GPU's free memory"
        if device.type == "cuda" and tile_memory > 0
        else "cache-sized"
    )
    logging.getLogger("vitattn.attention").info(
        "%s on %s: tiles of up to %.0f MB (%s)", owner, device, budget_bytes / 2**20, why
    )


def tiles(batch: int, n: int, features: int, budget: int) -> list[tuple[slice, slice]]:
    """``(heads, rows)`` tiles whose feature blocks hold at most about ``budget`` elements: whole
    sequences of a group of heads while one sequence fits (contiguous slices, no online
    maximum), otherwise chunks of rows of one head at a time."""
    if n * features <= budget:
        group = max(1, budget // (n * features))
        return [(slice(b, min(b + group, batch)), slice(0, n)) for b in range(0, batch, group)]
    rows = max(1, budget // features)
    return [
        (slice(b, b + 1), slice(r, min(r + rows, n)))
        for b in range(batch)
        for r in range(0, n, rows)
    ]


def in_block(block: torch.Tensor, heads: slice, rows: slice, features: int) -> torch.Tensor:
    """A contiguous ``(heads, rows, features)`` view at the start of a reused buffer."""
    shape = (heads.stop - heads.start, rows.stop - rows.start, features)
    return block[: math.prod(shape)].view(shape)


def with_column(x: torch.Tensor, column: torch.Tensor | float) -> torch.Tensor:
    """``x`` with one more last-dimension entry: ``column`` (a tensor or a constant: then one
    padding, one dispatch instead of a fill and a concatenation)."""
    if not isinstance(column, torch.Tensor):
        return torch.nn.functional.pad(x, (0, 1), value=column)
    return torch.cat([x, column], dim=-1)


def block_size(layout: list[tuple[slice, slice]], features: int) -> int:
    """Elements of a buffer that holds the block of any tile of ``layout``."""
    return max(
        (heads.stop - heads.start) * (rows.stop - rows.start) * features for heads, rows in layout
    )


def apply_per_head(
    function: type[torch.autograd.Function],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    weights: torch.Tensor,
    *settings: Any,
) -> torch.Tensor:
    """``function.apply(q, k, v, weights, *settings)`` on ``(batch * heads, n, d)`` views of
    ``(batch, heads, n, d)`` q, k, v, with the ``(heads, rows, d)`` per-head ``weights``
    repeated for every batch element; the output comes back as ``(batch, heads, n, d)``."""
    batch, heads, n, d = q.shape
    flat = batch * heads
    per_head = weights.unsqueeze(0).expand(batch, -1, -1, -1).reshape(flat, *weights.shape[1:])
    out = function.apply(
        q.reshape(flat, n, d),
        k.reshape(flat, n, d),
        v.reshape(flat, n, v.shape[-1]),
        per_head,
        *settings,
    )
    return out.reshape(batch, heads, n, v.shape[-1])


def backward_in_fp32(
    backward: Callable[[Any, torch.Tensor], tuple[torch.Tensor | None, ...]],
) -> Callable[[Any, torch.Tensor], tuple[torch.Tensor | None, ...]]:
    """Run a Function's ``backward`` with autocast off. The forward computes in fp32; autograd
    may call the backward inside the caller's autocast region (``loss.backward()`` under
    ``torch.autocast``), where its matrix products would silently drop to bf16/fp16."""

    @functools.wraps(backward)
    def wrapper(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        with torch.autocast(device_type=grad_out.device.type, enabled=False):
            return backward(ctx, grad_out)

    return wrapper
