"""Building Lightning objects from config groups that hold several entries."""

from __future__ import annotations

import math
import os
from datetime import timedelta
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from vitattn.errors import ConfigError
from vitattn.runs.files import one_line
from vitattn.utils import checks
from vitattn.utils.machine import usable_cpus


def instantiate_list(configs: DictConfig | None) -> list[Any]:
    """Instantiate every ``_target_`` entry of a ``{name: config}`` group (callbacks, loggers);
    entries without one (``null``, or a group left empty) are skipped."""
    if not configs:
        return []
    return [hydra.utils.instantiate(c) for c in configs.values() if c and "_target_" in c]


def instantiate_loggers(configs: DictConfig | None, resume_step: int | None = None) -> list[Any]:
    """The loggers of the ``logger`` group. When a run resumes from a checkpoint at
    ``resume_step``, TensorBoard is told to drop the events a killed run logged past it
    (``SummaryWriter(purge_step=...)``), so that every step is in the curves once, and the CSV
    logger (:class:`vitattn.training.logger.RunCSVLogger`) keeps the rows before it instead of
    starting its file anew. The events of step ``resume_step`` itself stay when the logger
    writes a step's metrics at the count after it (its ``step_offset``, 1 for
    :class:`vitattn.training.logger.RunTensorBoard`)."""
    if not configs:
        return []
    from lightning.pytorch.loggers import TensorBoardLogger

    from vitattn.training.logger import RunCSVLogger

    loggers = []
    for config in configs.values():
        if not config or "_target_" not in config:
            continue
        target = hydra.utils.get_class(str(config._target_))
        purges = isinstance(target, type) and issubclass(target, TensorBoardLogger | RunCSVLogger)
        purge = {}
        if purges and resume_step is not None:
            purge["purge_step"] = resume_step + int(getattr(target, "step_offset", 0))
        loggers.append(hydra.utils.instantiate(config, **purge))
    return loggers


def bare_trainer(trainer_cfg: DictConfig) -> Any:
    """A trainer as ``trainer_cfg`` describes, without loggers, callbacks, checkpoints, progress
    bar, summary or root directory: the trial build of a config, and an extra ``test`` whose
    metrics must not land in the run's logs. Settings Lightning would accept but vitattn cannot
    train with are one :class:`ConfigError` line."""
    max_steps = trainer_cfg.get("max_steps", -1)
    if max_steps == 0 or (isinstance(max_steps, int) and max_steps < -1):
        raise checks.invalid(
            "trainer.max_steps",
            max_steps,
            "-1 (train for trainer.max_epochs) or a number of steps >= 1",
        )
    if str(trainer_cfg.get("precision")) == "16-true":
        raise ConfigError(
            "trainer.precision=16-true (fp16 weights, no loss scaling) is not supported: "
            "training diverges (Adam's eps and small updates vanish in fp16); choose 16-mixed "
            "(fp16 with loss scaling, on a GPU), bf16-mixed or bf16-true"
        )
    check_machine(trainer_cfg)
    max_epochs = trainer_cfg.get("max_epochs")
    if max_epochs == 0:
        raise checks.invalid("trainer.max_epochs", 0, "-1, null or a number of epochs >= 1")
    if max_epochs == -1 and max_steps == -1:  # the schedule's steps were infinite: a traceback
        raise ConfigError(
            "trainer.max_epochs=-1 with trainer.max_steps=-1 trains for ever; give a number of "
            "epochs or of steps"
        )
    check_lightning_counts(trainer_cfg)
    check_fit_settings(trainer_cfg)
    return hydra.utils.instantiate(
        trainer_cfg,
        **steps_over_epochs(trainer_cfg),
        default_root_dir=None,
        logger=False,
        callbacks=[],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        _convert_="partial",  # plain dicts: Lightning took max_time's mapping for a timedelta
    )


