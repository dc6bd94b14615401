"""The fused path of efficient attention (Shen et al., WACV 2021) as ``torch.library`` operators:
``vitattn::efficient_attention`` (the forward, two Triton kernels) and
``vitattn::efficient_attention_backward`` (two more), made and joined by
:func:`~vitattn.attention.fused.fused_operators` (``register_autograd``; eager and unwatched, the
same bodies by a plain autograd Function).

The FLOP formulas give the plain path's products (:mod:`vitattn.attention.fused`). The kernels
are in :mod:`~vitattn.attention.fused.efficient_kernels`, imported on the first call.
"""

from __future__ import annotations

import torch
from torch import Tensor

from vitattn.attention.fused import count_as_products, fused_operators


def _efficient_attention(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(out, C, L): out = softmax_row(q) C, C = softmax_col(k)^T v, L the keys' log-sum-exp over
    the sequence per feature."""
    from vitattn.attention.fused import efficient_kernels

    return efficient_kernels.forward(q, k, v)


def _efficient_attention_backward(
    grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, context: Tensor, log_sum: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) of :func:`efficient_attention` given the gradient of its output."""
    from vitattn.attention.fused import efficient_kernels

    return efficient_kernels.backward(grad_out, q, k, v, context, log_sum)


efficient_attention, _call = fused_operators(
    "efficient_attention",
    _efficient_attention,
    _efficient_attention_backward,
    tensors=3,
    outputs=slice(1, None),
)


@efficient_attention.register_fake
def _efficient_attention_shapes(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    batch, heads, n, d = q.shape
    dv = v.shape[-1]
    return (
        v.new_empty(batch, heads, n, dv),
        q.new_empty(batch, heads, d, dv, dtype=torch.float32),
        q.new_empty(batch, heads, d, dtype=torch.float32),
    )


def _products(batch: int, heads: int, n_q: int, n_k: int, d: int, dv: int) -> int:
    """FLOPs of the forward's products, as the plain path's: softmax_col(K)^T V and
    softmax_row(Q) C."""
    return 2 * batch * heads * (n_q + n_k) * d * dv


count_as_products(
    torch.ops.vitattn.efficient_attention, torch.ops.vitattn.efficient_attention_backward, _products
)


def fused_efficient_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Efficient attention of ``(batch, heads, n, d)`` q, k, v by the fused kernels, in v's
    dtype."""
    out, _, _ = _call(q, k, v)
    return out
