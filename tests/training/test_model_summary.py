"""The model summary's example forward runs with ``torch.compile`` stood down: before torch 2.14
Dynamo, called under the summary's ``FlopCounterMode``, marked a compiled network's forward never
to be compiled (pytorch/pytorch#190286), and every ``model.compile`` run trained eager. On such a
torch (2.11, the lent GPUs' image) ``tests/models/test_compiled_graphs.py`` and
``tests/models/test_compiled_checkpoints.py`` failed with Lightning's summary; on a newer one
Dynamo no longer marks the code, so what is tested here is the stance the forward runs in."""

from __future__ import annotations

import logging
import re

import lightning as L
import pytest
import torch
import torch._dynamo.eval_frame
from torch import nn

from vitattn.training.callbacks import ModelSummary


class Recording(L.LightningModule):
    """A module whose forward records Dynamo's stance when it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 2)
        self.example_input_array = torch.zeros(1, 4)
        self.stances: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.stances.append(torch._dynamo.eval_frame._stance.stance)
        return self.layer(x)


def summarize_with(callback: L.Callback) -> list[str]:
    module = Recording()
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_model_summary=False)
    callback.on_fit_start(trainer, module)
    return module.stances


def test_the_summary_runs_its_example_forward_with_torch_compile_stood_down() -> None:
    assert summarize_with(L.pytorch.callbacks.ModelSummary()) == ["default"]  # Lightning's
    assert summarize_with(ModelSummary()) == ["force_eager"]
    assert torch._dynamo.eval_frame._stance.stance == "default"  # and after it, as before


def test_the_summary_still_counts_the_flops_of_the_example(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO):
        summarize_with(ModelSummary())
    assert re.search(r"^16\s+Total Flops$", caplog.text, re.MULTILINE)  # (1, 4) @ (4, 2)
