"""FAVOR+ attention (Choromanski et al., "Rethinking Attention with Performers", ICLR 2021) in
five Triton kernels, with either stabilizer (``AUTHORS``).

With s = d^(-1/4), the m random rows w_f of a head (``(heads, m, d)``) and eps, per batch and
head (:mod:`vitattn.attention.feature_maps.favor` gives the same function with autograd):

- a key's logits l_jf = s k_j.w_f - s^2 |k_j|^2 / 2, its features exp(l_jf - M) + eps with M
  the head's maximum over all keys and features of the logits (``unbiased``) or of s k_j.w_f
  alone (``authors``);
- a query's logits s q_i.w_f (``unbiased``) or s q_i.w_f - s^2 |q_i|^2 / 2 (``authors``), its
  features exp(l_if - m_i) + eps with m_i its maximum of s q_i.w_f;
- out = phi(Q) S / phi(Q) z with S = phi(K)^T V, z = phi(K)^T 1. The maxima are constants for
  the gradients (they cancel in the ratio).

The features are computed in registers, a block of ``BLOCK_M`` features at a time, and never
stored:

forward
    ``key_state``       per split of the keys and block of features, S and z of exp(l - m_f)
                        with an online maximum m_f per feature (as efficient attention's
                        context); merged after at the head's maximum M, then eps's share
                        (eps sum_j v_j, eps n) added
    ``output``          per block of queries, over the blocks of features, the numerator and
                        normaliser with the query's running maximum (an online softmax over the
                        features), eps's share (eps sum_f S_f, eps sum_f z_f) at the end; writes
                        out, the normaliser and each query's maximum
backward (only q, k, v, out, S, z, M, the normalisers and the queries' maxima are kept)
    ``query_grads``     dN = dO / den, dden = -rowsum(dO * out) / den,
                        dl = (dN S^T + dden z^T) * exp(l - m), dQ = s dl W
    ``feature_grads``   per split of the queries and block of features, dS = phi(Q)^T dN,
                        dz = phi(Q)^T dden
    ``key_grads``       dV = phi(K) dS, dl = (V dS^T + 1 dz^T) * exp(l - M),
                        dK = s dl W - s^2 K rowsum(dl)
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
    tuned,
)

BLOCK_M = 64
"""Features per block: a block's (rows x features) logits and (features x d_v) state stay in
registers."""


@triton.jit
def _projections(x, w, fcols, M, SCALE, PRECISION: tl.constexpr, NORM: tl.constexpr):
    """(s x.w_f, s^2 |x|^2 / 2) of a tile's rows and a block of features: the projections (-inf
    for features past the m-th) and, with ``NORM``, each row's term of the exponent (else 0)."""
    projections = tl.dot(x, tl.trans(w), input_precision=PRECISION) * SCALE
    projections = tl.where((fcols < M)[None, :], projections, float("-inf"))
    half_square = (0.5 * SCALE * SCALE) * tl.sum(x * x, axis=1)
    if not NORM:
        half_square = half_square * 0.0
    return projections, half_square


