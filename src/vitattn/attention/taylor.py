"""First-order Taylor attention: exp(q.k) ~ 1 + q.k on L2-normalised queries and keys.

The similarity 1 + q^.k^ with q^ = q/|q|, k^ = k/|k| lies in [0, 2], so the normalised weights
stay non-negative (the reason for normalising; cf. Li et al., "Linear Attention Mechanism: An
Efficient Attention for Semantic Segmentation", 2020). Computed with running sums in O(n d^2):
out_i = (sum_j v_j + q^_i (K^^T V)) / (n + q^_i . sum_j k^_j); the n x n matrix is never built.

This is linear attention with the feature map phi(x) = [x^, 1], and has its two paths (``impl``):
``torch``, the plain path and the reference, and ``triton``, the fused kernels of
:mod:`vitattn.attention.fused.linear` with feature map ``unit``; ``auto`` chooses
(:mod:`vitattn.attention.common.fusable`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vitattn.attention.common import knobs
from vitattn.attention.common.base import register_attention
from vitattn.attention.common.fusable import IMPLEMENTATIONS, FusableLinearAttention
from vitattn.attention.common.tiling import with_column


@register_attention("taylor")
class TaylorAttention(FusableLinearAttention):
    """Linear attention with similarity 1 + q^.k^, O(n d^2).

    Args:
        eps: added to the normaliser (it is 0 only when every key points opposite the query).
        impl: ``torch`` (the plain path), ``triton`` (fused kernels: a CUDA GPU, or a CPU under
            ``TRITON_INTERPRET=1``) or ``auto`` (see the module docstring).

    Sums run in fp32 whatever the autocast dtype.
    """

    FEATURE = "unit"

    def __init__(
        self, *, seq_len: int, heads: int, head_dim: int, eps: float = 1e-6, impl: str = "auto"
    ) -> None:
        super().__init__(seq_len=seq_len, heads=heads, head_dim=head_dim)
        self.eps = knobs.positive("eps", eps)
        self.impl = knobs.one_of("impl", impl, IMPLEMENTATIONS)

    def plain(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``impl=torch``: the plain path, in fp32 whatever the autocast dtype, out in v's."""
        with torch.autocast(device_type=q.device.type, enabled=False):
            q_hat = F.normalize(q.float(), dim=-1)
            k_hat = F.normalize(k.float(), dim=-1)
            # [V, 1]: the normaliser is the last column of the numerator's products, so one
            # product of each kind gives both (fewer dispatches, docs/attention.md).
            values_plus = with_column(v.float(), 1.0)  # (batch, heads, n, d_v + 1)
            out_plus = torch.baddbmm(
                values_plus.sum(dim=-2, keepdim=True).flatten(0, -3),  # [sum_j v_j, n]
                q_hat.flatten(0, -3),
                (k_hat.transpose(-2, -1) @ values_plus).flatten(0, -3),
            ).view_as(values_plus)
            d = v.shape[-1]
            out = out_plus[..., :d] / (out_plus[..., d:] + self.eps)
        return out.to(v.dtype)
