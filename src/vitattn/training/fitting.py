"""Fitting as every command does it: the steps before a fit (seeding, reading the data, the
trainer with the run's callbacks and loggers), a fit that a signal stops ends with ``"status":
"interrupted"`` and one line, the best checkpoint is tested, and the figures ``metrics.json``
reports of every run are gathered in one place."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import hydra
import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitattn.errors import TrainingError, VitattnError
from vitattn.runs.checkpoints import run_test_on_best
from vitattn.runs.layout import METRICS
from vitattn.runs.recorded import says_where
from vitattn.runs.task import write_metrics
from vitattn.training.callbacks.confusion import ConfusionReport
from vitattn.training.callbacks.insight import AttentionInsight
from vitattn.training.callbacks.interruption import CheckpointOnInterrupt
from vitattn.training.callbacks.throughput import ImagesPerSecond, load_average
from vitattn.training.instantiators import (
    accumulated,
    check_machine,
    check_nodes,
    instantiate_list,
    instantiate_loggers,
    overfits,
    steps_over_epochs,
)
from vitattn.utils import checks
from vitattn.utils.hydra_grammar import for_the_shell

log = logging.getLogger(__name__)


def seed_and_precision(cfg: Any) -> None:
    """Seed Python, numpy and torch with ``cfg.seed`` where it is given, and set torch's float32
    matmul precision to ``cfg.matmul_precision`` where that is."""
    if cfg.get("seed") is not None:
        # Lightning's own line goes to stderr, before a refusal's one line: the log has it
        L.seed_everything(cfg.seed, workers=True, verbose=False)
        log.info("Seed set to %s", cfg.seed)
    if cfg.get("matmul_precision"):
        torch.set_float32_matmul_precision(cfg.matmul_precision)


def prepare_for_fit(module: Any, datamodule: Any, trainer_cfg: Any, tests: bool = True) -> None:
    """Refuse in one line data that ``module``'s network cannot read, then read the data
    (downloading it where it is missing) and split it, and refuse a validation interval the
    split's epoch cannot hold (:func:`check_validation_interval`), a share of batches that
    takes none (:func:`check_batch_shares`; of the test split too where the command ``tests``)
    and a least training beyond the epochs' steps (:func:`check_least_steps`); warn of a
    validation set too small to choose the best checkpoint by
    (:func:`warn_of_few_validation_images`), and say how many images were read
    (:func:`tell_of_the_images`)."""
    module.check_data(datamodule)
    datamodule.prepare_data()
    datamodule.setup("fit")
    tell_of_the_images(datamodule)
    warn_of_few_validation_images(trainer_cfg, datamodule)
    check_validation_interval(trainer_cfg, datamodule)
    check_batch_shares(
        trainer_cfg, datamodule, ("train", "val", "test") if tests else ("train", "val")
    )
    check_least_steps(trainer_cfg, datamodule)
    check_batch_per_process(trainer_cfg, datamodule)


def check_batch_per_process(trainer_cfg: Any, datamodule: Any) -> None:
    """Refuse in one line, before anything is written, a batch larger than the training images
    each of the run's processes takes (``trainer.devices`` times ``trainer.num_nodes``, where
    they are numbers): it would train nothing there. Where they are not (``auto``), the data
    module refuses it as the fit starts."""
    devices = checks.as_count(trainer_cfg.get("devices"))
    nodes = checks.as_count(trainer_cfg.get("num_nodes", 1))
    check = getattr(datamodule, "check_batch_fits", None)
    if devices is not None and nodes is not None and check is not None:
        check(devices * nodes)


def batch_limit(trainer_cfg: Any, split: str) -> tuple[str, Any]:
    """The setting that limits the batches of ``split`` (``train``, ``val``, ``test``) and its
    value, as Lightning takes them: ``trainer.limit_<split>_batches``, or for the training and
    validation splits of a run that overfits, ``trainer.overfit_batches`` in its place."""
    if split in ("train", "val") and overfits(trainer_cfg):
        return "trainer.overfit_batches", trainer_cfg.get("overfit_batches")
    return f"trainer.limit_{split}_batches", trainer_cfg.get(f"limit_{split}_batches")


def never_validates(trainer_cfg: Any) -> bool:
    """Whether the trainer's settings turn validation off (``+trainer.limit_val_batches=0``)."""
    _, limit_val = batch_limit(trainer_cfg, "val")
    return limit_val is not None and not isinstance(limit_val, bool) and limit_val == 0


