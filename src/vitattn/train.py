"""``vitattn-train``: fit a ViT on CIFAR-10, test it, and write ``metrics.json``.

Examples::

    vitattn-train                                      # model=vit, attention=softmax
    vitattn-train attention.impl=naive model.heads=4 model.embed_dim=192
    vitattn-train -m attention=softmax seed=1,2,3      # one run directory per job
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from vitattn.utils.config import CONFIG_DIR, check_group_choices, check_output_dirs
from vitattn.utils.errors import ConfigError, VitattnError
from vitattn.utils.run import fail, run_task

log = logging.getLogger(__name__)


def instantiate_list(configs: DictConfig | None) -> list[Any]:
    """Instantiate every ``_target_`` entry of a ``{name: config}`` group (callbacks, loggers)."""
    if not configs:
        return []
    return [hydra.utils.instantiate(c) for c in configs.values() if c and "_target_" in c]


def choice(cfg: DictConfig, group: str) -> str | None:
    """The option chosen for ``group`` (e.g. ``attention`` -> ``softmax``), if known."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return HydraConfig.get().runtime.choices.get(group)
    if "hydra" in cfg:  # composed with the compose API and return_hydra_config=True
        return cfg.hydra.runtime.choices.get(group)
    return None


class _DropTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Tip:" not in str(record.msg)


