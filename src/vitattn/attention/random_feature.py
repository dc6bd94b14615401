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
(:mod:`vitattn.attention.common.tiling`) with a hand-written backward that recomputes each tile's
features, so the (n x 2D) feature matrices are never held; ``impl="autograd"`` is the reference.
``impl="auto"`` (the default) takes the chunked kernel on a CPU and, on a GPU, the faster of the
two for each shape, timed on the first call (:mod:`vitattn.attention.common.autotune`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from vitattn.attention.common import autotune, knobs
from vitattn.attention.common.base import AttentionKernel, register_attention
from vitattn.attention.common.tiling import (
    GPU_TILE_MEMORY,
    TILE_ELEMENTS,
    apply_per_head,
    backward_in_fp32,
    block_size,
    in_block,
    tile_budget,
    tiles,
    with_column,
)

IMPLEMENTATIONS = ("auto", "chunked", "autograd")


def fourier_features(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sqrt(1/D) [sin(x W^T), cos(x W^T)] for x ``(..., heads, n, d)``, W ``(heads, D, d)``."""
    projected = x @ weights.transpose(-2, -1)
    return torch.cat([projected.sin(), projected.cos()], dim=-1) * weights.shape[-2] ** -0.5


def random_feature_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    frequencies: torch.Tensor,
    *,
    scale: float,
    sigma: float,
    eps: float,
) -> torch.Tensor:
    """RFA written with autograd (``impl=autograd``), ``(batch, heads, n, d)`` q, k, v and
    ``(heads, D, d)`` frequencies."""
    x, y = q * scale, k * scale
    phi_q = fourier_features(x, frequencies)
    phi_k = fourier_features(y, frequencies)
    # log g_j = sigma^2 |y_j|^2 / 2, shifted by its max over keys (cancels in the ratio).
    log_key_weight = 0.5 * sigma**2 * y.square().sum(dim=-1, keepdim=True)
    key_weight = (log_key_weight - log_key_weight.amax(dim=-2, keepdim=True)).exp()
    weighted_phi_k = phi_k * key_weight  # (batch, heads, n, 2D)
    key_values = weighted_phi_k.transpose(-2, -1) @ v  # (batch, heads, 2D, d)
    normaliser = phi_q @ weighted_phi_k.sum(dim=-2).unsqueeze(-1)  # (batch, heads, n, 1)
    floor = eps * key_weight.sum(dim=-2, keepdim=True)
    return (phi_q @ key_values) / normaliser.clamp_min(floor)


class ChunkedRandomFeatures(torch.autograd.Function):
    """RFA of ``(B, n, d)`` q, k, v with ``(B, D, d)`` frequencies W, tile by tile, with a
    hand-written backward that recomputes each tile's features.

    With s = d^(-1/4), F(x) = [sin(s x W^T), cos(s x W^T)] (phi = F / sqrt(D)), key weights
    g = exp(sigma^2 s^2 |k|^2 / 2 - M) (M their running maximum over the head, a constant) and
    V+ = [V, 1]: KV+ = sum_n F(k_n)^T g_n V+_n / D; O+ = F(q) KV+; the normaliser O+[d] is
    floored at eps * sum_n g_n; out = O+[:d] / normaliser.
    """

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        frequencies: torch.Tensor,
        scale: float,
        sigma: float,
        eps: float,
        budget: int,
    ) -> torch.Tensor:
        batch, n, d = v.shape
        count = frequencies.shape[1]
        frequencies = frequencies * scale
        frequencies_t = frequencies.transpose(1, 2)
        weight_scale = 0.5 * (sigma * scale) ** 2
        layout = tiles(batch, n, 2 * count, budget)
        projected_block = q.new_empty(block_size(layout, count))
        feature_block = q.new_empty(block_size(layout, 2 * count))

        def features(x: torch.Tensor, heads: slice) -> torch.Tensor:
            return fourier_tile(x, frequencies_t[heads], projected_block, feature_block)

        kv_plus = q.new_zeros(batch, 2 * count, d + 1)
        weight_sum = q.new_zeros(batch, 1, 1)
        log_weight_max = q.new_full((batch, 1, 1), -math.inf)
        for heads, rows in layout:
            key = k[heads, rows]
            log_weight = key.square().sum(dim=-1, keepdim=True).mul_(weight_scale)
            new_max = torch.maximum(log_weight_max[heads], log_weight.amax(dim=1, keepdim=True))
            rescale = torch.exp(log_weight_max[heads] - new_max)
            kv_plus[heads] *= rescale
            weight_sum[heads] *= rescale
            weight = log_weight.sub_(new_max).exp_()
            weight_sum[heads] += weight.sum(dim=1, keepdim=True)
            weighted_values = with_column(v[heads, rows], 1.0).mul_(weight)
            kv_plus[heads] += features(key, heads).transpose(1, 2) @ weighted_values
            log_weight_max[heads] = new_max
        kv_plus /= count  # sqrt(1/D) from the keys' features and sqrt(1/D) from the queries'
        floor = eps * weight_sum

        out = v.new_empty(batch, n, d)
        normaliser = v.new_empty(batch, n, 1)
        for heads, rows in layout:
            out_plus = features(q[heads, rows], heads) @ kv_plus[heads]
            normaliser[heads, rows] = out_plus[..., d:]
            torch.div(
                out_plus[..., :d],
                out_plus[..., d:].clamp_min(floor[heads]),
                out=out[heads, rows],
            )

        ctx.save_for_backward(q, k, v, frequencies, kv_plus, log_weight_max, floor, normaliser, out)
        ctx.weight_scale, ctx.eps, ctx.layout = weight_scale, eps, layout
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    @backward_in_fp32
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, frequencies, kv_plus, log_weight_max, floor, normaliser, out = ctx.saved_tensors
        weight_scale, eps, layout = ctx.weight_scale, ctx.eps, ctx.layout
        batch, d = v.shape[0], v.shape[2]
        count = frequencies.shape[1]
        frequencies_t = frequencies.transpose(1, 2)
        projected_block = q.new_empty(block_size(layout, count))
        feature_block = q.new_empty(block_size(layout, 2 * count))
        grad_block = q.new_empty(block_size(layout, 2 * count))

        def features(x: torch.Tensor, heads: slice) -> torch.Tensor:
            return fourier_tile(x, frequencies_t[heads], projected_block, feature_block)

        def grad_input(
            grad_features: torch.Tensor, features_: torch.Tensor, heads: slice
        ) -> torch.Tensor:
            # d sin(p) = cos(p) dp, d cos(p) = -sin(p) dp; p = s x W^T.
            sin, cos = features_[..., :count], features_[..., count:]
            grad_projected = grad_features[..., :count].mul_(cos)
            grad_projected.sub_(grad_features[..., count:].mul_(sin))
            return grad_projected @ frequencies[heads]

        grad_q = torch.empty_like(q)
        grad_kv_plus = q.new_zeros(batch, 2 * count, d + 1)
        grad_floor = q.new_zeros(batch, 1, 1)
        for heads, rows in layout:
            # out = O+[:d] / max(O+[d], floor)
            grad = grad_out[heads, rows]
            below = normaliser[heads, rows] < floor[heads]
            denominator = normaliser[heads, rows].clamp_min(floor[heads])
            grad_denominator = (grad * out[heads, rows]).sum(dim=-1, keepdim=True)
            grad_denominator.div_(denominator).neg_()
            grad_floor[heads] += (grad_denominator * below).sum(dim=1, keepdim=True)
            grad_out_plus = with_column(
                grad / denominator, grad_denominator.masked_fill(below, 0.0)
            )
            features_q = features(q[heads, rows], heads)
            grad_kv_plus[heads] += features_q.transpose(1, 2) @ grad_out_plus
            grad_features = in_block(grad_block, heads, rows, 2 * count)
            torch.bmm(grad_out_plus, kv_plus[heads].transpose(1, 2), out=grad_features)
            grad_q[heads, rows] = grad_input(grad_features, features_q, heads)
        grad_kv_plus /= count

        grad_k = torch.empty_like(k)
        grad_v = torch.empty_like(v)
        for heads, rows in layout:
            key = k[heads, rows]
            log_weight = key.square().sum(dim=-1, keepdim=True).mul_(weight_scale)
            weight = log_weight.sub_(log_weight_max[heads]).exp_()
            value_plus = with_column(v[heads, rows], 1.0)
            features_k = features(key, heads)
            # KV+ = c sum F^T (g V+): the gradient of g V+ is c F grad_KV+.
            grad_weighted = features_k @ grad_kv_plus[heads]
            grad_v[heads, rows] = grad_weighted[..., :d] * weight
            grad_weight = (grad_weighted * value_plus).sum(dim=-1, keepdim=True)
            grad_weight += eps * grad_floor[heads]  # floor = eps * sum g
            grad_features = in_block(grad_block, heads, rows, 2 * count)
            torch.bmm(
                value_plus.mul_(weight), grad_kv_plus[heads].transpose(1, 2), out=grad_features
            )
            # log g = sigma^2 s^2 |k|^2 / 2 - M: d g / d k = 2 weight_scale g k
            grad_k[heads, rows] = grad_input(grad_features, features_k, heads).add_(
                key * (grad_weight * weight), alpha=2 * weight_scale
            )
        return grad_q, grad_k, grad_v, None, None, None, None, None


def fourier_tile(
    x: torch.Tensor,
    frequencies_t: torch.Tensor,
    projected_block: torch.Tensor,
    feature_block: torch.Tensor,
) -> torch.Tensor:
    """[sin(x W^T), cos(x W^T)] for one tile ``(heads, rows, d)`` (W already scaled), written
    into the reused buffers."""
    heads, rows, _ = x.shape
    count = frequencies_t.shape[-1]
    projected = projected_block[: heads * rows * count].view(heads, rows, count)
    torch.bmm(x, frequencies_t, out=projected)
    features = feature_block[: heads * rows * 2 * count].view(heads, rows, 2 * count)
    torch.sin(projected, out=features[..., :count])
    torch.cos(projected, out=features[..., count:])
    return features


def chunked_random_feature_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    frequencies: torch.Tensor,
    *,
    scale: float,
    sigma: float,
    eps: float,
    budget: int = TILE_ELEMENTS,
) -> torch.Tensor:
    """RFA of ``(batch, heads, n, d)`` q, k, v with ``(heads, D, d)`` frequencies (drawn with
    standard deviation ``sigma``), computed by :class:`ChunkedRandomFeatures`."""
    return apply_per_head(ChunkedRandomFeatures, q, k, v, frequencies, scale, sigma, eps, budget)


@register_attention("random_feature")
class RandomFeatureAttention(AttentionKernel):
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
            plain reference; both compute the same function) or ``auto``: chunked on a CPU, the
            faster of the two per shape on a GPU (:mod:`~vitattn.attention.common.autotune`).
        tile_memory: on a GPU, the share of its free memory that one tile of sin/cos
            features may take (``tiling.GPU_TILE_MEMORY``).

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
        self.impl = knobs.one_of("impl", impl, IMPLEMENTATIONS)
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
        with torch.autocast(device_type=q.device.type, enabled=False):
            scale = self.head_dim**-0.25
            dtype = v.dtype
            q, k, v = q.float(), k.float(), v.float()
            if self.normalize:
                q, k = self.normalized(q, scale), self.normalized(k, scale)
            frequencies = self.frequencies.float()
            settings = {"scale": scale, "sigma": self.frequency_std, "eps": self.eps}
            implementations = {
                "chunked": lambda *x: chunked_random_feature_attention(
                    *x, frequencies, budget=self.tile_budget(q.device), **settings
                ),
                "autograd": lambda *x: random_feature_attention(*x, frequencies, **settings),
            }
            out = autotune.run(
                self.impl, "random_feature", implementations, q, k, v, default="chunked",
                settings=(self.num_features, self.tile_memory),
            )  # fmt: skip
        return out.to(dtype)

    def tile_budget(self, device: torch.device) -> int:
        """Elements of one tile of the chunked kernel on ``device``."""
        return tile_budget(device, self.tile_memory, "random_feature")

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, num_features={self.num_features}, sigma={self.sigma}, "
            f"normalize={self.normalize}, redraw={self.redraw}, impl={self.impl}, "
            f"tile_memory={self.tile_memory}"
        )
