"""Performer attention: FAVOR+, positive orthogonal random features.

Choromanski et al., "Rethinking Attention with Performers", ICLR 2021. For w ~ N(0, I),

    exp(x.y) = E[exp(w.x - |x|^2/2) exp(w.y - |y|^2/2)],

so phi(x) = exp(W x - |x|^2/2) / sqrt(m) with m random rows W gives an unbiased, *positive*
estimate of the softmax kernel (x = q / d^(1/4), y = k / d^(1/4)), and attention in O(n m d) as
phi(Q) (phi(K)^T V) / phi(Q) (phi(K)^T 1). The rows of W are drawn in blocks of d mutually
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

``impl="chunked"`` computes the same function without ever holding the (n x m)
feature matrices: it walks the sequence in chunks, folds the keys into phi(K)^T [V, 1] with an
online maximum (as FlashAttention does for softmax), and recomputes each chunk's features in the
backward pass. Element-wise work then stays in cache and no large tensor is allocated, which on a
CPU is most of eager FAVOR+'s time; memory saved for backward is O(n d) instead of O(n m).
``impl="autograd"`` is the plain reference written with autograd. ``impl="auto"`` (the default)
takes the chunked kernel on a CPU and, on a GPU, the faster of the two for each shape, timed on
the first call (:mod:`vitattn.attention.common.autotune`).
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
STABILIZERS = ("authors", "unbiased")


def orthogonal_gaussian_rows(
    rows: int, dim: int, device: torch.device, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``(rows, dim)`` matrix whose rows come in blocks of ``dim`` orthogonal directions, each row
    scaled to the length of a Gaussian vector, so every row is marginally N(0, I)."""
    blocks = []
    for _ in range(math.ceil(rows / dim)):
        gaussian = torch.randn(dim, dim, device=device, dtype=torch.float32, generator=generator)
        orthonormal, _ = torch.linalg.qr(gaussian)
        blocks.append(orthonormal.T)
    directions = torch.cat(blocks)[:rows]
    lengths = torch.randn(rows, dim, device=device, dtype=torch.float32, generator=generator).norm(
        dim=1
    )
    return directions * lengths.unsqueeze(1)


def positive_features(
    x: torch.Tensor,
    projection: torch.Tensor,
    *,
    is_query: bool,
    eps: float,
    stabilizer: str = "unbiased",
) -> torch.Tensor:
    """FAVOR+ features of ``x`` ``(batch, heads, n, d)`` up to factors that cancel in attention.

    phi(x) = exp(w.x - |x|^2/2) / sqrt(m). In the ratio phi(q) (phi(K)^T V) / phi(q) (phi(K)^T 1)
    a factor common to one query's features cancels, and so does one common to all keys' features
    of a head: no 1/sqrt(m), and each exponent is shifted by a maximum (a constant for autograd,
    ``detach``), over the query's features or over all keys and features of the head.
    ``unbiased``: a query's |q|^2/2 is dropped and the maxima are of the whole exponents;
    ``authors``: every exponent keeps its |x|^2/2 and the maxima are of w.x alone.
    """
    projected = x @ projection.transpose(-2, -1)  # (batch, heads, n, m)
    over = (-1,) if is_query else (-2, -1)
    if stabilizer == "authors":
        shift = projected.amax(dim=over, keepdim=True).detach()
        exponent = projected - 0.5 * x.square().sum(dim=-1, keepdim=True) - shift
    elif is_query:
        exponent = projected - projected.amax(dim=-1, keepdim=True).detach()
    else:
        exponent = projected - 0.5 * x.square().sum(dim=-1, keepdim=True)
        exponent = exponent - exponent.amax(dim=over, keepdim=True).detach()
    return exponent.exp() + eps


