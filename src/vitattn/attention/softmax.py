"""Exact softmax attention.

Vaswani et al., "Attention Is All You Need", NeurIPS 2017: softmax(Q K^T / sqrt(d)) V.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from vitattn.attention.common import knobs
from vitattn.attention.common.base import AttentionKernel, register_attention
from vitattn.errors import ConfigError

IMPLEMENTATIONS = ("auto", "sdpa", "naive")
SDPA_BACKENDS = {
    "auto": None,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}
"""``sdpa_backend``: torch's choice, or the one fused kernel allowed (``torch.nn.attention``)."""
# impl=auto on a CPU in bf16/fp16 builds the explicit matrix up to this many tokens: below it the
# explicit matrix's half-precision products beat the CPU's fused kernel (docs/attention.md).
CPU_HALF_EXPLICIT_MAX_TOKENS = 512


@register_attention("softmax")
class SoftmaxAttention(AttentionKernel):
    """Scaled dot-product attention, O(n^2 d) time.

    Args:
        impl: ``sdpa`` uses ``torch.nn.functional.scaled_dot_product_attention`` (fused
            FlashAttention / memory-efficient kernels where available); ``naive`` builds the
            explicit n x n weight matrix, the reference the approximations are compared with;
            ``auto`` is ``sdpa`` except on a CPU in bf16/fp16 with at most
            ``CPU_HALF_EXPLICIT_MAX_TOKENS`` tokens, where the explicit matrix's half-precision
            matrix products are faster than the CPU's fused kernel. All three compute the
            same function.
        dropout: dropout on the attention weights, applied in training only.
        sdpa_backend: the kernel behind SDPA: ``auto`` (torch picks, per device, dtype and
            shape), or only ``flash`` (FlashAttention-2; also on CPU), ``efficient`` (xFormers'
            memory-efficient kernel, CUDA), ``cudnn`` (cuDNN's, recent NVIDIA GPUs) or ``math``
            (the unfused reference), for comparing backends. A backend that cannot run the
            call ends the run with one line saying so.
    """

    def __init__(
        self,
        *,
        seq_len: int,
        heads: int,
        head_dim: int,
        impl: str = "auto",
        dropout: float = 0.0,
        sdpa_backend: str = "auto",
    ) -> None:
        super().__init__(seq_len=seq_len, heads=heads, head_dim=head_dim)
        self.impl = knobs.one_of("impl", impl, IMPLEMENTATIONS)
        self.dropout = knobs.fraction("dropout", dropout)
        self.sdpa_backend = knobs.one_of("sdpa_backend", sdpa_backend, tuple(SDPA_BACKENDS))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        dropout = self.dropout if self.training else 0.0
        if self.impl == "sdpa" or (self.impl == "auto" and not self.explicit_is_faster(q)):
            return self.fused(q, k, v, dropout)
        weights = self.attention_matrix(q, k)
        if dropout:
            weights = F.dropout(weights, p=dropout)
        return weights @ v

    def fused(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout: float
    ) -> torch.Tensor:
        """SDPA through the backend ``sdpa_backend`` allows."""
        backend = SDPA_BACKENDS[self.sdpa_backend]
        allowed: AbstractContextManager = nullcontext() if backend is None else sdpa_kernel(backend)
        try:
            with allowed:
                return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout)
        except RuntimeError as error:
            if backend is None or "No viable backend" not in str(error):
                raise
            raise ConfigError(
                f"attention.sdpa_backend={self.sdpa_backend} cannot run here ({q.device.type}, "
                f"{str(q.dtype).removeprefix('torch.')}, head dim {q.shape[-1]}); choose auto, or "
                f"flash or math, which also run on a CPU"
            ) from None

    @staticmethod
    def explicit_is_faster(q: torch.Tensor) -> bool:
        """Whether ``impl=auto`` builds the explicit matrix for these queries."""
        return (
            q.device.type == "cpu"
            and q.dtype in (torch.bfloat16, torch.float16)
            and q.shape[-2] <= CPU_HALF_EXPLICIT_MAX_TOKENS
        )

    def attention_matrix(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """The explicit ``(batch, heads, n, n)`` matrix softmax(Q K^T / sqrt(d))."""
        return ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, impl={self.impl}, dropout={self.dropout}, "
            f"sdpa_backend={self.sdpa_backend}"
        )
