"""Dispatch modes that observe what runs without changing it: :class:`PassThroughMode` and
:class:`LargestTensor`, the largest storage any operator builds. The bench measures a call's
memory with them (:mod:`vitattn.bench.memory`), and a checkpoint's network is checked with them
before it is built (:mod:`vitattn.models.forward_memory`)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class PassThroughMode(TorchDispatchMode):
    """A dispatch mode that observes, never changes, what runs: compiled code stays compiled
    (the mode is off while dynamo compiles and sees the compiled artifact's own calls), and a
    higher-order operator (``flex_attention``, ``cond``) runs below the mode as one operator,
    handed to :meth:`observe` like any other."""

    supports_higher_order_operators = True

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def observe(self, func: Any, out: Any) -> None:
        """Called once per operator with its output."""

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        # The mode is popped while this runs, so a higher-order operator called again here runs
        # its own implementation below the mode, as it would have without it.
        out = func(*args, **(kwargs or {}))
        self.observe(func, out)
        return out


class LargestTensor(PassThroughMode):
    """Dispatch mode recording the largest storage produced by any operator while active."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0
        self.op = ""

    def observe(self, func: Any, out: Any) -> None:
        for item in tree_flatten(out)[0]:
            if isinstance(item, torch.Tensor):
                try:
                    size = item.untyped_storage().nbytes()
                except (RuntimeError, NotImplementedError):
                    continue
                if size > self.bytes:
                    self.bytes, self.op = size, str(func)
