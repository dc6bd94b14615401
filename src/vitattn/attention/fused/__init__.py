"""Fused GPU paths of mechanisms whose plain PyTorch path dispatches many small operators.

Each fast path computes the same function as its mechanism's plain path (the reference it is
tested against), in a few Triton kernels wrapped as one ``torch.library`` operator per pass
(``register_autograd`` joins the two), so that ``torch.compile`` keeps it in one graph
(``fullgraph=True``), ``FlopCounterMode`` counts the plain path's FLOPs for it (a formula given to
``register_flop_formula``) and the bench's dispatch count sees one operator where the kernels run.
Where nothing watches (eager, no dispatch mode), the same kernels run under a plain
``torch.autograd.Function`` instead, without the operators' dispatch (:func:`fused_operators`).

Triton kernels run on a CUDA GPU, or on a CPU under ``TRITON_INTERPRET=1`` (set before the
kernels are imported): how the suite tests them on a machine without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import register_flop_formula

from vitattn.errors import ConfigError


@torch.compiler.assume_constant_result
def unavailable_on(device_type: str) -> str | None:
    """Why the fused paths cannot run on a device of this type here, or ``None`` if they can."""
    try:
        from vitattn.attention.fused import tiles
    except ImportError as error:
        return f"it needs Triton ({error})"
    if device_type == "cuda" and not tiles.INTERPRETED:
        return None
    if device_type == "cpu" and tiles.INTERPRETED:
        return None
    return f"it runs on a CUDA GPU (or on a CPU under TRITON_INTERPRET=1), not on {device_type}"


def runs_here(impl: str, device_type: str, instead: str) -> bool:
    """Whether the fused paths run on a device of this type here; ``impl=triton`` where they
    cannot is refused in one line that offers ``instead``."""
    reason = unavailable_on(device_type)
    if impl == "triton" and reason is not None:
        raise ConfigError(f"attention.impl=triton cannot run here: {reason}; choose {instead}")
    return reason is None


def gradients_like(
    _grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *_saved: object
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The shapes and strides, for the compiler, of a backward operator's (dq, dk, dv): those of
    q, k and v (strided views, as the multi-head split passes them), as the kernels write them."""
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def count_as_products(
    forward: object, backward: object, products: Callable[[int, int, int, int, int, int], int]
) -> None:
    """Registers the FLOP formulas of a fused path's two operators (``torch.ops.vitattn.*``):
    ``products(batch, heads, n_q, n_k, d, d_v)``, the plain path's forward products, for the
    forward, and twice that for the backward (each product's two gradient products)."""

    def sizes(q_shape, k_shape, v_shape) -> tuple[int, int, int, int, int, int]:
        batch, heads, n_q, d = q_shape
        return batch, heads, n_q, k_shape[2], d, v_shape[3]

    @register_flop_formula(forward)
    def _forward_flops(q_shape, k_shape, v_shape, *_args, out_shape=None, **_kwargs) -> int:
        return products(*sizes(q_shape, k_shape, v_shape))

    @register_flop_formula(backward)
    def _backward_flops(_grad, q_shape, k_shape, v_shape, *_args, out_shape=None, **_kw) -> int:
        return 2 * products(*sizes(q_shape, k_shape, v_shape))


