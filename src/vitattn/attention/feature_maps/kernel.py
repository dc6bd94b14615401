"""What the kernels of feature-map mechanisms share: their implementations and ``impl=auto``."""

from __future__ import annotations

from torch import Tensor

from vitattn.attention import fused as fused_paths
from vitattn.attention.common import autotune
from vitattn.attention.common.base import AttentionKernel
from vitattn.attention.common.tiling import tile_budget
from vitattn.attention.feature_maps.base import FeatureMap
from vitattn.attention.feature_maps.chunked import chunked_attention

IMPLEMENTATIONS = ("auto", "chunked", "autograd")
"""The ``impl`` knob of a feature-map mechanism."""

FUSED_IMPLEMENTATIONS = (*IMPLEMENTATIONS, "triton")
"""The ``impl`` knob of a feature-map mechanism with a fused path
(:attr:`FeatureMapAttention.FUSED`)."""


class FeatureMapAttention(AttentionKernel):
    """A kernel that attends with a :class:`~vitattn.attention.feature_maps.base.FeatureMap` and
    its per-head weights, by ``impl``: ``chunked`` (tiles, a hand-written backward, O(n d) memory:
    :mod:`~vitattn.attention.feature_maps.chunked`), ``autograd`` (the plain reference; both
    compute the same function) or ``auto``: chunked on a CPU, the faster of the two per shape on a
    GPU (:mod:`~vitattn.attention.common.autotune`).

    A subclass checks the knobs ``impl`` and ``tile_memory``, keeps the map's weights in a buffer
    named :attr:`WEIGHTS` and supplies :meth:`feature_map`.
    """

    WEIGHTS: str = ""
    """The buffer of the feature map's weights, ``(heads, rows, head_dim)``."""

    KNOBS: tuple[str, ...] = ()
    """The knobs ``repr`` shows, in order."""

    COST_KNOBS: tuple[str, ...] = ()
    """The knobs that change what a call costs (part of what ``impl=auto`` keeps a choice for)."""

    impl: str
    tile_memory: float

    def feature_map(self) -> FeatureMap:
        """The feature map of this kernel's settings."""
        raise NotImplementedError

    def feature_weights(self) -> Tensor:
        """The feature map's weights in fp32."""
        return getattr(self, self.WEIGHTS).float()

    FUSED: bool = False
    """Whether the mechanism has a fused path (``impl=triton``, :meth:`fused`)."""

    def implementations(self, device_type: str) -> dict[str, autotune.Implementation]:
        """The implementations that can run on a device of this type, by ``impl``'s names:
        ``chunked``, ``autograd`` and, with :attr:`FUSED`, ``triton`` where it can run (which
        ``auto`` then takes off a CPU where it does not time, under ``torch.compile``)."""
        functions = {"chunked": self.chunked, "autograd": self.autograd}
        if not self.FUSED:
            return functions
        instead = "impl=chunked, impl=autograd or impl=auto"
        if fused_paths.runs_here(self.impl, device_type, instead):
            functions["triton"] = self.fused
        return functions

    def fused(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """``impl=triton`` (with :attr:`FUSED`), out in v's dtype."""
        raise NotImplementedError

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Attention of q, k, v by ``impl``, with autocast off: in fp32 by the chunked and
        autograd paths, which cast the inputs; by the fused one in fp32 registers from the inputs'
        own dtype, out in v's."""
        functions = self.implementations(q.device.type)
        fused = "triton" in functions and q.device.type != "cpu"
        implementations = autotune.Implementations(
            self.name,
            functions,
            default="triton" if fused else "chunked",
            settings=tuple(getattr(self, knob) for knob in self.COST_KNOBS),
        )
        return implementations.run(self.impl, q, k, v)

    def chunked(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """``impl=chunked``, in fp32."""
        budget = tile_budget(q.device, self.tile_memory, self.name)
        weights = self.feature_weights()
        q, k, v = q.float(), k.float(), v.float()
        return chunked_attention(q, k, v, weights, self.feature_map(), budget=budget)

    def autograd(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """``impl=autograd``, in fp32."""
        q, k, v = q.float(), k.float(), v.float()
        return self.feature_map().attention(q, k, v, self.feature_weights())

    def extra_repr(self) -> str:
        knobs = ", ".join(f"{knob}={getattr(self, knob)}" for knob in self.KNOBS)
        return f"{super().extra_repr()}, {knobs}"
