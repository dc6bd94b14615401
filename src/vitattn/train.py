"""``vitattn-train``: fit a ViT on CIFAR-10, test it, and write ``metrics.json``.

Examples::

    vitattn-train                                      # model=vit, attention=softmax
    vitattn-train attention.impl=naive model.heads=4 model.embed_dim=192
    vitattn-train -m attention=softmax seed=1,2,3      # one run directory per job
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from vitattn.utils.cli import console_main
from vitattn.utils.config import CONFIG_DIR, chosen_option
from vitattn.utils.resume import resume_arguments
from vitattn.utils.task import run_task

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit, validate at the end, test on the best (or last) checkpoint; return the metrics."""
    import lightning as L
    import torch
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from vitattn.callbacks import fit_summary
    from vitattn.utils.checkpoints import check_checkpoint_matches, run_test_on_best
    from vitattn.utils.hparams import log_hyperparameters, training_hyperparameters
    from vitattn.utils.instantiators import instantiate_list
    from vitattn.utils.lightning_output import tidy_lightning_output
    from vitattn.utils.task import write_metrics

    tidy_lightning_output()
    output_dir = Path(cfg.paths.output_dir)
    if cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True)
    if cfg.get("matmul_precision"):
        torch.set_float32_matmul_precision(cfg.matmul_precision)

    # Everything that can reject the configuration or the data runs before anything is written.
    datamodule: L.LightningDataModule = hydra.utils.instantiate(cfg.data)
    module: L.LightningModule = hydra.utils.instantiate(cfg.module)
    datamodule.prepare_data()
    datamodule.setup("fit")
    if cfg.get("ckpt_path"):
        check_checkpoint_matches(cfg.ckpt_path, module.hparams.net)

    callbacks = instantiate_list(cfg.get("callbacks"))
    loggers = instantiate_list(cfg.get("logger"))
    trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)

    params = sum(p.numel() for p in module.parameters())
    choices = {group: chosen_option(cfg, group) for group in ("attention", "model")}
    log_hyperparameters(trainer.loggers, training_hyperparameters(cfg, choices, params))
    log.info(
        "attention=%s, %d parameters, run directory %s", choices["attention"], params, output_dir
    )

    if torch.cuda.is_available():  # a sequential sweep's jobs share this process
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    except SIGTERMException:
        log.warning("stopped by SIGTERM; logs and checkpoints/last.ckpt are in %s", output_dir)
        raise SystemExit(143) from None  # 128 + SIGTERM, as if the signal had ended the process
    summary = fit_summary(trainer, time.perf_counter() - started)
    metrics: dict[str, Any] = {
        k: v for k, v in trainer.callback_metrics.items() if k.startswith("val/")
    }
    test_ckpt, test_metrics = (
        run_test_on_best(trainer, module, datamodule) if cfg.get("test", True) else (None, {})
    )
    metrics.update(test_metrics)
    metrics.update(
        {**summary, "params": params, **choices, "ckpt_path": test_ckpt, "status": "completed"}
    )
    if trainer.is_global_zero and not cfg.trainer.get("fast_dev_run"):
        write_metrics(output_dir / "metrics.json", metrics)
    return metrics


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def _hydra_main(cfg: DictConfig) -> float | None:
    metrics = run_task("vitattn-train", train, cfg)
    value = metrics.get(cfg.get("optimized_metric") or "val/acc")
    return float(value) if value is not None else None


def main() -> None:
    """Console script ``vitattn-train``."""
    console_main("vitattn-train", _hydra_main, config_name="train", prepare=resume_arguments)


if __name__ == "__main__":
    main()
