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

from vitattn.utils.cli import console_main
from vitattn.utils.config import CONFIG_DIR
from vitattn.utils.errors import ConfigError
from vitattn.utils.task import run_task

log = logging.getLogger(__name__)

MERGED_CHECKPOINT = "merged.ckpt"


def load_base(ckpt_path: Any) -> Any:
    """The :class:`ViTClassifier` to adapt, with one-line errors for every way it can be wrong."""
    from vitattn.loading import load_classifier
    from vitattn.lora.module import LoRAClassifier

    if ckpt_path in (None, "", "???"):
        raise ConfigError(
            "ckpt_path is required: vitattn-finetune ckpt_path=<train run>/checkpoints/last.ckpt"
        )
    base = load_classifier(ckpt_path)
    if isinstance(base, LoRAClassifier):
        raise ConfigError(
            f"ckpt_path={ckpt_path} holds LoRA adapters (a vitattn-finetune checkpoint); "
            f"pass the run's checkpoints/{MERGED_CHECKPOINT} (lora.merge=true) instead"
        )
    return base


def score(cfg: DictConfig, module: Any, datamodule: Any) -> float:
    """Test accuracy of ``module`` on ``datamodule``'s (shifted) test set, logged nowhere."""
    from vitattn.utils.instantiators import quiet_trainer

    results = quiet_trainer(cfg.trainer).test(module, datamodule=datamodule, verbose=False)
    return float(results[0]["test/acc"])


def finetune(cfg: DictConfig) -> dict[str, Any]:
    """Fine-tune, test the base and the result on the shifted test set; return the metrics."""
    import lightning as L
    import torch

    from vitattn.attention import registered_name
    from vitattn.data.as_trained import as_trained
    from vitattn.fitting import fit_and_test
    from vitattn.logger import FINETUNING_RESULTS, log_hyperparameters, log_results
    from vitattn.lora.adapters import LoRASettings
    from vitattn.lora.module import LoRAClassifier, save_plain_checkpoint
    from vitattn.utils.hparams import finetuning_hyperparameters
    from vitattn.utils.instantiators import instantiate_list
    from vitattn.utils.lightning_output import tidy_lightning_output
    from vitattn.utils.task import write_metrics

    tidy_lightning_output()
    output_dir = Path(cfg.paths.output_dir)
    # Everything that can reject the configuration or the data runs before anything is written.
    lora_cfg = OmegaConf.to_container(cfg.lora, resolve=True) if cfg.get("lora") else {}
    merge = bool(lora_cfg.get("merge", True))
    settings = LoRASettings.from_mapping(lora_cfg)
    base = load_base(cfg.get("ckpt_path"))
    if cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True)
    if cfg.get("matmul_precision"):
        torch.set_float32_matmul_precision(cfg.matmul_precision)
    # The base's input format (grayscale, normalised or raw pixels) unless given; the shift is
    # this run's own setting.
    data_cfg = as_trained(cfg.data, cfg.ckpt_path, settings=("grayscale", "normalize"))
    datamodule: L.LightningDataModule = hydra.utils.instantiate(data_cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")

    # The network comes from the checkpoint; the optimisation from this run's config.
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
    module.check_data(datamodule)
    module.load_base_weights(base.net.state_dict())
    counts = module.parameter_counts()
    attention = registered_name(module.hparams.net.get("attention"))

    callbacks = instantiate_list(cfg.get("callbacks"))
    loggers = instantiate_list(cfg.get("logger"))
    trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)
    hparams = finetuning_hyperparameters(
        cfg, data_cfg, module.hparams.net, module.hparams.lora, attention, counts
    )
    log_hyperparameters(trainer.loggers, hparams, FINETUNING_RESULTS)
    shift = datamodule.hparams.get("shift", "none")
    log.info(
        "lora.rank=%d on data.shift=%s: %d of %d parameters trainable (%d in adapters), "
        "run directory %s",
        settings.rank,
        shift,
        counts.trainable,
        counts.total,
        counts.lora,
        output_dir,
    )

    base_acc = score(cfg, base, datamodule)
    log.info("base model on the %s test set: test/acc_base=%.4f", shift, base_acc)
    del base

    # Testing a checkpoint loads it into `module`: the merge below folds the tested weights.
    metrics, tested = fit_and_test("vitattn-finetune", trainer, module, datamodule, cfg, False)
    metrics["test/acc_base"] = base_acc

    writes = trainer.is_global_zero and not cfg.trainer.get("fast_dev_run")
    merged_path = None
    if merge and writes:
        merged = module.merged_classifier()
        merged_path = save_plain_checkpoint(
            merged,
            output_dir / "checkpoints" / MERGED_CHECKPOINT,
            trainer.global_step,
            data_settings=dict(datamodule.hparams),
        )
        metrics["test/acc_merged"] = score(cfg, merged, datamodule)
        log.info("wrote %s (test/acc_merged=%.4f)", merged_path, metrics["test/acc_merged"])

    metrics.update(
        {
            "params": counts.total,
            "params/trainable": counts.trainable,
            "params/lora": counts.lora,
            "lora/rank": settings.rank,
            "lora/alpha": settings.alpha,
            "lora/target_modules": str(settings.as_dict()["target_modules"]),
            "lora/train_head": settings.train_head,
            "data/shift": shift,
            "attention": attention,
            "ckpt_path": str(Path(cfg.ckpt_path).expanduser().resolve()),
            "test_ckpt_path": tested,
            "merged_ckpt_path": str(merged_path) if merged_path else None,
            "status": "completed",
        }
    )
    if writes:
        write_metrics(output_dir / "metrics.json", metrics)
        log_results(trainer.loggers, metrics, trainer.global_step, FINETUNING_RESULTS)
        log.info(
            "attention=%s, lora.rank=%d on data.shift=%s: test/acc %.2f%% (base %.2f%%); %s",
            attention,
            settings.rank,
            shift,
            100 * float(metrics.get("test/acc") or float("nan")),
            100 * base_acc,
            output_dir,
        )
    return metrics


def validate(cfg: DictConfig) -> None:
    """What ``vitattn-finetune`` checks before its run directory exists: PEFT is there, the
    ``lora`` settings, and the data (its input format read from the base checkpoint),
    optimizer, schedule and trainer settings."""
    from omegaconf import open_dict

    from vitattn.data.as_trained import as_trained
    from vitattn.lora.adapters import LoRASettings, require_peft
    from vitattn.utils.validation import check_buildable, check_types

    require_peft()
    LoRASettings.from_mapping(
        OmegaConf.to_container(cfg.lora, resolve=True) if cfg.get("lora") else {}
    )
    path = cfg.get("ckpt_path")
    if path not in (None, "", "???") and Path(str(path)).expanduser().is_file():
        with open_dict(cfg):
            cfg.data = as_trained(cfg.data, path, settings=("grayscale", "normalize"))
    check_types(cfg)
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
