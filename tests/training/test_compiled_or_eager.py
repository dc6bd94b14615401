"""A run asked to compile that ran eager says so (issue 42: on torch 2.11, every
``model.compile=true`` run trained eager and reported a compile time of a few milliseconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.support.compiling import compile_stood_down
from tests.support.in_process import run_in_process
from tests.support.presets import FEW_STEPS
from vitattn.models.vit import CompiledOrEager


def test_a_run_asked_to_compile_that_ran_eager_warns_and_reports_no_compile_time(
    tmp_path: Path, data_dir: Path
) -> None:
    """Dynamo skipped the network's forward on the GPU (pytorch/pytorch#190286); here a stance
    that stands ``torch.compile`` down does the same, with no error: the run is eager, its
    metrics claim no compile seconds, and its log says why."""
    run = tmp_path / "run"
    with compile_stood_down():
        result = run_in_process(
            "vitattn-train",
            *FEW_STEPS,
            "model.compile=true",
            f"hydra.run.dir={run}",
            data_dir=data_dir,
        )
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "completed" and metrics["train/images_per_sec"] > 0
    assert "train/compile_seconds" not in metrics
    assert "torch.compile compiled no graph of the network's forward" in (
        result.stdout + result.stderr
    )


@pytest.mark.parametrize(
    ("devices", "compiles"), [(None, True), (("cpu",), True), (("cuda",), False)]
)
def test_compiled_or_eager_compiles_only_on_the_devices_it_names(devices, compiles) -> None:
    """``model.compile=auto`` is ``devices=("cuda",)``: on a CPU Dynamo never sees the
    function, and the run does not count as asked to compile there."""
    torch._dynamo.reset()

    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    forward = CompiledOrEager(double, devices)
    assert torch.equal(forward(torch.ones(3)), torch.full((3,), 2.0))
    assert forward.compiles_on("cpu") is compiles
    assert forward.ran_compiled() is compiles


def test_auto_calls_torch_compile_only_at_a_first_call_on_a_device_it_names(monkeypatch) -> None:
    """``torch.compile`` imports Inductor (seconds of every process's start): a network of
    ``model.compile=auto`` called on a CPU never calls it; on a device it names, once, at the
    first call there. ``model.compile=true`` calls it when built, as before."""
    made = []

    def recording_compile(function, *args, **kwargs):
        made.append(function)
        return function

    monkeypatch.setattr(torch, "compile", recording_compile)
    auto = CompiledOrEager(torch.neg, ("cuda",))
    auto(torch.ones(2))
    assert made == [] and auto.compiled
    named = CompiledOrEager(torch.neg, ("cpu",))
    assert made == []
    named(torch.ones(2))
    named(torch.ones(2))
    assert made == [torch.neg]
    CompiledOrEager(torch.neg)
    assert made == [torch.neg, torch.neg]


def test_auto_trains_eager_on_a_cpu_without_a_warning(tmp_path: Path, data_dir: Path) -> None:
    """The configs' default, ``model.compile=auto``, on a CPU: eager by choice, so no warning
    that a compile did not happen, and no compile seconds."""
    run = tmp_path / "run"
    result = run_in_process(
        "vitattn-train", *FEW_STEPS, "model.compile=auto", f"hydra.run.dir={run}", data_dir=data_dir
    )
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "completed"
    assert "train/compile_seconds" not in metrics
    assert "model.compile" not in result.stdout + result.stderr
