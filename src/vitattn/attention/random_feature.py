"""Random feature attention (RFA) with random Fourier features.

Peng et al., "Random Feature Attention", ICLR 2021. Bochner's theorem (Rahimi & Recht, "Random
Features for Large-Scale Kernel Machines", NeurIPS 2007) gives, for w ~ N(0, sigma^2 I),

    phi(x) = sqrt(1/D) [sin(w_1.x), ..., sin(w_D.x), cos(w_1.x), ..., cos(w_D.x)],
    E[phi(x) . phi(y)] = exp(-sigma^2 |x - y|^2 / 2),

and exp(sigma^2 x.y) = exp(sigma^2 |x|^2/2) exp(sigma^2 |y|^2/2) exp(-sigma^2 |x - y|^2 / 2).
With x = q / d^(1/4) and y = k / d^(1/4), sum_j phi(x).phi(y_j) g_j v_j / sum_j phi(x).phi(y_j) g_j
with key weights g_j = exp(sigma^2 |y_j|^2 / 2) estimates softmax(sigma^2 q k^T / sqrt(d)) V in
O(n D d): the query factor cancels in the ratio. That is ``normalize=false``: the norms are kept
and the key factor carried, so that ``sigma = 1`` estimates exact softmax attention. Its variance
grows as exp(|x|^2 + |y|^2), and on real inputs the estimate is worse than outputting zeros.

``normalize=true`` is RFA as the paper writes it (section 3): q and k are L2-normalised, so both
factors are constant, and a per-head sigma is learned. The estimate, bounded since every
phi(x).phi(y) lies in [-1, 1], targets softmax(sigma^2 cos(q, k)); sigma starts at ``sigma``
(1: a mild temperature, where the estimate's variance is low; the model sharpens it as it
learns). It runs the same kernel, on sigma q / |q| and
sigma k / |k| with frequencies of unit variance, so sigma learns through the inputs' gradient.
RFA's gating is for causal decoding and is not used here.

``impl="chunked"`` computes the same function tile by tile
(:mod:`vitattn.attention.feature_maps.chunked`) with a hand-written backward that recomputes each
tile's features, so the (n x 2D) feature matrices are never held; ``impl="autograd"`` is the
reference; ``impl="triton"`` computes it in five fused kernels that keep each block of sines
and cosines in registers (:mod:`vitattn.attention.fused.fourier`). ``impl="auto"`` (the
default) takes the chunked kernel on a CPU and, on a GPU, the fastest for each shape, timed on
the first call (:mod:`vitattn.attention.common.autotune`), the fused one under
``torch.compile``. The feature map itself is :mod:`vitattn.attention.feature_maps.fourier`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from vitattn.attention.common import knobs
from vitattn.attention.common.base import register_attention
from vitattn.attention.common.tiling import GPU_TILE_MEMORY
from vitattn.attention.feature_maps.fourier import RandomFourier
from vitattn.attention.feature_maps.kernel import FUSED_IMPLEMENTATIONS, FeatureMapAttention
from vitattn.attention.fused.fourier import fused_fourier_attention


@register_attention("random_feature")
class RandomFeatureAttention(FeatureMapAttention):
    """RFA: softmax attention estimated with D random Fourier features per head, O(n D d).

    Args:
        num_features: D, the number of frequencies w (the feature map has 2 D entries).
        sigma: ``normalize=false``: the standard deviation of the frequencies; the estimate
            targets softmax(sigma^2 q k^T / sqrt(d)), so 1 is exact softmax and other values
            change its temperature. ``normalize=true``: where the learned per-head sigma starts
            (the target is softmax(sigma^2 cos(q, k))).
        normalize: L2-normalise q and k and learn sigma per head (RFA as published; bounded
            estimate), or keep the norms and estimate exact softmax (unbounded variance).
        redraw: draw new frequencies at every training forward (RFA's training recipe); with
            ``False`` the frequencies drawn at construction stay fixed. Evaluation never redraws
            and uses the last frequencies (saved in checkpoints).
        eps: relative floor of the normaliser. An estimate of a positive sum from sin/cos features
            can come out near zero or negative at small D; the normaliser is clamped to at least
            ``eps`` times its largest possible value, sum_j g_j, so it stays positive and finite.
        impl: ``chunked`` (tiles, hand-written backward, O(n d) memory), ``autograd`` (the
            plain reference), ``triton`` (fused kernels: a CUDA GPU, or a CPU under
            ``TRITON_INTERPRET=1``; all three compute the same function) or ``auto``: chunked on
            a CPU, the fastest per shape on a GPU (:mod:`~vitattn.attention.common.autotune`).
        tile_memory: on a GPU, the share of its free memory that one tile of sin/cos
            features may take (``tiling.GPU_TILE_MEMORY``).

    Features and sums are computed in fp32 whatever the autocast dtype.
    """

    WEIGHTS = "frequencies"
    FUSED = True
    KNOBS = ("num_features", "sigma", "normalize", "redraw", "impl", "tile_memory")
    COST_KNOBS = ("num_features", "tile_memory")

    def __init__(
        self,
        *,
        seq_len: int,
        heads: int,
        head_dim: int,
        num_features: int = 256,
        sigma: float = 1.0,
        normalize: bool = True,
        redraw: bool = True,
        eps: float = 1e-3,
        impl: str = "auto",
        tile_memory: float = GPU_TILE_MEMORY,
    ) -> None:
        super().__init__(seq_len=seq_len, heads=heads, head_dim=head_dim)
        self.num_features = knobs.integer("num_features", num_features)
        self.sigma = knobs.positive("sigma", sigma)
        self.normalize = knobs.flag("normalize", normalize)
        if self.normalize:  # the learned per-head sigma, as its logarithm (stays positive)
            start = math.log(self.sigma)
            self.log_sigma = torch.nn.Parameter(torch.full((self.heads,), start))
        self.redraw = knobs.flag("redraw", redraw)
        self.eps = knobs.positive("eps", eps)
        self.impl = knobs.one_of("impl", impl, FUSED_IMPLEMENTATIONS)
        self.tile_memory = knobs.fraction("tile_memory", tile_memory)
        self.register_buffer("frequencies", self.draw_frequencies(torch.device("cpu")))

    @property
    def frequency_std(self) -> float:
        """Of the frequencies: ``sigma``, or 1 with ``normalize`` (sigma scales the inputs)."""
        return 1.0 if self.normalize else self.sigma

    def draw_frequencies(self, device: torch.device) -> torch.Tensor:
        """Fresh w ~ N(0, std^2 I) (:attr:`frequency_std`), ``(heads, num_features, head_dim)``,
        from torch's RNG."""
        shape = (self.heads, self.num_features, self.head_dim)
        return torch.randn(shape, device=device, dtype=torch.float32) * self.frequency_std

    def normalized(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        """sigma x / |x| per head, divided by the ``scale`` the kernel multiplies by."""
        sigma = self.log_sigma.float().exp().view(1, -1, 1, 1)
        return torch.nn.functional.normalize(x, dim=-1) * (sigma / scale)

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        if (
            self.normalize
            and prefix + "log_sigma" not in state_dict
            and prefix + "frequencies" in state_dict
        ):
            # Written before normalize existed (its config has no such key, so the rebuilt
            # module took today's default): it was trained as the exact-softmax estimator.
            self.normalize = False
            del self.log_sigma
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.training and self.redraw:
            self.frequencies = self.draw_frequencies(q.device)
        dtype = v.dtype
        with torch.autocast(device_type=q.device.type, enabled=False):
            q, k, v = q.float(), k.float(), v.float()
            if self.normalize:
                scale = self.head_dim**-0.25
                q, k = self.normalized(q, scale), self.normalized(k, scale)
            out = self.attend(q, k, v)
        return out.to(dtype)

    def fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return fused_fourier_attention(q, k, v, self.frequencies, self.frequency_std, self.eps)

    def feature_map(self) -> RandomFourier:
        scale = self.head_dim**-0.25
        return RandomFourier(scale=scale, sigma=self.frequency_std, eps=self.eps)
