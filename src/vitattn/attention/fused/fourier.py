"""The fused path of random feature attention (Peng et al., ICLR 2021) as ``torch.library``
operators: ``vitattn::fourier_attention`` (the forward, two Triton kernels) and
``vitattn::fourier_attention_backward`` (three more), joined by ``register_autograd``; the
frequencies are an input without a gradient (a buffer, redrawn by the mechanism).

The FLOP formulas give the plain path's products (``impl=autograd``,
:mod:`vitattn.attention.fused`). The kernels are in
:mod:`~vitattn.attention.fused.fourier_kernels`, imported on the first call.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.flop_counter import register_flop_formula

from vitattn.attention.fused import gradients_like, join_backward

if not hasattr(torch.library, "custom_op"):
    raise ImportError(f"the fused kernels need torch 2.4 or later, not {torch.__version__}")

Saved = tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]
"""out, the sine and cosine halves of S and of z, the keys' maximum, the floor, the normaliser."""


@torch.library.custom_op("vitattn::fourier_attention", mutates_args=())
def fourier_attention(
    q: Tensor, k: Tensor, v: Tensor, frequencies: Tensor, sigma: float, eps: float
) -> Saved:
    """(out, S_sin, S_cos, z_sin, z_cos, M, floor, den); out = psi(q) S / max(den, floor)."""
    from vitattn.attention.fused import fourier_kernels

    return fourier_kernels.forward(q, k, v, frequencies, sigma, eps)


@fourier_attention.register_fake
def _fourier_attention_shapes(
    q: Tensor, k: Tensor, v: Tensor, frequencies: Tensor, sigma: float, eps: float
) -> Saved:
    batch, heads, n, _ = q.shape
    dv, count = v.shape[-1], frequencies.shape[1]
    fp32 = dict(dtype=torch.float32)
    return (
        v.new_empty(batch, heads, n, dv),
        q.new_empty(batch, heads, count, dv, **fp32),
        q.new_empty(batch, heads, count, dv, **fp32),
        q.new_empty(batch, heads, count, **fp32),
        q.new_empty(batch, heads, count, **fp32),
        q.new_empty(batch, heads, **fp32),
        q.new_empty(batch, heads, **fp32),
        q.new_empty(batch, heads, n, **fp32),
    )


@torch.library.custom_op("vitattn::fourier_attention_backward", mutates_args=())
def fourier_attention_backward(
    grad_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    frequencies: Tensor,
    out: Tensor,
    state_sin: Tensor,
    state_cos: Tensor,
    sum_sin: Tensor,
    sum_cos: Tensor,
    key_max: Tensor,
    floor: Tensor,
    normaliser: Tensor,
    sigma: float,
    eps: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) of :func:`fourier_attention` given the gradient of its output."""
    from vitattn.attention.fused import fourier_kernels

    saved = (out, state_sin, state_cos, sum_sin, sum_cos, key_max, floor, normaliser)
    return fourier_kernels.backward(grad_out, q, k, v, frequencies, saved, sigma, eps)


fourier_attention_backward.register_fake(gradients_like)


join_backward(fourier_attention, fourier_attention_backward, tensors=4, outputs=slice(None))


def _sizes(q_shape, k_shape, v_shape, w_shape) -> tuple[int, int, int, int, int, int]:
    batch, heads, n_q, d = q_shape
    return batch * heads, n_q, k_shape[2], d, v_shape[3], 2 * w_shape[1]


@register_flop_formula(torch.ops.vitattn.fourier_attention)
def _forward_flops(q_shape, k_shape, v_shape, w_shape, *_args, out_shape=None, **_kw) -> int:
    """The plain path's products: the projections Q W^T and K W^T (D wide), phi(K)^T V,
    phi(Q) (phi(K)^T V) and phi(Q) (phi(K)^T 1) (2 D wide)."""
    heads, n_q, n_k, d, dv, width = _sizes(q_shape, k_shape, v_shape, w_shape)
    return heads * (n_q + n_k) * width * d + 2 * heads * width * (n_k * dv + n_q * (dv + 1))


@register_flop_formula(torch.ops.vitattn.fourier_attention_backward)
def _backward_flops(_grad, q_shape, k_shape, v_shape, w_shape, *_args, out_shape=None, **_kw):
    """Each product's two gradient products, but one for the projections (the frequencies have
    no gradient)."""
    heads, n_q, n_k, d, dv, width = _sizes(q_shape, k_shape, v_shape, w_shape)
    return heads * (n_q + n_k) * width * d + 4 * heads * width * (n_k * dv + n_q * (dv + 1))


def fused_fourier_attention(
    q: Tensor, k: Tensor, v: Tensor, frequencies: Tensor, sigma: float, eps: float
) -> Tensor:
    """Random feature attention of ``(batch, heads, n, d)`` q, k, v with ``(heads, D, d)``
    frequencies, by the fused kernels, in v's dtype."""
    out, *_ = fourier_attention(q, k, v, frequencies.float().contiguous(), sigma, eps)
    return out
