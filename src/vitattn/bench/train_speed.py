"""Images per second of whole training steps (``vitattn-bench mode=train``).

On the same data and model size (``train.model``, ``train.overrides``), each of
``train.implementations``:

- ``vitattn``: our pipeline as ``vitattn-train`` runs it (a Lightning Trainer, uint8 data on the
  device, batched augmentation, our ViT with the configured attention, AdamW and its schedule),
  with any ``model``/``attention``/``precision`` setting;
- ``plain_loop``: the same network, built from the same composed train config, trained by a
  hand-written loop on the same data module's batches, with the same on-device augmentation,
  optimizer (the module's parameter groups) and schedule, and no Lightning: ``vitattn/plain_loop``
  is what the framework costs;
- ``timm``: timm's ``VisionTransformer`` of the same embedding size, depth, heads, MLP size and
  patch size, in a plain loop over random on-device batches with the same augmentation;
- ``report_style``: the founding report's style, a plain PyTorch ViT with explicit (non-fused)
  softmax attention, fed by a torchvision ``DataLoader`` with per-image PIL transforms.

A step is everything between two consecutive optimizer steps: fetching and augmenting the batch,
forward, backward and the update. Every implementation is timed by a :class:`StepClock` the same
way: the first ``warmup`` steps are not counted, the rate is the median over ``repeats`` windows
of ``steps`` steps, and the device is synchronised only where a window starts or ends, so that
within a window the host queues the next step's work while the device runs this one's, as in a
real run (whose host reads a device value only at logging steps: ``tests/test_host_syncs.py``).

With ``train.compile``, ``vitattn``, ``plain_loop`` and ``timm`` also train compiled
(``torch.compile`` of the forward pass; ``model.compile=true`` for ours), each row beside its
eager one (``compile`` says which), and a compiled row's ``compile_seconds`` is what its warm-up
steps took beyond the steady step time (compilation): apart from its steady images/s.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import hydra
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from vitattn.bench.environment import environment
from vitattn.bench.references import (
    ExplicitAttentionViT,
    device_batches,
    loader_batches,
    loop_step,
    per_image_batches,
    timm_vit,
)
from vitattn.bench.settings import IMPLEMENTATIONS, BenchSettings, TrainSettings
from vitattn.cli.additions import MAX_SHOWN
from vitattn.data.cifar10 import check_batch_fits
from vitattn.errors import ConfigError
from vitattn.models.flops import gflop_per_image, model_flops_utilisation
from vitattn.runs.files import one_line
from vitattn.training.lightning_output import tidy_lightning_output
from vitattn.utils.config import CONFIG_DIR, cut_apart

__all__ = ["IMPLEMENTATIONS", "TrainRun", "TrainSpeed", "measure_train_speed", "run_train"]

COMPILED = ("vitattn", "plain_loop", "timm")
"""The implementations that also train compiled with ``train.compile`` (``report_style`` is the
founding report's eager loop)."""

REFERENCE_ATTENTION = {"timm": "softmax (timm fused)", "report_style": "softmax (explicit)"}
"""The attention of each reference network (ours and ``plain_loop`` use ``train.attention``)."""


@dataclass
class TrainSpeed:
    """One implementation's measurement: a line of ``train_speed.csv``."""

    implementation: str
    model: str
    attention: str
    batch_size: int
    precision: str
    compile: bool
    device: str
    params: int
    images_per_sec: float | None
    spread: float | None  # (max - min) / median over the repeats
    step_ms: float | None
    gflop_per_image: float | None = None  # forward+backward, torch.utils.flop_counter
    mfu: float | None = None  # on a GPU with a known 16-bit peak (vitattn.models.flops)
    compile_seconds: float | None = None  # compiled rows: the warm-up's seconds beyond steady
    status: str = "ok"


@dataclass
class TrainRun:
    """What ``mode=train`` measured, the ratios of ours to each other, and on what."""

    results: list[TrainSpeed]
    ratios: dict[str, float]
    environment: dict[str, Any]


class StepClock:
    """Times the ends of training steps, from a first tick (index 0) at the start.

    On a GPU the host runs ahead of the device, so a tick's time is the device's only after a
    synchronisation: the clock synchronises at the ticks whose indices are in ``synced`` (every
    tick where it is ``None``), and only those ticks' times may be read. A synchronisation at
    every step would add the host's work between steps (the loop's hooks, the next batch, the
    launches) to every step, which a real run overlaps with the device's work."""

    def __init__(self, device: torch.device, synced: Collection[int] | None = None) -> None:
        self.device = device
        self.synced = None if synced is None else frozenset(synced)
        self.ticks: list[float] = []

    @classmethod
    def for_windows(cls, device: torch.device, warmup: int, steps: int, repeats: int) -> StepClock:
        """A clock synchronised at the start, at the end of the warm-up and at the end of each
        of ``repeats`` windows of ``steps`` steps: the ticks :meth:`windows` and
        :meth:`warmup_extra` read."""
        return cls(device, {0, *(warmup + i * steps for i in range(repeats + 1))})

    def tick(self) -> None:
        if self.device.type == "cuda" and (self.synced is None or len(self.ticks) in self.synced):
            torch.cuda.synchronize(self.device)
        self.ticks.append(time.perf_counter())

    def seconds(self, first: int, last: int) -> float:
        """Seconds from tick ``first`` to tick ``last``, both synchronised ticks."""
        for index in (first, last):
            if self.synced is not None and index not in self.synced:
                raise ValueError(f"tick {index} was not synchronised with the device")
        return self.ticks[last] - self.ticks[first]

    def warmup_extra(self, warmup: int, step_seconds: float | None) -> float | None:
        """What the first ``warmup`` steps took beyond ``step_seconds`` each (compilation, at
        least 0); ``None`` without a warm-up or a steady step time."""
        if warmup < 1 or step_seconds is None or len(self.ticks) <= warmup:
            return None
        return max(0.0, self.seconds(0, warmup) - warmup * step_seconds)

    def windows(self, warmup: int, steps: int, repeats: int) -> list[float]:
        """Seconds per step of each window of ``steps`` steps after the first ``warmup``."""
        return [
            self.seconds(warmup + i * steps, warmup + (i + 1) * steps) / steps
            for i in range(repeats)
            if warmup + (i + 1) * steps < len(self.ticks)
        ]


def time_loop(step: Callable[[], None], device: torch.device, train: TrainSettings) -> StepClock:
    """The clock of a plain loop calling ``step`` for every step ``train`` times."""
    clock = StepClock.for_windows(device, train.warmup, train.steps, train.repeats)
    clock.tick()
    for _ in range(train.total_steps):
        step()
        clock.tick()
    return clock


def train_config(train: TrainSettings, compile: bool = False) -> DictConfig:
    """The ``vitattn-train`` config of ours: ``configs/train.yaml`` with the bench's settings,
    the network compiled with ``compile``."""
    overrides = [
        f"model={train.model}",
        f"attention={train.attention}",
        f"data.batch_size={train.batch_size}",
        f"trainer.precision={train.precision}",
        f"model.compile={str(compile).lower()}",
        *train.overrides,
    ]
    GlobalHydra.instance().clear()  # the bench's own Hydra app is running: compose beside it
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=overrides, return_hydra_config=False)


