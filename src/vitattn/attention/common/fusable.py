"""Mechanisms with two paths of one function, chosen by ``impl``: ``torch``, the plain PyTorch
path and the reference, and ``triton``, fused kernels (:mod:`vitattn.attention.fused`). ``auto``
(the default) takes the plain path on a CPU and, on a GPU, the faster of the two per shape, timed
on the first call (:mod:`vitattn.attention.common.autotune`); under ``torch.compile``, which is
not timed, the fused path on a GPU.
"""

from __future__ import annotations

import torch

from vitattn.attention import fused as fused_paths
from vitattn.attention.common import autotune
from vitattn.attention.common.base import AttentionKernel
from vitattn.attention.fused.linear import fused_linear_attention

IMPLEMENTATIONS = ("auto", "torch", "triton")
"""The ``impl`` knob of a mechanism with a fused path."""


class FusedOrPlain(AttentionKernel):
    """A kernel with a plain path (:meth:`plain`) and a fused one (:meth:`fused`) of one
    function, run by the knob ``impl`` (:data:`IMPLEMENTATIONS`), which a subclass checks."""

    impl: str

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        runs = fused_paths.runs_here(self.impl, q.device.type, "impl=torch or impl=auto")
        functions = {"torch": self.plain, "triton": self.fused} if runs else {"torch": self.plain}
        fused = runs and q.device.type != "cpu"
        implementations = autotune.Implementations(
            self.name, functions, default="triton" if fused else "torch"
        )
        return implementations.run(self.impl, q, k, v)

    def fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``impl=triton``: the fused kernels, out in v's dtype."""
        raise NotImplementedError

    def plain(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``impl=torch``: the plain path, out in v's dtype."""
        raise NotImplementedError


class FusableLinearAttention(FusedOrPlain):
    """A linear attention whose fused path is
    :func:`~vitattn.attention.fused.linear.fused_linear_attention` with the feature map
    :attr:`FEATURE`; a subclass checks the knobs ``impl`` and ``eps`` and supplies
    :meth:`plain`."""

    FEATURE: str = ""
    """The fused kernels' feature map (``elu`` or ``unit``)."""

    eps: float

    def fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return fused_linear_attention(q, k, v, self.eps, self.FEATURE)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, eps={self.eps}, impl={self.impl}"