def count_as_feature_products(
    forward: object, backward: object, widths: Callable[[tuple[int, ...]], tuple[int, int]]
) -> None:
    """Registers the FLOP formulas of a feature map's two fused operators (inputs q, k, v and
    the map's weights first): the plain path's products, the projections Q W^T and K W^T
    (``p`` wide) and phi(K)^T V, phi(Q) (phi(K)^T V) and phi(Q) (phi(K)^T 1) (``f`` wide), with
    ``(p, f) = widths(weights' shape)``. The backward does each product's two gradient products
    but one for the projections (the weights take no gradient)."""

    def products(q_shape, k_shape, v_shape, w_shape) -> tuple[int, int]:
        batch, heads, n_q, d = q_shape
        n_k, dv = k_shape[2], v_shape[3]
        projected, features = widths(w_shape)
        projections = 2 * batch * heads * projected * (n_q + n_k) * d
        return projections, 2 * batch * heads * features * (n_k * dv + n_q * (dv + 1))

    @register_flop_formula(forward)
    def _forward_flops(q_shape, k_shape, v_shape, w_shape, *_a, out_shape=None, **_kw) -> int:
        projections, feature_products = products(q_shape, k_shape, v_shape, w_shape)
        return projections + feature_products

    @register_flop_formula(backward)
    def _backward_flops(_grad, q_shape, k_shape, v_shape, w_shape, *_a, out_shape=None, **_kw):
        projections, feature_products = products(q_shape, k_shape, v_shape, w_shape)
        return projections + 2 * feature_products


def fused_operators(
    name: str,
    forward: Callable[..., tuple],
    backward: Callable[..., tuple],
    tensors: int,
    outputs: slice,
) -> tuple[Any, Callable[..., tuple]]:
    """A fused path's two ``torch.library`` operators, their autograd, and the function that
    calls them.

    ``forward`` and ``backward`` (typed functions: the kernels' passes) become the operators
    ``vitattn::<name>`` and ``vitattn::<name>_backward``; the backward's shapes for the compiler
    are its inputs' (:func:`gradients_like`), the forward's are the caller's to register
    (``register_fake`` on the returned operator). The forward operator's autograd
    (``register_autograd``): its first ``tensors`` inputs (q, k, v and any weights) and its
    ``outputs`` are saved, its other inputs (numbers, words) kept, and the backward operator,
    called with the output's gradient, the saved tensors and the kept inputs, gives (dq, dk, dv);
    weights and the rest get none.

    Returned: the forward operator, and a function of its inputs that runs the operators where
    something watches the dispatcher or compiles (``torch.compile``, ``FlopCounterMode``, the
    bench's dispatch count and memory modes, fake tensors), and elsewhere ``forward`` and
    ``backward`` themselves joined by a plain ``torch.autograd.Function``: the same kernels
    without ``torch.library``'s dispatch, which costs the host a third to a half of a fused
    call's time (docs/check.md)."""
    forward_operator = torch.library.custom_op(f"vitattn::{name}", forward, mutates_args=())
    backward_operator = torch.library.custom_op(
        f"vitattn::{name}_backward", backward, mutates_args=()
    )
    backward_operator.register_fake(gradients_like)

    def save(ctx: torch.autograd.function.FunctionCtx, inputs: tuple, output: tuple) -> None:
        ctx.save_for_backward(*inputs[:tensors], *output[outputs])
        ctx.settings = inputs[tensors:]

    def gradients_by(run: Callable[..., tuple]) -> Callable[..., tuple]:
        def gradients(
            ctx: torch.autograd.function.FunctionCtx, grad_out: torch.Tensor, *_: object
        ) -> tuple[torch.Tensor | None, ...]:
            grad_q, grad_k, grad_v = run(grad_out, *ctx.saved_tensors, *ctx.settings)
            return grad_q, grad_k, grad_v, *[None] * (tensors - 3 + len(ctx.settings))

        return gradients

    forward_operator.register_autograd(gradients_by(backward_operator), setup_context=save)
    run_forward, unwatched_gradients = forward, gradients_by(backward)

    class FusedPath(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *inputs: Any) -> tuple:
            output = run_forward(*inputs)
            save(ctx, inputs, output)
            ctx.mark_non_differentiable(*output[1:])
            return output

        backward = staticmethod(unwatched_gradients)

    def call(*inputs: Any) -> tuple:
        if watched() or inputs[0].device.type not in ("cuda", "cpu"):
            return forward_operator(*inputs)
        return FusedPath.apply(*inputs)

    return forward_operator, call


def watched() -> bool:
    """Whether a ``torch.compile`` trace or a dispatch mode (``FlopCounterMode``, fake tensors,
    the bench's counters) would see the fused path's operators."""
    return torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0
