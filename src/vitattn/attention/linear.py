"""Linear attention with the elu(x)+1 feature map.

Katharopoulos et al., "Transformers are RNNs: Fast Autoregressive Transformers with Linear
Attention", ICML 2020. softmax(q k^T) is replaced by phi(q) phi(k)^T with phi = elu + 1, and the
product is reassociated: phi(Q) (phi(K)^T V) costs O(n d^2) instead of O(n^2 d).

Two implementations of one function (``impl``): ``torch``, the plain path and the reference, and
``triton``, four fused kernels (:mod:`vitattn.attention.fused.linear`, feature map ``elu``) that
read q, k and v once per pass; ``auto`` chooses (:mod:`vitattn.attention.common.fusable`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vitattn.attention.common import knobs
from vitattn.attention.common.base import register_attention
from vitattn.attention.common.fusable import IMPLEMENTATIONS, FusableLinearAttention
from vitattn.attention.common.tiling import with_column


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1, positive everywhere."""
    return F.elu(x) + 1.0


@register_attention("linear")
class LinearAttention(FusableLinearAttention):
    """Non-causal linear attention, O(n d^2).

    Args:
        eps: added to the normaliser phi(q) . sum_j phi(k_j) to keep the division finite.
        impl: ``torch`` (the plain path), ``triton`` (fused kernels: a CUDA GPU, or a CPU under
            ``TRITON_INTERPRET=1``) or ``auto`` (see the module docstring).

    The feature map and the running sums are computed in fp32 whatever the autocast dtype: the
    key sum grows with n and overflows fp16, and elu(x)+1 rounds to 0 in bf16 for x below about -6.
    """

    FEATURE = "elu"

    def __init__(
        self, *, seq_len: int, heads: int, head_dim: int, eps: float = 1e-6, impl: str = "auto"
    ) -> None:
        super().__init__(seq_len=seq_len, heads=heads, head_dim=head_dim)
        self.eps = knobs.positive("eps", eps)
        self.impl = knobs.one_of("impl", impl, IMPLEMENTATIONS)

    def plain(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``impl=torch``: the plain path, in fp32 whatever the autocast dtype, out in v's."""
        with torch.autocast(device_type=q.device.type, enabled=False):
            phi_q = elu_feature_map(q.float())
            phi_k = elu_feature_map(k.float())
            # phi(K)^T [V, 1]: the key sum is the last column of one product, and phi(q) times
            # it gives numerator and normaliser together (fewer dispatches, docs/attention.md).
            key_values = phi_k.transpose(-2, -1) @ with_column(v.float(), 1.0)  # (d, d_v + 1)
            out_plus = phi_q @ key_values  # (batch, heads, n, d_v + 1)
            d = v.shape[-1]
            out = out_plus[..., :d] / (out_plus[..., d:] + self.eps)
        return out.to(v.dtype)
