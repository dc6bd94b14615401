"""How many operations a call dispatches: every aten operation that reaches a kernel, counted
by a :class:`~torch.utils._python_dispatch.TorchDispatchMode` (as ``torch.utils.flop_counter``
counts FLOPs). On a GPU each is at least one launch, so for small inputs the count, not the
arithmetic, sets the time."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class DispatchCounter(TorchDispatchMode):
    """Counts the aten operations dispatched inside it, by name (``ops``) and in all (``total``);
    ``computing`` leaves out views (``view``, ``transpose``, ``expand``, ``detach``, ...), which
    launch nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.views = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops[str(func.overloadpacket)] += 1
        self.views += bool(func.is_view)
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def computing(self) -> int:
        return self.total - self.views


def forward_backward_dispatches(
    kernel: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> DispatchCounter:
    """The operations of ``kernel(q, k, v)`` and of its backward through ``.sum()``, on leaf
    copies of q, k, v that require grad (the sum and the gradients' accumulation included)."""
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    with DispatchCounter() as counter:
        kernel(*leaves).sum().backward()
    return counter
