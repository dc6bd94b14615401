"""Random feature attention (RFA) with random Fourier features.

Peng et al., "Random Feature Attention", ICLR 2021. Bochner's theorem (Rahimi & Recht, "Random
Features for Large-Scale Kernel Machines", NeurIPS 2007) gives, for w ~ N(0, sigma^2 I),

    phi(x) = sqrt(1/D) [sin(w_1.x), ..., sin(w_D.x), cos(w_1.x), ..., cos(w_D.x)],
    E[phi(x) . phi(y)] = exp(-sigma^2 |x - y|^2 / 2),

and exp(sigma^2 x.y) = exp(sigma^2 |x|^2/2) exp(sigma^2 |y|^2/2) exp(-sigma^2 |x - y|^2 / 2).
With x = q / d^(1/4) and y = k / d^(1/4), sum_j phi(x).phi(y_j) g_j v_j / sum_j phi(x).phi(y_j) g_j
with key weights g_j = exp(sigma^2 |y_j|^2 / 2) estimates softmax(sigma^2 q k^T / sqrt(d)) V in
O(n D d): the query factor cancels in the ratio. RFA itself L2-normalises q and k, which makes
both factors constant; we keep the norms and carry the key factor so that ``sigma = 1`` estimates
exact softmax attention (the catalogue's limit: the error falls as D grows).
"""

from __future__ import annotations

import torch

from vitattn.attention.base import AttentionKernel, positive, positive_int, register_attention


def fourier_features(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sqrt(1/D) [sin(x W^T), cos(x W^T)] for x ``(..., heads, n, d)``, W ``(heads, D, d)``."""
    projected = x @ weights.transpose(-2, -1)
    return torch.cat([projected.sin(), projected.cos()], dim=-1) * weights.shape[-2] ** -0.5


@register_attention("random_feature")
class RandomFeatureAttention(AttentionKernel):
    """RFA: softmax attention estimated with D random Fourier features per head, O(n D d).

    Args:
        num_features: D, the number of frequencies w (the feature map has 2 D entries).
        sigma: standard deviation of the frequencies; the estimate targets
            softmax(sigma^2 q k^T / sqrt(d)), so 1 is exact softmax and other values change its
            temperature.
        redraw: draw new frequencies at every training forward (RFA's training recipe); with
            ``False`` the frequencies drawn at construction stay fixed. Evaluation never redraws
            and uses the last frequencies (saved in checkpoints).
        eps: relative floor of the normaliser. An estimate of a positive sum from sin/cos features
            can come out near zero or negative at small D; the normaliser is clamped to at least
            ``eps`` times its largest possible value, sum_j g_j, so it stays positive and finite.

    Features and sums are computed in fp32 whatever the autocast dtype.
    """

    def __init__(
        self,
        *,
        seq_len: int,
        heads: int,
        head_dim: int,
        num_features: int = 256,
        sigma: float = 1.0,
        redraw: bool = True,
        eps: float = 1e-3,
    ) -> None:
        super().__init__(seq_len=seq_len, heads=heads, head_dim=head_dim)
        self.num_features = positive_int("num_features", num_features)
        self.sigma = positive("sigma", sigma)
        self.redraw = bool(redraw)
        self.eps = positive("eps", eps)
        self.register_buffer("frequencies", self.draw_frequencies(torch.device("cpu")))

    def draw_frequencies(self, device: torch.device) -> torch.Tensor:
        """Fresh w ~ N(0, sigma^2 I), ``(heads, num_features, head_dim)``, from torch's RNG."""
        shape = (self.heads, self.num_features, self.head_dim)
        return torch.randn(shape, device=device) * self.sigma

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.training and self.redraw:
            self.frequencies = self.draw_frequencies(q.device)
        with torch.autocast(device_type=q.device.type, enabled=False):
            scale = self.head_dim**-0.25
            x, y = q.float() * scale, k.float() * scale
            phi_q = fourier_features(x, self.frequencies.float())
            phi_k = fourier_features(y, self.frequencies.float())
            # log g_j = sigma^2 |y_j|^2 / 2, shifted by its max over keys (cancels in the ratio).
            log_key_weight = 0.5 * self.sigma**2 * y.square().sum(dim=-1, keepdim=True)
            key_weight = (log_key_weight - log_key_weight.amax(dim=-2, keepdim=True)).exp()
            weighted_phi_k = phi_k * key_weight  # (batch, heads, n, 2D)
            key_values = weighted_phi_k.transpose(-2, -1) @ v.float()  # (batch, heads, 2D, d)
            normaliser = phi_q @ weighted_phi_k.sum(dim=-2).unsqueeze(-1)  # (batch, heads, n, 1)
            floor = self.eps * key_weight.sum(dim=-2, keepdim=True)
            out = (phi_q @ key_values) / normaliser.clamp_min(floor)
        return out.to(v.dtype)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, num_features={self.num_features}, sigma={self.sigma}, "
            f"redraw={self.redraw}"
        )
