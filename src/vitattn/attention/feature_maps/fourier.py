"""Random Fourier features, the feature map of random feature attention (RFA).

Rahimi & Recht, "Random Features for Large-Scale Kernel Machines", NeurIPS 2007: by Bochner's
theorem, for w ~ N(0, sigma^2 I),

    phi(x) = sqrt(1/D) [sin(w_1.x), ..., sin(w_D.x), cos(w_1.x), ..., cos(w_D.x)],
    E[phi(x) . phi(y)] = exp(-sigma^2 |x - y|^2 / 2).

Peng et al., "Random Feature Attention", ICLR 2021, turn it into attention: with x = q / d^(1/4),
y = k / d^(1/4) and exp(sigma^2 x.y) = exp(sigma^2 |x|^2/2) exp(sigma^2 |y|^2/2)
exp(-sigma^2 |x - y|^2 / 2), the ratio sum_j phi(x).phi(y_j) g_j v_j / sum_j phi(x).phi(y_j) g_j
with key weights g_j = exp(sigma^2 |y_j|^2 / 2) estimates softmax(sigma^2 q k^T / sqrt(d)) V (the
query's factor cancels). An estimate of a positive sum from sin/cos features can come out near
zero or negative, so the normaliser is floored at ``eps`` times its largest possible value,
sum_j g_j.

Tile by tile (:class:`FourierTiles`), with s = d^(-1/4): the key weights are one per key, logits
sigma^2 s^2 |k|^2 / 2, and psi = [sin(s x W^T), cos(s x W^T)] for keys and queries alike; the two
factors sqrt(1/D) become one division of the sums by D.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from vitattn.attention.common.tiling import block_size, in_block
from vitattn.attention.feature_maps.base import FeatureMap, Features, Layout, Tile, TileFeatures


def fourier_features(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sqrt(1/D) [sin(x W^T), cos(x W^T)] for x ``(..., heads, n, d)``, W ``(heads, D, d)``."""
    projected = x @ weights.transpose(-2, -1)
    return torch.cat([projected.sin(), projected.cos()], dim=-1) * weights.shape[-2] ** -0.5


@dataclass(frozen=True)
class RandomFourier(FeatureMap):
    """RFA's features of q and k scaled by ``scale`` (d^(-1/4)) with ``(heads, D, d)``
    frequencies of standard deviation ``sigma``, the keys' weighted, the normaliser floored at
    ``eps`` times the sum of the key weights."""

    scale: float
    sigma: float
    eps: float

    def features(self, q: Tensor, k: Tensor, weights: Tensor) -> Features:
        x, y = q * self.scale, k * self.scale
        phi_q = fourier_features(x, weights)
        phi_k = fourier_features(y, weights)
        # log g_j = sigma^2 |y_j|^2 / 2, shifted by its max over keys (cancels in the ratio).
        log_key_weight = 0.5 * self.sigma**2 * y.square().sum(dim=-1, keepdim=True)
        key_weight = (log_key_weight - log_key_weight.amax(dim=-2, keepdim=True)).exp()
        floor = self.eps * key_weight.sum(dim=-2, keepdim=True)
        return phi_q, phi_k * key_weight, floor

    def tiles(self, weights: Tensor) -> FourierTiles:
        return FourierTiles(weights, self)


class FourierTiles(TileFeatures):
    """RFA one tile at a time (the module docstring): one weight per key."""

    weights_per_key = True

    def __init__(self, frequencies: Tensor, fourier: RandomFourier) -> None:
        self.count = frequencies.shape[1]
        self.width, self.divisor, self.floor = 2 * self.count, self.count, fourier.eps
        self.frequencies = frequencies * fourier.scale  # s W, (B, D, d)
        self.weight_scale = 0.5 * (fourier.sigma * fourier.scale) ** 2

    def allocate(self, layout: Layout) -> None:
        self.projected = self.frequencies.new_empty(block_size(layout, self.count))
        self.block = self.frequencies.new_empty(block_size(layout, self.width))

    def key_logits(self, x: Tensor, tile: Tile) -> Tensor:
        return x.square().sum(dim=-1, keepdim=True).mul_(self.weight_scale)

    def key_features(self, x: Tensor, tile: Tile) -> Tensor:
        """[sin(s x W^T), cos(s x W^T)], written into the reused buffers (eager), or as one
        expression that the compiler fuses (under ``torch.compile``, whose Dynamo refuses the
        non-contiguous halves of the buffer as ``out=``: a graph break per call)."""
        if torch.compiler.is_compiling():
            projected = x @ self.frequencies[tile[0]].transpose(1, 2)
            return torch.cat([projected.sin(), projected.cos()], dim=-1)
        projected = in_block(self.projected, *tile, self.count)
        torch.bmm(x, self.frequencies[tile[0]].transpose(1, 2), out=projected)
        features = in_block(self.block, *tile, self.width)
        torch.sin(projected, out=features[..., : self.count])
        torch.cos(projected, out=features[..., self.count :])
        return features

    def query_features(self, x: Tensor, tile: Tile, shift: Tensor | None, find: bool) -> Tensor:
        return self.key_features(x, tile)

    def query_gradient(self, grad: Tensor, features: Tensor, x: Tensor, tile: Tile) -> Tensor:
        # d sin(p) = cos(p) dp, d cos(p) = -sin(p) dp; p = s x W^T.
        sin, cos = features[..., : self.count], features[..., self.count :]
        grad_projected = grad[..., : self.count].mul_(cos)
        grad_projected.sub_(grad[..., self.count :].mul_(sin))
        return grad_projected @ self.frequencies[tile[0]]

    def logits_gradient(self, grad: Tensor, x: Tensor, tile: Tile, base: Tensor | None) -> Tensor:
        # l = sigma^2 s^2 |k|^2 / 2: d l / d k = 2 weight_scale k.
        return base.add_(x * grad, alpha=2 * self.weight_scale)
