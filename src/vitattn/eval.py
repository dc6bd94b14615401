"""``vitattn-eval ckpt_path=...``: test accuracy of a checkpoint saved by ``vitattn-train``.

The checkpoint carries the network's config, so the model is rebuilt exactly as it was trained;
the data and trainer settings come from ``configs/eval.yaml`` and the command line, except the
data settings left ``null`` there (grayscale, normalize, shift), which are those the checkpoint
was trained with (:mod:`vitattn.data.as_trained`), and the precision left ``null``
(``trainer.precision``, ``matmul_precision``), which is the one its run trained and tested at
(:func:`precision_as_trained`).

With a TensorBoard logger (``configs/eval.yaml``'s default, ``~logger`` for none) the run is a
TensorBoard run with an HPARAMS session as a training run's: the checkpoint's attention and
knobs, its size, the data variant tested, the checkpoint's name, and ``test/acc`` as the result
(``~summary/acc_test``), so that the evaluation's row shows its test accuracy beside the
training runs'.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from vitattn.cli.console import console_main
from vitattn.runs.layout import RunDir
from vitattn.runs.task import run_task
from vitattn.utils.config import CONFIG_DIR

log = logging.getLogger(__name__)


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Test a checkpoint; write and return ``metrics.json``'s content."""
    import lightning as L

    from vitattn.attention import registered_name
    from vitattn.data.as_trained import as_trained
    from vitattn.loading import existing_checkpoint, load_trained
    from vitattn.runs.task import write_metrics
    from vitattn.training.fitting import (
        check_batch_shares,
        instantiate_trainer,
        seed_and_precision,
        tell_of_the_images,
        test_report,
    )
    from vitattn.training.hparams import evaluation_hyperparameters
    from vitattn.training.lightning_output import tidy_lightning_output
    from vitattn.training.logger import EVALUATION_RESULTS, log_hyperparameters, log_results

    tidy_lightning_output()
    trained = load_trained(existing_checkpoint(cfg.get("ckpt_path"), "vitattn-eval"))
    module = trained.module
    precision_as_trained(cfg, trained.precision)
    seed_and_precision(cfg)
    datamodule: L.LightningDataModule = hydra.utils.instantiate(
        as_trained(cfg.data, trained.data_settings)
    )
    module.check_data(datamodule, checkpoint=str(cfg.ckpt_path))
    datamodule.prepare_data()
    datamodule.setup("test")
    tell_of_the_images(datamodule)
    check_batch_shares(cfg.trainer, datamodule, ("test",))

    trainer = instantiate_trainer(cfg)
    # a fine-tune's checkpoint counts its network as the fine-tune did, its adapters left out
    counts = getattr(module, "parameter_counts", None)
    params = counts().total if counts else sum(p.numel() for p in module.parameters())
    attention = registered_name(module.hparams.net.get("attention"))
    shift = datamodule.hparams.get("shift", "none")
    hparams = evaluation_hyperparameters(
        cfg, module, attention, trained.data_settings, shift, params
    )
    log_hyperparameters(trainer.loggers, hparams, EVALUATION_RESULTS)
    trainer.test(module, datamodule=datamodule, verbose=False)
    metrics: dict[str, Any] = {
        k: v for k, v in trainer.callback_metrics.items() if k.startswith("test/")
    }
    metrics.update(test_report(trainer))
    metrics["ckpt_path"] = str(Path(cfg.ckpt_path).expanduser().resolve())
    metrics["params"] = params
    if trainer.is_global_zero:
        write_metrics(RunDir(Path(cfg.paths.output_dir)).metrics_file, metrics)
        log_results(trainer.loggers, metrics, trainer.global_step, EVALUATION_RESULTS)
    log.info("test/acc=%.4f", float(metrics["test/acc"]))
    return metrics


def precision_as_trained(cfg: DictConfig, recorded: Mapping[str, str] | None) -> None:
    """Set ``trainer.precision`` and ``matmul_precision`` left ``null`` to those the checkpoint's
    run trained and tested at (``recorded``,
    :func:`~vitattn.runs.checkpoints.precision_of`), so that its best checkpoint gives its
    ``test/acc`` again; where it records none (written before 2026-12-02), to ``32-true`` and
    torch's default ``highest``, what ``vitattn-eval`` tested every checkpoint at before. A
    value given on the command line is used as given."""
    chosen: dict[str, str] = {}
    if cfg.trainer.get("precision") is None:
        chosen["trainer.precision"] = recorded["trainer"] if recorded else "32-true"
    if cfg.get("matmul_precision") is None:
        chosen["matmul_precision"] = recorded["matmul"] if recorded else "highest"
    with open_dict(cfg):
        for key, value in chosen.items():
            OmegaConf.update(cfg, key, value)
    if chosen:
        source = "as the checkpoint was trained" if recorded else "the checkpoint records none"
        shown = ", ".join(f"{key}={value}" for key, value in chosen.items())
        log.info("precision %s: %s", source, shown)


def validate(cfg: DictConfig) -> None:
    """What ``vitattn-eval`` checks before its run directory exists: the data settings and the
    trainer's (those left to the checkpoint read from it)."""
    from vitattn.cli.validation import check_types
    from vitattn.data.as_trained import as_trained
    from vitattn.loading import checked_checkpoint
    from vitattn.runs.checkpoints import data_settings_of, precision_of
    from vitattn.training.instantiators import check_takes_batches
    from vitattn.training.trial_build import check_buildable

    checkpoint = checked_checkpoint(
        cfg.get("ckpt_path"),
        "vitattn-eval",
        batches={"data.eval_batch_size": OmegaConf.select(cfg, "data.eval_batch_size")},
        trainer=cfg.get("trainer") or {},
    )
    with open_dict(cfg):
        cfg.data = as_trained(cfg.data, data_settings_of(checkpoint))
    precision_as_trained(cfg, precision_of(checkpoint))
    check_types(cfg)
    check_takes_batches(cfg.trainer, "test", "vitattn-eval's result is the test")
    check_buildable(cfg)


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="eval")
def _hydra_main(cfg: DictConfig) -> float:
    return float(run_task("vitattn-eval", evaluate, cfg)["test/acc"])


def main() -> None:
    """Console script ``vitattn-eval``."""
    console_main("vitattn-eval", _hydra_main, config_name="eval", validate=validate)


if __name__ == "__main__":
    main()
