"""Performer attention: FAVOR+, positive orthogonal random features.

Choromanski et al., "Rethinking Attention with Performers", ICLR 2021. For w ~ N(0, I),

    exp(x.y) = E[exp(w.x - |x|^2/2) exp(w.y - |y|^2/2)],

so phi(x) = exp(W x - |x|^2/2) / sqrt(m) with m random rows W gives an unbiased, *positive*
estimate of the softmax kernel (x = q / d^(1/4), y = k / d^(1/4)), and attention in O(n m d) as
phi(Q) (phi(K)^T V) / phi(Q) (phi(K)^T 1). The rows of W are drawn in blocks of d mutually
orthogonal directions with chi-distributed lengths (lower variance than i.i.d. rows).

Numerics follow the authors' implementation: the exponent of each query's features is shifted by
its own maximum and the keys' by the maximum over all keys of a head (both cancel in the ratio),
a small constant keeps every feature positive, and everything runs in fp32.
"""

from __future__ import annotations

import math

import torch

from vitattn.attention.base import AttentionKernel, positive_int, register_attention
from vitattn.utils.errors import ConfigError


def orthogonal_gaussian_rows(
    rows: int, dim: int, device: torch.device, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``(rows, dim)`` matrix whose rows come in blocks of ``dim`` orthogonal directions, each row
    scaled to the length of a Gaussian vector, so every row is marginally N(0, I)."""
    blocks = []
    for _ in range(math.ceil(rows / dim)):
        gaussian = torch.randn(dim, dim, device=device, generator=generator)
        orthonormal, _ = torch.linalg.qr(gaussian)
        blocks.append(orthonormal.T)
    directions = torch.cat(blocks)[:rows]
    lengths = torch.randn(rows, dim, device=device, generator=generator).norm(dim=1)
    return directions * lengths.unsqueeze(1)


def positive_features(
    x: torch.Tensor, projection: torch.Tensor, *, is_query: bool, eps: float
) -> torch.Tensor:
    """FAVOR+ features of ``x`` ``(batch, heads, n, d)`` up to factors that cancel in attention.

    phi(x) = exp(w.x - |x|^2/2) / sqrt(m). In the ratio phi(q) (phi(K)^T V) / phi(q) (phi(K)^T 1)
    a factor common to one query's features cancels, and so does one common to all keys' features
    of a head. So: no 1/sqrt(m); for a query, |q|^2/2 and the max over its features are dropped
    (the exponent is w.q minus its maximum); for keys, the max over all keys and features of the
    head is subtracted. The maxima are constants for autograd (``detach``).
    """
    projected = x @ projection.transpose(-2, -1)  # (batch, heads, n, m)
    if is_query:
        exponent = projected - projected.amax(dim=-1, keepdim=True).detach()
    else:
        exponent = projected - 0.5 * x.square().sum(dim=-1, keepdim=True)
        exponent = exponent - exponent.amax(dim=(-2, -1), keepdim=True).detach()
    return exponent.exp() + eps


@register_attention("performer")
class PerformerAttention(AttentionKernel):
    """FAVOR+ attention with ``num_features`` positive orthogonal random features, O(n m d).

    Args:
        num_features: m, rows of the random projection (the paper's default is d log d, about
            266 for d = 64).
        redraw_interval: draw a new projection every this many training forwards (the authors'
            feature redrawing); 0 keeps the projection drawn at construction. Evaluation never
            redraws.
        eps: added to each feature after the max-shift, keeping the normaliser positive.
    """

    def __init__(
        self,
        *,
        seq_len: int,
        heads: int,
        head_dim: int,
        num_features: int = 256,
        redraw_interval: int = 1000,
        eps: float = 1e-4,
    ) -> None:
        super().__init__(seq_len=seq_len, heads=heads, head_dim=head_dim)
        self.num_features = positive_int("num_features", num_features)
        if (
            isinstance(redraw_interval, bool)
            or int(redraw_interval) != redraw_interval
            or (redraw_interval < 0)
        ):
            raise ConfigError(
                f"attention.redraw_interval={redraw_interval} is not valid; choose an integer "
                ">= 0 (0 = never redraw)"
            )
        self.redraw_interval = int(redraw_interval)
        if eps <= 0:
            raise ConfigError(f"attention.eps={eps} is not valid; choose a positive number")
        self.eps = eps
        self.register_buffer("projection", self.draw_projection(torch.device("cpu")))
        # A Python counter (saved through get_extra_state): a tensor would force a host-device
        # sync at every training step just to decide whether to redraw.
        self.forwards_since_redraw = 0

    def draw_projection(self, device: torch.device) -> torch.Tensor:
        """A fresh ``(heads, num_features, head_dim)`` orthogonal projection, one per head."""
        return torch.stack(
            [
                orthogonal_gaussian_rows(self.num_features, self.head_dim, device)
                for _ in range(self.heads)
            ]
        )

    def maybe_redraw(self, device: torch.device) -> None:
        if not self.training or self.redraw_interval == 0:
            return
        if self.forwards_since_redraw >= self.redraw_interval:
            self.projection = self.draw_projection(device)
            self.forwards_since_redraw = 0
        self.forwards_since_redraw += 1

    def get_extra_state(self) -> dict[str, int]:
        return {"forwards_since_redraw": self.forwards_since_redraw}

    def set_extra_state(self, state: dict[str, int]) -> None:
        self.forwards_since_redraw = int(state["forwards_since_redraw"])

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.maybe_redraw(q.device)
        with torch.autocast(device_type=q.device.type, enabled=False):
            scale = self.head_dim**-0.25
            projection = self.projection.float()
            phi_q = positive_features(q.float() * scale, projection, is_query=True, eps=self.eps)
            phi_k = positive_features(k.float() * scale, projection, is_query=False, eps=self.eps)
            key_values = phi_k.transpose(-2, -1) @ v.float()  # (batch, heads, m, d)
            normaliser = phi_q @ phi_k.sum(dim=-2).unsqueeze(-1)  # (batch, heads, n, 1)
            out = (phi_q @ key_values) / normaliser
        return out.to(v.dtype)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, num_features={self.num_features}, "
            f"redraw_interval={self.redraw_interval}"
        )
