"""``vitattn-finetune ckpt_path=...``: adapt a trained ViT to a shifted CIFAR-10 with LoRA.

Low-rank adaptation (Hu et al. 2022) through the PEFT library: the network of a
``vitattn-train`` checkpoint gets adapters of rank ``lora.rank`` on ``lora.target_modules``
(attention projections and MLP by default), everything else is frozen (the head trains unless
``lora.train_head=false``), and it is trained on the variant ``data.shift`` of CIFAR-10.
``lora.rank=0`` is full fine-tuning, the baseline.

Examples::

    vitattn-finetune ckpt_path=outputs/train/runs/<run>/checkpoints/last.ckpt data.shift=rotate
    vitattn-finetune -m ckpt_path=... lora.rank=0,1,2,4,8,16,32,64 data.shift=quantize,rotate,invert
    python scripts/lora_table.py outputs/finetune/multiruns/<stamp>

The run directory is laid out as ``vitattn-train``'s; ``checkpoints/`` holds the fine-tuned model
with its adapters (PEFT names, read with ``LoRAClassifier.load_from_checkpoint``) and, with
``lora.merge=true``, ``merged.ckpt``: the adapters folded into the weights, a plain checkpoint
for ``vitattn-eval``. ``metrics.json`` adds ``test/acc_base`` (the loaded model on the same
shifted test set, before fine-tuning) and ``params/trainable`` to the usual figures.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from vitattn.cli.console import console_main
from vitattn.errors import ConfigError
from vitattn.runs.layout import MERGED_CHECKPOINT, RunDir
from vitattn.runs.task import run_task
from vitattn.utils import checks
from vitattn.utils.config import CONFIG_DIR

log = logging.getLogger(__name__)


def finetune(cfg: DictConfig) -> dict[str, Any]:
    """Fine-tune, test the base and the result on the shifted test set; return the metrics."""
    import lightning as L

    from vitattn.data.as_trained import INPUT_FORMAT, SPLIT, as_trained
    from vitattn.runs.task import write_metrics
    from vitattn.training import fitting
    from vitattn.training.lightning_output import tidy_lightning_output
    from vitattn.training.logger import FINETUNING_RESULTS, log_hyperparameters, log_results

    tidy_lightning_output()
    output_dir = Path(cfg.paths.output_dir)
    # Everything that can reject the configuration or the data runs before anything is written.
    settings, merge = lora_settings(cfg)
    base, base_data = load_base(cfg.get("ckpt_path"))
    fitting.seed_and_precision(cfg)
    # The base's input format (grayscale, normalised or raw pixels) and its split unless given;
    # the shift is this run's own setting.
    data_cfg = as_trained(cfg.data, base_data, settings=(*INPUT_FORMAT, *SPLIT))
    datamodule: L.LightningDataModule = hydra.utils.instantiate(data_cfg)
    module = adapted_module(cfg, base, settings)
    fitting.prepare_for_fit(module, datamodule, cfg.trainer)
    trainer = fitting.instantiate_trainer(cfg)
    figures = run_figures(cfg, module, datamodule, settings)
    log_hyperparameters(
        trainer.loggers, hyperparameters(cfg, data_cfg, module, settings), FINETUNING_RESULTS
    )
    log_start(figures, output_dir)

    base_acc = score(cfg, base, datamodule)
    log.info("base model on the %s test set: test/acc_base=%.4f", figures["data/shift"], base_acc)
    del base
    # Testing a checkpoint loads it into `module`: the merge below folds the tested weights.
    metrics, tested = fitting.fit_and_test(
        "vitattn-finetune", trainer, module, datamodule, cfg, False
    )
    metrics["test/acc_base"] = base_acc
    writes = fitting.writes_results(trainer, cfg)
    merged = (
        save_merged(cfg, module, datamodule, trainer, metrics, merged_step(tested, trainer))
        if merge and writes
        else None
    )
    metrics.update(
        {**figures, "test_ckpt_path": tested, "merged_ckpt_path": merged, "status": "completed"}
    )
    if writes:
        write_metrics(RunDir(output_dir).metrics_file, metrics)
        log_results(trainer.loggers, metrics, trainer.global_step, FINETUNING_RESULTS)
        log.info("%s", result_line(metrics, output_dir))
    return metrics


def lora_settings(cfg: DictConfig) -> tuple[Any, bool]:
    """The ``lora`` node as :class:`~vitattn.lora.adapters.LoRASettings` (one line for a wrong
    one), and whether to save the merged checkpoint (``lora.merge``); with them, the run's
    ``label_smoothing`` (null: the base run's)."""
    from vitattn.lora.adapters import LoRASettings

    lora_cfg = OmegaConf.to_container(cfg.lora, resolve=True) if cfg.get("lora") else {}
    assert isinstance(lora_cfg, dict)
    settings = LoRASettings.from_mapping(lora_cfg)
    settings.check_choices()
    merge = checks.flag("lora.merge", lora_cfg.get("merge", True))
    if cfg.get("label_smoothing") is not None:
        checks.fraction("label_smoothing", cfg.label_smoothing, hint=", or null (the base run's)")
    return settings, merge


def load_base(ckpt_path: Any) -> tuple[Any, dict[str, Any]]:
    """The :class:`ViTClassifier` to adapt, with one-line errors for every way it can be wrong,
    and the data settings it was trained with (from the same bytes)."""
    from vitattn.loading import load_trained
    from vitattn.lora.module import LoRAClassifier

    if ckpt_path in (None, "", "???"):
        raise ConfigError(
            "ckpt_path is required: vitattn-finetune ckpt_path=<train run>/checkpoints/last.ckpt"
        )
    trained = load_trained(ckpt_path)
    if isinstance(trained.module, LoRAClassifier):
        raise ConfigError(
            f"ckpt_path={ckpt_path} holds LoRA adapters (a vitattn-finetune checkpoint); "
            f"pass the run's checkpoints/{MERGED_CHECKPOINT} (lora.merge=true) instead"
        )
    return trained.module, trained.data_settings


def adapted_module(cfg: DictConfig, base: Any, settings: Any) -> Any:
    """The :class:`LoRAClassifier` to train: the base's network with adapters as ``settings``
    say and the base's weights; the optimisation (and label smoothing, unless ``null``) from
    this run's config."""
    from vitattn.lora.module import LoRAClassifier

    scheduler = cfg.get("scheduler")
    label_smoothing = cfg.get("label_smoothing")
    if label_smoothing is None:
        label_smoothing = base.hparams.label_smoothing
    module = LoRAClassifier(
        net=base.hparams.net,
        optimizer=OmegaConf.to_container(cfg.optimizer, resolve=True),
        scheduler=OmegaConf.to_container(scheduler, resolve=True) if scheduler else None,
        label_smoothing=label_smoothing,
        num_classes=base.hparams.num_classes,
        lora=settings.as_dict(),
    )
    module.load_base_weights(base.net.state_dict())
    return module


def run_figures(cfg: DictConfig, module: Any, datamodule: Any, settings: Any) -> dict[str, Any]:
    """What ``metrics.json`` says of the fine-tune's setup: the parameters (all, trainable, in
    adapters), the adapters' settings as they acted (``LoRASettings.in_effect``: at rank 0 no
    targets, no ``alpha``, the head trained), the data's shift, the attention and the base
    checkpoint."""
    from vitattn.attention import registered_name

    counts = module.parameter_counts()
    acting = settings.recorded()
    return {
        "params": counts.total,
        "params/trainable": counts.trainable,
        "params/lora": counts.lora,
        "lora/rank": acting["rank"],
        "lora/alpha": acting["alpha"],
        "lora/target_modules": str(acting["target_modules"]),
        "lora/train_head": acting["train_head"],
        "data/shift": datamodule.hparams.get("shift", "none"),
        "attention": registered_name(module.hparams.net.get("attention")),
        "ckpt_path": str(Path(cfg.ckpt_path).expanduser().resolve()),
    }


def hyperparameters(cfg: DictConfig, data_cfg: DictConfig, module: Any, settings: Any) -> Any:
    """What the HPARAMS view compares this fine-tune by (its ``Hyperparameters``): the
    ``lora`` settings as ``metrics.json`` records them (``LoRASettings.recorded``)."""
    from vitattn.attention import registered_name
    from vitattn.training.hparams import finetuning_hyperparameters

    attention = registered_name(module.hparams.net.get("attention"))
    counts = module.parameter_counts()
    lora = settings.recorded()
    return finetuning_hyperparameters(cfg, data_cfg, module, attention, counts, lora)


def log_start(figures: dict[str, Any], output_dir: Path) -> None:
    """The line a fine-tune starts with: rank, shift, parameters trainable of those it trains
    (the network's and its adapters'), where."""
    log.info(
        "lora.rank=%d on data.shift=%s: %d of %d parameters trainable (%d in adapters added to "
        "the network's %d), run directory %s",
        figures["lora/rank"],
        figures["data/shift"],
        figures["params/trainable"],
        figures["params"] + figures["params/lora"],
        figures["params/lora"],
        figures["params"],
        output_dir,
    )


def score(cfg: DictConfig, module: Any, datamodule: Any) -> float:
    """Test accuracy of ``module`` on ``datamodule``'s (shifted) test set, logged nowhere."""
    from vitattn.training.instantiators import bare_trainer

    results = bare_trainer(cfg.trainer).test(module, datamodule=datamodule, verbose=False)
    return float(results[0]["test/acc"])


def merged_step(tested: str | None, trainer: Any) -> int:
    """The step of the weights ``module`` holds once the fit and its test are done: those of the
    checkpoint ``tested`` (testing it loaded it; the best by ``val/acc`` is seldom the last),
    else, with ``test=false`` or no checkpoint saved, the fit's last. ``merged.ckpt`` carries
    it: until 2026-12-02 it carried the last step beside the best checkpoint's weights, so a
    run continued from it or compared by step was placed where its weights were not."""
    from vitattn.runs.checkpoints import read_checkpoint

    if tested is None:
        return int(trainer.global_step)
    return int(read_checkpoint(tested)["global_step"])


def save_merged(
    cfg: DictConfig,
    module: Any,
    datamodule: Any,
    trainer: Any,
    metrics: dict[str, Any],
    step: int,
) -> str:
    """Fold the adapters into the weights and save the result as ``checkpoints/merged.ckpt``, a
    plain checkpoint with the data settings, for ``vitattn-eval``, at ``step``, that of the
    weights merged (:func:`merged_step`); its test accuracy goes into ``metrics`` as
    ``test/acc_merged``. Returns the checkpoint's path."""
    from vitattn.lora.module import save_plain_checkpoint
    from vitattn.models.module import precision_record

    merged = module.merged_classifier()
    path = save_plain_checkpoint(
        merged,
        RunDir(Path(cfg.paths.output_dir)).checkpoints / MERGED_CHECKPOINT,
        step,
        data_settings=dict(datamodule.hparams),
        precision=precision_record(trainer),  # vitattn-eval tests it as it was scored here
    )
    metrics["test/acc_merged"] = score(cfg, merged, datamodule)
    log.info("wrote %s (test/acc_merged=%.4f)", path, metrics["test/acc_merged"])
    return str(path)


def result_line(metrics: dict[str, Any], output_dir: Path) -> str:
    """The line a fine-tune ends with: attention, rank, shift, test accuracy against the base's."""
    test_acc = float(metrics.get("test/acc") or float("nan"))
    return (
        f"attention={metrics['attention']}, lora.rank={metrics['lora/rank']} on "
        f"data.shift={metrics['data/shift']}: test/acc {100 * test_acc:.2f}% "
        f"(base {100 * metrics['test/acc_base']:.2f}%); {output_dir}"
    )


BATCH_SETTINGS = ("batch_size", "eval_batch_size")
"""The data settings whose batches ``vitattn-finetune`` runs its network over: training's, and
the tests' (of the base network and of the result)."""


def validate(cfg: DictConfig) -> None:
    """What ``vitattn-finetune`` checks before its run directory exists: PEFT is there, the
    run's own settings (``seed``, ``test``, ...), the ``lora`` settings, the base checkpoint (a
    file, holding no code), and the data (its input format read from the checkpoint),
    optimizer, schedule and trainer settings (the optimizer's and the schedule's first where
    the command line sets a value in them)."""
    from omegaconf import open_dict

    from vitattn.cli.validation import check_run_settings, check_types, given_groups
    from vitattn.data.as_trained import INPUT_FORMAT, SPLIT, as_trained
    from vitattn.loading import checked_checkpoint
    from vitattn.lora.adapters import require_peft
    from vitattn.runs.checkpoints import data_settings_of
    from vitattn.training.instantiators import check_takes_batches
    from vitattn.training.trial_build import (
        built_with_torch_alone,
        check_buildable,
        check_buildable_with_torch,
    )

    require_peft(only_installed=True)
    check_run_settings(cfg)
    lora_settings(cfg)
    # there, holding no code, building what vitattn builds: the data settings left to it
    batches = {f"data.{key}": OmegaConf.select(cfg, f"data.{key}") for key in BATCH_SETTINGS}
    checkpoint = checked_checkpoint(
        cfg.get("ckpt_path"),
        "vitattn-finetune",
        batches=batches,
        trainer=cfg.get("trainer") or {},
    )
    with open_dict(cfg):
        cfg.data = as_trained(
            cfg.data, data_settings_of(checkpoint), settings=(*INPUT_FORMAT, *SPLIT)
        )
    require_peft()  # imported: an installed PEFT that fails to import is refused here
    first = built_with_torch_alone(given_groups(cfg))  # the optimizer's and schedule's ranges
    check_types(cfg, groups=first)
    check_buildable_with_torch(cfg, first)
    check_types(cfg, checked=first)
    check_takes_batches(cfg.trainer, "train", "vitattn-finetune at 0 trains no step")
    if cfg.get("test", True):
        check_takes_batches(
            cfg.trainer, "test", "the fine-tune's result is its test (test=false skips it)"
        )
    check_buildable(cfg)


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="finetune")
def _hydra_main(cfg: DictConfig) -> float | None:
    metrics = run_task("vitattn-finetune", finetune, cfg)
    value = metrics.get("test/acc", metrics.get("val/acc"))
    return float(value) if value is not None else None


def main() -> None:
    """Console script ``vitattn-finetune``."""
    console_main("vitattn-finetune", _hydra_main, config_name="finetune", validate=validate)


if __name__ == "__main__":
    main()
