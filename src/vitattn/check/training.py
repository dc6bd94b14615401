"""Sections 2 and 3 of ``vitattn-check``: a short training of every attention, and our training
speed against timm's ViT of the same size.

Each attention trains ``training.steps`` steps of ``training.model`` through a Lightning Trainer as
``vitattn-train`` runs it (no validation, logging or checkpoints). The device is synchronised
only at the start, half way and at the end (as ``vitattn-bench mode=train`` does at its windows'
ends), so the host queues each step while the device runs the one before, as in a real run;
images/s is over the second half of the steps, after compilation, autotuning and the allocator
have settled. With ``training.compile`` each
attention also trains compiled (``model.compile=true``), its row beside the eager one
(``compiled``), with ``compile_seconds``: what the first half of the steps took beyond the steady
step time. The reference section runs ours and timm's eager and, with ``reference.compile``,
compiled. GFLOP/image is forward+backward,
counted by :func:`~vitattn.models.flops.gflop_per_image`; MFU is the model FLOPs achieved per
second over the device's dense tensor-core peak in the run's 16-bit dtype
(:func:`~vitattn.models.flops.model_flops_utilisation`; none on a CPU or an unlisted GPU, at
32-bit precision, or at bf16 on a part without a bf16 path such as a T4). The loss is
"falling" when the mean of the last quarter of the steps is below that of the first quarter.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass
from typing import Any

import hydra
import torch

from vitattn.bench.environment import environment
from vitattn.bench.kernels import failure_status
from vitattn.bench.settings import TrainSettings
from vitattn.bench.train_speed import (
    StepClock,
    bare_trainer,
    eager_status,
    measure_train_speed,
    ratios,
    train_config,
)
from vitattn.check.settings import CheckSettings
from vitattn.data.cifar10 import check_batch_fits
from vitattn.models.flops import gflop_per_image, model_flops_utilisation
from vitattn.training.fitting import compiled
from vitattn.training.lightning_output import tidy_lightning_output

log = logging.getLogger(__name__)


@dataclass
class TrainingRow:
    """One attention's short training: a line of the training table."""

    attention: str
    model: str
    batch_size: int
    precision: str
    steps: int
    params: int | None = None
    images_per_sec: float | None = None
    peak_memory_gb: float | None = None
    gflop_per_image: float | None = None
    mfu: float | None = None
    loss_first: float | None = None  # mean of the first quarter of the steps
    loss_last: float | None = None  # mean of the last quarter
    loss_falling: bool | None = None
    compiled: bool = False
    compile_seconds: float | None = None  # compiled: the first half's seconds beyond steady
    seconds: float | None = None  # the row's in all: building, counting FLOPs, the fit
    status: str = "ok"


def bench_settings(
    settings: CheckSettings, attention: str, compile: bool = False, **timing: int
) -> TrainSettings:
    """The bench's ``train`` settings for ``attention`` at the check's sizes (``compile``: also
    compiled)."""
    training = settings.training
    return TrainSettings(
        implementations=["vitattn", "timm"],
        model=training.model,
        attention=attention,
        batch_size=training.batch_size,
        precision=training.precision,
        compile=compile,
        warmup=timing.get("warmup", 0),
        steps=timing.get("steps", training.steps),
        repeats=timing.get("repeats", 1),
        overrides=list(training.overrides),
    )


class _Recorder:
    """Step-end times and losses of a Lightning fit of ``steps`` steps (the losses kept on the
    device until the end: reading each one would sync at every step), the device synchronised
    at the start, half way and at the end only."""

    def __init__(self, device: torch.device, steps: int) -> None:
        import lightning as L

        self.half = (steps + 1) // 2
        """The tick that ends the first half of the steps (the warm-up: compiling, tuning)."""
        # the bench's clock with the first half as its warm-up and the second as one window
        self.clock = StepClock.for_windows(device, self.half, steps - self.half, 1)
        self.losses: list[torch.Tensor] = []
        recorder = self

        class Callback(L.Callback):
            def on_train_start(self, *args: Any) -> None:
                recorder.clock.tick()

            def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, *_: Any) -> None:
                loss = outputs["loss"] if isinstance(outputs, dict) else outputs
                recorder.losses.append(loss.detach().float())
                recorder.clock.tick()

        self.callback = Callback()


