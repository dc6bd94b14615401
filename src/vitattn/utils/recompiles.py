"""Dynamo's limit on the graphs it keeps per function (``recompile_limit``): every graph past
it is refused (or, with ``fullgraph=True``, an error). And :func:`eager_only`, a block Dynamo
never sees."""

from __future__ import annotations

import contextlib
from typing import Any


def recompile_limit() -> int:
    """The limit now."""
    import torch

    return int(torch._dynamo.config.recompile_limit)


def recompile_limit_set_to(limit: int) -> contextlib.AbstractContextManager[Any]:
    """The limit set to ``limit`` inside the block."""
    import torch

    return torch._dynamo.config.patch(recompile_limit=limit)


def eager_only() -> contextlib.AbstractContextManager[Any]:
    """Every ``torch.compile``'d function called inside runs eager, and Dynamo never sees it.

    Dynamo refuses to trace under a dispatch mode such as ``FlopCounterMode``, and up to torch
    2.13 it then marks the code object as never to be compiled (pytorch/pytorch#190286): one
    count before training left every later ``model.compile=true`` forward eager, silently."""
    import torch

    return torch.compiler.set_stance("force_eager")
