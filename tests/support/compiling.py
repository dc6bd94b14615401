"""A compile asked for that never happens, caused for real: ``torch.compile`` stood down."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def compile_stood_down() -> Iterator[None]:
    """Inside, every ``torch.compile``'d function runs eager with no error (the stance
    ``force_eager``), as when Dynamo skips the code; Dynamo's graphs left by a compiled test
    earlier in this process are dropped first, so that none is taken for this run's."""
    torch._dynamo.reset()
    with torch.compiler.set_stance("force_eager"):
        yield
