"""The chunked kernel of feature-map attention, written once for every map of this package.

It computes phi(Q) (phi(K)^T [V, 1]) without ever holding an (n x features) matrix: it walks
the sequence in tiles (:func:`~vitattn.attention.common.tiling.tiles`), folds the keys into
KV+ = sum_n phi(k_n)^T [v_n, 1] with an online maximum of their logits per head (as
FlashAttention does for softmax), and recomputes each tile's features in a hand-written backward.
Element-wise work then stays in cache and no large tensor is allocated, which on a CPU is most of
the time of the implementation written with autograd; memory saved for backward is O(n d)
instead of O(n features).

With w = exp(l(k) - M) the keys' weights, c the offset, V+ = [V, 1] and psi, l, M as in
:class:`~vitattn.attention.feature_maps.base.TileFeatures`:

    KV+ = sum_n (w_n + c)^T V+_n          (the weights are the features), or
    KV+ = sum_n psi(k_n)^T (w_n V+_n)     (one weight per key);
    O+ = (phi(q) + c) KV+;   out = O+[:d] / max(O+[d], floor),  floor = f sum_n w_n.

The maxima M and the queries' shifts are constants for autograd (each cancels in the ratio).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
from torch import Tensor

from vitattn.attention.common.tiling import (
    TILE_ELEMENTS,
    apply_per_head,
    backward_in_fp32,
    block_size,
    in_block,
    tiles,
    with_column,
)
from vitattn.attention.feature_maps.base import FeatureMap, Layout, TileFeatures


class Keys(NamedTuple):
    """The keys folded by :func:`fold_keys`."""

    kv_plus: Tensor
    """KV+, ``(B, width, d + 1)``."""
    key_max: Tensor
    """M, the maximum of the keys' logits per head, ``(B, 1, 1)``."""
    floor: Tensor | None
    """The normaliser's floor per head, ``(B, 1, 1)``, or ``None``."""


class Queries(NamedTuple):
    """What :func:`attend` keeps of the queries for the backward pass."""

    out: Tensor
    """The attention, ``(B, n, d)``."""
    normaliser: Tensor
    """O+[d] before the floor, ``(B, n, 1)``."""
    shift: Tensor | None
    """Each query's shift, ``(B, n, 1)``, or ``None``."""


class ChunkedFeatureAttention(torch.autograd.Function):
    """Feature-map attention of ``(B, n, d)`` q, k, v with ``(B, rows, d)`` weights (one set per
    flattened (batch, head)), tile by tile, with a hand-written backward that recomputes each
    tile's features. Every tile's features live in buffers reused from tile to tile."""

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        weights: Tensor,
        feature_map: FeatureMap,
        budget: int,
    ) -> Tensor:
        phi = feature_map.tiles(weights)
        layout = tiles(v.shape[0], v.shape[1], phi.width, budget)
        phi.allocate(layout)
        keys = fold_keys(phi, k, v, layout)
        queries = attend(phi, q, keys, layout)
        ctx.save_for_backward(q, k, v, weights, *keys, *queries)
        ctx.feature_map, ctx.layout = feature_map, layout
        return queries.out

    @staticmethod
    @torch.autograd.function.once_differentiable
    @backward_in_fp32
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, weights, *saved = ctx.saved_tensors
        keys, queries = Keys(*saved[:3]), Queries(*saved[3:])
        phi = ctx.feature_map.tiles(weights)
        phi.allocate(ctx.layout)
        grad_block = q.new_empty(block_size(ctx.layout, phi.width))
        grad_q, grad_kv_plus, grad_floor = query_gradients(
            phi, q, grad_out, keys, queries, ctx.layout, grad_block
        )
        grad_k, grad_v = key_gradients(
            phi, k, v, keys.key_max, grad_kv_plus, grad_floor, ctx.layout, grad_block
        )
        return grad_q, grad_k, grad_v, None, None, None


def chunked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    weights: Tensor,
    feature_map: FeatureMap,
    *,
    budget: int = TILE_ELEMENTS,
) -> Tensor:
    """Attention with ``feature_map`` of ``(batch, heads, n, d)`` q, k, v and ``(heads, rows, d)``
    weights per head, computed by :class:`ChunkedFeatureAttention` in tiles of about ``budget``
    elements."""
    return apply_per_head(ChunkedFeatureAttention, q, k, v, weights, feature_map, budget)