def check_precision(setting: str, precision: str) -> None:
    """``precision``, which :func:`bare_trainer` gives Lightning's Trainer, one that the Trainer
    takes (its ``precision`` type hint), else one line naming ``setting`` and what is valid: a
    Trainer built with another failed every row of a command that then exited 0."""
    from lightning import Trainer

    from vitattn.utils import checks

    hints, _, _ = checks.signature_of(Trainer)
    checks.of_type(setting, precision, hints["precision"])


def not_taken(key: str, owner: str) -> str | None:
    """Why ``vitattn-bench`` (``owner`` ``train``) or ``vitattn-check`` (``training``) does not
    take an override of ``key`` in the training it measures, where it would have no effect or
    make the measurement wrong (``data.batch_size=4`` doubled the images/s, counted with the
    command's batch size); ``None`` for a key the overrides may set."""
    if key == "data.batch_size":
        return f"the images each measured step counts are {owner}.batch_size's: set that"
    if key in ("model", "attention", "model.compile"):
        return f"the command chooses them ({owner}.model, its attentions, eager and compiled)"
    if key.split(".", 1)[0] == "trainer":
        return f"the command trains with a trainer of its own ({owner}.steps, {owner}.precision)"
    if key.split(".", 1)[0].split("/", 1)[0] in ("hydra", "paths"):
        return "the command composes the settings without running a Hydra app: none reads it"
    return None


