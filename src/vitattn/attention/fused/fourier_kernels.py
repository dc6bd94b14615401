"""Random feature attention (Peng et al., "Random Feature Attention", ICLR 2021) with random
Fourier features (Rahimi & Recht, NeurIPS 2007), in five Triton kernels.

With s = d^(-1/4), the D frequencies w_f of a head (``(heads, D, d)``), c = sigma^2 s^2 / 2 and
eps (:mod:`vitattn.attention.feature_maps.fourier` gives the same function with autograd):

- the projections p = s x.w_f of a query or key, its features psi = [sin p, cos p] / sqrt(D);
- a key's weight g_j = exp(c |k_j|^2 - M), M the head's maximum of c |k_j|^2 (a constant for
  the gradients: it cancels in the ratio);
- out = psi(Q) S / max(psi(Q) z, eps sum_j g_j) with S = sum_j psi(k_j)^T g_j v_j and
  z = sum_j psi(k_j) g_j.

The features are computed in registers, a block of ``BLOCK_M`` frequencies (their sines and
cosines) at a time, and never stored; the sine and cosine halves of S and z are kept apart.

forward
    ``key_state``       per split of the keys and block of frequencies, the sums with the keys'
                        weights shifted by the split's running maximum; merged after at M, the
                        floor eps sum_j g_j with them
    ``output``          per block of queries, over the blocks of frequencies, numerator and
                        normaliser; out, and the normaliser before the floor, written
backward (only q, k, v, out, S, z, M, the floor and the normalisers are kept)
    ``query_grads``     dN = dO / den', dden' = -rowsum(dO * out) / den' (den' the floored
                        normaliser), to the normaliser where it is above the floor, to the floor
                        (summed per block of queries) where below; dp = dsin cos - dcos sin,
                        dQ = s dp W
    ``feature_grads``   per split of the queries and block of frequencies, dS = psi(Q)^T dN,
                        dz = psi(Q)^T dden
    ``key_grads``       dV = g psi(K) dS; dpsi(K) = g (V dS^T + 1 dz^T), dK = s dp W; and
                        dg = rowsum(psi(K) (V dS^T + 1 dz^T)) + eps dfloor, dK += 2 c g dg K
"""

