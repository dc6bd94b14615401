"""The fused path of linear attention with a feature map as ``torch.library`` operators:
``vitattn::linear_attention`` (the forward, two Triton kernels) and
``vitattn::linear_attention_backward`` (two more), made and joined by
:func:`~vitattn.attention.fused.fused_operators` (``register_autograd``; eager and unwatched, the
same bodies by a plain autograd Function). The feature map is an argument: ``elu`` for linear
attention (Katharopoulos et al., ICML 2020), ``unit`` for first-order Taylor attention's 1 +
q^.k^ (:mod:`~vitattn.attention.fused.linear_kernels`).

The FLOP formulas give the plain path's products (:mod:`vitattn.attention.fused`). The kernels
are in :mod:`~vitattn.attention.fused.linear_kernels`, imported on the first call.
"""

from __future__ import annotations

import torch
from torch import Tensor

from vitattn.attention.fused import count_as_products, fused_operators


def _linear_attention(
    q: Tensor, k: Tensor, v: Tensor, eps: float, feature: str
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(out, S, z, s): out = (phi(q) S + c s) / (phi(q) z + c n_k + eps), S = phi(k)^T v,
    z = phi(k)^T 1, s = v^T 1 for ``unit`` (c = 1), empty for ``elu`` (c = 0)."""
    from vitattn.attention.fused import linear_kernels

    return linear_kernels.forward(q, k, v, eps, feature)


def _linear_attention_backward(
    grad_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: Tensor,
    key_sum: Tensor,
    value_sum: Tensor,
    eps: float,
    feature: str,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) of :func:`linear_attention` given the gradient of its output."""
    from vitattn.attention.fused import linear_kernels

    return linear_kernels.backward(grad_out, q, k, v, state, key_sum, value_sum, eps, feature)


linear_attention, _call = fused_operators(
    "linear_attention",
    _linear_attention,
    _linear_attention_backward,
    tensors=3,
    outputs=slice(1, None),
)


@linear_attention.register_fake
def _linear_attention_shapes(
    q: Tensor, k: Tensor, v: Tensor, eps: float, feature: str
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    batch, heads, n, d = q.shape
    dv = v.shape[-1]
    return (
        v.new_empty(batch, heads, n, dv),
        q.new_empty(batch, heads, d, dv, dtype=torch.float32),
        q.new_empty(batch, heads, d, dtype=torch.float32),
        q.new_empty(batch, heads, dv if feature == "unit" else 0, dtype=torch.float32),
    )


def _products(batch: int, heads: int, n_q: int, n_k: int, d: int, dv: int) -> int:
    """FLOPs of the forward's products, as the plain paths' (linear's and taylor's alike):
    phi(K)^T [V, 1] and phi(Q) [S, z]."""
    return 2 * batch * heads * (n_q + n_k) * d * (dv + 1)


count_as_products(
    torch.ops.vitattn.linear_attention, torch.ops.vitattn.linear_attention_backward, _products
)


def fused_linear_attention(q: Tensor, k: Tensor, v: Tensor, eps: float, feature: str) -> Tensor:
    """Linear attention of ``(batch, heads, n, d)`` q, k, v with the feature map ``feature``
    (``elu`` or ``unit``) by the fused kernels, in v's dtype."""
    out, *_ = _call(q, k, v, eps, feature)
    return out