@rank_zero_only
def tell_of_the_images(datamodule: Any) -> None:
    """One line, in a run's first process, on the images read and where: a warning where they
    are not the whole of CIFAR-10 (``CIFAR10DataModule.images_read``)."""
    level, line = datamodule.images_read()
    log.log(level, line)


@rank_zero_only
def warn_of_few_validation_images(trainer_cfg: Any, datamodule: Any) -> None:
    """One warning, in a run's first process, where the validation set is a handful of images
    (``data.val_fraction=0.0001`` held out one, whose ``val/acc`` of 0 or 1 chose the best
    checkpoint without a word), unless the run never validates
    (``+trainer.limit_val_batches=0``)."""
    if never_validates(trainer_cfg):
        return
    said = datamodule.validation_warning()
    if said is not None:
        log.warning(said)


def check_batch_shares(trainer_cfg: Any, datamodule: Any, splits: Sequence[str]) -> None:
    """Refuse in one line, once the data is read and before anything is written, a share
    ``trainer.limit_<split>_batches`` (0 < share < 1) of one of ``splits`` that takes no batch
    of it (``0.0001`` of 71 batches: Lightning failed as the fit started, with the run begun,
    or, for the test, once the fit had ended; red team), or a share ``trainer.overfit_batches``
    that takes none of the training or validation split."""
    for split in splits:
        setting, share = batch_limit(trainer_cfg, split)
        if not isinstance(share, float) or not 0 < share < 1:
            continue
        batches = len(getattr(datamodule, f"{split}_dataloader")())
        if int(share * batches) < 1:
            whole = "0 (off)" if setting == "trainer.overfit_batches" else "null (all)"
            raise checks.invalid(
                setting,
                share,
                f"a share of at least {checks.rounded_up(1 / batches)} (one of the {split} "
                f"split's {batches} batches), a number of batches >= 1, or {whole}",
            )


def check_validation_interval(trainer_cfg: Any, datamodule: Any) -> None:
    """Refuse in one line, once the data is read and before anything is written, an integer
    ``trainer.val_check_interval`` above an epoch's training batches while
    ``trainer.check_val_every_n_epoch`` is set: Lightning then counts it within each epoch and
    fails as ``fit`` starts, with the run begun (the same bound as Lightning's ``FitLoop``)."""
    every = trainer_cfg.get("check_val_every_n_epoch")
    interval = trainer_cfg.get("val_check_interval")
    if every is None or isinstance(interval, bool) or not isinstance(interval, int):
        return
    if never_validates(trainer_cfg):
        return
    batches = epoch_batches(trainer_cfg, datamodule)
    if interval > batches:
        raise checks.invalid(
            "trainer.val_check_interval",
            interval,
            f"at most {batches} (an epoch's training batches: trainer.check_val_every_n_epoch="
            f"{every} counts it within each epoch), a fraction of an epoch (1.0: its end), or "
            "trainer.check_val_every_n_epoch=null (it counts steps across epochs)",
        )


def epoch_batches(trainer_cfg: Any, datamodule: Any) -> int:
    """The training batches of an epoch, with ``trainer.limit_train_batches`` (or
    ``trainer.overfit_batches``), in one process (each of a DDP run's processes takes its share
    of them)."""
    batches = len(datamodule.train_dataloader())
    _, limit = batch_limit(trainer_cfg, "train")
    if isinstance(limit, int) and not isinstance(limit, bool):
        batches = min(batches, limit)
    elif isinstance(limit, float):
        batches = int(batches * limit)
    return batches


