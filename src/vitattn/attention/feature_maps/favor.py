"""FAVOR+: positive orthogonal random features, the feature map of Performer attention.

Choromanski et al., "Rethinking Attention with Performers", ICLR 2021. For w ~ N(0, I),
exp(x.y) = E[exp(w.x - |x|^2/2) exp(w.y - |y|^2/2)], so phi(x) = exp(W x - |x|^2/2) / sqrt(m)
with m random rows W estimates the softmax kernel without bias and with *positive* features
(x = q / d^(1/4), y = k / d^(1/4)). The rows of W come in blocks of d orthogonal directions with
chi-distributed lengths (:func:`orthogonal_gaussian_rows`), which lowers the variance.

Factors common to one query's features, or to all keys' features of a head, cancel in the
ratio: features are computed without 1/sqrt(m), their exponents shifted by maxima, plus ``eps``.
Where the shifts are taken is the ``stabilizer`` (:func:`positive_features`; the Performer
module's docstring says what each one estimates).

Tile by tile (:class:`FavorTiles`), with s = d^(-1/4): a key's logits s k.w - s^2 |k|^2 / 2 are
one product [k, -s^2 |k|^2 / 2] . [s w, 1], shifted by M, the head's maximum of them
(``unbiased``) or of s k.w alone (``authors``); a query's are s q.w (``unbiased``; its
-s^2 |q|^2 / 2 cancels) or the keys' product (``authors``), shifted by the query's maximum of
s q.w; the weights exp(l - M) are the features, and ``eps`` is the offset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from vitattn.attention.common.tiling import block_size, in_block, with_column
from vitattn.attention.feature_maps.base import FeatureMap, Features, Layout, Tile, TileFeatures

STABILIZERS = ("authors", "unbiased")


def orthogonal_gaussian_rows(
    rows: int, dim: int, device: torch.device, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``(rows, dim)`` matrix whose rows come in blocks of ``dim`` orthogonal directions, each row
    scaled to the length of a Gaussian vector, so every row is marginally N(0, I)."""
    blocks = []
    for _ in range(math.ceil(rows / dim)):
        gaussian = torch.randn(dim, dim, device=device, dtype=torch.float32, generator=generator)
        orthonormal, triangular = torch.linalg.qr(gaussian)
        # Haar-distributed Q (Mezzadri 2007): without this sign fix each row's direction is
        # biased (row i's i-th coordinate leans negative; row 0's is never positive).
        orthonormal = orthonormal * torch.diagonal(triangular).sign().unsqueeze(0)
        blocks.append(orthonormal.T)
    directions = torch.cat(blocks)[:rows]
    lengths = torch.randn(rows, dim, device=device, dtype=torch.float32, generator=generator).norm(
        dim=1
    )
    return directions * lengths.unsqueeze(1)


def positive_features(
    x: torch.Tensor,
    projection: torch.Tensor,
    *,
    is_query: bool,
    eps: float,
    stabilizer: str = "unbiased",
) -> torch.Tensor:
    """FAVOR+ features of ``x`` ``(batch, heads, n, d)`` up to factors that cancel in attention.

    phi(x) = exp(w.x - |x|^2/2) / sqrt(m). In the ratio phi(q) (phi(K)^T V) / phi(q) (phi(K)^T 1)
    a factor common to one query's features cancels, and so does one common to all keys' features
    of a head: no 1/sqrt(m), and each exponent is shifted by a maximum (a constant for autograd,
    ``detach``), over the query's features or over all keys and features of the head.
    ``unbiased``: a query's |q|^2/2 is dropped and the maxima are of the whole exponents;
    ``authors``: every exponent keeps its |x|^2/2 and the maxima are of w.x alone.
    """
    projected = x @ projection.transpose(-2, -1)  # (batch, heads, n, m)
    over = (-1,) if is_query else (-2, -1)
    if stabilizer == "authors":
        shift = projected.amax(dim=over, keepdim=True).detach()
        exponent = projected - 0.5 * x.square().sum(dim=-1, keepdim=True) - shift
    elif is_query:
        exponent = projected - projected.amax(dim=-1, keepdim=True).detach()
    else:
        exponent = projected - 0.5 * x.square().sum(dim=-1, keepdim=True)
        exponent = exponent - exponent.amax(dim=over, keepdim=True).detach()
    return exponent.exp() + eps


