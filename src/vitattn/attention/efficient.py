"""Efficient attention: softmax over the query features and over the key positions.

Shen et al., "Efficient Attention: Attention with Linear Complexities", WACV 2021 (arXiv 2018).
softmax_row(Q) (softmax_col(K)^T V): the keys' softmax over the sequence makes each of the d
"global context" vectors a convex combination of values; each query mixes them with its own
softmax over features. O(n d^2).
"""

from __future__ import annotations

import torch

from vitattn.attention.common.base import AttentionKernel, register_attention


@register_attention("efficient")
class EfficientAttention(AttentionKernel):
    """Efficient attention (Shen et al.), no knobs; normalisation as in the paper (no scaling)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        queries = q.softmax(dim=-1)  # over each query's features
        keys = k.softmax(dim=-2)  # over the sequence, per feature
        context = keys.transpose(-2, -1) @ v  # (batch, heads, d, d_v)
        return (queries @ context.to(queries.dtype)).to(v.dtype)