def check_least_steps(trainer_cfg: Any, datamodule: Any) -> None:
    """Refuse in one line, once the data is read and before anything is written, a
    ``trainer.min_steps`` beyond the optimizer steps of ``trainer.max_epochs`` epochs where they
    end the run (``max_steps=-1``): Lightning stopped there all the same but skipped every
    validation for the least training it was asked, so the run kept no checkpoint and tested
    the weights in memory (red team). The steps are counted in one process, an upper bound of
    a DDP run's."""
    least, epochs = trainer_cfg.get("min_steps"), trainer_cfg.get("max_epochs")
    max_steps = trainer_cfg.get("max_steps", -1)
    numbers = (least, epochs, max_steps)
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in numbers):
        return
    if max_steps != -1 or epochs < 1 or least < 1:
        return  # max_steps, where it is set, was checked against min_steps before the data
    per_epoch = -(-epoch_batches(trainer_cfg, datamodule) // accumulated(trainer_cfg))
    if least > epochs * per_epoch:
        raise checks.invalid(
            "trainer.min_steps",
            least,
            f"at most {epochs * per_epoch} (the steps of trainer.max_epochs={epochs} epochs of "
            f"{per_epoch}: the run stops there, and Lightning would skip its validations for a "
            "least training beyond it), or null",
        )


def instantiate_trainer(cfg: Any, resume_step: int | None = None) -> L.Trainer:
    """The configured trainer with the run's callbacks and loggers; a run resuming from a
    checkpoint of ``resume_step`` gets loggers that drop what a killed run logged after it.
    A ``trainer.num_nodes`` that no cluster starts, and devices this machine does not have, are
    refused first (:func:`check_nodes`, :func:`check_machine`)."""
    check_nodes(cfg.trainer)
    check_machine(cfg.trainer)
    callbacks = instantiate_list(cfg.get("callbacks"))
    loggers = instantiate_loggers(cfg.get("logger"), resume_step)
    return hydra.utils.instantiate(
        cfg.trainer,
        **steps_over_epochs(cfg.trainer),
        callbacks=callbacks,
        logger=loggers,
        _convert_="partial",  # plain dicts: Lightning took max_time's mapping for a timedelta
    )


def writes_results(trainer: L.Trainer, cfg: Any) -> bool:
    """Whether this process writes the run's results: the rank-zero process of a run that is not
    a ``fast_dev_run``."""
    return bool(trainer.is_global_zero and not cfg.trainer.get("fast_dev_run"))


def fit_summary(trainer: L.Trainer, seconds: float) -> dict[str, Any]:
    """What ``metrics.json`` reports of a finished ``fit``: the best ``val/acc``, the last
    training loss, the run's steady images/s (:class:`ImagesPerSecond`'s median, over
    ``steady_steps`` steps of every attempt), the machine's 1-minute load average at the fit's
    start and end with its ``cpu_count`` (a load above it makes speeds incomparable), steps,
    epochs, seconds (with :class:`ImagesPerSecond`, the fit's own, summed over a resumed fit's
    attempts; ``None`` where an earlier attempt's are not known) and ``attempts``, with
    ``model.compile`` the first steps' seconds beyond the steady rate
    (``train/compile_seconds``: :meth:`ImagesPerSecond.startup_seconds`), what
    :class:`AttentionInsight` cost, and on a GPU the peak of allocated memory."""
    throughput = next((c for c in trainer.callbacks if isinstance(c, ImagesPerSecond)), None)
    summary: dict[str, Any] = {
        "val/acc_best": best_validation_accuracy(trainer),
        "train/loss": trainer.callback_metrics.get("train/loss"),
        "train/images_per_sec": throughput.median if throughput is not None else None,
        "steady_steps": throughput.steady_steps if throughput is not None else None,
        "load_avg_start": throughput.load_avg_start if throughput is not None else None,
        "load_avg_end": load_average(),
        "cpu_count": os.cpu_count(),
        "steps": trainer.global_step,
        "epochs": trainer.current_epoch,
        "seconds": round(seconds, 2),
        "attempts": 1 if trainer.ckpt_path is None else None,  # resumed: counted below
    }
    if throughput is not None:  # a resumed fit: the costs of every attempt
        total = throughput.total_seconds()
        summary["seconds"] = round(total, 2) if total is not None else None
        summary["attempts"] = throughput.attempts
        if compiled(trainer.lightning_module):
            startup = throughput.startup_seconds()
            summary["train/compile_seconds"] = round(startup, 2) if startup is not None else None
    insight = next((c for c in trainer.callbacks if isinstance(c, AttentionInsight)), None)
    if insight is not None and insight.validations:
        summary.update(insight.cost())
    device = trainer.strategy.root_device
    if device.type == "cuda":
        summary["peak_memory_gb"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
    return summary


def compiled(module: L.LightningModule) -> bool:
    """Whether ``module``'s network ran compiled (``model.compile=true``, or ``auto`` on a GPU;
    compiling did not fall back to eager, Dynamo compiled a graph of it
    (:meth:`CompiledOrEager.ran_compiled`) and did not reach its recompile limit, past which it
    runs the forward eager); a network asked to compile that ran eager all the same is a
    warning."""
    forward = getattr(getattr(module, "net", None), "_compiled_forward", None)
    if forward is None or not forward.compiled or not forward.compiles_on(module.device.type):
        return False
    if forward.ran_compiled() is False:
        log.warning(
            "model.compile=%s: torch.compile compiled no graph of the network's forward "
            "(Dynamo skipped it, or torch.compile was stood down); this run trained eager",
            forward.setting,
        )
        return False
    if forward.hit_recompile_limit():
        log.warning(
            "model.compile=%s: Dynamo compiled the network's forward %s times, its recompile "
            "limit, and runs it eager past it: this run trained eager after its first steps "
            "(TORCH_LOGS=recompiles names the guard that failed)",
            forward.setting,
            forward.graphs(),
        )
        return False
    return True


def best_validation_accuracy(trainer: L.Trainer) -> float | None:
    """The highest ``val/acc`` of the run, as the checkpoint callback watching it has it (it
    survives a resume); ``None`` without one."""
    for callback in trainer.checkpoint_callbacks:
        if callback.monitor == "val/acc" and callback.best_model_score is not None:
            return float(callback.best_model_score)
    return None


def interruption(trainer: L.Trainer) -> CheckpointOnInterrupt | None:
    """The run's :class:`CheckpointOnInterrupt` if a signal stopped (or is stopping) it."""
    callback = next((c for c in trainer.callbacks if isinstance(c, CheckpointOnInterrupt)), None)
    if callback is not None and (callback.interrupted or trainer.received_sigterm):
        return callback
    return None


def places_given() -> list[str]:
    """This run's command-line overrides that say where (``paths.log_dir=...``,
    ``data.data_dir=...``), as a shell takes them: a resume replays none from the run's files
    (:func:`vitattn.runs.recorded.says_where`), so the command that continues it gives them
    again. A resume's own ``ckpt_path`` is left out (``resume=true`` finds ``last.ckpt``)."""
    import shlex

    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    given = []
    for text in HydraConfig.get().overrides.task:
        key = text.partition("=")[0].lstrip("+~")
        if key != "ckpt_path" and says_where(key):
            given.append(shlex.quote(text))
    return given


def end_interrupted(
    program: str, trainer: L.Trainer, seconds: float, output_dir: Path, resumable: bool = True
) -> NoReturn:
    """After SIGTERM or Ctrl-C stopped a fit: write ``metrics.json`` with ``"status":
    "interrupted"`` and what was reached, print one line saying how to continue (``resumable``)
    or where the checkpoint is, and exit with 128 + the signal's number (143 for SIGTERM, 130 for
    Ctrl-C), as the signal would have."""
    callback = interruption(trainer)
    ctrl_c = callback is not None and callback.interrupted
    name, number = ("Ctrl-C", signal.SIGINT) if ctrl_c else ("SIGTERM", signal.SIGTERM)
    metrics = {k: v for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    metrics.update(fit_summary(trainer, seconds))
    metrics.update({"status": "interrupted", "signal": name})
    if trainer.is_global_zero:
        write_metrics(output_dir / METRICS, metrics)
    places = " ".join(["", *places_given()])
    then = (
        f"continue with: {program} resume=true "
        f"{for_the_shell('hydra.run.dir', str(output_dir))}{places}"
        if resumable
        else f"its weights are in {output_dir / 'checkpoints' / 'last.ckpt'}"
    )
    print(
        f"{program}: interrupted by {name} after step {trainer.global_step}; {then}",
        file=sys.stderr,
        flush=True,
    )
    raise SystemExit(128 + int(number))


def fit_and_test(
    program: str, trainer: L.Trainer, module: Any, datamodule: Any, cfg: Any, resumable: bool = True
) -> tuple[dict[str, Any], str | None]:
    """Fit (a ``resumable`` command continues from ``cfg.ckpt_path`` if given), then test the
    best checkpoint unless ``cfg.test`` is false. Returns the ``val/`` and ``test/`` figures with
    :func:`fit_summary`'s, and the checkpoint tested. A fit that SIGTERM or Ctrl-C stops ends the
    command here (:func:`end_interrupted`)."""
    output_dir, test = Path(cfg.paths.output_dir), cfg.get("test", True)
    ckpt_path = cfg.get("ckpt_path") if resumable else None
    if torch.cuda.is_available():  # a sequential sweep's jobs share this process
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    except SIGTERMException:
        end_interrupted(program, trainer, time.perf_counter() - started, output_dir, resumable)
    if interruption(trainer):  # a signal during the last step: no test, the run stops here
        end_interrupted(program, trainer, time.perf_counter() - started, output_dir, resumable)
    summary = fit_summary(trainer, time.perf_counter() - started)
    metrics = {k: v for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    tested, test_metrics = test_after_fit(trainer, module, datamodule) if test else (None, {})
    return {**metrics, **test_metrics, **summary, **test_report(trainer)}, tested


def test_after_fit(trainer: L.Trainer, module: Any, datamodule: Any) -> tuple[str | None, dict]:
    """:func:`run_test_on_best` of a fit that ended; a refusal there is the run's
    :class:`TrainingError`, which keeps its directory: a refusal of its best checkpoint, a
    plain :class:`ConfigError`, was taken for one before the run and the directory, checkpoints
    and logs, removed (red team)."""
    try:
        return run_test_on_best(trainer, module, datamodule)
    except TrainingError:
        raise
    except VitattnError as error:
        raise TrainingError(f"the fit ended, and its test could not run: {error}") from error


def test_report(trainer: L.Trainer) -> dict[str, Any]:
    """The confusion matrix and per-class accuracy of the last test (:class:`ConfusionReport`),
    for ``metrics.json``; empty if there was no test or no such callback."""
    report = next((c for c in trainer.callbacks if isinstance(c, ConfusionReport)), None)
    return dict(report.report) if report is not None else {}


def result_line(metrics: dict[str, Any], output_dir: Path, kept: bool = True) -> str:
    """The one line a finished run ends with: attention, best and test accuracy, time, where
    (or, for a ``fast_dev_run``, that ``kept`` nothing)."""

    def percent(key: str) -> str:
        value = metrics.get(key)
        return "n/a" if value is None else f"{float(value):.2%}"

    return (
        f"attention={metrics.get('attention')}: best val/acc {percent('val/acc_best')}, "
        f"test/acc {percent('test/acc')}, {float(metrics.get('seconds') or 0):.0f} s; "
        + (f"{output_dir}" if kept else "fast_dev_run: nothing kept")
    )