def train_briefly(
    settings: CheckSettings, attention: str, datamodule: Any, compile: bool = False
) -> tuple[TrainingRow, Any]:
    """Train ``attention`` for ``training.steps`` steps, compiled with ``compile``; its row and
    the trained module."""

    training, device = settings.training, settings.torch_device
    row = TrainingRow(
        attention, training.model, training.batch_size, training.precision, training.steps
    )
    row.compiled = compile
    check_batch_fits(len(datamodule.train_set), training.batch_size, "training.batch_size")
    cfg = train_config(bench_settings(settings, attention), compile=compile)
    torch.manual_seed(settings.seed)
    datamodule.reseed(device)  # every row on the same batches, augmented alike
    module = hydra.utils.instantiate(cfg.module)
    row.params = sum(p.numel() for p in module.parameters())
    example = datamodule.on_after_batch_transfer(module.example_input_array, 0)
    # counted on the device it trains on, where a kernel such as attention.impl=triton runs
    row.gflop_per_image = gflop_per_image(module.net, example.to(device))
    recorder = _Recorder(device, training.steps)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    trainer = bare_trainer(device, training.precision, training.steps, recorder.callback)
    trainer.fit(module, datamodule=datamodule)
    if compile and not compiled(module):  # e.g. Dynamo skipped the forward: timed eager
        row.status = eager_status(module.net) or "ran eager"
    if device.type == "cuda":
        row.peak_memory_gb = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
    clock, half = recorder.clock, recorder.half
    second_half = training.steps - half
    windows = clock.windows(half, second_half, 1) if second_half >= 1 else []
    if windows:  # every step ran
        row.images_per_sec = training.batch_size / windows[0]
        extra = clock.warmup_extra(half, windows[0]) if compile else None
        row.compile_seconds = None if extra is None else round(extra, 3)
    losses = [loss.item() for loss in recorder.losses]
    quarter = max(1, len(losses) // 4)
    if losses:
        row.loss_first = statistics.fmean(losses[:quarter])
        row.loss_last = statistics.fmean(losses[-quarter:])
        row.loss_falling = row.loss_last < row.loss_first
    row.mfu = model_flops_utilisation(
        row.gflop_per_image, row.images_per_sec, device, training.precision
    )
    return row, module


def run_training(settings: CheckSettings) -> list[TrainingRow]:
    """Section 2: every attention's short training (a failure is that attention's row status)."""
    tidy_lightning_output()
    assert settings.attentions is not None
    cfg = train_config(bench_settings(settings, settings.attentions[0]))
    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    ways = [False, True] if settings.training.compile else [False]
    rows = []
    for attention in settings.attentions:
        for compile in ways:
            rows.append(training_row(settings, attention, datamodule, compile))
            if settings.torch_device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def training_row(
    settings: CheckSettings, attention: str, datamodule: Any, compile: bool
) -> TrainingRow:
    """:func:`train_briefly`'s row, or the row of its failure, with its seconds."""
    started = time.perf_counter()
    try:
        row, _ = train_briefly(settings, attention, datamodule, compile)
    except Exception as error:
        training = settings.training
        row = TrainingRow(
            attention, training.model, training.batch_size, training.precision, training.steps
        )
        row.compiled, row.status = compile, failure_status(error)
    row.seconds = round(time.perf_counter() - started, 1)
    log.info(
        "training %-14s %-8s %s images/s, loss %s -> %s, %s",
        attention,
        "compiled" if compile else "eager",
        "-" if row.images_per_sec is None else f"{row.images_per_sec:.0f}",
        row.loss_first,
        row.loss_last,
        row.status,
    )
    return row


def run_reference(settings: CheckSettings) -> dict[str, Any]:
    """Section 3: ours (softmax) and timm's ViT of the same size, timed alike; the ratio."""
    from vitattn.bench.settings import require_timm
    from vitattn.errors import ConfigError

    try:
        require_timm()
    except ConfigError as missing:
        return {"status": f"skipped: {missing}", "results": [], "ratios": {}}
    reference = settings.reference
    train = bench_settings(
        settings,
        "softmax",
        compile=reference.compile,
        warmup=reference.warmup,
        steps=reference.steps,
        repeats=reference.repeats,
    )
    tidy_lightning_output()
    try:
        results = measure_train_speed(train, settings.torch_device, "training.batch_size")
    except ConfigError as error:  # as the training section's rows: the report says why
        return {"status": f"unsupported: {error}", "results": [], "ratios": {}}
    return {
        "status": "ok",
        "results": [vars(r) for r in results],
        "ratios": ratios(results),
        "environment": environment(settings.torch_device),
    }
