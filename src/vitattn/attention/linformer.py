"""Linformer: softmax attention over keys and values projected to a fixed length k.

Wang et al., "Linformer: Self-Attention with Linear Complexity", arXiv:2006.04768, 2020. Learned
projections E, F of shape (k, n) compress the n keys and values along the sequence axis:
softmax(Q (E K)^T / sqrt(d)) (F V), O(n k d). E and F are shared across heads (the paper's
"headwise sharing"), and with ``share_kv`` E = F ("key-value sharing").

Because E and F have n columns, a Linformer layer is tied to the token count it was built for.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vitattn.attention.common import knobs
from vitattn.attention.common.base import AttentionKernel, register_attention
from vitattn.errors import ConfigError


@register_attention("linformer")
class LinformerAttention(AttentionKernel):
    """Softmax attention to k learned mixtures of the keys and values, O(n k d).

    Args:
        k: projected length; ``None`` takes the founding report's choice, ``seq_len // 8``
            (at least 1). Must not exceed ``seq_len``.
        share_kv: use one projection for keys and values (E = F).
    """

    def __init__(
        self,
        *,
        seq_len: int,
        heads: int,
        head_dim: int,
        k: int | None = None,
        share_kv: bool = False,
    ) -> None:
        super().__init__(seq_len=seq_len, heads=heads, head_dim=head_dim)
        if k is None:
            k = max(1, self.seq_len // 8)
        elif knobs.integer("k", k) > self.seq_len:
            raise ConfigError(
                f"attention.k={k} is larger than the {self.seq_len} tokens it attends over; "
                f"choose 1 <= attention.k <= {self.seq_len} (or null for seq_len // 8)"
            )
        self.k = int(k)
        self.share_kv = knobs.flag("share_kv", share_kv)
        self.key_projection = nn.Parameter(torch.empty(k, self.seq_len))
        self.value_projection = (
            None if self.share_kv else nn.Parameter(torch.empty(k, self.seq_len))
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # As a Linear(seq_len -> k) layer with Xavier initialisation (fairseq's Linformer).
        bound = math.sqrt(6.0 / (self.k + self.seq_len))
        for projection in (self.key_projection, self.value_projection):
            if projection is not None:
                nn.init.uniform_(projection, -bound, bound)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        tokens = k.shape[-2]
        if tokens != self.seq_len:
            raise ConfigError(
                f"linformer was built for {self.seq_len} tokens but got {tokens}; its E, F "
                "projections fix the sequence length (rebuild with the model's seq_len)"
            )
        value_projection = (
            self.key_projection if self.value_projection is None else self.value_projection
        )
        keys = self.key_projection.to(k.dtype) @ k  # (batch, heads, k, head_dim)
        values = value_projection.to(v.dtype) @ v
        return F.scaled_dot_product_attention(q, keys, values)

    def exact_because(self) -> str | None:
        if self.k < self.seq_len:
            return None
        return (
            f"k {self.k} >= {self.seq_len} tokens: no compression (E, F are square "
            f"{self.k} x {self.seq_len} mixings of the tokens; with E = F = I this is softmax)"
        )

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        stored = state_dict.get(prefix + "key_projection")
        if stored is not None and stored.shape != self.key_projection.shape:
            raise ConfigError(
                f"this linformer checkpoint has projections for k={stored.shape[0]}, "
                f"seq_len={stored.shape[1]} tokens, but the model has k={self.k}, "
                f"seq_len={self.seq_len}; use the checkpoint's model.patch_size/model.pool "
                "and attention.k"
            )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, k={self.k}, share_kv={self.share_kv}"