@dataclass(frozen=True)
class Favor(FeatureMap):
    """FAVOR+ features of q and k scaled by ``scale`` (d^(-1/4)) with a ``(heads, m, d)``
    projection, ``eps`` added to each feature, shifted as ``stabilizer`` says."""

    scale: float
    eps: float
    stabilizer: str = "unbiased"

    def features(self, q: Tensor, k: Tensor, weights: Tensor) -> Features:
        settings = {"eps": self.eps, "stabilizer": self.stabilizer}
        phi_q = positive_features(q * self.scale, weights, is_query=True, **settings)
        phi_k = positive_features(k * self.scale, weights, is_query=False, **settings)
        return phi_q, phi_k, None

    def tiles(self, weights: Tensor) -> FavorTiles:
        return FavorTiles(weights, self)


class FavorTiles(TileFeatures):
    """FAVOR+ one tile at a time (the module docstring): the weights are the features."""

    shifts_queries = True

    def __init__(self, projection: Tensor, favor: Favor) -> None:
        self.scale, self.offset = favor.scale, favor.eps
        self.authors = favor.stabilizer == "authors"
        self.width = projection.shape[1]
        self.projection = projection * self.scale  # s w, (B, m, d)
        self.extended = with_column(self.projection, 1.0)  # [s w, 1], (B, m, d + 1)

    def allocate(self, layout: Layout) -> None:
        self.block = self.projection.new_empty(block_size(layout, self.width))

    def key_logits(self, x: Tensor, tile: Tile) -> Tensor:
        logits = in_block(self.block, *tile, self.width)
        extended_t = self.extended[tile[0]].transpose(1, 2)
        return torch.bmm(key_rows(x, self.scale), extended_t, out=logits)

    def logits_max(self, logits: Tensor, x: Tensor) -> Tensor:
        if not self.authors:
            return super().logits_max(logits, x)
        # The maximum of s k.w: each row's maximum plus its s^2 |k|^2 / 2.
        rows_max = logits.amax(dim=2) + half_square_norm(x, self.scale)
        return rows_max.amax(dim=1).view(-1, 1, 1)

    def query_features(self, x: Tensor, tile: Tile, shift: Tensor | None, find: bool) -> Tensor:
        if self.authors:
            logits = self.key_logits(x, tile)
            if find:
                shift[...] = (logits.amax(dim=-1) + half_square_norm(x, self.scale)).unsqueeze(-1)
        else:
            logits = in_block(self.block, *tile, self.width)
            torch.bmm(x, self.projection[tile[0]].transpose(1, 2), out=logits)
            if find:
                torch.amax(logits, dim=-1, keepdim=True, out=shift)
        return logits.sub_(shift).exp_()

    def query_gradient(self, grad: Tensor, features: Tensor, x: Tensor, tile: Tile) -> Tensor:
        grad_logits = grad.mul_(features)
        if self.authors:  # the keys' logits
            return self.logits_gradient(grad_logits, x, tile, None)
        return grad_logits @ self.projection[tile[0]]

    def logits_gradient(self, grad: Tensor, x: Tensor, tile: Tile, base: Tensor | None) -> Tensor:
        # Of [x, -s^2 |x|^2 / 2] . [s w, 1]: the last column carries the sum over features of
        # the gradient, times -s^2 x.
        grad_row = grad @ self.extended[tile[0]]
        d = x.shape[-1]
        return torch.addcmul(grad_row[..., :d], x, grad_row[..., d:], value=-(self.scale**2))


def half_square_norm(x: torch.Tensor, scale: float) -> torch.Tensor:
    """s^2 |x|^2 / 2 of each row of ``x`` (its last axis summed)."""
    return x.square().sum(dim=-1).mul_(0.5 * scale**2)


def key_rows(k: torch.Tensor, scale: float) -> torch.Tensor:
    """[k, -s^2 |k|^2 / 2]: with [s w, 1], one product gives the key exponent s k.w - s^2|k|^2/2."""
    return with_column(k, k.square().sum(dim=-1, keepdim=True).mul_(-0.5 * scale**2))
