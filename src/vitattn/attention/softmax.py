"""Exact softmax attention.

Vaswani et al., "Attention Is All You Need", NeurIPS 2017: softmax(Q K^T / sqrt(d)) V.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vitattn.attention.base import AttentionKernel, register_attention
from vitattn.utils.errors import ConfigError

IMPLEMENTATIONS = ("sdpa", "naive")


@register_attention("softmax")
class SoftmaxAttention(AttentionKernel):
    """Scaled dot-product attention, O(n^2 d) time.

    Args:
        impl: ``sdpa`` uses ``torch.nn.functional.scaled_dot_product_attention`` (fused
            FlashAttention / memory-efficient kernels where available); ``naive`` builds the
            explicit n x n weight matrix, the reference the approximations are compared with.
        dropout: dropout on the attention weights, applied in training only.
    """

    def __init__(
        self,
        *,
        seq_len: int,
        heads: int,
        head_dim: int,
        impl: str = "sdpa",
        dropout: float = 0.0,
    ) -> None:
        super().__init__(seq_len=seq_len, heads=heads, head_dim=head_dim)
        if impl not in IMPLEMENTATIONS:
            raise ConfigError(
                f"attention.impl={impl!r} is not valid; choose one of {IMPLEMENTATIONS}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"attention.dropout={dropout} is not valid; choose 0 <= dropout < 1")
        self.impl = impl
        self.dropout = dropout

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        dropout = self.dropout if self.training else 0.0
        if self.impl == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout)
        weights = self.attention_matrix(q, k)
        if dropout:
            weights = F.dropout(weights, p=dropout)
        return weights @ v

    def attention_matrix(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """The explicit ``(batch, heads, n, n)`` matrix softmax(Q K^T / sqrt(d))."""
        return ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, impl={self.impl}, dropout={self.dropout}"