def fold_keys(phi: TileFeatures, k: Tensor, v: Tensor, layout: Layout) -> Keys:
    """KV+ over all keys, tile by tile: each tile's weights are shifted by the running maximum
    of the head's logits, and what is summed so far is rescaled when that maximum grows."""
    batch, n, d = v.shape
    kv_plus = k.new_zeros(batch, phi.width, d + 1)
    key_max = k.new_full((batch, 1, 1), -math.inf)
    weight_sum = k.new_zeros(batch, 1, 1)  # with weights per key, for the floor
    for heads, rows in layout:
        key = k[heads, rows]
        logits = phi.key_logits(key, (heads, rows))
        new_max = torch.maximum(key_max[heads], phi.logits_max(logits, key))
        rescale = torch.exp(key_max[heads] - new_max)
        kv_plus[heads] *= rescale
        weights = logits.sub_(new_max).exp_()
        value_plus = with_column(v[heads, rows], 1.0)
        if phi.weights_per_key:
            weight_sum[heads] *= rescale
            weight_sum[heads] += weights.sum(dim=1, keepdim=True)
            features = phi.key_features(key, (heads, rows))
            kv_plus[heads] += features.transpose(1, 2) @ value_plus.mul_(weights)
        else:
            kv_plus[heads] += weights.transpose(1, 2) @ value_plus
        key_max[heads] = new_max
    if phi.offset:  # sum_n c V+_n
        kv_plus[..., :d] += phi.offset * v.sum(dim=1, keepdim=True)
        kv_plus[..., d] += phi.offset * n
    if phi.divisor != 1:
        kv_plus /= phi.divisor
    return Keys(kv_plus, key_max, phi.floor * weight_sum if phi.floor else None)


def attend(phi: TileFeatures, q: Tensor, keys: Keys, layout: Layout) -> Queries:
    """out = O+[:d] / max(O+[d], floor) with O+ = (phi(q) + c) KV+, tile by tile."""
    batch, n, _ = q.shape
    d = keys.kv_plus.shape[-1] - 1
    kv_plus_sum = keys.kv_plus.sum(dim=1, keepdim=True) if phi.offset else None
    out = q.new_empty(batch, n, d)
    normaliser = q.new_empty(batch, n, 1)
    shift = q.new_empty(batch, n, 1) if phi.shifts_queries else None
    for heads, rows in layout:
        tile_shift = None if shift is None else shift[heads, rows]
        features = phi.query_features(q[heads, rows], (heads, rows), tile_shift, find=True)
        out_plus = plus_offset(features, keys.kv_plus, kv_plus_sum, heads, phi.offset)
        normaliser[heads, rows] = out_plus[..., d:]
        denominator = floored(out_plus[..., d:], keys.floor, heads)
        torch.div(out_plus[..., :d], denominator, out=out[heads, rows])
    return Queries(out, normaliser, shift)


def plus_offset(
    features: Tensor, matrix: Tensor, column_sums: Tensor | None, heads: slice, offset: float
) -> Tensor:
    """(features + offset) @ matrix[heads], the offset applied through the column sums of
    ``matrix`` over its rows."""
    if not offset:
        return features @ matrix[heads]
    return torch.baddbmm(column_sums[heads], features, matrix[heads], beta=offset)


def floored(normaliser: Tensor, floor: Tensor | None, heads: slice) -> Tensor:
    """``normaliser`` clamped at the floor of ``heads``, if there is one."""
    return normaliser if floor is None else normaliser.clamp_min(floor[heads])


def output_gradient(
    grad: Tensor, out: Tensor, normaliser: Tensor, floor: Tensor | None, heads: slice
) -> tuple[Tensor, Tensor | None]:
    """The gradient with respect to O+ of out = O+[:d] / max(O+[d], floor), and with respect to
    the floor of each head (summed over the tile's rows) where it holds, given ``grad``."""
    denominator = floored(normaliser, floor, heads)
    grad_denominator = (grad * out).sum(dim=-1, keepdim=True).div_(denominator).neg_()
    if floor is None:
        return with_column(grad / denominator, grad_denominator), None
    below = normaliser < floor[heads]
    grad_out_plus = with_column(grad / denominator, grad_denominator.masked_fill(below, 0.0))
    return grad_out_plus, (grad_denominator * below).sum(dim=1, keepdim=True)


