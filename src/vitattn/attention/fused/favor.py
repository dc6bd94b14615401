"""The fused path of FAVOR+ attention (Choromanski et al., ICLR 2021), either stabilizer, as
``torch.library`` operators: ``vitattn::favor_attention`` (the forward, two Triton kernels) and
``vitattn::favor_attention_backward`` (three more), made and joined by
:func:`~vitattn.attention.fused.fused_operators` (``register_autograd``; eager and unwatched, the
same bodies by a plain autograd Function); the projection is an input without a gradient (a
buffer, redrawn by the mechanism).

The FLOP formulas give the plain path's products (``impl=autograd``,
:mod:`vitattn.attention.fused`). The kernels are in
:mod:`~vitattn.attention.fused.favor_kernels`, imported on the first call.
"""

from __future__ import annotations

import torch
from torch import Tensor

from vitattn.attention.fused import count_as_feature_products, fused_operators

Saved = tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]
"""out, S, z, the keys' maximum, the normaliser and the queries' maxima."""


def _favor_attention(
    q: Tensor, k: Tensor, v: Tensor, projection: Tensor, eps: float, stabilizer: str
) -> Saved:
    """(out, S, z, M, den, shift) of FAVOR+ attention; out = phi(q) S / phi(q) z."""
    from vitattn.attention.fused import favor_kernels

    return favor_kernels.forward(q, k, v, projection, eps, stabilizer)


def _favor_attention_backward(
    grad_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    projection: Tensor,
    out: Tensor,
    state: Tensor,
    key_sum: Tensor,
    key_max: Tensor,
    normaliser: Tensor,
    shift: Tensor,
    eps: float,
    stabilizer: str,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) of :func:`favor_attention` given the gradient of its output."""
    from vitattn.attention.fused import favor_kernels

    saved = (out, state, key_sum, key_max, normaliser, shift)
    return favor_kernels.backward(grad_out, q, k, v, projection, saved, eps, stabilizer)


favor_attention, _call = fused_operators(
    "favor_attention", _favor_attention, _favor_attention_backward, tensors=4, outputs=slice(None)
)


@favor_attention.register_fake
def _favor_attention_shapes(
    q: Tensor, k: Tensor, v: Tensor, projection: Tensor, eps: float, stabilizer: str
) -> Saved:
    batch, heads, n, _ = q.shape
    dv, m = v.shape[-1], projection.shape[1]
    fp32 = dict(dtype=torch.float32)
    return (
        v.new_empty(batch, heads, n, dv),
        q.new_empty(batch, heads, m, dv, **fp32),
        q.new_empty(batch, heads, m, **fp32),
        q.new_empty(batch, heads, **fp32),
        q.new_empty(batch, heads, n, **fp32),
        q.new_empty(batch, heads, n, **fp32),
    )


count_as_feature_products(
    torch.ops.vitattn.favor_attention,
    torch.ops.vitattn.favor_attention_backward,
    lambda w_shape: (w_shape[1], w_shape[1]),  # m logits and m features
)


def fused_favor_attention(
    q: Tensor, k: Tensor, v: Tensor, projection: Tensor, eps: float, stabilizer: str
) -> Tensor:
    """FAVOR+ attention of ``(batch, heads, n, d)`` q, k, v with a ``(heads, m, d)`` projection
    and ``stabilizer`` (``unbiased`` or ``authors``), by the fused kernels, in v's dtype."""
    out, *_ = _call(q, k, v, projection.float().contiguous(), eps, stabilizer)
    return out
