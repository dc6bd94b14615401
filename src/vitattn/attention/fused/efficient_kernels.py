"""Efficient attention (Shen et al., "Efficient Attention: Attention with Linear Complexities",
WACV 2021) in four Triton kernels.

out = softmax_row(Q) C with C = softmax_col(K)^T V, the keys' softmax taken over the sequence per
feature; per batch and head, in fp32 in registers:

forward
    ``context`` per split of the keys, the online softmax over the sequence (flash attention's
                over a row, here over a column): the running maximum m_c = max_j K_jc,
                S = sum_j exp(K_j - m) V_j and l = sum_j exp(K_j - m), rescaled as m grows; the
                splits are merged after (C = sum_s w_s S_s / sum_s w_s l_s, w_s = e^(m_s - m)),
                and only C and the log-sum-exp L = m + log l are kept
    ``output``  O = softmax_row(Q) C
backward, recomputing both softmaxes (only q, k, v, C and L are kept)
    ``queries`` P = softmax_row(Q), dP = dO C^T, dQ = P * (dP - rowsum(dP * P)), and the partial
                sums of dC = P^T dO
    ``keys``    A = exp(K - L), dV = A dC, dA = V dC^T, dK = A * (dA - r) with
                r_c = sum_j A_jc dA_jc = sum_e C_ce dC_ce (from C and dC alone)

Each pass reads each input once and writes each output once, where the plain path
(:class:`vitattn.attention.efficient.EfficientAttention`, ``impl=torch``) dispatches a softmax per
side, two products and their backwards. Products of fp32 values follow torch's float32 matmul
precision, as the plain path's do. Shared pieces: :mod:`~vitattn.attention.fused.tiles`.
"""

# ruff: noqa: N803 (Triton's convention: pointers and sizes in capitals, as in its tutorials)
from __future__ import annotations

import torch
import triton
import triton.language as tl

from vitattn.attention.fused.tiles import (
    blocks,
    cdiv,
    matrix,
    precision,
    program_head,
    put_matrix,
    put_tile,
    split_rows,
    split_span,
    strides,
    tile,
)


@triton.jit
def _row_softmax(x, cols, D):
    """softmax over each row's D features of a :func:`tile` (padding columns get nothing)."""
    x = tl.where((cols < D)[None, :], x, float("-inf"))
    e = tl.exp(x - tl.max(x, axis=1)[:, None])
    return e / tl.sum(e, axis=1)[:, None]