# ruff: noqa: N803 (Triton's convention: pointers and sizes in capitals, as in its tutorials)
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from vitattn.attention.fused.tiles import (
    INTERPRETED,
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

BLOCK_M = 32
"""Frequencies per block: their sines and cosines, two (rows x frequencies) tiles and two
(frequencies x d_v) states, stay in registers."""

FAST_TRIG: bool = not INTERPRETED
"""Whether the sines and cosines are the GPU's fast ones, ``__sinf`` and ``__cosf`` (its special
function units: a few instructions; within 2^-21.41 of the true values over [-pi, pi], to which
the projections are first reduced, by the CUDA C++ Programming Guide's table of intrinsics),
rather than libdevice's ``sinf`` and ``cosf`` (Triton's ``tl.sin``, ``tl.cos``: a reduction and
a polynomial of their own, dozens of instructions each, and a slow path for large arguments;
docs/check.md counts them). The interpreter runs no libdevice call: it takes ``tl.sin`` and
``tl.cos`` of the same reduced projections."""

TWO_PI_HIGH = tl.constexpr(6.28125)
"""2 pi to 8 bits, then :data:`TWO_PI_MIDDLE` to 12 and :data:`TWO_PI_LOW` to 24 more: Cody and
Waite's reduction, the projection less k 2 pi in three steps, of which the first two are exact
in fp32 (with or without fused multiply-adds) for fewer than 4,096 turns."""

TWO_PI_MIDDLE = tl.constexpr(0.0019350051879882812)
TWO_PI_LOW = tl.constexpr(3.019916050561733e-07)


@triton.jit
def _sin_cos(x, w, fcols, F, SCALE, PRECISION: tl.constexpr, FAST_TRIG: tl.constexpr):
    """sin and cos of s x.w_f for a tile's rows and a block of frequencies, zero for
    frequencies past the F-th (:data:`FAST_TRIG`)."""
    projected = tl.dot(x, tl.trans(w), input_precision=PRECISION) * SCALE
    turns = tl.floor(projected * 0.15915494309189535 + 0.5)  # the nearest multiple of 2 pi
    reduced = projected - turns * TWO_PI_HIGH - turns * TWO_PI_MIDDLE - turns * TWO_PI_LOW
    if FAST_TRIG:
        sin = libdevice.fast_sinf(reduced)
        cos = libdevice.fast_cosf(reduced)
    else:
        sin = tl.sin(reduced)
        cos = tl.cos(reduced)
    inside = (fcols < F)[None, :]
    return tl.where(inside, sin, 0.0), tl.where(inside, cos, 0.0)


@tuned("BATCH", "HEADS", "N", "D", "DV", "F", "ROWS_PER_SPLIT", "FAST_TRIG", halves=True)
@triton.jit
def _key_state(
    K, V, W, SS_PARTS, SC_PARTS, ZS_PARTS, ZC_PARTS, MAX_PARTS, GSUM_PARTS,
    BATCH, HEADS, N, D, DV, F, ROWS_PER_SPLIT, SCALE, WEIGHT_SCALE,
    sk_b, sk_h, sk_n, sk_d, sv_b, sv_h, sv_n, sv_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, PRECISION: tl.constexpr, FAST_TRIG: tl.constexpr,
    HALVES: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    split = tl.program_id(1)
    frequency_block = tl.program_id(2)
    rows = tl.arange(0, BLOCK_N // HALVES)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    fcols = frequency_block * BLOCK_M + tl.arange(0, BLOCK_M)
    w = matrix(W, h, fcols, cols, F, D)
    state_sin = tl.zeros((BLOCK_M, BLOCK_DV), dtype=tl.float32)
    state_cos = tl.zeros((BLOCK_M, BLOCK_DV), dtype=tl.float32)
    sum_sin = tl.zeros((BLOCK_M,), dtype=tl.float32)
    sum_cos = tl.zeros((BLOCK_M,), dtype=tl.float32)
    weight_sum = tl.zeros((1,), dtype=tl.float32)
    running_max = tl.full((1,), float("-inf"), dtype=tl.float32)
    start, end = split_span(ROWS_PER_SPLIT, N)
    for offset in range(start, end, BLOCK_N // HALVES):
        n = offset + rows
        k = tile(K, b, h, n, N, cols, D, sk_b, sk_h, sk_n, sk_d)
        v = tile(V, b, h, n, N, vcols, DV, sv_b, sv_h, sv_n, sv_d)
        logits = tl.where(n < N, WEIGHT_SCALE * tl.sum(k * k, axis=1), float("-inf"))
        new_max = tl.maximum(running_max, tl.max(logits, axis=0))
        rescale = tl.exp(running_max - new_max)  # 0 at the first block (running_max is -inf)
        weights = tl.exp(logits - new_max)  # one per key of the step, 0 past N
        sin, cos = _sin_cos(k, w, fcols, F, SCALE, PRECISION, FAST_TRIG)
        weighted = v * weights[:, None]
        state_sin = state_sin * rescale + tl.dot(tl.trans(sin), weighted, input_precision=PRECISION)
        state_cos = state_cos * rescale + tl.dot(tl.trans(cos), weighted, input_precision=PRECISION)
        sum_sin = sum_sin * rescale + tl.sum(sin * weights[:, None], axis=0)
        sum_cos = sum_cos * rescale + tl.sum(cos * weights[:, None], axis=0)
        weight_sum = weight_sum * rescale + tl.sum(weights, axis=0)
        running_max = new_max
    part = (head * tl.num_programs(1) + split) * tl.num_programs(2) + frequency_block
    every = tl.arange(0, BLOCK_M)
    put_matrix(SS_PARTS, state_sin, part, every, vcols, BLOCK_M, DV)
    put_matrix(SC_PARTS, state_cos, part, every, vcols, BLOCK_M, DV)
    tl.store(ZS_PARTS + part * BLOCK_M + every, sum_sin)
    tl.store(ZC_PARTS + part * BLOCK_M + every, sum_cos)
    if frequency_block == 0:
        part = head * tl.num_programs(1) + split
        one = tl.arange(0, 1)
        tl.store(MAX_PARTS + part + one, running_max)
        tl.store(GSUM_PARTS + part + one, weight_sum)


@tuned("BATCH", "HEADS", "N", "D", "DV", "F", "FAST_TRIG")
@triton.jit
def _output(
    Q, W, SS, SC, ZS, ZC, FLOOR, OUT, DEN,
    BATCH, HEADS, N, D, DV, F, SCALE,
    sq_b, sq_h, sq_n, sq_d, so_b, so_h, so_n, so_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, PRECISION: tl.constexpr, FAST_TRIG: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    q = tile(Q, b, h, n, N, cols, D, sq_b, sq_h, sq_n, sq_d)
    numerator = tl.zeros((BLOCK_N, BLOCK_DV), dtype=tl.float32)
    normaliser = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for first in range(0, F, BLOCK_M):
        fcols = first + tl.arange(0, BLOCK_M)
        sin, cos = _sin_cos(
            q, matrix(W, h, fcols, cols, F, D), fcols, F, SCALE, PRECISION, FAST_TRIG
        )
        numerator += tl.dot(sin, matrix(SS, head, fcols, vcols, F, DV), input_precision=PRECISION)
        numerator += tl.dot(cos, matrix(SC, head, fcols, vcols, F, DV), input_precision=PRECISION)
        sum_sin = tl.load(ZS + head * F + fcols, mask=fcols < F, other=0.0)
        sum_cos = tl.load(ZC + head * F + fcols, mask=fcols < F, other=0.0)
        normaliser += tl.sum(sin * sum_sin[None, :] + cos * sum_cos[None, :], axis=1)
    floored = tl.maximum(normaliser, tl.load(FLOOR + head))
    put_tile(OUT, numerator / floored[:, None], b, h, n, N, vcols, DV, so_b, so_h, so_n, so_d)
    tl.store(DEN + head * N + n, normaliser, mask=n < N)


@triton.jit
def _output_gradients(
    DO, OUT, DEN, FLOOR, head, b, h, n, N, vcols, DV,
    sdo_b, sdo_h, sdo_n, sdo_d, so_b, so_h, so_n, so_d,
):  # fmt: skip
    """dN, and the gradients for the normaliser and for the floor, of a block of queries:
    the floored normaliser's gradient goes to the normaliser where it is at least the floor,
    to the floor where it is below (zero past N)."""
    grad_out = tile(DO, b, h, n, N, vcols, DV, sdo_b, sdo_h, sdo_n, sdo_d)
    out = tile(OUT, b, h, n, N, vcols, DV, so_b, so_h, so_n, so_d)
    normaliser = tl.load(DEN + head * N + n, mask=n < N, other=1.0)
    floor = tl.load(FLOOR + head)
    floored = tl.maximum(normaliser, floor)
    grad_floored = -tl.sum(grad_out * out, axis=1) / floored
    below = normaliser < floor
    grad_normaliser = tl.where(below, 0.0, grad_floored)
    grad_floor = tl.where(below, grad_floored, 0.0)
    return grad_out / floored[:, None], grad_normaliser, grad_floor


@tuned("BATCH", "HEADS", "N", "D", "DV", "F", "FAST_TRIG")
@triton.jit
def _query_grads(
    Q, DO, OUT, W, SS, SC, ZS, ZC, FLOOR, DEN, DQ, DFLOOR_PARTS,
    BATCH, HEADS, N, D, DV, F, SCALE,
    sq_b, sq_h, sq_n, sq_d, sdo_b, sdo_h, sdo_n, sdo_d, so_b, so_h, so_n, so_d,
    sdq_b, sdq_h, sdq_n, sdq_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, PRECISION: tl.constexpr, FAST_TRIG: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    q = tile(Q, b, h, n, N, cols, D, sq_b, sq_h, sq_n, sq_d)
    grad_numerator, grad_normaliser, grad_floor = _output_gradients(
        DO, OUT, DEN, FLOOR, head, b, h, n, N, vcols, DV,
        sdo_b, sdo_h, sdo_n, sdo_d, so_b, so_h, so_n, so_d,
    )  # fmt: skip
    grad_q = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    for first in range(0, F, BLOCK_M):
        fcols = first + tl.arange(0, BLOCK_M)
        w = matrix(W, h, fcols, cols, F, D)
        sin, cos = _sin_cos(q, w, fcols, F, SCALE, PRECISION, FAST_TRIG)
        state_sin = matrix(SS, head, fcols, vcols, F, DV)
        state_cos = matrix(SC, head, fcols, vcols, F, DV)
        sum_sin = tl.load(ZS + head * F + fcols, mask=fcols < F, other=0.0)
        sum_cos = tl.load(ZC + head * F + fcols, mask=fcols < F, other=0.0)
        grad_sin = tl.dot(grad_numerator, tl.trans(state_sin), input_precision=PRECISION)
        grad_sin += grad_normaliser[:, None] * sum_sin[None, :]
        grad_cos = tl.dot(grad_numerator, tl.trans(state_cos), input_precision=PRECISION)
        grad_cos += grad_normaliser[:, None] * sum_cos[None, :]
        grad_projected = grad_sin * cos - grad_cos * sin
        grad_q += tl.dot(grad_projected, w, input_precision=PRECISION)
    put_tile(DQ, grad_q * SCALE, b, h, n, N, cols, D, sdq_b, sdq_h, sdq_n, sdq_d)
    part = head * tl.num_programs(1) + tl.program_id(1)
    tl.store(DFLOOR_PARTS + part, tl.sum(grad_floor, axis=0))


@tuned("BATCH", "HEADS", "N", "D", "DV", "F", "ROWS_PER_SPLIT", "FAST_TRIG", halves=True)
@triton.jit
def _feature_grads(
    Q, DO, OUT, W, FLOOR, DEN, DSS_PARTS, DSC_PARTS, DZS_PARTS, DZC_PARTS,
    BATCH, HEADS, N, D, DV, F, ROWS_PER_SPLIT, SCALE,
    sq_b, sq_h, sq_n, sq_d, sdo_b, sdo_h, sdo_n, sdo_d, so_b, so_h, so_n, so_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, PRECISION: tl.constexpr, FAST_TRIG: tl.constexpr,
    HALVES: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    split = tl.program_id(1)
    frequency_block = tl.program_id(2)
    rows = tl.arange(0, BLOCK_N // HALVES)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    fcols = frequency_block * BLOCK_M + tl.arange(0, BLOCK_M)
    w = matrix(W, h, fcols, cols, F, D)
    grad_state_sin = tl.zeros((BLOCK_M, BLOCK_DV), dtype=tl.float32)
    grad_state_cos = tl.zeros((BLOCK_M, BLOCK_DV), dtype=tl.float32)
    grad_sum_sin = tl.zeros((BLOCK_M,), dtype=tl.float32)
    grad_sum_cos = tl.zeros((BLOCK_M,), dtype=tl.float32)
    start, end = split_span(ROWS_PER_SPLIT, N)
    for offset in range(start, end, BLOCK_N // HALVES):
        n = offset + rows
        q = tile(Q, b, h, n, N, cols, D, sq_b, sq_h, sq_n, sq_d)
        grad_numerator, grad_normaliser, _ = _output_gradients(
            DO, OUT, DEN, FLOOR, head, b, h, n, N, vcols, DV,
            sdo_b, sdo_h, sdo_n, sdo_d, so_b, so_h, so_n, so_d,
        )  # fmt: skip
        sin, cos = _sin_cos(q, w, fcols, F, SCALE, PRECISION, FAST_TRIG)
        grad_state_sin += tl.dot(tl.trans(sin), grad_numerator, input_precision=PRECISION)
        grad_state_cos += tl.dot(tl.trans(cos), grad_numerator, input_precision=PRECISION)
        grad_sum_sin += tl.sum(sin * grad_normaliser[:, None], axis=0)
        grad_sum_cos += tl.sum(cos * grad_normaliser[:, None], axis=0)
    part = (head * tl.num_programs(1) + split) * tl.num_programs(2) + frequency_block
    every = tl.arange(0, BLOCK_M)
    put_matrix(DSS_PARTS, grad_state_sin, part, every, vcols, BLOCK_M, DV)
    put_matrix(DSC_PARTS, grad_state_cos, part, every, vcols, BLOCK_M, DV)
    tl.store(DZS_PARTS + part * BLOCK_M + every, grad_sum_sin)
    tl.store(DZC_PARTS + part * BLOCK_M + every, grad_sum_cos)


@tuned("BATCH", "HEADS", "N", "D", "DV", "F", "FAST_TRIG")
@triton.jit
def _key_grads(
    K, V, W, DSS, DSC, DZS, DZC, KEY_MAX, DFLOOR, DK, DVAL,
    BATCH, HEADS, N, D, DV, F, SCALE, WEIGHT_SCALE, eps,
    sk_b, sk_h, sk_n, sk_d, sv_b, sv_h, sv_n, sv_d,
    sdk_b, sdk_h, sdk_n, sdk_d, sdv_b, sdv_h, sdv_n, sdv_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, PRECISION: tl.constexpr, FAST_TRIG: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    k = tile(K, b, h, n, N, cols, D, sk_b, sk_h, sk_n, sk_d)
    v = tile(V, b, h, n, N, vcols, DV, sv_b, sv_h, sv_n, sv_d)
    logits = WEIGHT_SCALE * tl.sum(k * k, axis=1)
    weights = tl.where(n < N, tl.exp(logits - tl.load(KEY_MAX + head)), 0.0)
    grad_k = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    grad_weighted_v = tl.zeros((BLOCK_N, BLOCK_DV), dtype=tl.float32)
    grad_weights = tl.zeros((BLOCK_N,), dtype=tl.float32) + eps * tl.load(DFLOOR + head)
    for first in range(0, F, BLOCK_M):
        fcols = first + tl.arange(0, BLOCK_M)
        w = matrix(W, h, fcols, cols, F, D)
        sin, cos = _sin_cos(k, w, fcols, F, SCALE, PRECISION, FAST_TRIG)
        grad_state_sin = matrix(DSS, head, fcols, vcols, F, DV)
        grad_state_cos = matrix(DSC, head, fcols, vcols, F, DV)
        grad_sum_sin = tl.load(DZS + head * F + fcols, mask=fcols < F, other=0.0)
        grad_sum_cos = tl.load(DZC + head * F + fcols, mask=fcols < F, other=0.0)
        grad_weighted_v += tl.dot(sin, grad_state_sin, input_precision=PRECISION)
        grad_weighted_v += tl.dot(cos, grad_state_cos, input_precision=PRECISION)
        # the gradient for a key's features divided by its weight
        per_sin = tl.dot(v, tl.trans(grad_state_sin), input_precision=PRECISION)
        per_sin += grad_sum_sin[None, :]
        per_cos = tl.dot(v, tl.trans(grad_state_cos), input_precision=PRECISION)
        per_cos += grad_sum_cos[None, :]
        grad_weights += tl.sum(sin * per_sin + cos * per_cos, axis=1)
        grad_projected = (per_sin * cos - per_cos * sin) * weights[:, None]
        grad_k += tl.dot(grad_projected, w, input_precision=PRECISION)
    grad_k = SCALE * grad_k + (2.0 * WEIGHT_SCALE) * (grad_weights * weights)[:, None] * k
    put_tile(DK, grad_k, b, h, n, N, cols, D, sdk_b, sdk_h, sdk_n, sdk_d)
    grad_v = grad_weighted_v * weights[:, None]
    put_tile(DVAL, grad_v, b, h, n, N, vcols, DV, sdv_b, sdv_h, sdv_n, sdv_d)


def _meta(d: int, dv: int, device: torch.device) -> dict[str, object]:
    """The kernels' compile-time arguments."""
    block_n, block_d, block_dv = blocks(d, dv, device, widest=2 * BLOCK_M)
    return dict(
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        BLOCK_DV=block_dv,
        BLOCK_M=BLOCK_M,
        PRECISION=precision(device),
        FAST_TRIG=FAST_TRIG,
    )


def _scales(d: int, sigma: float) -> tuple[float, float]:
    """(s, c): the inputs' scale d^(-1/4) and the keys' weight's sigma^2 s^2 / 2."""
    scale = d**-0.25
    return scale, 0.5 * (sigma * scale) ** 2


def forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    frequencies: torch.Tensor,
    sigma: float,
    eps: float,
) -> tuple[torch.Tensor, ...]:
    """(out, S_sin, S_cos, z_sin, z_cos, M, floor, den) of random feature attention of
    ``(batch, heads, n, d)`` q, k, v of any strides with contiguous fp32 ``(heads, D, d)``
    frequencies: out in v's dtype; the halves of S ``(batch, heads, D, d_v)`` and of z
    ``(batch, heads, D)``, the keys' maximum M and the floor ``(batch, heads)``, the normaliser
    before the floor ``(batch, heads, n)``, in fp32."""
    batch, heads, n_q, d = q.shape
    n_k, dv = k.shape[2], v.shape[3]
    count = frequencies.shape[1]
    scale, weight_scale = _scales(d, sigma)
    meta = _meta(d, dv, q.device)
    frequency_blocks = cdiv(count, BLOCK_M)
    splits, rows_per_split = split_rows(
        n_k, batch * heads * frequency_blocks, meta["BLOCK_N"], q.device
    )
    fp32 = dict(device=q.device, dtype=torch.float32)
    parts = (batch * heads, splits, frequency_blocks * BLOCK_M)
    state_sin_parts = torch.empty(*parts, dv, **fp32)
    state_cos_parts = torch.empty(*parts, dv, **fp32)
    sum_sin_parts = torch.empty(*parts, **fp32)
    sum_cos_parts = torch.empty(*parts, **fp32)
    max_parts = torch.empty(batch * heads, splits, **fp32)
    weight_sum_parts = torch.empty(batch * heads, splits, **fp32)
    _key_state[(batch * heads, splits, frequency_blocks)](
        k, v, frequencies, state_sin_parts, state_cos_parts, sum_sin_parts, sum_cos_parts,
        max_parts, weight_sum_parts,
        batch, heads, n_k, d, dv, count, rows_per_split, scale, weight_scale,
        *strides(k), *strides(v), **meta,
    )  # fmt: skip
    # merged at the head's maximum; the features' two factors 1/sqrt(D) as one division
    key_max = max_parts.amax(dim=1)
    weights = (max_parts - key_max[:, None]).exp_()
    merged = [
        (parts[:, :, :count] * weights.view(*weights.shape, *[1] * (parts.dim() - 2))).sum(1)
        / count
        for parts in (state_sin_parts, state_cos_parts, sum_sin_parts, sum_cos_parts)
    ]
    floor = (weight_sum_parts * weights).sum(1).mul_(eps)
    out = torch.empty(batch, heads, n_q, dv, device=q.device, dtype=v.dtype)
    normaliser = torch.empty(batch, heads, n_q, **fp32)
    _output[(batch * heads, cdiv(n_q, meta["BLOCK_N"]))](
        q, frequencies, *merged, floor, out, normaliser,
        batch, heads, n_q, d, dv, count, scale,
        *strides(q), *strides(out), **meta,
    )  # fmt: skip
    state_sin, state_cos, sum_sin, sum_cos = merged
    return (
        out,
        state_sin.view(batch, heads, count, dv),
        state_cos.view(batch, heads, count, dv),
        sum_sin.view(batch, heads, count),
        sum_cos.view(batch, heads, count),
        key_max.view(batch, heads),
        floor.view(batch, heads),
        normaliser,
    )


def backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    frequencies: torch.Tensor,
    saved: tuple[torch.Tensor, ...],
    sigma: float,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of :func:`forward` given the gradient of its output and what it returned
    (``saved``), each in its input's dtype."""
    out, state_sin, state_cos, sum_sin, sum_cos, key_max, floor, normaliser = saved
    batch, heads, n_q, d = q.shape
    n_k, dv = k.shape[2], v.shape[3]
    count = frequencies.shape[1]
    scale, weight_scale = _scales(d, sigma)
    meta = _meta(d, dv, q.device)
    row_blocks = cdiv(n_q, meta["BLOCK_N"])
    fp32 = dict(device=q.device, dtype=torch.float32)
    grad_q = torch.empty_like(q)
    grad_floor_parts = torch.empty(batch * heads, row_blocks, **fp32)
    _query_grads[(batch * heads, row_blocks)](
        q, grad_out, out, frequencies, state_sin, state_cos, sum_sin, sum_cos, floor,
        normaliser, grad_q, grad_floor_parts,
        batch, heads, n_q, d, dv, count, scale,
        *strides(q), *strides(grad_out), *strides(out), *strides(grad_q), **meta,
    )  # fmt: skip
    frequency_blocks = cdiv(count, BLOCK_M)
    splits, rows_per_split = split_rows(
        n_q, batch * heads * frequency_blocks, meta["BLOCK_N"], q.device
    )
    parts = (batch * heads, splits, frequency_blocks * BLOCK_M)
    grad_parts = [torch.empty(*parts, dv, **fp32), torch.empty(*parts, dv, **fp32)]
    grad_parts += [torch.empty(*parts, **fp32), torch.empty(*parts, **fp32)]
    _feature_grads[(batch * heads, splits, frequency_blocks)](
        q, grad_out, out, frequencies, floor, normaliser, *grad_parts,
        batch, heads, n_q, d, dv, count, rows_per_split, scale,
        *strides(q), *strides(grad_out), *strides(out), **meta,
    )  # fmt: skip
    # the gradients for the sums over the keys, before their division by D
    grad_sums = [parts[:, :, :count].sum(1) / count for parts in grad_parts]
    grad_k = torch.empty_like(k)
    grad_v = torch.empty_like(v)
    _key_grads[(batch * heads, cdiv(n_k, meta["BLOCK_N"]))](
        k, v, frequencies, *grad_sums, key_max, grad_floor_parts.sum(1), grad_k, grad_v,
        batch, heads, n_k, d, dv, count, scale, weight_scale, eps,
        *strides(k), *strides(v), *strides(grad_k), *strides(grad_v), **meta,
    )  # fmt: skip
    return grad_q, grad_k, grad_v
