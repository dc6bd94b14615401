"""Dynamo's limit on the graphs it keeps per function, under either of its names: every graph
past it is refused (or, with ``fullgraph=True``, an error). ``recompile_limit`` since torch 2.6,
``cache_size_limit`` before. And :func:`eager_only`, a block Dynamo never sees."""

from __future__ import annotations

import contextlib
from typing import Any


def _setting() -> tuple[Any, str]:
    import torch

    config = torch._dynamo.config
    return config, "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"


def recompile_limit() -> int:
    """The limit now."""
    config, name = _setting()
    return int(getattr(config, name))


def recompile_limit_set_to(limit: int) -> contextlib.AbstractContextManager[Any]:
    """The limit set to ``limit`` inside the block."""
    config, name = _setting()
    return config.patch(**{name: limit})


def eager_only() -> contextlib.AbstractContextManager[Any]:
    """Every ``torch.compile``'d function called inside runs eager, and Dynamo never sees it.

    Dynamo refuses to trace under a dispatch mode such as ``FlopCounterMode``, and up to torch
    2.13 it then marks the code object as never to be compiled (pytorch/pytorch#190286): one
    count before training left every later ``model.compile=true`` forward eager, silently."""
    import torch

    return torch.compiler.set_stance("force_eager")
