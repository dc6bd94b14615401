"""What a feature map supplies: phi written with autograd, and phi one tile at a time.

A :class:`FeatureMap` holds a map's settings (frozen, hashable); its weights (a projection,
frequencies: ``(heads, rows, d)``, one set per head) are passed alongside, since a mechanism may
redraw them. :meth:`FeatureMap.attention` is the attention written with autograd on top of phi
(``impl=autograd``); :meth:`FeatureMap.tiles` gives the :class:`TileFeatures` that the chunked
kernel (:mod:`~vitattn.attention.feature_maps.chunked`) evaluates a tile at a time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from torch import Tensor

Tile = tuple[slice, slice]
"""``(heads, rows)``: one tile of :func:`~vitattn.attention.common.tiling.tiles`."""

Layout = list[Tile]

Features = tuple[Tensor, Tensor, Tensor | None]
"""phi(q), phi(k) and the normaliser's floor (``None``: none)."""


class FeatureMap(ABC):
    """A feature map phi, for ``(heads, rows, d)`` weights per head passed alongside."""

    @abstractmethod
    def features(self, q: Tensor, k: Tensor, weights: Tensor) -> Features:
        """phi(q) and phi(k) for ``(batch, heads, n, d)`` q and k, with autograd, and the
        normaliser's floor (broadcast against ``(batch, heads, n, 1)``) or ``None``."""

    @abstractmethod
    def tiles(self, weights: Tensor) -> TileFeatures:
        """phi as the chunked kernel evaluates it, for ``(B, rows, d)`` weights: one set per
        flattened (batch, head)."""

    def attention(self, q: Tensor, k: Tensor, v: Tensor, weights: Tensor) -> Tensor:
        """phi(Q) (phi(K)^T V) / phi(Q) (phi(K)^T 1) written with autograd (``impl=autograd``),
        the normaliser floored where the map says so; whole feature matrices are kept for the
        backward pass."""
        phi_q, phi_k, floor = self.features(q, k, weights)
        key_values = phi_k.transpose(-2, -1) @ v  # (batch, heads, features, d)
        normaliser = phi_q @ phi_k.sum(dim=-2).unsqueeze(-1)  # (batch, heads, n, 1)
        if floor is not None:
            normaliser = normaliser.clamp_min(floor)
        return (phi_q @ key_values) / normaliser


class TileFeatures(ABC):
    """phi one tile of ``(heads, rows)`` at a time, and its derivative, for the chunked kernel.

    ``x`` is a tile's queries or keys, ``(heads, rows, d)``; ``tile`` says where it lies. A key's
    features are phi(k) = psi(k) w(k) + :attr:`offset`, with weights w(k) = exp(l(k) - M): the
    kernel shifts the logits l(k) (:meth:`key_logits`) by M, their maximum over the head, found
    online (:meth:`logits_max` of each tile), and exponentiates them. Either the weights are the
    features (one logit per feature, psi = 1: FAVOR+), or there is one weight per key
    (:attr:`weights_per_key`: random Fourier features, psi(k) from :meth:`key_features`), which
    the kernel puts on the key's value, (d + 1) products instead of one per feature. A query's
    features come whole from :meth:`query_features`.
    """

    width: int
    """Features per token."""

    offset: float = 0.0
    """A constant in every feature (FAVOR+'s eps), which the kernel adds to the sums instead."""

    floor: float = 0.0
    """With :attr:`weights_per_key`, the normaliser is floored at this times the sum of the keys'
    weights (0: no floor)."""

    divisor: int = 1
    """The sums over keys are divided by this: a constant factor of the features (1/sqrt(D) on
    the queries' and on the keys' random Fourier features)."""

    weights_per_key: bool = False
    """One weight per key (psi(k) w(k)) instead of weights that are the features."""

    shifts_queries: bool = False
    """:meth:`query_features` shifts each query's exponents by a constant of that query, which
    the forward pass finds and the backward pass reuses."""

    @abstractmethod
    def allocate(self, layout: Layout) -> None:
        """Make the buffers that every tile of ``layout`` reuses for its features."""

    @abstractmethod
    def key_logits(self, x: Tensor, tile: Tile) -> Tensor:
        """l(k), ``(heads, rows, width)`` or, with :attr:`weights_per_key`, ``(heads, rows, 1)``:
        a tensor the kernel may overwrite."""

    def logits_max(self, logits: Tensor, x: Tensor) -> Tensor:
        """The shift of one tile's key logits, per head ``(heads, 1, 1)``: their maximum."""
        return logits.amax(dim=(1, 2), keepdim=True)

    def key_features(self, x: Tensor, tile: Tile) -> Tensor:
        """psi(k), ``(heads, rows, width)`` (with :attr:`weights_per_key` only)."""
        raise NotImplementedError(f"{type(self).__name__} has no features apart from weights")

    @abstractmethod
    def query_features(self, x: Tensor, tile: Tile, shift: Tensor | None, find: bool) -> Tensor:
        """phi(q) less the offset, ``(heads, rows, width)``. With :attr:`shifts_queries`,
        ``shift`` ``(heads, rows, 1)`` holds each query's shift: written where ``find`` (the
        forward pass), read otherwise."""

    @abstractmethod
    def query_gradient(self, grad: Tensor, features: Tensor, x: Tensor, tile: Tile) -> Tensor:
        """The gradient with respect to ``x`` of :meth:`query_features` (``features``, which it
        may overwrite) given ``grad``, theirs; with :attr:`weights_per_key` also that of
        :meth:`key_features`."""

    @abstractmethod
    def logits_gradient(self, grad: Tensor, x: Tensor, tile: Tile, base: Tensor | None) -> Tensor:
        """The gradient with respect to ``x`` of :meth:`key_logits` given ``grad``, theirs, plus
        ``base`` (with :attr:`weights_per_key`: the gradient through psi), which it may
        overwrite."""
