"""How many operations a call dispatches: every aten operation that reaches a kernel, counted
by a :class:`~torch.utils._python_dispatch.TorchDispatchMode` (as ``torch.utils.flop_counter``
counts FLOPs). On a GPU each is at least one launch, so for small inputs the count, not the
arithmetic, sets the time."""

from __future__ import annotations

from collections.abc import Callable

import torch

from vitattn.bench.floor import DispatchCounter

__all__ = ["DispatchCounter", "forward_backward_dispatches"]


def forward_backward_dispatches(
    kernel: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> DispatchCounter:
    """The operations of ``kernel(q, k, v)`` and of its backward through ``.sum()``, on leaf
    copies of q, k, v that require grad (the sum and the gradients' accumulation included)."""
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    with DispatchCounter() as counter:
        kernel(*leaves).sum().backward()
    return counter
