"""Gathering and masking shared by the sparse kernels (local, bigbird, sparse, reformer).

The sparse kernels never build the n x n score matrix. They gather, for each block of queries,
the few keys it may attend to (a band, a set of key blocks, a row or column of the image, a chunk
of hash-sorted tokens), score the block against them, and mask the gathered slots that are not
allowed with an additive bias. The bias of a masked slot is :data:`MASKED`, a large *finite*
negative number, so that a row whose every slot is masked (only ever a padding query, whose
output is discarded) gives finite weights instead of the NaN of ``-inf - (-inf)``, and no NaN
reaches the gradients.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from vitattn.attention.common.tiling import log_budget, memory_budget

MASKED = -1e9
"""Additive score bias of a slot a query may not attend to."""

GROUP_BYTES = 8 << 20
"""Bytes of one group's score tensor in :func:`in_block_groups`: a few MB stays in cache, and
stays under glibc's mmap threshold (32 MB), above which every fresh tensor is new zeroed pages."""


def pad_tokens(x: torch.Tensor, before: int = 0, after: int = 0) -> torch.Tensor:
    """Zero-pad ``(..., tokens, dim)`` along the token axis."""
    if before == 0 and after == 0:
        return x
    return F.pad(x, (0, 0, before, after))


def softmax_parts(scores: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """One softmax over the concatenation of several score blocks (same shape but the last axis),
    split back into the blocks: the weights of a query over the union of its key sets."""
    if len(scores) == 1:
        return [scores[0].softmax(dim=-1)]
    sizes = [s.shape[-1] for s in scores]
    shape = torch.broadcast_shapes(*(s.shape[:-1] for s in scores))
    joint = torch.cat([s.expand(*shape, s.shape[-1]) for s in scores], dim=-1)
    return list(joint.softmax(dim=-1).split(sizes, dim=-1))


def in_fp32(
    attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
) -> torch.Tensor:
    """Run ``attend`` on fp32 copies of q, k, v with autocast off, and return the output in
    ``v``'s dtype: the scores, masks (:data:`MASKED`) and softmax stay in fp32 under
    bf16/fp16 autocast."""
    with torch.autocast(device_type=q.device.type, enabled=False):
        out = attend(q.float(), k.float(), v.float())
    return out.to(v.dtype)


def dense_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, bias: torch.Tensor | None
) -> torch.Tensor:
    """softmax(q k^T * scale + bias) v for a *few* queries against all keys (global tokens)."""
    scores = (q * scale) @ k.transpose(-2, -1)
    if bias is not None:
        scores = scores + bias
    return scores.softmax(dim=-1) @ v


def group_budget(device: torch.device, tile_memory: float, owner: str) -> int:
    """Bytes of one group's scores for ``owner`` on ``device``: :data:`GROUP_BYTES` on a CPU, on
    a GPU ``tile_memory`` of its free memory (``tiling.memory_budget``: there a group is a kernel
    launch, not a cache's worth); logged once."""
    budget = memory_budget(device, tile_memory, GROUP_BYTES)
    log_budget(owner, device, tile_memory, budget)
    return budget