def steps_over_epochs(trainer_cfg: Any) -> dict[str, int]:
    """What Lightning is given where vitattn's settings count optimizer steps and Lightning's
    would not (until 2026-12-02 both were Lightning's, training audit):

    - ``max_epochs=-1`` where ``trainer.max_steps`` is a number of steps: it overrides
      ``trainer.max_epochs``, as ``configs/trainer/default.yaml`` says, where Lightning stops at
      whichever comes first (``trainer.max_steps=60`` trained 40 steps of 10 epochs and said
      the run completed);
    - an integer ``trainer.val_check_interval`` times ``trainer.accumulate_grad_batches``,
      where it counts steps across epochs (``check_val_every_n_epoch=null``, the default):
      Lightning counts it in batches, and a run accumulating 2 batches a step validated (and
      chose its best checkpoint) twice as often as its settings said. Within epochs
      (``check_val_every_n_epoch`` set) it stays Lightning's count of an epoch's batches.

    Nothing otherwise."""
    given: dict[str, int] = {}
    max_steps = trainer_cfg.get("max_steps", -1)
    if _count(max_steps) and max_steps > 0:
        given["max_epochs"] = -1
    interval, accumulate = trainer_cfg.get("val_check_interval"), accumulated(trainer_cfg)
    across_epochs = trainer_cfg.get("check_val_every_n_epoch") is None
    if _count(interval) and accumulate > 1 and across_epochs:
        given["val_check_interval"] = interval * accumulate
    return given


def accumulated(trainer_cfg: Any) -> int:
    """The batches of one optimizer step (``trainer.accumulate_grad_batches``, 1 unset)."""
    accumulate = trainer_cfg.get("accumulate_grad_batches") or 1
    return accumulate if _count(accumulate) and accumulate > 1 else 1


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_machine(trainer_cfg: DictConfig) -> None:
    """What this machine bounds of ``trainer_cfg``, each refused in one line: a GPU accelerator
    needs a CUDA GPU, and the CPU's processes :func:`check_cpu_processes`. Run by the trial
    build before a run, and as the trainer that trains is built (a SLURM job's trial build ran
    on the machine that submitted it)."""
    accelerator = trainer_cfg.get("accelerator")
    if accelerator in ("gpu", "cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                f"trainer.accelerator={accelerator} but this machine has no CUDA GPU; use "
                "trainer=cpu (or trainer.accelerator=cpu)"
            )
    check_cpu_processes(trainer_cfg)


CPU_PROCESSES_PER_CPU = 2
"""On the CPU, the most processes ``trainer.devices`` may start per CPU: two DDP processes on
one core (``trainer=ddp``'s smoke test) run, slowly; a thousand stall the machine."""


def check_cpu_processes(trainer_cfg: DictConfig) -> None:
    """On the CPU, ``trainer.devices`` is the number of processes Lightning starts: refused in
    one line above :data:`CPU_PROCESSES_PER_CPU` per CPU this process may use, its affinity (a
    resume replaying ``trainer.devices=1000`` from a run's file started a training process per
    device until the machine stalled; red team). A GPU's devices Lightning checks itself,
    against the GPUs there are."""
    import torch

    accelerator = str(trainer_cfg.get("accelerator", "auto"))
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
    devices = checks.as_count(trainer_cfg.get("devices"))
    cpus = usable_cpus()
    most = CPU_PROCESSES_PER_CPU * cpus
    if on_cpu and devices is not None and devices > most:
        raise checks.invalid(
            "trainer.devices",
            trainer_cfg.get("devices"),
            f"a number of processes from 1 to {most} (two for each CPU this process may use, "
            f"{cpus} here) or auto",
        )


def check_nodes(trainer_cfg: DictConfig) -> None:
    """Refuse in one line a ``trainer.num_nodes`` above 1 where nothing starts the run on the
    other nodes: no cluster Lightning detects (torchrun, SLURM's srun, LSF, MPI: the order of its
    ``AcceleratorConnector``) and no ``MASTER_ADDR`` of processes started by hand on each node.
    Lightning then waits for the other nodes until its process group's timeout, 30 minutes
    (red team). Checked in the process that trains, not as a sweep is submitted: a SLURM
    sweep's jobs run in the cluster its submitting process is not in."""
    from lightning.fabric.plugins.environments import (
        LSFEnvironment,
        MPIEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )

    nodes = trainer_cfg.get("num_nodes", 1)
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes <= 1:
        return
    clusters = (TorchElasticEnvironment, SLURMEnvironment, LSFEnvironment, MPIEnvironment)
    if "MASTER_ADDR" in os.environ or any(cluster.detect() for cluster in clusters):
        return
    raise ConfigError(
        f"trainer.num_nodes={nodes}, but nothing starts this run on the other {nodes - 1} "
        "(no torchrun, srun, LSF or MPI here, and MASTER_ADDR is unset): it would wait for them "
        "for 30 minutes; start it on each node (srun, torchrun, or hydra/launcher=slurm with "
        "hydra.launcher.nodes), or set trainer.num_nodes=1"
    )