def query_gradients(
    phi: TileFeatures,
    q: Tensor,
    grad_out: Tensor,
    keys: Keys,
    queries: Queries,
    layout: Layout,
    grad_block: Tensor,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """The gradients with respect to q, to KV+ and to the floor, tile by tile over the queries;
    ``grad_block`` holds each tile's gradient of the features."""
    batch, _, d = queries.out.shape
    grad_q = torch.empty_like(q)
    grad_kv_plus = q.new_zeros(batch, phi.width, d + 1)
    grad_out_plus_sum = q.new_zeros(batch, 1, d + 1)  # with an offset
    grad_floor = None if keys.floor is None else q.new_zeros(batch, 1, 1)
    for heads, rows in layout:
        grad_out_plus, grad_tile_floor = output_gradient(
            grad_out[heads, rows],
            queries.out[heads, rows],
            queries.normaliser[heads, rows],
            keys.floor,
            heads,
        )
        if grad_floor is not None:
            grad_floor[heads] += grad_tile_floor
        if phi.offset:
            grad_out_plus_sum[heads] += grad_out_plus.sum(dim=1, keepdim=True)
        query = q[heads, rows]
        shift = None if queries.shift is None else queries.shift[heads, rows]
        features = phi.query_features(query, (heads, rows), shift, find=False)
        grad_kv_plus[heads] += features.transpose(1, 2) @ grad_out_plus
        grad_features = in_block(grad_block, heads, rows, phi.width)
        torch.bmm(grad_out_plus, keys.kv_plus[heads].transpose(1, 2), out=grad_features)
        grad_q[heads, rows] = phi.query_gradient(grad_features, features, query, (heads, rows))
    if phi.offset:  # c is in every query feature
        grad_kv_plus += phi.offset * grad_out_plus_sum
    if phi.divisor != 1:
        grad_kv_plus /= phi.divisor
    return grad_q, grad_kv_plus, grad_floor


def key_gradients(
    phi: TileFeatures,
    k: Tensor,
    v: Tensor,
    key_max: Tensor,
    grad_kv_plus: Tensor,
    grad_floor: Tensor | None,
    layout: Layout,
    grad_block: Tensor,
) -> tuple[Tensor, Tensor]:
    """The gradients with respect to k and v, tile by tile over the keys, from those with
    respect to KV+ and to the floor; ``grad_block`` holds each tile's gradient of the features."""
    d = v.shape[2]
    grad_k, grad_v = torch.empty_like(k), torch.empty_like(v)
    grad_kv = None if phi.weights_per_key else grad_kv_plus[..., :d].contiguous()
    grad_kv_sum = grad_kv.sum(dim=1, keepdim=True) if phi.offset else None
    for heads, rows in layout:
        key, value_plus = k[heads, rows], with_column(v[heads, rows], 1.0)
        weights = phi.key_logits(key, (heads, rows)).sub_(key_max[heads]).exp_()
        grad_features = in_block(grad_block, heads, rows, phi.width)
        if phi.weights_per_key:  # KV+ = sum psi^T (w V+): the gradient of w V+ is psi grad_KV+
            features = phi.key_features(key, (heads, rows))
            grad_weighted = features @ grad_kv_plus[heads]
            grad_v[heads, rows] = grad_weighted[..., :d] * weights
            grad_weights = (grad_weighted * value_plus).sum(dim=-1, keepdim=True)
            if grad_floor is not None:  # floor = f sum w
                grad_weights += phi.floor * grad_floor[heads]
            value_plus.mul_(weights)
            torch.bmm(value_plus, grad_kv_plus[heads].transpose(1, 2), out=grad_features)
            base = phi.query_gradient(grad_features, features, key, (heads, rows))
        else:  # KV+ = sum (w + c)^T V+
            grad_v[heads, rows] = plus_offset(weights, grad_kv, grad_kv_sum, heads, phi.offset)
            torch.bmm(value_plus, grad_kv_plus[heads].transpose(1, 2), out=grad_features)
            grad_weights, base = grad_features, None
        grad_logits = grad_weights.mul_(weights)  # d w = w d l
        grad_k[heads, rows] = phi.logits_gradient(grad_logits, key, (heads, rows), base)
    return grad_k, grad_v
