"""The fused path of random feature attention (Peng et al., ICLR 2021) as ``torch.library``
operators: ``vitattn::fourier_attention`` (the forward, two Triton kernels) and
``vitattn::fourier_attention_backward`` (three more), made and joined by
:func:`~vitattn.attention.fused.fused_operators` (``register_autograd``; eager and unwatched, the
same bodies by a plain autograd Function); the frequencies are an input without a gradient (a
buffer, redrawn by the mechanism).

The FLOP formulas give the plain path's products (``impl=autograd``,
:mod:`vitattn.attention.fused`). The kernels are in
:mod:`~vitattn.attention.fused.fourier_kernels`, imported on the first call.
"""

from __future__ import annotations

import torch
from torch import Tensor

from vitattn.attention.fused import count_as_feature_products, fused_operators

Saved = tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]
"""out, the sine and cosine halves of S and of z, the keys' maximum, the floor, the normaliser."""


def _fourier_attention(
    q: Tensor, k: Tensor, v: Tensor, frequencies: Tensor, sigma: float, eps: float
) -> Saved:
    """(out, S_sin, S_cos, z_sin, z_cos, M, floor, den); out = psi(q) S / max(den, floor)."""
    from vitattn.attention.fused import fourier_kernels

    return fourier_kernels.forward(q, k, v, frequencies, sigma, eps)


def _fourier_attention_backward(
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


fourier_attention, _call = fused_operators(
    "fourier_attention",
    _fourier_attention,
    _fourier_attention_backward,
    tensors=4,
    outputs=slice(None),
)


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


# D frequencies: D projections, 2 D features (a sine and a cosine each)
count_as_feature_products(
    torch.ops.vitattn.fourier_attention,
    torch.ops.vitattn.fourier_attention_backward,
    lambda w_shape: (w_shape[1], 2 * w_shape[1]),
)


def fused_fourier_attention(
    q: Tensor, k: Tensor, v: Tensor, frequencies: Tensor, sigma: float, eps: float
) -> Tensor:
    """Random feature attention of ``(batch, heads, n, d)`` q, k, v with ``(heads, D, d)``
    frequencies, by the fused kernels, in v's dtype."""
    out, *_ = _call(q, k, v, frequencies.float().contiguous(), sigma, eps)
    return out
