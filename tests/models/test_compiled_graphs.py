"""How many graphs a compiled run compiles: one for training and one for evaluation, not another
for the test stage (each is seconds of Inductor on a GPU, outside ``train/compile_seconds``).
The model summary runs its forward with ``torch.compile`` stood down (it counts FLOPs under
``FlopCounterMode``, where Dynamo before torch 2.14 marked the code never to be compiled: this
test failed there with Lightning's summary): eager, no graph. The graphs are counted with
Dynamo's cheapest backend (``torch.compile``'s backend replaced: no C++), in this process."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch._dynamo

from tests.support.presets import FEW_STEPS
from tests.support.runners import train_with


@pytest.fixture
def graphs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[bool, int]]]:
    """(gradients on, batch size) of every graph ``torch.compile`` compiles while the test runs."""
    made: list[tuple[bool, int]] = []

    def counting(graph: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        images = next(x for x in example_inputs if isinstance(x, torch.Tensor) and x.dim() == 4)
        made.append((torch.is_grad_enabled(), images.shape[0]))
        return graph.forward

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=counting))
    torch._dynamo.reset()
    yield made
    torch._dynamo.reset()


def test_a_compiled_run_compiles_a_training_graph_and_an_evaluation_graph(
    graphs: list[tuple[bool, int]], tmp_path: Path, data_dir: Path
) -> None:
    """Eight steps validating twice, then the test set: the training graph (batch 64, with
    gradients) and one evaluation graph for validation and test alike (no gradients). Before,
    a third: the test stage's, under ``torch.inference_mode`` (Lightning validates within fit
    under ``no_grad``), whose inference tensors fail the evaluation graph's guards
    (``trainer.inference_mode=false`` now)."""
    metrics = train_with(tmp_path / "run", data_dir, *FEW_STEPS, "model.compile=true")
    assert metrics["status"] == "completed" and "test/acc" in metrics
    assert [grad for grad, _ in graphs] == [True, False], graphs
    assert graphs[0][1] == 64
