"""A compile asked for that never happens, caused for real: ``torch.compile`` stood down; and a
backend that counts the graphs Dynamo compiles."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch


@contextlib.contextmanager
def compile_stood_down() -> Iterator[None]:
    """Inside, every ``torch.compile``'d function runs eager with no error (the stance
    ``force_eager``), as when Dynamo skips the code; Dynamo's graphs left by a compiled test
    earlier in this process are dropped first, so that none is taken for this run's."""
    torch._dynamo.reset()
    with torch.compiler.set_stance("force_eager"):
        yield


def counting_into(graphs: list[torch.fx.GraphModule]) -> Callable[..., Any]:
    """A ``torch.compile`` backend that keeps each graph in ``graphs`` and runs it as traced."""

    def counting(graph: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        graphs.append(graph)
        return graph.forward

    return counting
