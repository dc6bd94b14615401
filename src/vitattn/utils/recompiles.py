"""Dynamo's limit on the graphs it keeps per function, under either of its names: every graph
past it is refused (or, with ``fullgraph=True``, an error). ``recompile_limit`` since torch 2.6,
``cache_size_limit`` before."""

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