def group_size(bytes_per_block: int, budget: int = GROUP_BYTES) -> int:
    """Query blocks per group, so that a group's scores take about ``budget`` bytes."""
    return max(1, budget // max(1, bytes_per_block))


def in_block_groups(
    attend: Callable[..., torch.Tensor],
    blocked: Sequence[torch.Tensor],
    bias: torch.Tensor,
    bias_dim: int,
    bytes_per_block: int,
    budget: int = GROUP_BYTES,
) -> torch.Tensor:
    """``attend(*blocked, bias)`` over consecutive groups of query blocks (axis 2 of every
    ``blocked`` tensor, axis ``bias_dim`` of ``bias``), concatenated along axis 2. Each group's
    scores take about ``budget`` bytes (:func:`group_budget`): on a CPU, one pass over all
    blocks at once makes score tensors of hundreds of MB at long sequences, and time then grows
    faster than n (docs/attention.md has the measurement). The groups are ``split``
    views, whose gradients autograd joins in one ``cat``; slicing per group would instead give
    every group a zero-filled gradient of the whole tensor."""
    blocks = blocked[0].shape[2]
    size = group_size(bytes_per_block, budget)
    if size >= blocks:
        return attend(*blocked, bias)
    parts = [x.split(size, dim=2) for x in blocked] + [bias.split(size, dim=bias_dim)]
    groups = zip(*parts, strict=True)
    return torch.cat([attend(*group) for group in groups], dim=2)


def grid_side(seq_len: int) -> int:
    """Side of the largest square patch grid within ``seq_len`` tokens."""
    return math.isqrt(seq_len)


class _GatherRows(torch.autograd.Function):
    """``x[index]`` for a 2-D ``x`` whose every row is used the same number of times, with a
    backward that gathers instead of scattering (CPU ``index_add_`` is serial)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, index: torch.Tensor, inverse: torch.Tensor):
        ctx.save_for_backward(inverse)
        return x.index_select(0, index)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor):
        (inverse,) = ctx.saved_tensors
        uses, rows = inverse.shape
        gathered = grad.index_select(0, inverse.flatten())
        return gathered.view(uses, rows, *grad.shape[1:]).sum(dim=0), None, None


def gather_rows(x: torch.Tensor, index: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    """Rows ``x[index]`` of a 2-D ``x``, where every row of ``x`` occurs exactly ``u`` times in
    ``index`` and ``inverse`` ``(u, rows of x)`` lists where: ``index[inverse[j, i]] == i``.
    The gradient of row i is the sum of the output gradients at ``inverse[:, i]``."""
    return _GatherRows.apply(x, index, inverse)


class _AttentionWithLSE(torch.autograd.Function):
    """softmax(q k^T * scale + bias) v and the log-sum-exp of each row, fused by hand: the
    forward works in place on one score buffer and saves only the weights; the backward is the
    softmax/log-sum-exp gradient in closed form (as in FlashAttention's)."""

    @staticmethod
    def forward(ctx: Any, q, k, v, bias, scale: float, groups: int):
        rows, queries, _ = q.shape
        scaled = q * scale
        weights = torch.bmm(scaled, k.transpose(1, 2))  # (rows, queries, keys)
        keys = weights.shape[-1]
        weights.view(groups, rows // groups, queries, keys).add_(bias)
        top = weights.amax(dim=-1, keepdim=True)
        weights.sub_(top).exp_()
        total = weights.sum(dim=-1, keepdim=True)
        weights.div_(total)
        out = torch.bmm(weights, v)
        lse = (top + total.log()).squeeze(-1)
        ctx.scale = scale
        ctx.set_materialize_grads(False)  # an unused log-sum-exp gets None, not zeros
        ctx.save_for_backward(scaled, k, v, weights, out)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out, grad_lse):
        scaled, k, v, weights, out = ctx.saved_tensors
        if grad_out is None:
            grad_out = torch.zeros_like(out)
        grad_v = torch.bmm(weights.transpose(1, 2), grad_out)
        grad_scores = torch.bmm(grad_out, v.transpose(1, 2))
        shift = (grad_out * out).sum(dim=-1, keepdim=True)
        if grad_lse is not None:
            shift = shift - grad_lse.unsqueeze(-1)
        grad_scores.sub_(shift).mul_(weights)
        grad_q = torch.bmm(grad_scores, k).mul_(ctx.scale)
        grad_k = torch.bmm(grad_scores.transpose(1, 2), scaled)
        return grad_q, grad_k, grad_v, None, None, None


def attention_with_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    scale: float,
    groups: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batched attention ``(rows, queries, d)`` x ``(rows, keys, d)`` with its log-sum-exp.

    ``bias`` is added to the scores viewed as ``(groups, rows // groups, queries, keys)``, so it
    may be ``(queries, keys)`` (the same for every row) or ``(rows // groups, queries, keys)``
    (one per row of a group). Returns the output ``(rows, queries, d)`` and the log-sum-exp of
    the biased, scaled scores ``(rows, queries)``.
    """
    return _AttentionWithLSE.apply(q, k, v, bias, scale, groups)
