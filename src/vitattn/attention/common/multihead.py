"""Multi-head attention that owns the projections and delegates the mixing to a kernel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from vitattn.attention.common.base import AttentionKernel
from vitattn.errors import ConfigError


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

    A kernel whose keys are derived from its queries (``shared_qk``, Reformer's shared-QK
    attention) gets no key projection: ``qkv`` then projects to queries and values only, and the
    queries are passed as ``k`` too.
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
        self.kernel = attention(seq_len=seq_len, heads=heads, head_dim=self.head_dim)
        self.projections = 2 if self.kernel.shared_qk else 3
        self.qkv = nn.Linear(dim, self.projections * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_dropout = nn.Dropout(proj_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, self.projections, self.heads, self.head_dim)
        projected = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        q, k, v = (projected[0], projected[0], projected[1]) if self.kernel.shared_qk else projected
        out = self.kernel(q, k, v).transpose(1, 2).reshape(batch, tokens, dim)
        return self.proj_dropout(self.proj(out))

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        # Checkpoints from before shared-QK kernels dropped their key projection hold q, k and v
        # rows; the key rows were never used, so they are left out.
        for name in ("weight", "bias"):
            stored = state_dict.get(f"{prefix}qkv.{name}")
            expected = getattr(self.qkv, name)
            if self.projections == 2 and stored is not None and expected is not None:
                old_layout = stored.shape[0] == 3 * expected.shape[0] // 2
                if old_layout:
                    q_rows, _, v_rows = stored.chunk(3, dim=0)
                    state_dict[f"{prefix}qkv.{name}"] = torch.cat([q_rows, v_rows])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
