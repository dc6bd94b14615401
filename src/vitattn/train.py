"""``vitattn-train``: fit a ViT on CIFAR-10, test it, and write ``metrics.json``.

Examples::

    vitattn-train                                      # model=vit, attention=softmax
    vitattn-train attention.impl=naive model.heads=4 model.embed_dim=192
    vitattn-train -m attention=softmax seed=1,2,3      # one run directory per job
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from vitattn.utils.cli import console_main
from vitattn.utils.config import CONFIG_DIR, chosen_option
from vitattn.utils.resume import resume_arguments
from vitattn.utils.task import run_task
from vitattn.utils.validation import validate_training

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit, validate at the end, test on the best (or last) checkpoint; return the metrics."""
    import lightning as L
    import torch

    from vitattn.fitting import fit_and_test, result_line
    from vitattn.logger import log_hyperparameters, log_results
    from vitattn.models.flops import gflop_per_image
    from vitattn.utils.checkpoint_io import remove_partial_checkpoints
    from vitattn.utils.checkpoints import (
        check_checkpoint_matches,
        read_checkpoint,
    )
    from vitattn.utils.hparams import training_hyperparameters
    from vitattn.utils.instantiators import instantiate_list, instantiate_loggers
    from vitattn.utils.lightning_output import tidy_lightning_output
    from vitattn.utils.sweep_continuation import continue_interrupted_job
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
    module.check_data(datamodule)
    datamodule.prepare_data()
    datamodule.setup("fit")
    continue_interrupted_job(cfg)  # an interrupted job of a re-run sweep: from its last.ckpt
    resume_step = None
    if cfg.get("ckpt_path"):
        check_checkpoint_matches(cfg.ckpt_path, module.hparams.net)
        resume_step = int(read_checkpoint(cfg.ckpt_path)["global_step"])

    callbacks = instantiate_list(cfg.get("callbacks"))
    loggers = instantiate_loggers(cfg.get("logger"), resume_step)
    trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)

    params = sum(p.numel() for p in module.parameters())
    example = datamodule.on_after_batch_transfer(module.example_input_array, 0)
    gflop = gflop_per_image(module.net, example)
    choices = {group: chosen_option(cfg, group) for group in ("attention", "model", "optimizer")}
    hparams = training_hyperparameters(cfg, choices, params)
    log_hyperparameters(trainer.loggers, hparams)
    log.info(
        "attention=%s, %d parameters, precision %s on %s, run directory %s",
        choices["attention"],
        params,
        trainer.precision,
        trainer.strategy.root_device,
        output_dir,
    )
    degenerate = warn_if_exact(module.net, choices["attention"])

    remove_partial_checkpoints(output_dir / "checkpoints")  # left by a killed write
    metrics, tested = fit_and_test("vitattn-train", trainer, module, datamodule, cfg)
    metrics.update(
        {
            "params": params,
            "gflop_per_image": None if gflop is None else round(gflop, 3),
            "attention": choices["attention"],
            "model": choices["model"],
            "degenerate": degenerate,
            "ckpt_path": tested,
            "status": "completed",
        }
    )
    if trainer.is_global_zero and not cfg.trainer.get("fast_dev_run"):
        write_metrics(output_dir / "metrics.json", metrics)
        log_results(trainer.loggers, metrics, trainer.global_step)
        log.info("%s", result_line(metrics, output_dir))
    return metrics


def warn_if_exact(net: Any, attention: str | None) -> str | None:
    """Log one warning when the model's attention is exact by construction at its settings
    (the comparison with softmax would measure no approximation); return the reason or None."""
    from vitattn.attention import exact_by_construction

    reason = exact_by_construction(net)
    if reason:
        log.warning(
            "attention=%s is exact by construction here: %s; compared with softmax it measures "
            "no approximation (lower its budget: docs/attention.md)",
            attention,
            reason,
        )
    return reason


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def _hydra_main(cfg: DictConfig) -> float | None:
    metrics = run_task("vitattn-train", train, cfg)
    value = metrics.get(cfg.get("optimized_metric") or "val/acc")
    return float(value) if value is not None else None


def main() -> None:
    """Console script ``vitattn-train``."""
    console_main(
        "vitattn-train",
        _hydra_main,
        config_name="train",
        prepare=resume_arguments,
        validate=validate_training,
    )


if __name__ == "__main__":
    main()