class ChunkedFavor(torch.autograd.Function):
    """FAVOR+ attention of ``(B, n, d)`` q, k, v with a ``(B, m, d)`` projection, computed tile
    by tile (:func:`tiles`), with a hand-written backward that recomputes each tile's features.

    With s = d^(-1/4), E the features' exponentials (without eps) and V+ = [V, 1]:
    keys:    E_k = exp(s k.w - s^2 |k|^2 / 2 - M), M the running maximum over the head (online
             across row tiles) of the exponent (``unbiased``) or of s k.w alone (``authors``);
             KV+ = sum_n (E_k[n] + eps)^T V+[n]. The exponent is one matrix product:
             [k, -s^2 |k|^2 / 2] . [s w, 1].
    queries: E_q = exp(s q.w - max over the query's features of s q.w), and for ``authors``
             also - s^2 |q|^2 / 2 (the same product as the keys'); O+ = (E_q + eps) KV+;
             out = O+[:d] / O+[d]
    The projection is a constant (a buffer) and the maxima are constants, as in
    :func:`positive_features`. Every tile's (heads, rows, m) block lives in one reused buffer.
    """

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        projection: torch.Tensor,
        scale: float,
        eps: float,
        budget: int,
        authors: bool,
    ) -> torch.Tensor:
        batch, n, d = v.shape
        features = projection.shape[1]
        projection = projection * scale
        key_projection = with_column(projection, 1.0).transpose(1, 2)  # (B, d + 1, m)
        layout = tiles(batch, n, features, budget)
        block = q.new_empty(block_size(layout, features))

        kv_plus = q.new_zeros(batch, features, d + 1)
        key_max = q.new_full((batch, 1, 1), -math.inf)
        for heads, rows in layout:
            exponent = in_block(block, heads, rows, features)
            key = k[heads, rows]
            torch.bmm(key_rows(key, scale), key_projection[heads], out=exponent)
            if authors:  # the maximum of s k.w: each row's maximum plus its s^2 |k|^2 / 2
                rows_max = exponent.amax(dim=2) + half_square_norm(key, scale)
                tile_max = rows_max.amax(dim=1).view(-1, 1, 1)
            else:
                tile_max = exponent.amax(dim=(1, 2), keepdim=True)
            new_max = torch.maximum(key_max[heads], tile_max)
            kv_plus[heads] *= torch.exp(key_max[heads] - new_max)
            exponent.sub_(new_max).exp_()
            kv_plus[heads] += exponent.transpose(1, 2) @ with_column(v[heads, rows], 1.0)
            key_max[heads] = new_max
        kv_plus[..., :d] += eps * v.sum(dim=1, keepdim=True)
        kv_plus[..., d] += eps * n
        kv_plus_sum = kv_plus.sum(dim=1, keepdim=True)

        query_projection = projection.transpose(1, 2)
        out = v.new_empty(batch, n, d)
        normaliser = v.new_empty(batch, n, 1)
        query_max = v.new_empty(batch, n, 1)
        for heads, rows in layout:
            exponent = in_block(block, heads, rows, features)
            query = q[heads, rows]
            if authors:
                torch.bmm(key_rows(query, scale), key_projection[heads], out=exponent)
                rows_max = exponent.amax(dim=-1) + half_square_norm(query, scale)
                query_max[heads, rows] = rows_max.unsqueeze(-1)
            else:
                torch.bmm(query, query_projection[heads], out=exponent)
                torch.amax(exponent, dim=-1, keepdim=True, out=query_max[heads, rows])
            exponent.sub_(query_max[heads, rows]).exp_()
            out_plus = torch.baddbmm(kv_plus_sum[heads], exponent, kv_plus[heads], beta=eps)
            normaliser[heads, rows] = out_plus[..., d:]
            torch.div(out_plus[..., :d], out_plus[..., d:], out=out[heads, rows])

        ctx.save_for_backward(q, k, v, projection, kv_plus, key_max, query_max, normaliser, out)
        ctx.scale, ctx.eps, ctx.layout, ctx.authors = scale, eps, layout, authors
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    @backward_in_fp32
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, projection, kv_plus, key_max, query_max, normaliser, out = ctx.saved_tensors
        scale, eps, layout, authors = ctx.scale, ctx.eps, ctx.layout, ctx.authors
        batch, d = v.shape[0], v.shape[2]
        features = projection.shape[1]
        size = block_size(layout, features)
        block, grad_block = q.new_empty(size), q.new_empty(size)

        query_projection = projection.transpose(1, 2)
        key_projection = with_column(projection, 1.0)  # (B, m, d + 1)
        grad_q = torch.empty_like(q)
        grad_kv_plus = q.new_zeros(batch, features, d + 1)
        grad_out_plus_sum = q.new_zeros(batch, 1, d + 1)
        for heads, rows in layout:
            # out = O+[:d] / O+[d]
            grad = grad_out[heads, rows]
            grad_normaliser = (grad * out[heads, rows]).sum(dim=-1, keepdim=True).neg_()
            grad_out_plus = with_column(grad, grad_normaliser).div_(normaliser[heads, rows])
            grad_out_plus_sum[heads] += grad_out_plus.sum(dim=1, keepdim=True)

            exponential = in_block(block, heads, rows, features)
            query = q[heads, rows]
            if authors:
                rows_of_query = key_rows(query, scale)
                torch.bmm(rows_of_query, key_projection[heads].transpose(1, 2), out=exponential)
            else:
                torch.bmm(query, query_projection[heads], out=exponential)
            exponential.sub_(query_max[heads, rows]).exp_()
            grad_kv_plus[heads] += exponential.transpose(1, 2) @ grad_out_plus
            grad_exponent = in_block(grad_block, heads, rows, features)
            torch.bmm(grad_out_plus, kv_plus[heads].transpose(1, 2), out=grad_exponent)
            grad_exponent.mul_(exponential)
            if authors:  # as for the keys below: the last column carries -s^2 |q|^2 / 2
                row_gradient(
                    grad_exponent, key_projection[heads], query, scale, grad_q[heads, rows]
                )
            else:
                torch.bmm(grad_exponent, projection[heads], out=grad_q[heads, rows])
        grad_kv_plus += eps * grad_out_plus_sum  # eps is in every query feature

        grad_kv = grad_kv_plus[..., :d].contiguous()
        grad_kv_sum = grad_kv.sum(dim=1, keepdim=True)
        grad_k = torch.empty_like(k)
        grad_v = torch.empty_like(v)
        for heads, rows in layout:
            exponential = in_block(block, heads, rows, features)
            key = k[heads, rows]
            torch.bmm(key_rows(key, scale), key_projection[heads].transpose(1, 2), out=exponential)
            exponential.sub_(key_max[heads]).exp_()
            torch.baddbmm(
                grad_kv_sum[heads], exponential, grad_kv[heads], beta=eps, out=grad_v[heads, rows]
            )
            grad_exponent = in_block(grad_block, heads, rows, features)
            value = with_column(v[heads, rows], 1.0)
            torch.bmm(value, grad_kv_plus[heads].transpose(1, 2), out=grad_exponent)
            grad_exponent.mul_(exponential)
            row_gradient(grad_exponent, key_projection[heads], key, scale, grad_k[heads, rows])
        return grad_q, grad_k, grad_v, None, None, None, None, None