def check_train_overrides(
    setting: str, overrides: Sequence[str], model: str, attentions: Sequence[str]
) -> None:
    """``overrides``, the ``vitattn-train`` overrides a command trains ``model`` with, with each
    of ``attentions`` (``vitattn-bench``'s ``train.overrides``, ``vitattn-check``'s
    ``training.overrides``), checked before its run as ``vitattn-train`` checks a command line:
    each an override, composed, additions and interpolations, each setting against its target's
    signature, each object built once on nothing but the trainer (:func:`bare_trainer` trains).
    They are refused, in one line naming ``setting``, where they fail with every attention;
    where some take them, the others' rows say why they did not train (as a setting the bench
    takes at one size of its grid)."""
    from vitattn.cli.console import check_composition, composes
    from vitattn.cli.overrides import check_syntax, key_of
    from vitattn.cli.validation import check_types
    from vitattn.training.trial_build import check_buildable

    def as_trained(cfg: DictConfig) -> None:
        check_types(cfg)
        check_buildable(cfg, skip=("trainer",))  # bare_trainer's is the one that trains

    shown = cut_apart(one_line(f"[{','.join(overrides)}]"), MAX_SHOWN)
    flags = [text for text in overrides if text.startswith("-")]
    if flags:
        flag = cut_apart(one_line(flags[0]), MAX_SHOWN)
        raise ConfigError(
            f"{setting}={shown}: {flag} is a flag of a command line, not an override; give "
            "vitattn-train overrides, e.g. model.depth=2"
        )
    try:
        check_syntax(list(overrides))
    except ConfigError as error:
        raise ConfigError(f"{setting}={shown}: {error}") from None
    owner = setting.rsplit(".", 1)[0]
    for text in overrides:
        why = not_taken(key_of(text), owner)
        if why is not None:
            raise ConfigError(
                f"{setting}={shown}: {cut_apart(one_line(text), MAX_SHOWN)} is not taken: {why}"
            )
    refusals: list[tuple[str, ConfigError | None]] = []
    for attention in attentions:
        arguments = [f"model={model}", f"attention={attention}", *overrides]
        if refusals and not composes("train", arguments):
            refusals.append((attention, None))  # refused; only the first refusal's line is shown
            continue
        try:
            check_composition("train", arguments, as_trained)
        except ConfigError as error:
            refusals.append((attention, error))
            continue
        return
    if refusals:
        attention, error = refusals[0]
        every = " (and every other attention trained)" if len(refusals) > 1 else ""
        raise ConfigError(
            f"{setting}={shown} (with model={model} attention={attention}{every}): {error}"
        ) from None


def bare_trainer(device: torch.device, precision: str, steps: int, *callbacks: Any) -> Any:
    """A Lightning Trainer for ``steps`` training steps and nothing else: no validation, logger,
    checkpoints, progress bar or summary; one device."""
    import lightning as L

    return L.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        precision=precision,
        max_steps=steps,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        callbacks=list(callbacks),
    )


def lightning_windows(
    cfg: DictConfig, datamodule: Any, device: torch.device, train: TrainSettings
) -> tuple[StepClock, torch.nn.Module]:
    """``vitattn``: the step clock of our real training (a Lightning Trainer), and the net."""
    # Imported here, not above: Lightning takes seconds to import and only this mode needs it.
    import lightning as L

    module = hydra.utils.instantiate(cfg.module)
    clock = StepClock.for_windows(device, train.warmup, train.steps, train.repeats)

    class Clock(L.Callback):
        def on_train_start(self, *args: Any) -> None:
            clock.tick()

        def on_train_batch_end(self, *args: Any) -> None:
            clock.tick()

    trainer = bare_trainer(device, cfg.trainer.precision, train.total_steps, Clock())
    trainer.fit(module, datamodule=datamodule)
    return clock, module.net


