"""Linear attention with a feature map phi, non-causal, in four Triton kernels.

``FEATURE`` picks phi, computed in fp32 in registers:

``elu``
    phi(x) = elu(x) + 1: linear attention (Katharopoulos et al., "Transformers are RNNs", ICML
    2020; :class:`vitattn.attention.linear.LinearAttention`).
``unit``
    phi(x) = [x / |x|, 1]: the similarity 1 + q^.k^ of first-order Taylor attention
    (:class:`vitattn.attention.taylor.TaylorAttention`). The constant feature is kept apart from
    the d others (a (d + 1)-wide tile would pad to 2d for ``tl.dot``): its state is
    s = V^T 1, its part of the normaliser the number of keys.

Per batch and head, with c the constant feature (1 for ``unit``, 0 for ``elu``):

forward
    ``state``   S = phi(K)^T V, z = phi(K)^T 1 and s = V^T 1: sums over the keys, split into
                ``splits`` partial sums per head (the GPU's parallelism; summed after,
                deterministically)
    ``output``  O = N / den with N = phi(Q) S + c s, den = phi(Q) z + c n_k + eps
backward, recomputing phi(Q), phi(K) and the numerator (only q, k, v, S, z and s are kept)
    ``queries`` dN = dO / den, dden = -rowsum(dO * N) / den^2, dphi(Q) = dN S^T + dden z^T,
                dQ from dphi(Q) through phi, and the partial sums of dS = phi(Q)^T dN,
                dz = phi(Q)^T dden, ds = c dN^T 1
    ``keys``    dphi(K) = V dS^T + 1 dz^T, dK from it through phi, dV = phi(K) dS + c 1 ds^T

Each pass reads each input once and writes each output once, where the plain paths
(``impl=torch``) dispatch dozens of operators with fp32 copies of q, k and v. Products of fp32
values follow torch's float32 matmul precision (TF32 unless it is ``highest``), as the plain
paths' do.

What the kernels share with other fused paths (tiles, blocks, splits) is in
:mod:`~vitattn.attention.fused.tiles`.
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

FEATURES = ("elu", "unit")
"""The feature maps the kernels compute (the module docstring)."""

NORM_EPS = tl.constexpr(1e-12)
"""``unit``: x / max(|x|, NORM_EPS), as ``torch.nn.functional.normalize``'s default."""


@triton.jit
def _phi(x, n, N, cols, D, FEATURE: tl.constexpr):
    """phi(x) of a :func:`_tile` (without ``unit``'s constant feature), zero outside the tensor
    (padding adds nothing)."""
    if FEATURE == "unit":
        norm = tl.sqrt(tl.sum(x * x, axis=1))  # the tile's padding is zero: adds nothing
        return x / tl.maximum(norm, NORM_EPS)[:, None]
    else:
        inside = (n < N)[:, None] & (cols < D)[None, :]
        return tl.where(inside, tl.where(x > 0, x + 1.0, tl.exp(x)), 0.0)


@triton.jit
def _through_phi(x, grad_phi, FEATURE: tl.constexpr):
    """The gradient for x given ``grad_phi``, the gradient for phi(x): for ``elu`` times phi'(x)
    (1 above zero, exp(x) below); for ``unit`` the projection of x / |x|'s Jacobian,
    (g - x^ (x^ . g)) / |x|, or g / NORM_EPS where |x| is below NORM_EPS (``normalize``'s)."""
    if FEATURE == "unit":
        norm = tl.sqrt(tl.sum(x * x, axis=1))
        scale = tl.maximum(norm, NORM_EPS)
        unit = x / scale[:, None]
        along = tl.where(norm > NORM_EPS, tl.sum(unit * grad_phi, axis=1), 0.0)
        return (grad_phi - unit * along[:, None]) / scale[:, None]
    else:
        return grad_phi * tl.where(x > 0, 1.0, tl.exp(x))


