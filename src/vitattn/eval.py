"""``vitattn-eval ckpt_path=...``: test accuracy of a checkpoint saved by ``vitattn-train``.

The checkpoint carries the network's config, so the model is rebuilt exactly as it was trained;
the data and trainer settings come from ``configs/eval.yaml`` and the command line, except the
data settings left ``null`` there (grayscale, normalize, shift), which are those the checkpoint
was trained with (:mod:`vitattn.data.as_trained`).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from vitattn.train import instantiate_list, tidy_lightning_output
from vitattn.utils.config import CONFIG_DIR, check_group_choices, check_output_dirs
from vitattn.utils.errors import ConfigError, VitattnError
from vitattn.utils.run import fail, run_task

log = logging.getLogger(__name__)


def load_classifier(ckpt_path: str | Path) -> Any:
    """Rebuild the :class:`~vitattn.models.module.ViTClassifier` stored in a checkpoint: one of
    ``vitattn-train``, or of ``vitattn-finetune`` (a
    :class:`~vitattn.lora.module.LoRAClassifier`, whose network carries LoRA adapters)."""
    from vitattn.models.module import ViTClassifier

    path = Path(ckpt_path).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"ckpt_path={ckpt_path} is not a file; pass a .ckpt saved by vitattn-train"
        )
    try:
        if holds_adapters(path):
            from vitattn.lora.module import LoRAClassifier

            return LoRAClassifier.load_from_checkpoint(path, map_location="cpu")
        return ViTClassifier.load_from_checkpoint(path, map_location="cpu")
    except VitattnError:
        raise
    except Exception as error:
        # The first line only: a state_dict mismatch lists every key on the following ones.
        reason = next(iter(str(error).splitlines()), "")
        raise ConfigError(
            f"ckpt_path={ckpt_path} is not a vitattn-train checkpoint "
            f"({type(error).__name__}: {reason})"
        ) from error


def holds_adapters(path: Path) -> bool:
    """Whether a checkpoint was written by ``vitattn-finetune`` with LoRA adapters (its module
    hyperparameters have ``lora``); ``False`` for anything unreadable, which the loader reports."""
    from vitattn.utils.checkpoints import read_checkpoint

    try:
        return "lora" in (read_checkpoint(path).get("hyper_parameters") or {})
    except Exception:
        return False


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Test a checkpoint; write and return ``metrics.json``'s content."""
    import lightning as L

    from vitattn.data.as_trained import as_trained
    from vitattn.utils.run import write_metrics

    tidy_lightning_output()
    if cfg.get("ckpt_path") in (None, "", "???"):
        raise ConfigError(
            "ckpt_path is required: vitattn-eval ckpt_path=<run>/checkpoints/last.ckpt"
        )
    module = load_classifier(cfg.ckpt_path)
    datamodule: L.LightningDataModule = hydra.utils.instantiate(as_trained(cfg.data, cfg.ckpt_path))
    datamodule.prepare_data()
    datamodule.setup("test")

    trainer: L.Trainer = hydra.utils.instantiate(
        cfg.trainer,
        callbacks=instantiate_list(cfg.get("callbacks")),
        logger=instantiate_list(cfg.get("logger")),
    )
    trainer.test(module, datamodule=datamodule)
    metrics: dict[str, Any] = {
        k: v for k, v in trainer.callback_metrics.items() if k.startswith("test/")
    }
    metrics["ckpt_path"] = str(Path(cfg.ckpt_path).expanduser().resolve())
    metrics["params"] = sum(p.numel() for p in module.parameters())
    if trainer.is_global_zero:
        write_metrics(Path(cfg.paths.output_dir) / "metrics.json", metrics)
    log.info("test/acc=%.4f", float(metrics["test/acc"]))
    return metrics


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="eval")
def _hydra_main(cfg: DictConfig) -> float:
    return float(run_task("vitattn-eval", evaluate, cfg)["test/acc"])


def main() -> None:
    """Console script ``vitattn-eval``."""
    try:
        check_group_choices(sys.argv[1:])
        check_output_dirs(sys.argv[1:])
    except VitattnError as error:
        fail("vitattn-eval", error)
        sys.exit(1)
    _hydra_main()


if __name__ == "__main__":
    main()