def row_gradient(
    grad_exponent: torch.Tensor,
    key_projection: torch.Tensor,
    x: torch.Tensor,
    scale: float,
    out: torch.Tensor,
) -> None:
    """Write into ``out`` the gradient with respect to ``x`` of the exponent
    [x, -s^2 |x|^2 / 2] . [s w, 1] (see :func:`key_rows`), given its gradient ``grad_exponent``:
    the last column of ``key_projection`` carries sum_m of the exponent's gradient, times -s^2 x."""
    grad_row = grad_exponent @ key_projection
    d = x.shape[-1]
    torch.addcmul(grad_row[..., :d], x, grad_row[..., d:], value=-(scale**2), out=out)


def half_square_norm(x: torch.Tensor, scale: float) -> torch.Tensor:
    """s^2 |x|^2 / 2 of each row of ``x`` (its last axis summed)."""
    return x.square().sum(dim=-1).mul_(0.5 * scale**2)


def key_rows(k: torch.Tensor, scale: float) -> torch.Tensor:
    """[k, -s^2 |k|^2 / 2]: with [s w, 1], one product gives the key exponent s k.w - s^2|k|^2/2."""
    return with_column(k, k.square().sum(dim=-1, keepdim=True).mul_(-0.5 * scale**2))


def chunked_favor_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    projection: torch.Tensor,
    *,
    scale: float,
    eps: float,
    budget: int = TILE_ELEMENTS,
    stabilizer: str = "unbiased",
) -> torch.Tensor:
    """FAVOR+ attention of ``(batch, heads, n, d)`` q, k, v with a ``(heads, m, d)`` projection,
    q and k scaled by ``scale`` (d^(-1/4)), computed by :class:`ChunkedFavor`."""
    authors = stabilizer == "authors"
    return apply_per_head(ChunkedFavor, q, k, v, projection, scale, eps, budget, authors)


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
        stabilizer: where the exponentials are shifted (see the module docstring): ``authors``
            (the FAVOR+ reference code's numerics: eps weighs more, lower variance, a bias) or
            ``unbiased`` (the whole exponent's maximum: eps negligible, more variance).
        impl: ``chunked`` (memory-efficient, hand-written backward), ``autograd`` (the plain
            reference; both compute the same function) or ``auto``: chunked on a CPU, the faster
            of the two per shape on a GPU (:mod:`~vitattn.attention.common.autotune`).
        tile_memory: on a GPU, the share of its free memory for one tile of features
            (``tiling.GPU_TILE_MEMORY``).
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
        self.impl = knobs.one_of("impl", impl, IMPLEMENTATIONS)
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
        dtype = v.dtype
        with torch.autocast(device_type=q.device.type, enabled=False):
            q, k, v = q.float(), k.float(), v.float()
            implementations = {"chunked": self.chunked, "autograd": self.autograd}
            out = autotune.run(
                self.impl, "performer", implementations, q, k, v, default="chunked",
                settings=(self.num_features, self.stabilizer, self.tile_memory),
            )  # fmt: skip
        return out.to(dtype)

    def chunked(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``impl=chunked`` on fp32 q, k, v."""
        return chunked_favor_attention(
            q,
            k,
            v,
            self.projection.float(),
            scale=self.head_dim**-0.25,
            eps=self.eps,
            budget=tile_budget(q.device, self.tile_memory, "performer"),
            stabilizer=self.stabilizer,
        )

    def autograd(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``impl=autograd`` on fp32 q, k, v."""
        scale, projection = self.head_dim**-0.25, self.projection.float()
        settings = {"eps": self.eps, "stabilizer": self.stabilizer}
        phi_q = positive_features(q * scale, projection, is_query=True, **settings)
        phi_k = positive_features(k * scale, projection, is_query=False, **settings)
        key_values = phi_k.transpose(-2, -1) @ v  # (batch, heads, m, d)
        normaliser = phi_q @ phi_k.sum(dim=-2).unsqueeze(-1)  # (batch, heads, n, 1)
        return (phi_q @ key_values) / normaliser

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, num_features={self.num_features}, "
            f"redraw_interval={self.redraw_interval}, stabilizer={self.stabilizer}, "
            f"impl={self.impl}, "
            f"tile_memory={self.tile_memory}"
        )