@triton.jit
def _numerator_and_normaliser(
    phi_q, state, key_sum, VSUM, head, vcols, DV, N_KEYS, eps,
    PRECISION: tl.constexpr, FEATURE: tl.constexpr,
):  # fmt: skip
    """N = phi(Q) S + c s and den = phi(Q) z + c n_k + eps (the module docstring)."""
    numerator = tl.dot(phi_q, state, input_precision=PRECISION)
    normaliser = tl.sum(phi_q * key_sum[None, :], axis=1) + eps
    if FEATURE == "unit":
        value_sum = tl.load(VSUM + head * DV + vcols, mask=vcols < DV, other=0.0)
        numerator += value_sum[None, :]
        normaliser += N_KEYS
    return numerator, normaliser


@triton.jit
def _state(
    K, V, S_PARTS, Z_PARTS, VSUM_PARTS,
    HEADS, N, D, DV, ROWS_PER_SPLIT,
    sk_b, sk_h, sk_n, sk_d, sv_b, sv_h, sv_n, sv_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    PRECISION: tl.constexpr, FEATURE: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    split = tl.program_id(1)
    rows = tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    state = tl.zeros((BLOCK_D, BLOCK_DV), dtype=tl.float32)
    key_sum = tl.zeros((BLOCK_D,), dtype=tl.float32)
    value_sum = tl.zeros((BLOCK_DV,), dtype=tl.float32)
    start, end = split_span(ROWS_PER_SPLIT, N)
    for offset in range(start, end, BLOCK_N):
        n = offset + rows
        k = tile(K, b, h, n, N, cols, D, sk_b, sk_h, sk_n, sk_d)
        v = tile(V, b, h, n, N, vcols, DV, sv_b, sv_h, sv_n, sv_d)
        phi_k = _phi(k, n, N, cols, D, FEATURE)
        state += tl.dot(tl.trans(phi_k), v, input_precision=PRECISION)
        key_sum += tl.sum(phi_k, axis=0)
        if FEATURE == "unit":
            value_sum += tl.sum(v, axis=0)
    part = head * tl.num_programs(1) + split
    put_matrix(S_PARTS, state, part, cols, vcols, D, DV)
    tl.store(Z_PARTS + part * D + cols, key_sum, mask=cols < D)
    if FEATURE == "unit":
        tl.store(VSUM_PARTS + part * DV + vcols, value_sum, mask=vcols < DV)


@triton.jit
def _output(
    Q, S, Z, VSUM, OUT,
    HEADS, N, D, DV, N_KEYS, eps,
    sq_b, sq_h, sq_n, sq_d, so_b, so_h, so_n, so_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    PRECISION: tl.constexpr, FEATURE: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    state = matrix(S, head, cols, vcols, D, DV)
    key_sum = tl.load(Z + head * D + cols, mask=cols < D, other=0.0)
    phi_q = _phi(tile(Q, b, h, n, N, cols, D, sq_b, sq_h, sq_n, sq_d), n, N, cols, D, FEATURE)
    numerator, normaliser = _numerator_and_normaliser(
        phi_q, state, key_sum, VSUM, head, vcols, DV, N_KEYS, eps, PRECISION, FEATURE
    )
    out = numerator / normaliser[:, None]
    put_tile(OUT, out, b, h, n, N, vcols, DV, so_b, so_h, so_n, so_d)


@triton.jit
def _queries(
    Q, DO, S, Z, VSUM, DQ, DS_PARTS, DZ_PARTS, DVSUM_PARTS,
    HEADS, N, D, DV, N_KEYS, ROWS_PER_SPLIT, eps,
    sq_b, sq_h, sq_n, sq_d, sdo_b, sdo_h, sdo_n, sdo_d, sdq_b, sdq_h, sdq_n, sdq_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    PRECISION: tl.constexpr, FEATURE: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    split = tl.program_id(1)
    rows = tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    state = matrix(S, head, cols, vcols, D, DV)
    key_sum = tl.load(Z + head * D + cols, mask=cols < D, other=0.0)
    grad_state = tl.zeros((BLOCK_D, BLOCK_DV), dtype=tl.float32)
    grad_key_sum = tl.zeros((BLOCK_D,), dtype=tl.float32)
    grad_value_sum = tl.zeros((BLOCK_DV,), dtype=tl.float32)
    start, end = split_span(ROWS_PER_SPLIT, N)
    for offset in range(start, end, BLOCK_N):
        n = offset + rows
        q = tile(Q, b, h, n, N, cols, D, sq_b, sq_h, sq_n, sq_d)
        grad_out = tile(DO, b, h, n, N, vcols, DV, sdo_b, sdo_h, sdo_n, sdo_d)
        phi_q = _phi(q, n, N, cols, D, FEATURE)
        numerator, normaliser = _numerator_and_normaliser(
            phi_q, state, key_sum, VSUM, head, vcols, DV, N_KEYS, eps, PRECISION, FEATURE
        )
        grad_numerator = grad_out / normaliser[:, None]
        grad_normaliser = -tl.sum(grad_out * numerator, axis=1) / (normaliser * normaliser)
        grad_phi_q = tl.dot(grad_numerator, tl.trans(state), input_precision=PRECISION)
        grad_phi_q += grad_normaliser[:, None] * key_sum[None, :]
        grad_q = _through_phi(q, grad_phi_q, FEATURE)
        put_tile(DQ, grad_q, b, h, n, N, cols, D, sdq_b, sdq_h, sdq_n, sdq_d)
        grad_state += tl.dot(tl.trans(phi_q), grad_numerator, input_precision=PRECISION)
        grad_key_sum += tl.sum(phi_q * grad_normaliser[:, None], axis=0)
        if FEATURE == "unit":
            grad_value_sum += tl.sum(grad_numerator, axis=0)  # padding rows' dO is zero
    part = head * tl.num_programs(1) + split
    put_matrix(DS_PARTS, grad_state, part, cols, vcols, D, DV)
    tl.store(DZ_PARTS + part * D + cols, grad_key_sum, mask=cols < D)
    if FEATURE == "unit":
        tl.store(DVSUM_PARTS + part * DV + vcols, grad_value_sum, mask=vcols < DV)


@triton.jit
def _keys(
    K, V, DS, DZ, DVSUM, DK, DVAL,
    HEADS, N, D, DV,
    sk_b, sk_h, sk_n, sk_d, sv_b, sv_h, sv_n, sv_d,
    sdk_b, sdk_h, sdk_n, sdk_d, sdv_b, sdv_h, sdv_n, sdv_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    PRECISION: tl.constexpr, FEATURE: tl.constexpr,
):  # fmt: skip
    head, b, h = program_head(HEADS)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    vcols = tl.arange(0, BLOCK_DV)
    grad_state = matrix(DS, head, cols, vcols, D, DV)
    grad_key_sum = tl.load(DZ + head * D + cols, mask=cols < D, other=0.0)
    k = tile(K, b, h, n, N, cols, D, sk_b, sk_h, sk_n, sk_d)
    v = tile(V, b, h, n, N, vcols, DV, sv_b, sv_h, sv_n, sv_d)
    grad_phi_k = tl.dot(v, tl.trans(grad_state), input_precision=PRECISION)
    # rows past the end stay zero: unit's g / NORM_EPS of them would overflow a half-precision cast
    grad_phi_k = tl.where((n < N)[:, None], grad_phi_k + grad_key_sum[None, :], 0.0)
    grad_k = _through_phi(k, grad_phi_k, FEATURE)
    put_tile(DK, grad_k, b, h, n, N, cols, D, sdk_b, sdk_h, sdk_n, sdk_d)
    grad_v = tl.dot(_phi(k, n, N, cols, D, FEATURE), grad_state, input_precision=PRECISION)
    if FEATURE == "unit":
        grad_v += tl.load(DVSUM + head * DV + vcols, mask=vcols < DV, other=0.0)[None, :]
    put_tile(DVAL, grad_v, b, h, n, N, vcols, DV, sdv_b, sdv_h, sdv_n, sdv_d)


def forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, eps: float, feature: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, S, z, s) of linear attention with the feature map ``feature`` (:data:`FEATURES`);
    ``(batch, heads, n, d)`` inputs of any strides, out in v's dtype, S ``(batch, heads, d, d_v)``,
    z ``(batch, heads, d)`` and s ``(batch, heads, d_v)`` in fp32; s is ``(batch, heads, 0)``
    for ``elu``, which has no constant feature."""
    batch, heads, n_q, d = q.shape
    n_k, dv = k.shape[2], v.shape[3]
    meta = _meta(d, dv, q.device, feature)
    block_n = meta["BLOCK_N"]
    splits, rows_per_split = split_rows(n_k, batch * heads, block_n, q.device)
    fp32 = dict(device=q.device, dtype=torch.float32)
    state_parts = torch.empty(batch * heads, splits, d, dv, **fp32)
    key_sum_parts = torch.empty(batch * heads, splits, d, **fp32)
    unit = feature == "unit"
    # elu: no constant feature; the kernels neither read nor write its pointers
    value_sum_parts = torch.empty(batch * heads, splits, dv, **fp32) if unit else state_parts
    _state[(batch * heads, splits)](
        k, v, state_parts, key_sum_parts, value_sum_parts,
        heads, n_k, d, dv, rows_per_split,
        *strides(k), *strides(v), **meta,
    )  # fmt: skip
    state = state_parts.sum(1).view(batch, heads, d, dv)
    key_sum = key_sum_parts.sum(1).view(batch, heads, d)
    if unit:
        value_sum = value_sum_parts.sum(1).view(batch, heads, dv)
    else:
        value_sum = state.new_empty(batch, heads, 0)
    out = torch.empty(batch, heads, n_q, dv, device=q.device, dtype=v.dtype)
    _output[(batch * heads, cdiv(n_q, block_n))](
        q, state, key_sum, value_sum if unit else state, out,
        heads, n_q, d, dv, n_k, eps,
        *strides(q), *strides(out), **meta,
    )  # fmt: skip
    return out, state, key_sum, value_sum


def backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: torch.Tensor,
    key_sum: torch.Tensor,
    value_sum: torch.Tensor,
    eps: float,
    feature: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of :func:`forward` given the gradient of its output, each in its input's
    dtype."""
    batch, heads, n_q, d = q.shape
    n_k, dv = k.shape[2], v.shape[3]
    meta = _meta(d, dv, q.device, feature)
    block_n = meta["BLOCK_N"]
    splits, rows_per_split = split_rows(n_q, batch * heads, block_n, q.device)
    fp32 = dict(device=q.device, dtype=torch.float32)
    grad_state_parts = torch.empty(batch * heads, splits, d, dv, **fp32)
    grad_key_sum_parts = torch.empty(batch * heads, splits, d, **fp32)
    unit = feature == "unit"
    # elu: no constant feature; the kernels neither read nor write its pointers
    grad_value_sum_parts = torch.empty(batch * heads, splits, dv, **fp32) if unit else state
    grad_q = torch.empty_like(q)
    _queries[(batch * heads, splits)](
        q, grad_out, state, key_sum, value_sum if unit else state,
        grad_q, grad_state_parts, grad_key_sum_parts, grad_value_sum_parts,
        heads, n_q, d, dv, n_k, rows_per_split, eps,
        *strides(q), *strides(grad_out), *strides(grad_q), **meta,
    )  # fmt: skip
    grad_state = grad_state_parts.sum(1)
    grad_key_sum = grad_key_sum_parts.sum(1)
    grad_value_sum = grad_value_sum_parts.sum(1) if unit else state
    grad_k = torch.empty_like(k)
    grad_v = torch.empty_like(v)
    _keys[(batch * heads, cdiv(n_k, block_n))](
        k, v, grad_state, grad_key_sum, grad_value_sum, grad_k, grad_v,
        heads, n_k, d, dv,
        *strides(k), *strides(v), *strides(grad_k), *strides(grad_v), **meta,
    )  # fmt: skip
    return grad_q, grad_k, grad_v


def _meta(d: int, dv: int, device: torch.device, feature: str) -> dict[str, object]:
    """The kernels' compile-time arguments."""
    if feature not in FEATURES:
        raise ValueError(f"feature={feature!r}: the kernels compute one of {FEATURES}")
    block_n, block_d, block_dv = blocks(d, dv, device)
    return dict(
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        BLOCK_DV=block_dv,
        PRECISION=precision(device),
        FEATURE=feature,
    )
