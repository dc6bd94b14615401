"""Performer attention: FAVOR+, positive orthogonal random features.

Choromanski et al., "Rethinking Attention with Performers", ICLR 2021. Random features
phi(x) = exp(W x - |x|^2/2) / sqrt(m) (:mod:`vitattn.attention.feature_maps.favor`) give an
unbiased, *positive* estimate of the softmax kernel, and attention in O(n m d) as
phi(Q) (phi(K)^T V) / phi(Q) (phi(K)^T 1). The m rows of W are drawn in blocks of d mutually
orthogonal directions with chi-distributed lengths (lower variance than i.i.d. rows).

The exponentials are shifted by maxima (which cancel in the ratio) and a small constant ``eps``
keeps every feature positive; everything runs in fp32. Where the shift is taken is the
``stabilizer``:

- ``authors``: the FAVOR+ reference code (``softmax_kernel`` of google-research/performer and of
  performer-pytorch): both phi(q) and phi(k) keep their -|x|^2/2 term, and the shift is the
  maximum of w.x alone (per query over its features; per head over all keys and features). The
  largest feature is then below 1, so ``eps`` weighs more: the estimate leans toward averaging
  (lower variance, a bias).
- ``unbiased``: the query's -|q|^2/2 (a per-query factor) is dropped, and the shifts are the
  maxima of the whole exponents, so the largest feature is 1 and ``eps`` is negligible: unbiased
  up to eps, with more variance.

``impl="chunked"`` computes the same function without ever holding the (n x m) feature matrices
(:mod:`vitattn.attention.feature_maps.chunked`: tiles, an online maximum, a hand-written
backward that recomputes each tile's features; memory saved for backward is O(n d) instead of
O(n m)). ``impl="triton"`` computes it in five fused kernels that keep each block of features in
registers (:mod:`vitattn.attention.fused.favor`, on a CUDA GPU).
``impl="autograd"`` is the plain reference written with autograd. ``impl="auto"`` (the default)
takes the chunked kernel on a CPU and, on a GPU, the fastest for each shape, timed on the first
call (:mod:`vitattn.attention.common.autotune`), the fused one under ``torch.compile``.
"""

from __future__ import annotations

import torch

from vitattn.attention.common import knobs
from vitattn.attention.common.base import register_attention
from vitattn.attention.common.tiling import GPU_TILE_MEMORY
from vitattn.attention.feature_maps.favor import STABILIZERS, Favor, orthogonal_gaussian_rows
from vitattn.attention.feature_maps.kernel import FUSED_IMPLEMENTATIONS, FeatureMapAttention
from vitattn.attention.fused.favor import fused_favor_attention


@register_attention("performer")
class PerformerAttention(FeatureMapAttention):
    """FAVOR+ attention with ``num_features`` positive orthogonal random features, O(n m d).

    Args:
        num_features: m, rows of the random projection (the paper's default is d log d, about
            266 for d = 64).
        redraw_interval: draw a new projection every this many training forwards (the authors'
            feature redrawing); 0 keeps the projection drawn at construction. Evaluation never
            redraws.
        eps: added to each feature after the max-shift, keeping the normaliser positive.
        stabilizer: where the exponentials are shifted (see the module docstring): ``authors``
            (the FAVOR+ reference code's numerics: eps weighs more, lower variance, a bias) or
            ``unbiased`` (the whole exponent's maximum: eps negligible, more variance).
        impl: ``chunked`` (memory-efficient, hand-written backward), ``autograd`` (the plain
            reference), ``triton`` (fused kernels: a CUDA GPU, or a CPU under
            ``TRITON_INTERPRET=1``; all three compute the same function) or ``auto``: chunked on
            a CPU, the fastest per shape on a GPU (:mod:`~vitattn.attention.common.autotune`).
        tile_memory: on a GPU, the share of its free memory for one tile of features
            (``tiling.GPU_TILE_MEMORY``).
    """

    WEIGHTS = "projection"
    FUSED = True
    KNOBS = ("num_features", "redraw_interval", "stabilizer", "impl", "tile_memory")
    COST_KNOBS = ("num_features", "stabilizer", "tile_memory")

    def __init__(
        self,
        *,
        seq_len: int,
        heads: int,
        head_dim: int,
        num_features: int = 256,
        redraw_interval: int = 1000,
        eps: float = 1e-4,
        stabilizer: str = "unbiased",
        impl: str = "auto",
        tile_memory: float = GPU_TILE_MEMORY,
    ) -> None:
        super().__init__(seq_len=seq_len, heads=heads, head_dim=head_dim)
        self.num_features = knobs.integer("num_features", num_features)
        self.redraw_interval = knobs.integer(
            "redraw_interval", redraw_interval, 0, hint=" (0 = never redraw)"
        )
        self.eps = knobs.positive("eps", eps)
        self.stabilizer = knobs.one_of("stabilizer", stabilizer, STABILIZERS)
        self.impl = knobs.one_of("impl", impl, FUSED_IMPLEMENTATIONS)
        self.tile_memory = knobs.fraction("tile_memory", tile_memory)
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

    def before_forward(self, device: torch.device) -> None:
        """A training forward counted; the projection redrawn when ``redraw_interval`` are."""
        if not self.training or self.redraw_interval == 0:
            return
        if self.forwards_since_redraw >= self.redraw_interval:
            self.projection = self.draw_projection(device)
            self.forwards_since_redraw = 0
        self.forwards_since_redraw += 1

    @property
    def counts_every_forward(self) -> bool:  # type: ignore[override]
        """Its count of training forwards since the last redraw, where it redraws."""
        return self.redraw_interval > 0

    def get_extra_state(self) -> dict[str, int]:
        return {"forwards_since_redraw": self.forwards_since_redraw}

    def set_extra_state(self, state: dict[str, int]) -> None:
        self.forwards_since_redraw = int(state["forwards_since_redraw"])

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.before_own_forward(q.device)
        dtype = v.dtype
        with torch.autocast(device_type=q.device.type, enabled=False):
            out = self.attend(q, k, v)  # in fp32 (the fused kernels read q, k, v as they are)
        return out.to(dtype)

    def fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return fused_favor_attention(q, k, v, self.projection, self.eps, self.stabilizer)

    def feature_map(self) -> Favor:
        return Favor(scale=self.head_dim**-0.25, eps=self.eps, stabilizer=self.stabilizer)