def tidy_lightning_output() -> None:
    """One copy of each Lightning message, and no warnings that do not apply here."""
    import lightning  # noqa: F401  (it adds its own console handler on import)

    # Hydra's root handlers already print (and file) Lightning's records: without this, every
    # Lightning message is printed twice.
    if logging.getLogger().handlers:
        logging.getLogger("lightning").handlers.clear()
    # Lightning advertises optional cloud packages ("💡 Tip: ... litlogger") at every start.
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _DropTips) for f in rank_zero.filters):
        rank_zero.addFilter(_DropTips())
    # Batches are slices of in-memory tensors: worker processes would only slow them down.
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    # Raised inside Lightning's own pytree helper for the installed torch; nothing to act on.
    warnings.filterwarnings("ignore", r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")
    # Our data module resumes mid-epoch itself (it skips the batches already trained).
    warnings.filterwarnings("ignore", ".*resuming from a checkpoint that ended before the epoch.*")


def best_checkpoint(trainer: Any) -> str | None:
    """The best checkpoint by the monitored metric, else the latest one saved, else ``None``."""
    callbacks = trainer.checkpoint_callbacks
    monitored = [c.best_model_path for c in callbacks if c.monitor and c.best_model_path]
    latest = [c.best_model_path or c.last_model_path for c in callbacks if not c.monitor]
    return next((path for path in monitored + latest if path), None)


def run_test_on_best(trainer: Any, module: Any, datamodule: Any) -> tuple[str | None, dict]:
    """Test the best checkpoint (:func:`best_checkpoint`; the weights in memory if none was
    saved). Returns the checkpoint tested and the ``test/`` metrics."""
    ckpt_path = best_checkpoint(trainer)
    if ckpt_path is None:
        log.warning("no checkpoint was saved: testing the weights in memory")
    trainer.test(module, datamodule=datamodule, ckpt_path=ckpt_path)
    metrics = {k: v for k, v in trainer.callback_metrics.items() if k.startswith("test/")}
    return ckpt_path, metrics


def check_checkpoint_matches(ckpt_path: str, module: Any) -> None:
    """Refuse, in one line, a checkpoint whose network differs from the configured one."""
    from vitattn.utils.checkpoints import read_checkpoint

    try:
        stored = read_checkpoint(ckpt_path)["hyper_parameters"]["net"]
    except FileNotFoundError as error:
        raise ConfigError(f"ckpt_path={ckpt_path} is not a file") from error
    except Exception as error:
        raise ConfigError(
            f"ckpt_path={ckpt_path} is not a vitattn-train checkpoint ({type(error).__name__})"
        ) from error
    configured = OmegaConf.to_container(OmegaConf.create(dict(module.hparams.net)), resolve=True)
    stored = OmegaConf.to_container(OmegaConf.create(dict(stored)), resolve=True)
    for network in (configured, stored):  # compiling or not does not change the weights
        network.pop("compile", None)
    if stored != configured:
        differ = sorted(
            key
            for key in set(flatten_dict(stored)) | set(flatten_dict(configured))
            if flatten_dict(stored).get(key) != flatten_dict(configured).get(key)
        )
        shown = ", ".join(
            f"model.{k}={flatten_dict(stored).get(k)} (here {flatten_dict(configured).get(k)})"
            for k in differ[:3]
        )
        raise ConfigError(
            f"ckpt_path={ckpt_path} was trained with another network: {shown}; "
            "resume without model/attention overrides, or start a new run"
        )


def flatten_dict(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix.rstrip("."): tree}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(flatten_dict(value, f"{prefix}{key}."))
    return flat


def hyperparameters(cfg: DictConfig, params: int) -> dict[str, Any]:
    """The flat settings shown in TensorBoard's HPARAMS view: names of the choices and knobs."""
    from vitattn.utils.hparams import flatten

    groups = ("attention", "model", "optimizer", "scheduler", "data", "trainer", "module")
    knobs = {
        g: OmegaConf.to_container(cfg[g], resolve=True) if cfg.get(g) else None for g in groups
    }
    # The model's attention and the module's net/optimizer/scheduler repeat groups listed above.
    knobs["model"] = {k: v for k, v in knobs["model"].items() if k != "attention"}
    knobs["module"] = {k: v for k, v in knobs["module"].items() if not isinstance(v, dict)}
    return {
        "attention": choice(cfg, "attention"),
        "model": choice(cfg, "model"),
        "params": params,
        "seed": cfg.get("seed"),
        **{k: v for k, v in flatten(knobs).items() if not k.endswith("_partial_")},
    }


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit, validate at the end, test on the best (or last) checkpoint; return the metrics."""
    import lightning as L
    import torch
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from vitattn.callbacks import ImagesPerSecond
    from vitattn.utils.hparams import log_hyperparameters
    from vitattn.utils.run import write_metrics

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
        check_checkpoint_matches(cfg.ckpt_path, module)

    callbacks = instantiate_list(cfg.get("callbacks"))
    loggers = instantiate_list(cfg.get("logger"))
    trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)

    params = sum(p.numel() for p in module.parameters())
    attention = choice(cfg, "attention")
    log_hyperparameters(trainer.loggers, hyperparameters(cfg, params))
    log.info("attention=%s, %d parameters, run directory %s", attention, params, output_dir)

    started = time.perf_counter()
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    except SIGTERMException:
        log.warning("stopped by SIGTERM; logs and checkpoints/last.ckpt are in %s", output_dir)
        raise SystemExit(143) from None  # 128 + SIGTERM, as if the signal had ended the process
    fit_seconds = time.perf_counter() - started
    metrics: dict[str, Any] = {
        k: v for k, v in trainer.callback_metrics.items() if k.startswith("val/")
    }
    train_metrics = {k: v for k, v in trainer.callback_metrics.items() if k.startswith("train/")}

    test_ckpt = None
    if cfg.get("test", True):
        test_ckpt, test_metrics = run_test_on_best(trainer, module, datamodule)
        metrics.update(test_metrics)

    throughput = next((c for c in trainer.callbacks if isinstance(c, ImagesPerSecond)), None)
    metrics.update(
        {
            "train/loss": train_metrics.get("train/loss"),
            "train/images_per_sec": throughput.overall if throughput is not None else None,
            "params": params,
            "attention": attention,
            "model": choice(cfg, "model"),
            "steps": trainer.global_step,
            "epochs": trainer.current_epoch,
            "seconds": round(fit_seconds, 2),
            "ckpt_path": test_ckpt,
            "status": "completed",
        }
    )
    if trainer.strategy.root_device.type == "cuda":
        metrics["peak_memory_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
    if trainer.is_global_zero and not cfg.trainer.get("fast_dev_run"):
        write_metrics(output_dir / "metrics.json", metrics)
    return metrics


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def _hydra_main(cfg: DictConfig) -> float | None:
    metrics = run_task("vitattn-train", train, cfg)
    value = metrics.get(cfg.get("optimized_metric") or "val/acc")
    return float(value) if value is not None else None


def resume_arguments(arguments: list[str]) -> list[str]:
    """Command-line arguments that continue a run in its own directory with its own settings.

    ``ckpt_path=<run>/checkpoints/<file>.ckpt`` or ``resume=true hydra.run.dir=<run>`` (which
    takes ``<run>/checkpoints/last.ckpt``): the run's recorded overrides
    (``<run>/.hydra/overrides.yaml``) come first, so the model and data are rebuilt as they were,
    then the ones given now (e.g. a larger ``trainer.max_steps``); ``hydra.run.dir`` points at the
    run, so TensorBoard curves, checkpoints and ``metrics.json`` continue there.
    """
    if any(arg in ("-m", "--multirun") for arg in arguments):
        return arguments
    given = dict(arg.split("=", 1) for arg in arguments if "=" in arg and not arg.startswith("-"))
    run_dir = Path(given["hydra.run.dir"]) if "hydra.run.dir" in given else None
    ckpt_path = given.get("ckpt_path")
    if given.get("resume", "false").lower() == "true":
        if run_dir is None:
            raise ConfigError("resume=true needs the run to continue: add hydra.run.dir=<run dir>")
        if ckpt_path in (None, "null"):
            ckpt_path = str(run_dir / "checkpoints" / "last.ckpt")
            if not Path(ckpt_path).is_file():
                raise ConfigError(
                    f"resume=true: {ckpt_path} does not exist; hydra.run.dir must be a "
                    "vitattn-train run directory with checkpoints/last.ckpt"
                )
            arguments = [*arguments, f"ckpt_path={ckpt_path}"]
    if ckpt_path in (None, "null"):
        return arguments
    checkpoint = Path(ckpt_path).expanduser()
    if not checkpoint.is_file():
        raise ConfigError(
            f"ckpt_path={ckpt_path} is not a file; pass a .ckpt saved by vitattn-train"
        )
    if run_dir is None and checkpoint.parent.name == "checkpoints":
        candidate = checkpoint.parent.parent
        if (candidate / ".hydra" / "overrides.yaml").is_file():
            run_dir = candidate
            arguments = [*arguments, f"hydra.run.dir={run_dir}"]
    recorded = run_dir / ".hydra" / "overrides.yaml" if run_dir is not None else None
    if recorded is None or not recorded.is_file():
        return arguments
    previous = OmegaConf.to_container(OmegaConf.load(recorded)) or []
    keys_now = {arg.split("=", 1)[0].lstrip("+~") for arg in arguments}
    skip = {"ckpt_path", "resume", *keys_now}
    kept = [
        str(arg)
        for arg in previous
        if str(arg).split("=", 1)[0].lstrip("+~") not in skip and not str(arg).startswith("hydra.")
    ]
    return [*kept, *arguments]


def main() -> None:
    """Console script ``vitattn-train``."""
    try:
        arguments = resume_arguments(sys.argv[1:])
        check_group_choices(arguments)
        check_output_dirs(arguments)
    except VitattnError as error:
        fail("vitattn-train", error)
        sys.exit(1)
    sys.argv = [sys.argv[0], *arguments]
    _hydra_main()


if __name__ == "__main__":
    main()