@tuned("BATCH", "HEADS", "N", "D", "DV", "M", "ROWS_PER_SPLIT", halves=True)
@triton.jit
def _key_state(
    K, V, W, S_PARTS, Z_PARTS, MAX_PARTS, VSUM_PARTS,
    BATCH, HEADS, N, D, DV, M, ROWS_PER_SPLIT, SCALE,
    sk_b, sk_h, sk_n, sk_d, sv_b, sv_h, sv_n, sv_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, PRECISION: tl.constexpr, AUTHORS: tl.constexpr,
    HALVES: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    split = tl.program_id(1)
    feature_block = tl.program_id(2)
    rows = tl.arange(0, BLOCK_N // HALVES)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    fcols = feature_block * BLOCK_M + tl.arange(0, BLOCK_M)
    w = matrix(W, h, fcols, cols, M, D)
    state = tl.zeros((BLOCK_M, BLOCK_DV), dtype=tl.float32)
    key_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    value_sum = tl.zeros((BLOCK_DV,), dtype=tl.float32)
    running_max = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    start, end = split_span(ROWS_PER_SPLIT, N)
    for offset in range(start, end, BLOCK_N // HALVES):
        n = offset + rows
        k = tile(K, b, h, n, N, cols, D, sk_b, sk_h, sk_n, sk_d)
        v = tile(V, b, h, n, N, vcols, DV, sv_b, sv_h, sv_n, sv_d)
        projections, half_square = _projections(k, w, fcols, M, SCALE, PRECISION, True)
        projections = tl.where((n < N)[:, None], projections, float("-inf"))
        logits = projections - half_square[:, None]
        # unbiased: shifted by the logits' maximum; authors: by the projections'
        shifted_by = projections if AUTHORS else logits
        new_max = tl.maximum(running_max, tl.max(shifted_by, axis=0))
        # features past the m-th stay at -inf: shifted by 0 instead, their weights are exp(-inf)
        shift = tl.where(new_max > float("-inf"), new_max, 0.0)
        rescale = tl.exp(running_max - shift)  # 0 at the first block (running_max is -inf)
        weights = tl.exp(logits - shift[None, :])
        state = state * rescale[:, None] + tl.dot(tl.trans(weights), v, input_precision=PRECISION)
        key_sum = key_sum * rescale + tl.sum(weights, axis=0)
        value_sum += tl.sum(v, axis=0)
        running_max = new_max
    part = (head * tl.num_programs(1) + split) * tl.num_programs(2) + feature_block
    every = tl.arange(0, BLOCK_M)
    put_matrix(S_PARTS, state, part, every, vcols, BLOCK_M, DV)
    tl.store(Z_PARTS + part * BLOCK_M + every, key_sum)
    tl.store(MAX_PARTS + part * BLOCK_M + every, running_max)
    if feature_block == 0:
        part = head * tl.num_programs(1) + split
        tl.store(VSUM_PARTS + part * DV + vcols, value_sum, mask=vcols < DV)


@tuned("BATCH", "HEADS", "N", "D", "DV", "M")
@triton.jit
def _output(
    Q, W, S, Z, S_SUM, Z_SUM, OUT, DEN, SHIFT,
    BATCH, HEADS, N, D, DV, M, SCALE, eps,
    sq_b, sq_h, sq_n, sq_d, so_b, so_h, so_n, so_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, PRECISION: tl.constexpr, AUTHORS: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    q = tile(Q, b, h, n, N, cols, D, sq_b, sq_h, sq_n, sq_d)
    numerator = tl.zeros((BLOCK_N, BLOCK_DV), dtype=tl.float32)
    normaliser = tl.zeros((BLOCK_N,), dtype=tl.float32)
    shift = tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)
    for first in range(0, M, BLOCK_M):
        fcols = first + tl.arange(0, BLOCK_M)
        w = matrix(W, h, fcols, cols, M, D)
        projections, half_square = _projections(q, w, fcols, M, SCALE, PRECISION, AUTHORS)
        new_shift = tl.maximum(shift, tl.max(projections, axis=1))
        rescale = tl.exp(shift - new_shift)  # 0 at the first block
        weights = tl.exp(projections - (half_square + new_shift)[:, None])
        state = matrix(S, head, fcols, vcols, M, DV)
        key_sum = tl.load(Z + head * M + fcols, mask=fcols < M, other=0.0)
        numerator = numerator * rescale[:, None] + tl.dot(weights, state, input_precision=PRECISION)
        normaliser = normaliser * rescale + tl.sum(weights * key_sum[None, :], axis=1)
        shift = new_shift
    state_sum = tl.load(S_SUM + head * DV + vcols, mask=vcols < DV, other=0.0)
    numerator += eps * state_sum[None, :]
    normaliser += eps * tl.load(Z_SUM + head)
    put_tile(OUT, numerator / normaliser[:, None], b, h, n, N, vcols, DV, so_b, so_h, so_n, so_d)
    tl.store(DEN + head * N + n, normaliser, mask=n < N)
    tl.store(SHIFT + head * N + n, shift, mask=n < N)


@triton.jit
def _output_gradients(
    DO, OUT, DEN, head, b, h, n, N, vcols, DV,
    sdo_b, sdo_h, sdo_n, sdo_d, so_b, so_h, so_n, so_d,
):  # fmt: skip
    """dN = dO / den and dden = -rowsum(dO * out) / den of a block of queries (zero past N)."""
    grad_out = tile(DO, b, h, n, N, vcols, DV, sdo_b, sdo_h, sdo_n, sdo_d)
    out = tile(OUT, b, h, n, N, vcols, DV, so_b, so_h, so_n, so_d)
    normaliser = tl.load(DEN + head * N + n, mask=n < N, other=1.0)
    grad_numerator = grad_out / normaliser[:, None]
    grad_normaliser = -tl.sum(grad_out * out, axis=1) / normaliser
    return grad_numerator, grad_normaliser


@tuned("BATCH", "HEADS", "N", "D", "DV", "M")
@triton.jit
def _query_grads(
    Q, DO, OUT, W, S, Z, DEN, SHIFT, DQ,
    BATCH, HEADS, N, D, DV, M, SCALE,
    sq_b, sq_h, sq_n, sq_d, sdo_b, sdo_h, sdo_n, sdo_d, so_b, so_h, so_n, so_d,
    sdq_b, sdq_h, sdq_n, sdq_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, PRECISION: tl.constexpr, AUTHORS: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    q = tile(Q, b, h, n, N, cols, D, sq_b, sq_h, sq_n, sq_d)
    grad_numerator, grad_normaliser = _output_gradients(
        DO, OUT, DEN, head, b, h, n, N, vcols, DV,
        sdo_b, sdo_h, sdo_n, sdo_d, so_b, so_h, so_n, so_d,
    )  # fmt: skip
    shift = tl.load(SHIFT + head * N + n, mask=n < N, other=0.0)
    grad_q = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    grad_logits_sum = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for first in range(0, M, BLOCK_M):
        fcols = first + tl.arange(0, BLOCK_M)
        w = matrix(W, h, fcols, cols, M, D)
        projections, half_square = _projections(q, w, fcols, M, SCALE, PRECISION, AUTHORS)
        weights = tl.exp(projections - (half_square + shift)[:, None])
        state = matrix(S, head, fcols, vcols, M, DV)
        key_sum = tl.load(Z + head * M + fcols, mask=fcols < M, other=0.0)
        grad_features = tl.dot(grad_numerator, tl.trans(state), input_precision=PRECISION)
        grad_features += grad_normaliser[:, None] * key_sum[None, :]
        grad_logits = grad_features * weights
        grad_q += tl.dot(grad_logits, w, input_precision=PRECISION)
        if AUTHORS:
            grad_logits_sum += tl.sum(grad_logits, axis=1)
    grad_q = SCALE * grad_q
    if AUTHORS:  # the queries' exponents keep -s^2 |q|^2 / 2
        grad_q -= (SCALE * SCALE) * q * grad_logits_sum[:, None]
    put_tile(DQ, grad_q, b, h, n, N, cols, D, sdq_b, sdq_h, sdq_n, sdq_d)


@tuned("BATCH", "HEADS", "N", "D", "DV", "M", "ROWS_PER_SPLIT", halves=True)
@triton.jit
def _feature_grads(
    Q, DO, OUT, W, DEN, SHIFT, DS_PARTS, DZ_PARTS,
    BATCH, HEADS, N, D, DV, M, ROWS_PER_SPLIT, SCALE, eps,
    sq_b, sq_h, sq_n, sq_d, sdo_b, sdo_h, sdo_n, sdo_d, so_b, so_h, so_n, so_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, PRECISION: tl.constexpr, AUTHORS: tl.constexpr,
    HALVES: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    split = tl.program_id(1)
    feature_block = tl.program_id(2)
    rows = tl.arange(0, BLOCK_N // HALVES)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    fcols = feature_block * BLOCK_M + tl.arange(0, BLOCK_M)
    w = matrix(W, h, fcols, cols, M, D)
    grad_state = tl.zeros((BLOCK_M, BLOCK_DV), dtype=tl.float32)
    grad_key_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    start, end = split_span(ROWS_PER_SPLIT, N)
    for offset in range(start, end, BLOCK_N // HALVES):
        n = offset + rows
        q = tile(Q, b, h, n, N, cols, D, sq_b, sq_h, sq_n, sq_d)
        grad_numerator, grad_normaliser = _output_gradients(
            DO, OUT, DEN, head, b, h, n, N, vcols, DV,
            sdo_b, sdo_h, sdo_n, sdo_d, so_b, so_h, so_n, so_d,
        )  # fmt: skip
        shift = tl.load(SHIFT + head * N + n, mask=n < N, other=0.0)
        projections, half_square = _projections(q, w, fcols, M, SCALE, PRECISION, AUTHORS)
        weights = tl.exp(projections - (half_square + shift)[:, None])
        features = tl.where((fcols < M)[None, :], weights + eps, 0.0)
        grad_state += tl.dot(tl.trans(features), grad_numerator, input_precision=PRECISION)
        grad_key_sum += tl.sum(features * grad_normaliser[:, None], axis=0)
    part = (head * tl.num_programs(1) + split) * tl.num_programs(2) + feature_block
    every = tl.arange(0, BLOCK_M)
    put_matrix(DS_PARTS, grad_state, part, every, vcols, BLOCK_M, DV)
    tl.store(DZ_PARTS + part * BLOCK_M + every, grad_key_sum)


@tuned("BATCH", "HEADS", "N", "D", "DV", "M")
@triton.jit
def _key_grads(
    K, V, W, DS, DZ, KEY_MAX, DK, DVAL,
    BATCH, HEADS, N, D, DV, M, SCALE, eps,
    sk_b, sk_h, sk_n, sk_d, sv_b, sv_h, sv_n, sv_d,
    sdk_b, sdk_h, sdk_n, sdk_d, sdv_b, sdv_h, sdv_n, sdv_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, PRECISION: tl.constexpr, AUTHORS: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    k = tile(K, b, h, n, N, cols, D, sk_b, sk_h, sk_n, sk_d)
    v = tile(V, b, h, n, N, vcols, DV, sv_b, sv_h, sv_n, sv_d)
    key_max = tl.load(KEY_MAX + head)
    grad_k = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    grad_v = tl.zeros((BLOCK_N, BLOCK_DV), dtype=tl.float32)
    grad_logits_sum = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for first in range(0, M, BLOCK_M):
        fcols = first + tl.arange(0, BLOCK_M)
        w = matrix(W, h, fcols, cols, M, D)
        projections, half_square = _projections(k, w, fcols, M, SCALE, PRECISION, True)
        weights = tl.exp(projections - (half_square + key_max)[:, None])
        weights = tl.where((n < N)[:, None], weights, 0.0)  # rows past N: exp(-M) may overflow
        features = tl.where((fcols < M)[None, :], weights + eps, 0.0)
        grad_state = matrix(DS, head, fcols, vcols, M, DV)
        grad_key_sum = tl.load(DZ + head * M + fcols, mask=fcols < M, other=0.0)
        grad_v += tl.dot(features, grad_state, input_precision=PRECISION)
        grad_features = tl.dot(v, tl.trans(grad_state), input_precision=PRECISION)
        grad_logits = (grad_features + grad_key_sum[None, :]) * weights
        grad_k += tl.dot(grad_logits, w, input_precision=PRECISION)
        grad_logits_sum += tl.sum(grad_logits, axis=1)
    grad_k = SCALE * grad_k - (SCALE * SCALE) * k * grad_logits_sum[:, None]
    put_tile(DK, grad_k, b, h, n, N, cols, D, sdk_b, sdk_h, sdk_n, sdk_d)
    put_tile(DVAL, grad_v, b, h, n, N, vcols, DV, sdv_b, sdv_h, sdv_n, sdv_d)


def _meta(d: int, dv: int, device: torch.device, stabilizer: str) -> dict[str, object]:
    """The kernels' compile-time arguments; rows per block as for the widest of d, d_v and
    :data:`BLOCK_M`."""
    block_n, block_d, block_dv = blocks(d, dv, device, widest=BLOCK_M)
    return dict(
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        BLOCK_DV=block_dv,
        BLOCK_M=BLOCK_M,
        PRECISION=precision(device),
        AUTHORS=stabilizer == "authors",
    )


def forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    projection: torch.Tensor,
    eps: float,
    stabilizer: str,
) -> tuple[torch.Tensor, ...]:
    """(out, S, z, M, den, shift) of FAVOR+ attention with ``stabilizer`` of
    ``(batch, heads, n, d)`` q, k, v of any strides with a contiguous fp32 ``(heads, m, d)``
    projection: out in v's dtype; S ``(batch, heads, m, d_v)``, z ``(batch, heads, m)``, the
    keys' maximum M ``(batch, heads)``, the normaliser and the queries' maxima
    ``(batch, heads, n)``, in fp32."""
    batch, heads, n_q, d = q.shape
    n_k, dv = k.shape[2], v.shape[3]
    m = projection.shape[1]
    scale = d**-0.25
    meta = _meta(d, dv, q.device, stabilizer)
    feature_blocks = cdiv(m, BLOCK_M)
    splits, rows_per_split = split_rows(
        n_k, batch * heads * feature_blocks, meta["BLOCK_N"], q.device
    )
    fp32 = dict(device=q.device, dtype=torch.float32)
    parts = (batch * heads, splits, feature_blocks * BLOCK_M)
    state_parts = torch.empty(*parts, dv, **fp32)
    key_sum_parts = torch.empty(*parts, **fp32)
    max_parts = torch.empty(*parts, **fp32)
    value_sum_parts = torch.empty(batch * heads, splits, dv, **fp32)
    _key_state[(batch * heads, splits, feature_blocks)](
        k, v, projection, state_parts, key_sum_parts, max_parts, value_sum_parts,
        batch, heads, n_k, d, dv, m, rows_per_split, scale,
        *strides(k), *strides(v), **meta,
    )  # fmt: skip
    # merged at the head's maximum over splits and features; then eps's share of every feature
    max_parts = max_parts[..., :m]
    key_max = max_parts.amax(dim=(1, 2))
    weights = (max_parts - key_max[:, None, None]).exp_()
    state = (state_parts[:, :, :m] * weights[..., None]).sum(1)
    state += eps * value_sum_parts.sum(1)[:, None, :]
    key_sum = (key_sum_parts[..., :m] * weights).sum(1).add_(eps * n_k)
    out = torch.empty(batch, heads, n_q, dv, device=q.device, dtype=v.dtype)
    normaliser = torch.empty(batch, heads, n_q, **fp32)
    shift = torch.empty(batch, heads, n_q, **fp32)
    _output[(batch * heads, cdiv(n_q, meta["BLOCK_N"]))](
        q, projection, state, key_sum, state.sum(1), key_sum.sum(1), out, normaliser, shift,
        batch, heads, n_q, d, dv, m, scale, eps,
        *strides(q), *strides(out), **meta,
    )  # fmt: skip
    return (
        out,
        state.view(batch, heads, m, dv),
        key_sum.view(batch, heads, m),
        key_max.view(batch, heads),
        normaliser,
        shift,
    )


def backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    projection: torch.Tensor,
    saved: tuple[torch.Tensor, ...],
    eps: float,
    stabilizer: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of :func:`forward` given the gradient of its output and what it returned
    (``saved``: out, S, z, M, den, shift), each in its input's dtype."""
    out, state, key_sum, key_max, normaliser, shift = saved
    batch, heads, n_q, d = q.shape
    n_k, dv = k.shape[2], v.shape[3]
    m = projection.shape[1]
    scale = d**-0.25
    meta = _meta(d, dv, q.device, stabilizer)
    grad_q = torch.empty_like(q)
    _query_grads[(batch * heads, cdiv(n_q, meta["BLOCK_N"]))](
        q, grad_out, out, projection, state, key_sum, normaliser, shift, grad_q,
        batch, heads, n_q, d, dv, m, scale,
        *strides(q), *strides(grad_out), *strides(out), *strides(grad_q), **meta,
    )  # fmt: skip
    feature_blocks = cdiv(m, BLOCK_M)
    splits, rows_per_split = split_rows(
        n_q, batch * heads * feature_blocks, meta["BLOCK_N"], q.device
    )
    fp32 = dict(device=q.device, dtype=torch.float32)
    grad_state_parts = torch.empty(batch * heads, splits, feature_blocks * BLOCK_M, dv, **fp32)
    grad_key_sum_parts = torch.empty(batch * heads, splits, feature_blocks * BLOCK_M, **fp32)
    _feature_grads[(batch * heads, splits, feature_blocks)](
        q, grad_out, out, projection, normaliser, shift, grad_state_parts, grad_key_sum_parts,
        batch, heads, n_q, d, dv, m, rows_per_split, scale, eps,
        *strides(q), *strides(grad_out), *strides(out), **meta,
    )  # fmt: skip
    grad_state = grad_state_parts[:, :, :m].sum(1)
    grad_key_sum = grad_key_sum_parts[..., :m].sum(1)
    grad_k = torch.empty_like(k)
    grad_v = torch.empty_like(v)
    _key_grads[(batch * heads, cdiv(n_k, meta["BLOCK_N"]))](
        k, v, projection, grad_state, grad_key_sum, key_max, grad_k, grad_v,
        batch, heads, n_k, d, dv, m, scale, eps,
        *strides(k), *strides(v), *strides(grad_k), *strides(grad_v), **meta,
    )  # fmt: skip
    return grad_q, grad_k, grad_v