@triton.jit
def _context(
    K, V, S_PARTS, M_PARTS, L_PARTS,
    HEADS, N, D, DV, ROWS_PER_SPLIT,
    sk_b, sk_h, sk_n, sk_d, sv_b, sv_h, sv_n, sv_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    split = tl.program_id(1)
    rows = tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    state = tl.zeros((BLOCK_D, BLOCK_DV), dtype=tl.float32)
    running_max = tl.full((BLOCK_D,), float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros((BLOCK_D,), dtype=tl.float32)
    start, end = split_span(ROWS_PER_SPLIT, N)
    for offset in range(start, end, BLOCK_N):
        n = offset + rows
        inside = (n < N)[:, None]
        k = tile(K, b, h, n, N, cols, D, sk_b, sk_h, sk_n, sk_d)
        v = tile(V, b, h, n, N, vcols, DV, sv_b, sv_h, sv_n, sv_d)
        new_max = tl.maximum(running_max, tl.max(tl.where(inside, k, float("-inf")), axis=0))
        rescale = tl.exp(running_max - new_max)  # 0 at the first block (running_max is -inf)
        weights = tl.where(inside, tl.exp(k - new_max[None, :]), 0.0)
        state = state * rescale[:, None] + tl.dot(tl.trans(weights), v, input_precision=PRECISION)
        running_sum = running_sum * rescale + tl.sum(weights, axis=0)
        running_max = new_max
    part = head * tl.num_programs(1) + split
    put_matrix(S_PARTS, state, part, cols, vcols, D, DV)
    tl.store(M_PARTS + part * D + cols, running_max, mask=cols < D)
    tl.store(L_PARTS + part * D + cols, running_sum, mask=cols < D)


@triton.jit
def _output(
    Q, C, OUT,
    HEADS, N, D, DV,
    sq_b, sq_h, sq_n, sq_d, so_b, so_h, so_n, so_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    context = matrix(C, head, cols, vcols, D, DV)
    queries = _row_softmax(tile(Q, b, h, n, N, cols, D, sq_b, sq_h, sq_n, sq_d), cols, D)
    out = tl.dot(queries, context, input_precision=PRECISION)
    put_tile(OUT, out, b, h, n, N, vcols, DV, so_b, so_h, so_n, so_d)


@triton.jit
def _queries(
    Q, DO, C, DQ, DC_PARTS,
    HEADS, N, D, DV, ROWS_PER_SPLIT,
    sq_b, sq_h, sq_n, sq_d, sdo_b, sdo_h, sdo_n, sdo_d, sdq_b, sdq_h, sdq_n, sdq_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    split = tl.program_id(1)
    rows = tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    context = matrix(C, head, cols, vcols, D, DV)
    grad_context = tl.zeros((BLOCK_D, BLOCK_DV), dtype=tl.float32)
    start, end = split_span(ROWS_PER_SPLIT, N)
    for offset in range(start, end, BLOCK_N):
        n = offset + rows
        queries = _row_softmax(tile(Q, b, h, n, N, cols, D, sq_b, sq_h, sq_n, sq_d), cols, D)
        grad_out = tile(DO, b, h, n, N, vcols, DV, sdo_b, sdo_h, sdo_n, sdo_d)  # 0 past the end
        grad_queries = tl.dot(grad_out, tl.trans(context), input_precision=PRECISION)
        along = tl.sum(grad_queries * queries, axis=1)
        grad_q = queries * (grad_queries - along[:, None])
        put_tile(DQ, grad_q, b, h, n, N, cols, D, sdq_b, sdq_h, sdq_n, sdq_d)
        grad_context += tl.dot(tl.trans(queries), grad_out, input_precision=PRECISION)
    part = head * tl.num_programs(1) + split
    put_matrix(DC_PARTS, grad_context, part, cols, vcols, D, DV)


@triton.jit
def _keys(
    K, V, C, LSE, DC, DK, DVAL,
    HEADS, N, D, DV,
    sk_b, sk_h, sk_n, sk_d, sv_b, sv_h, sv_n, sv_d,
    sdk_b, sdk_h, sdk_n, sdk_d, sdv_b, sdv_h, sdv_n, sdv_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    context = matrix(C, head, cols, vcols, D, DV)
    grad_context = matrix(DC, head, cols, vcols, D, DV)
    log_sum = tl.load(LSE + head * D + cols, mask=cols < D, other=0.0)
    k = tile(K, b, h, n, N, cols, D, sk_b, sk_h, sk_n, sk_d)
    v = tile(V, b, h, n, N, vcols, DV, sv_b, sv_h, sv_n, sv_d)
    inside = (n < N)[:, None] & (cols < D)[None, :]
    keys = tl.where(inside, tl.exp(k - log_sum[None, :]), 0.0)
    grad_v = tl.dot(keys, grad_context, input_precision=PRECISION)
    put_tile(DVAL, grad_v, b, h, n, N, vcols, DV, sdv_b, sdv_h, sdv_n, sdv_d)
    grad_keys = tl.dot(v, tl.trans(grad_context), input_precision=PRECISION)
    along = tl.sum(context * grad_context, axis=1)
    grad_k = keys * (grad_keys - along[None, :])
    put_tile(DK, grad_k, b, h, n, N, cols, D, sdk_b, sdk_h, sdk_n, sdk_d)


def _meta(d: int, dv: int, device: torch.device) -> dict[str, object]:
    """The kernels' compile-time arguments."""
    block_n, block_d, block_dv = blocks(d, dv, device)
    return dict(BLOCK_N=block_n, BLOCK_D=block_d, BLOCK_DV=block_dv, PRECISION=precision(device))


def forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, C, L) of efficient attention: ``(batch, heads, n, d)`` inputs of any strides, out in
    v's dtype, the context C ``(batch, heads, d, d_v)`` and the keys' log-sum-exp L
    ``(batch, heads, d)`` in fp32."""
    batch, heads, n_q, d = q.shape
    n_k, dv = k.shape[2], v.shape[3]
    meta = _meta(d, dv, q.device)
    splits, rows_per_split = split_rows(n_k, batch * heads, meta["BLOCK_N"], q.device)
    fp32 = dict(device=q.device, dtype=torch.float32)
    state_parts = torch.empty(batch * heads, splits, d, dv, **fp32)
    max_parts = torch.empty(batch * heads, splits, d, **fp32)
    sum_parts = torch.empty(batch * heads, splits, d, **fp32)
    _context[(batch * heads, splits)](
        k, v, state_parts, max_parts, sum_parts,
        heads, n_k, d, dv, rows_per_split,
        *strides(k), *strides(v), **meta,
    )  # fmt: skip
    # the splits' online softmaxes merged: each rescaled to the common maximum
    largest = max_parts.amax(1, keepdim=True)
    weights = (max_parts - largest).exp_()
    total = (sum_parts * weights).sum(1)
    context = (state_parts * weights[..., None]).sum(1).div_(total[..., None])
    log_sum = total.log_().add_(largest.squeeze(1))
    out = torch.empty(batch, heads, n_q, dv, device=q.device, dtype=v.dtype)
    _output[(batch * heads, cdiv(n_q, meta["BLOCK_N"]))](
        q, context, out,
        heads, n_q, d, dv,
        *strides(q), *strides(out), **meta,
    )  # fmt: skip
    return out, context.view(batch, heads, d, dv), log_sum.view(batch, heads, d)


def backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    context: torch.Tensor,
    log_sum: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of :func:`forward` given the gradient of its output, each in its input's
    dtype."""
    batch, heads, n_q, d = q.shape
    n_k, dv = k.shape[2], v.shape[3]
    meta = _meta(d, dv, q.device)
    splits, rows_per_split = split_rows(n_q, batch * heads, meta["BLOCK_N"], q.device)
    grad_context_parts = torch.empty(
        batch * heads, splits, d, dv, device=q.device, dtype=torch.float32
    )
    grad_q = torch.empty_like(q)
    _queries[(batch * heads, splits)](
        q, grad_out, context, grad_q, grad_context_parts,
        heads, n_q, d, dv, rows_per_split,
        *strides(q), *strides(grad_out), *strides(grad_q), **meta,
    )  # fmt: skip
    grad_context = grad_context_parts.sum(1)
    grad_k = torch.empty_like(k)
    grad_v = torch.empty_like(v)
    _keys[(batch * heads, cdiv(n_k, meta["BLOCK_N"]))](
        k, v, context, log_sum, grad_context, grad_k, grad_v,
        heads, n_k, d, dv,
        *strides(k), *strides(v), *strides(grad_k), *strides(grad_v), **meta,
    )  # fmt: skip
    return grad_q, grad_k, grad_v
