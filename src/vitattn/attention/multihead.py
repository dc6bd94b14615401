"""Multi-head attention that owns the projections and delegates the mixing to a kernel."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from vitattn.attention.base import AttentionKernel
from vitattn.utils.errors import ConfigError


class MultiHeadAttention(nn.Module):
    """Project to heads, attend with an injected kernel, project back.

    Args:
        dim: embedding size of the tokens.
        heads: number of heads; must divide ``dim``.
        seq_len: number of tokens, passed on to the kernel.
        attention: factory of the kernel, called with ``seq_len``, ``heads`` and ``head_dim``
            (Hydra's ``_partial_: true`` attention config instantiates to exactly this).
        qkv_bias: whether the q/k/v projection has a bias.
        proj_dropout: dropout after the output projection.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        seq_len: int,
        attention: Callable[..., AttentionKernel],
        qkv_bias: bool = True,
        proj_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if heads < 1 or dim % heads != 0:
            raise ConfigError(
                f"model.embed_dim={dim} is not divisible by model.heads={heads}; "
                f"choose model.heads among the divisors of {dim}: {_divisors(dim)}"
            )
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.kernel = attention(seq_len=seq_len, heads=heads, head_dim=self.head_dim)
        self.proj = nn.Linear(dim, dim)
        self.proj_dropout = nn.Dropout(proj_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        out = self.kernel(q, k, v).transpose(1, 2).reshape(batch, tokens, dim)
        return self.proj_dropout(self.proj(out))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