ROOT = "${paths.output_dir}"
"""``trainer.default_root_dir`` as every trainer config sets it: the run directory."""


def overfits(trainer_cfg: Any) -> bool:
    """Whether the trainer's settings overfit (``trainer.overfit_batches`` above 0): Lightning
    then takes that many batches of the training and the validation split."""
    overfit = trainer_cfg.get("overfit_batches")
    return checks.is_number(overfit) and overfit > 0


def check_fit_settings(trainer_cfg: DictConfig) -> None:
    """Trainer settings that would end a run before it trained, fail it once begun, or be
    ignored, refused in one line (red team): an integer ``val_check_interval`` below 1 (a
    ``ZeroDivisionError`` once the run directory was made), a ``max_time`` of no time (no step
    trained, and the untrained network's test reported, exit status 0), ``trainer.logger`` and
    ``trainer.callbacks`` (the groups ``logger`` and ``callbacks`` replaced them without a
    word), a ``default_root_dir`` other than the run directory (some of the run's files went
    there), ``use_distributed_sampler`` (the data module shards its own batches),
    ``limit_train_batches`` or ``limit_val_batches`` beside ``overfit_batches`` (which Lightning
    takes in their place), and a least training beyond the stop (:func:`check_least_training`)."""
    interval = trainer_cfg.get("val_check_interval")
    if isinstance(interval, int) and not isinstance(interval, bool) and interval < 1:
        raise checks.invalid(
            "trainer.val_check_interval",
            interval,
            "a number of steps >= 1, a share of an epoch 0 < x <= 1.0, or null (each epoch)",
        )
    max_time = trainer_cfg.get("max_time")
    if isinstance(max_time, str) and no_time(max_time):
        raise checks.invalid(
            "trainer.max_time", max_time, "a time above zero (DD:HH:MM:SS), or null"
        )
    if isinstance(max_time, DictConfig):
        check_time_parts(max_time)
    groups = {
        "logger": "loggers come from the group logger (none: ~logger ~callbacks.lr_monitor)",
        "callbacks": ("callbacks come from the group callbacks (~callbacks.<name>: without one)"),
    }
    for key, said in groups.items():
        if key in trainer_cfg:  # the run's own replace it: it was ignored without a word
            raise ConfigError(f"trainer.{key} is not taken: a run's {said}; drop trainer.{key}")
    root = OmegaConf.to_container(trainer_cfg, resolve=False).get("default_root_dir", ROOT)
    if root != ROOT:  # some files went there, the rest to the run directory
        raise ConfigError(
            f"trainer.default_root_dir={one_line(root)} is not taken: a run writes in its run "
            f"directory ({ROOT}); choose it with hydra.run.dir"
        )
    check_least_training(trainer_cfg)
    if trainer_cfg.get("use_distributed_sampler") is True:  # each process's shard split again
        raise ConfigError(
            "trainer.use_distributed_sampler=true is not taken: the data module shards its own "
            "batches across a run's processes, and Lightning's sampler put in its place would "
            "split each process's shard again, or hand it single images; choose false"
        )
    if overfits(trainer_cfg):
        for split in ("train", "val"):  # Lightning uses overfit_batches in their place
            if trainer_cfg.get(f"limit_{split}_batches") is not None:
                raise ConfigError(
                    f"trainer.limit_{split}_batches is not taken with trainer.overfit_batches="
                    f"{trainer_cfg.overfit_batches}: Lightning takes that many batches of the "
                    f"training and the validation split in its place; drop "
                    f"trainer.limit_{split}_batches"
                )


LEAST_TRAINING = {"min_steps": "max_steps", "min_epochs": "max_epochs"}
"""Lightning's least training, each with the stop it must not pass."""