def eager_status(net: torch.nn.Module) -> str | None:
    """The status of a compiled row whose network (ours: it has a ``_compiled_forward``) ran
    eager: Dynamo compiled no graph of it, or reached its recompile limit (a recompile at every
    step) and ran it eager past it; ``None`` where it ran compiled or does not tell."""
    forward = getattr(net, "_compiled_forward", None)
    if forward is None:
        return None
    if forward.ran_compiled() is False:
        return "ran eager: torch.compile compiled no graph of the network"
    if forward.hit_recompile_limit():
        return "ran eager past Dynamo's recompile limit: a recompile at every step"
    return None


def plain_loop_step(
    cfg: DictConfig, datamodule: Any, device: torch.device, train: TrainSettings
) -> tuple[Callable[[], None], torch.nn.Module]:
    """``plain_loop``: our network, optimizer and schedule from ``cfg``, in a hand-written loop."""
    module = hydra.utils.instantiate(cfg.module)
    net = module.net.to(device)
    optimizer = hydra.utils.instantiate(cfg.optimizer)(params=module.parameter_groups())
    scheduler = None
    if cfg.get("scheduler") is not None:  # over the same steps as Lightning's max_steps
        schedule = hydra.utils.instantiate(cfg.scheduler)
        scheduler = schedule(optimizer=optimizer, total_steps=train.total_steps)
    step = loop_step(
        net,
        loader_batches(datamodule, device),
        optimizer,
        device=device,
        precision=train.precision,
        label_smoothing=module.hparams.label_smoothing,
        scheduler=scheduler,
    )
    return step, net


def reference_step(
    implementation: str,
    cfg: DictConfig,
    datamodule: Any,
    device: torch.device,
    train: TrainSettings,
    compile: bool = False,
) -> tuple[Callable[[], None], torch.nn.Module]:
    """``timm`` or ``report_style`` with our network's sizes, in a plain loop with AdamW,
    its forward pass compiled with ``compile``."""
    net_cfg = cfg.model
    mlp_dim = net_cfg.mlp_dim
    if mlp_dim is None:
        mlp_dim = round(net_cfg.embed_dim * net_cfg.mlp_ratio)
    sizes = (net_cfg.patch_size, net_cfg.embed_dim, net_cfg.depth, net_cfg.heads, mlp_dim)
    if implementation == "timm":
        net = timm_vit(*sizes, net_cfg.num_classes)
        batches = device_batches(datamodule, train.batch_size, device)
    else:
        net = ExplicitAttentionViT(*sizes, net_cfg.num_classes)
        batches = per_image_batches(datamodule, train.batch_size, device)
    net.to(device)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    step = loop_step(
        net, batches, optimizer, device=device, precision=train.precision, compile=compile
    )
    return step, net


def parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def measure_train_speed(
    train: TrainSettings, device: torch.device, batch_setting: str = "train.batch_size"
) -> list[TrainSpeed]:
    """Measure ours (always, first) and each other implementation on the same data and sizes,
    eager, and with ``train.compile`` each of :data:`COMPILED` compiled right after; a batch
    larger than the training images is one line naming ``batch_setting``."""
    configs = {False: train_config(train), True: train_config(train, compile=True)}
    datamodule = hydra.utils.instantiate(configs[False].data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    check_batch_fits(len(datamodule.train_set), train.batch_size, batch_setting)
    results = []
    for implementation in ["vitattn", *(i for i in train.implementations if i != "vitattn")]:
        ways = [False, True] if train.compile and implementation in COMPILED else [False]
        for compile in ways:
            results.append(measure_one(implementation, configs[compile], datamodule, device, train))
    return results


def measure_one(
    implementation: str,
    cfg: DictConfig,
    datamodule: Any,
    device: torch.device,
    train: TrainSettings,
) -> TrainSpeed:
    """One implementation's row, compiled where ``cfg`` says ``model.compile``."""
    compile = bool(cfg.model.compile)
    torch.manual_seed(0)
    if implementation == "vitattn":
        clock, net = lightning_windows(cfg, datamodule, device, train)
    else:
        if implementation == "plain_loop":
            step, net = plain_loop_step(cfg, datamodule, device, train)
        else:
            step, net = reference_step(implementation, cfg, datamodule, device, train, compile)
        clock = time_loop(step, device, train)
    seconds = clock.windows(train.warmup, train.steps, train.repeats)
    result = speed_of(implementation, parameters(net), seconds, train, device)
    result.compile = compile
    if compile and (eager := eager_status(net)) is not None:
        result.status = eager
    if compile:
        steady = statistics.median(seconds) if seconds else None
        extra = clock.warmup_extra(train.warmup, steady)
        result.compile_seconds = None if extra is None else round(extra, 3)
    example = example_image(datamodule, implementation).to(device)
    result.gflop_per_image = gflop_per_image(net, example)
    result.mfu = model_flops_utilisation(
        result.gflop_per_image, result.images_per_sec, device, train.precision
    )
    return result


def example_image(datamodule: Any, implementation: str) -> torch.Tensor:
    """One image as ``implementation``'s network takes it (FLOPs do not depend on its values):
    ours through the data module's on-device transfer (raw uint8 pixels for an intensity
    embedding), the references' normalised floats."""
    if implementation in REFERENCE_ATTENTION:
        return torch.zeros(1, *datamodule.image_shape)
    raw = torch.zeros(1, *datamodule.image_shape, dtype=torch.uint8)
    return datamodule.on_after_batch_transfer(raw, 0)


def speed_of(
    implementation: str,
    params: int,
    seconds: list[float],
    train: TrainSettings,
    device: torch.device,
) -> TrainSpeed:
    """The :class:`TrainSpeed` of ``seconds`` per step of each window."""
    rate = spread = step_ms = None
    if seconds:
        median = statistics.median(seconds)
        rates = [train.batch_size / s for s in seconds]
        rate = train.batch_size / median
        spread, step_ms = (max(rates) - min(rates)) / rate, 1000 * median
    ours = implementation not in REFERENCE_ATTENTION
    return TrainSpeed(
        implementation=implementation,
        model=train.model,
        attention=train.attention if ours else REFERENCE_ATTENTION[implementation],
        batch_size=train.batch_size,
        precision=train.precision,
        compile=train.compile,
        device=str(device),
        params=params,
        images_per_sec=rate,
        spread=spread,
        step_ms=step_ms,
        status="ok" if seconds else "no measurement",
    )


def ratios(results: list[TrainSpeed]) -> dict[str, float]:
    """Our images/s over each other's, eager against eager (``vitattn/plain_loop``,
    ``vitattn/timm``, ...) and compiled against compiled (``vitattn compiled/timm compiled``),
    and ours compiled over ours eager (``vitattn compiled/vitattn``); of rows that ran as they
    were asked alone (status ``ok``): a compiled row that ran eager compared its eager speed as
    a compiled one (red team)."""
    results = [r for r in results if r.status == "ok"]
    found = {}
    for compile in (False, True):
        ours = next(
            (r for r in results if r.implementation == "vitattn" and r.compile == compile), None
        )
        if ours is None or ours.images_per_sec is None:
            continue
        suffix = " compiled" if compile else ""
        for r in results:
            if r.implementation != "vitattn" and r.compile == compile and r.images_per_sec:
                name = f"vitattn{suffix}/{r.implementation}{suffix}"
                found[name] = ours.images_per_sec / r.images_per_sec
    eager, compiled = (
        next((r for r in results if r.implementation == "vitattn" and r.compile == c), None)
        for c in (False, True)
    )
    if eager and compiled and eager.images_per_sec and compiled.images_per_sec:
        found["vitattn compiled/vitattn"] = compiled.images_per_sec / eager.images_per_sec
    return found


def run_train(settings: BenchSettings) -> TrainRun:
    """``mode=train``: every implementation's speed and our ratios to them."""
    tidy_lightning_output()
    device = settings.torch_device
    results = measure_train_speed(settings.train, device)
    return TrainRun(results, ratios(results), environment(device))
