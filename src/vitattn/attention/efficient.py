"""Efficient attention: softmax over the query features and over the key positions.

Shen et al., "Efficient Attention: Attention with Linear Complexities", WACV 2021 (arXiv 2018).
softmax_row(Q) (softmax_col(K)^T V): the keys' softmax over the sequence makes each of the d
"global context" vectors a convex combination of values; each query mixes them with its own
softmax over features. O(n d^2).

Two implementations of one function (``impl``): ``torch``, the plain path and the reference, and
``triton``, four fused kernels (:mod:`vitattn.attention.fused.efficient`) that read q, k and v once
per pass; ``auto`` chooses (:mod:`vitattn.attention.common.fusable`).
"""

from __future__ import annotations

import torch

from vitattn.attention.common import knobs
from vitattn.attention.common.base import register_attention
from vitattn.attention.common.fusable import IMPLEMENTATIONS, FusedOrPlain
from vitattn.attention.fused.efficient import fused_efficient_attention


@register_attention("efficient")
class EfficientAttention(FusedOrPlain):
    """Efficient attention (Shen et al.); normalisation as in the paper (no scaling).

    Args:
        impl: ``torch`` (the plain path), ``triton`` (fused kernels: a CUDA GPU, or a CPU under
            ``TRITON_INTERPRET=1``) or ``auto`` (see the module docstring).
    """

    def __init__(self, *, seq_len: int, heads: int, head_dim: int, impl: str = "auto") -> None:
        super().__init__(seq_len=seq_len, heads=heads, head_dim=head_dim)
        self.impl = knobs.one_of("impl", impl, IMPLEMENTATIONS)

    def plain(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``impl=torch``: the plain path, out in v's dtype."""
        queries = q.softmax(dim=-1)  # over each query's features
        keys = k.softmax(dim=-2)  # over the sequence, per feature
        context = keys.transpose(-2, -1) @ v  # (batch, heads, d, d_v)
        return (queries @ context.to(queries.dtype)).to(v.dtype)

    def fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return fused_efficient_attention(q, k, v)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, impl={self.impl}"