def check_least_training(trainer_cfg: DictConfig) -> None:
    """Refuse in one line a ``min_steps`` or ``min_epochs`` beyond the run's ``max_steps`` or
    ``max_epochs``: Lightning stops there all the same but skipped the last validation for the
    least training it was asked, so the final weights had no ``val/acc`` and no checkpoint
    (red team)."""
    for least, stop in LEAST_TRAINING.items():
        low, high = trainer_cfg.get(least), trainer_cfg.get(stop)
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (low, high)):
            continue
        if 0 < high < low:
            raise checks.invalid(
                f"trainer.{least}",
                low,
                f"at most {high} (trainer.{stop}: the run stops there, and Lightning would skip "
                "its last validation for a least training beyond it), or null",
            )


TIME_PARTS = ("weeks", "days", "hours", "minutes", "seconds", "milliseconds", "microseconds")
"""The parts of Lightning's dict form of ``max_time`` (``datetime.timedelta``'s arguments)."""


def check_time_parts(max_time: DictConfig) -> None:
    """Refuse in one line a dict form of ``trainer.max_time`` (``{hours: 1, minutes: 30}``)
    that is no time above zero: a part ``timedelta`` does not take, a part that is not a
    number, or a total of zero or less (or beyond ``timedelta``'s range)."""
    parts = OmegaConf.to_container(max_time, resolve=True)
    numbers = all(
        key in TIME_PARTS and checks.is_number(value) and math.isfinite(value)
        for key, value in parts.items()
    )
    try:
        above_zero = numbers and timedelta(**parts).total_seconds() > 0
    except OverflowError:
        above_zero = False
    if not above_zero:
        valid = f"parts from {', '.join(TIME_PARTS)}, each a number, adding up to a time above zero"
        raise checks.invalid("trainer.max_time", parts, valid)


def no_time(max_time: str) -> bool:
    """Whether ``max_time`` (Lightning's ``DD:HH:MM:SS``) is a time of zero or less."""
    parts = max_time.split(":")
    numbers = [part.strip().lstrip("-") for part in parts]
    if len(parts) != 4 or not all(number.isdigit() for number in numbers):
        return False  # Lightning's own check words it
    return all(int(number) == 0 for number in numbers) or max_time.strip().startswith("-")


def check_takes_batches(trainer_cfg: DictConfig, split: str, why: str) -> None:
    """Refuse in one line a ``trainer.limit_<split>_batches`` of 0 where the command needs that
    split (``why``): ``vitattn-eval`` ended in ``unexpected KeyError: 'test/acc'`` and
    ``vitattn-finetune`` in an ``IndexError`` for the test, each once its run directory was made
    (red team); for the training, ``vitattn-train`` and ``vitattn-finetune`` trained no step and
    reported the untrained network's test as their result, with exit status 0."""
    limit = trainer_cfg.get(f"limit_{split}_batches")
    if checks.is_number(limit) and limit == 0:
        raise checks.invalid(
            f"trainer.limit_{split}_batches",
            limit,
            f"a share above 0 (<= 1.0) or a number of batches >= 1, or null (all): {why}",
        )


LIGHTNING_COUNTS = {
    "accumulate_grad_batches": (1, " (batches whose gradients make one optimizer step)"),
    "check_val_every_n_epoch": (1, ", or null (validate every trainer.val_check_interval steps)"),
    "log_every_n_steps": (0, " (0: no training curves), or null (Lightning's 50)"),
    "num_sanity_val_steps": (-1, " (-1: every validation batch; 0: none)"),
}
"""Trainer settings that are counts: the least each takes, and what the refusal adds."""


def check_lightning_counts(trainer_cfg: DictConfig) -> None:
    """Trainer settings Lightning takes in any value but uses as a count or a bound, refused in
    one line where it would fail or quietly do another thing: ``check_val_every_n_epoch=0``
    divides by zero after the first epoch, a negative ``gradient_clip_val`` turns clipping off
    and NaN makes every gradient NaN, a negative ``log_every_n_steps`` logs at every step,
    ``accumulate_grad_batches=0`` divides by zero once the run directory is made."""
    for name, (least, hint) in LIGHTNING_COUNTS.items():
        value = trainer_cfg.get(name)
        if value is not None:
            checks.integer(f"trainer.{name}", value, low=least, hint=hint)
    clip = trainer_cfg.get("gradient_clip_val")
    if clip is not None and not (checks.is_number(clip) and clip >= 0):
        raise checks.invalid(
            "trainer.gradient_clip_val",
            clip,
            "a number > 0 (the gradients' largest norm, or value with "
            "trainer.gradient_clip_algorithm=value), or 0 or null (no clipping)",
        )
