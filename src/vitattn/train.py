"""``vitattn-train``: fit a ViT on CIFAR-10, test it, and write ``metrics.json``.

Examples::

    vitattn-train                                      # model=vit, attention=softmax
    vitattn-train attention.impl=naive model.heads=4 model.embed_dim=192
    vitattn-train -m attention=softmax seed=1,2,3      # one run directory per job
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from omegaconf import DictConfig

from vitattn.cli.console import console_main
from vitattn.cli.resume import resume_arguments
from vitattn.runs.layout import RunDir
from vitattn.runs.task import run_task
from vitattn.utils.config import CONFIG_DIR, chosen_option

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit, validate at the end, test on the best (or last) checkpoint; return the metrics."""
    import lightning as L

    from vitattn.runs.checkpoint_io import remove_partial_checkpoints
    from vitattn.runs.continuation import continue_interrupted_job
    from vitattn.runs.task import write_metrics
    from vitattn.training import fitting
    from vitattn.training.callbacks import pruned_at
    from vitattn.training.hparams import training_hyperparameters
    from vitattn.training.lightning_output import tidy_lightning_output
    from vitattn.training.logger import log_hyperparameters, log_results

    tidy_lightning_output()
    output_dir = Path(cfg.paths.output_dir)
    fitting.seed_and_precision(cfg)
    # Everything that can reject the configuration or the data runs before anything is written.
    datamodule: L.LightningDataModule = hydra.utils.instantiate(cfg.data)
    module: L.LightningModule = hydra.utils.instantiate(cfg.module)
    fitting.prepare_for_fit(module, datamodule, cfg.trainer, tests=cfg.get("test", True))
    continue_interrupted_job(cfg)  # an interrupted job of a re-run sweep: from its last.ckpt
    trainer = fitting.instantiate_trainer(cfg, resume_step=resumed_step(cfg, module))

    choices = {group: chosen_option(cfg, group) for group in ("attention", "model", "optimizer")}
    figures = model_figures(module, datamodule, choices, trainer.strategy.root_device)
    hparams = training_hyperparameters(cfg, choices, figures["params"], module.net)
    log_hyperparameters(trainer.loggers, hparams)
    log.info(
        "attention=%s, %d parameters, precision %s on %s, run directory %s",
        choices["attention"],
        figures["params"],
        trainer.precision,
        trainer.strategy.root_device,
        output_dir,
    )
    figures["degenerate"] = warn_if_exact(module.net, choices["attention"])

    remove_partial_checkpoints(RunDir(output_dir).checkpoints)  # left by a killed write
    metrics, tested = fitting.fit_and_test("vitattn-train", trainer, module, datamodule, cfg)
    metrics.update({**figures, "ckpt_path": tested, "status": "completed"})
    if (step := pruned_at(trainer)) is not None:  # an Optuna search's pruner stopped it
        metrics.update({"status": "pruned", "pruned_at_step": step})
    if fitting.writes_results(trainer, cfg):
        write_metrics(RunDir(output_dir).metrics_file, metrics)
        log_results(trainer.loggers, metrics, trainer.global_step)
        log.info("%s", fitting.result_line(metrics, output_dir))
    elif trainer.is_global_zero:  # a fast_dev_run
        log.info("%s", fitting.result_line(metrics, output_dir, kept=False))
    return metrics


def resumed_step(cfg: DictConfig, module: Any) -> int | None:
    """The step of the checkpoint ``cfg.ckpt_path`` the run continues from, once it is known to
    hold ``module``'s network; ``None`` for a run that starts afresh."""
    from vitattn.runs.checkpoints import check_checkpoint_matches, read_checkpoint

    if not cfg.get("ckpt_path"):
        return None
    training = {"optimizer": module.hparams.optimizer, "scheduler": module.hparams.scheduler}
    check_checkpoint_matches(cfg.ckpt_path, module.hparams.net, training)
    return int(read_checkpoint(cfg.ckpt_path)["global_step"])


def model_figures(
    module: Any, datamodule: Any, choices: dict[str, str | None], device: torch.device
) -> dict[str, Any]:
    """What ``metrics.json`` says of the model: its parameters, GFLOP per image (forward and
    backward, on an image as the data module prepares it, counted on ``device``, the one it
    trains on: a kernel that runs only there, ``attention.impl=triton`` say, is counted too), its
    attention and model options."""
    from vitattn.models.flops import gflop_per_image

    example = datamodule.on_after_batch_transfer(module.example_input_array, 0)
    gflop = gflop_per_image(module.net, example.to(device))
    return {
        "params": sum(p.numel() for p in module.parameters()),
        "gflop_per_image": None if gflop is None else float(f"{gflop:.4g}"),  # 4 digits
        "attention": choices["attention"],
        "model": choices["model"],
    }


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


def validate(cfg: DictConfig) -> None:
    """Everything ``vitattn-train`` checks before its run directory exists: the run's own
    settings (``seed``, ``test``, ...), the settings' types, each object built once (first those
    torch alone builds that the command line sets a value in: a mistake typed there is named
    before Lightning is imported), and what a resume may do (the file it continues from read
    first, for the same reason)."""
    from vitattn.cli.validation import (
        check_resume,
        check_resume_file,
        check_run_settings,
        check_types,
        given_groups,
    )
    from vitattn.training.instantiators import check_takes_batches
    from vitattn.training.trial_build import (
        built_with_torch_alone,
        check_buildable,
        check_buildable_with_torch,
    )

    check_run_settings(cfg)
    check_resume_file(cfg)
    first = built_with_torch_alone(given_groups(cfg))
    check_types(cfg, groups=first)
    check_buildable_with_torch(cfg, first)
    check_types(cfg, checked=first)
    check_takes_batches(cfg.trainer, "train", "vitattn-train at 0 trains no step")
    check_buildable(cfg)
    check_resume(cfg)


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def _hydra_main(cfg: DictConfig) -> dict[str, Any]:
    """The run's metrics: a search's sweeper reads the ones ``optimized_metric`` names, and
    its status (``pruned``)."""
    return run_task("vitattn-train", train, cfg)


def main() -> None:
    """Console script ``vitattn-train``."""
    console_main(
        "vitattn-train",
        _hydra_main,
        config_name="train",
        prepare=resume_arguments,
        validate=validate,
        continues_runs=True,
    )


if __name__ == "__main__":
    main()
