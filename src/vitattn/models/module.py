"""The LightningModule that trains a :class:`~vitattn.models.vit.VisionTransformer` classifier."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import hydra
import lightning as L
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from vitattn.errors import ConfigError
from vitattn.runs.checkpoint_values import PRECISION_KEY, SCHEDULE_KEY
from vitattn.utils import checks, metric_names
from vitattn.utils.parameters import parameter_groups

log = logging.getLogger(__name__)


def _plain(config: Mapping[str, Any] | DictConfig | None) -> dict[str, Any] | None:
    if config is None:
        return None
    if isinstance(config, DictConfig):
        return OmegaConf.to_container(config, resolve=True)  # type: ignore[return-value]
    return dict(config)


class ViTClassifier(L.LightningModule):
    """Image classification with cross-entropy, accuracy metrics and a per-step schedule.

    The network, optimizer and scheduler are given as Hydra configs (plain mappings with
    ``_target_``), so a checkpoint carries everything needed to rebuild the model:
    ``ViTClassifier.load_from_checkpoint(path)`` needs no other argument.

    Args:
        net: config of the network (``configs/model/*.yaml`` with its ``attention``).
        optimizer: ``_partial_`` config of a ``torch.optim`` optimizer.
        scheduler: ``_partial_`` config of a schedule taking ``optimizer`` and ``total_steps``,
            stepped every optimizer step; ``None`` keeps the rate constant.
        label_smoothing: label smoothing of the training loss (Szegedy et al. 2016).
        num_classes: number of classes.
    """

    logged = metric_names.MODULE_LOGGED
    """The names this module logs as it trains (:mod:`vitattn.utils.metric_names`)."""
    tested = metric_names.MODULE_TESTED
    """The names it logs as it tests."""

    def __init__(
        self,
        net: Mapping[str, Any],
        optimizer: Mapping[str, Any],
        scheduler: Mapping[str, Any] | None = None,
        label_smoothing: float = 0.0,
        num_classes: int = 10,
    ) -> None:
        super().__init__()
        checks.fraction("module.label_smoothing", label_smoothing)
        net_classes = net.get("num_classes") if isinstance(net, Mapping | DictConfig) else None
        if net_classes is not None and net_classes != num_classes:
            raise ConfigError(
                f"module.num_classes={num_classes} is not the network's model.num_classes="
                f"{net_classes}; leave it to follow model.num_classes"
            )
        self.save_hyperparameters(
            {
                "net": _plain(net),
                "optimizer": _plain(optimizer),
                "scheduler": _plain(scheduler),
                "label_smoothing": label_smoothing,
                "num_classes": num_classes,
            },
            logger=False,
        )
        self.net: nn.Module = hydra.utils.instantiate(self.hparams.net)
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_loss = MeanMetric()
        self.test_loss = MeanMetric()
        # One blank image as the data loaders yield it (uint8), for Lightning's model summary
        # (its FLOPs column) and the run's GFLOP/image; the datamodule prepares it as a batch.
        size = getattr(self.net, "image_size", 32)
        channels = getattr(self.net, "in_channels", 3)
        self.example_input_array = torch.zeros(1, channels, size, size, dtype=torch.uint8)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)

    def check_data(self, datamodule: Any, checkpoint: str | None = None) -> None:
        """Refuse, in one line, data the network cannot read: images of another shape, or more
        classes than it has outputs. With ``checkpoint``, the network is that file's: the line
        says to leave the data's colours to it, not to set ``model.in_channels``."""
        channels, height, width = datamodule.image_shape
        net = self.net
        if getattr(net, "in_channels", channels) != channels:
            where = " (data.grayscale=true)" if channels == 1 else ""
            fix = f"set model.in_channels={channels}"
            if checkpoint is not None:
                fix = (
                    f"the network is {checkpoint}'s: leave data.grayscale null (as it was "
                    "trained), or give a checkpoint trained on such images"
                )
            raise ConfigError(
                f"model.in_channels={net.in_channels} does not match the data: its images have "
                f"{channels} channel(s){where}; {fix}"
            )
        if getattr(net, "image_size", height) != height or height != width:
            raise ConfigError(
                f"model.image_size={net.image_size} does not match the data's {height}x{width} "
                f"images; set model.image_size={height}"
            )
        self.check_normalization(datamodule, checkpoint)
        if getattr(net, "num_classes", None) != datamodule.num_classes:
            raise ConfigError(
                f"model.num_classes={getattr(net, 'num_classes', None)} does not match the "
                f"data's {datamodule.num_classes} classes; set model.num_classes="
                f"{datamodule.num_classes}"
            )

    def check_normalization(self, datamodule: Any, checkpoint: str | None = None) -> None:
        """Refuse data normalised for the other embedding: the intensity lookup reads the 8-bit
        pixel values (``data.normalize=false``), the patch embedding normalised pixels. Until
        2026-12-02 the patch embedding trained on values 0..255 without a word (data audit),
        and the lookup was refused at its first forward, once the run was made."""
        from vitattn.models.vit import IntensityEmbedding

        normalize = getattr(getattr(datamodule, "settings", None), "normalize", None)
        if normalize is None:
            return
        lookup = isinstance(getattr(self.net, "patch_embed", None), IntensityEmbedding)
        if lookup != bool(normalize):
            return
        embedding = "intensity" if lookup else "patch"
        reads = "the 8-bit pixel values" if lookup else "normalised pixels"
        fix = f"set data.normalize={str(not lookup).lower()}"
        if checkpoint is not None:
            fix = f"the network is {checkpoint}'s: leave data.normalize null (as it was trained)"
        raise ConfigError(
            f"data.normalize={str(bool(normalize)).lower()} does not match "
            f"model.embedding={embedding}, which reads {reads}; {fix}"
        )

    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        images, labels = batch
        logits = self(images)
        # Soft (batch, classes) labels come from MixUp/CutMix; accuracy is against their argmax.
        loss = F.cross_entropy(logits, labels, label_smoothing=self.hparams.label_smoothing)
        self.train_acc(logits, labels.argmax(dim=-1) if labels.ndim == 2 else labels)
        size = labels.shape[0]
        # Not prog_bar=True: Lightning would read it on the host at every step (a GPU sync);
        # vitattn.training.callbacks.ProgressBar shows it when the bar refreshes.
        self.log("train/loss", loss, on_step=True, on_epoch=False, batch_size=size)
        self.log("train/acc", self.train_acc, on_step=True, on_epoch=False, batch_size=size)
        return loss

    def _evaluate(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> torch.Tensor:
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels)
        accuracy = self.val_acc if stage == "val" else self.test_acc
        mean_loss = self.val_loss if stage == "val" else self.test_loss
        accuracy.update(logits, labels)
        mean_loss.update(loss, weight=labels.shape[0])
        size = labels.shape[0]
        self.log(f"{stage}/loss", mean_loss, on_step=False, on_epoch=True, batch_size=size)
        self.log(
            f"{stage}/acc", accuracy, on_step=False, on_epoch=True, prog_bar=True, batch_size=size
        )
        return logits

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self._evaluate(batch, "test")  # the logits, for vitattn.training.callbacks.confusion

    def parameter_groups(self) -> list[dict[str, Any]]:
        """Weight decay on matrices only (:func:`vitattn.utils.parameters.parameter_groups`)."""
        return parameter_groups(self.net)

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = hydra.utils.instantiate(self.hparams.optimizer)(params=self.parameter_groups())
        if self.hparams.scheduler is None:
            return {"optimizer": optimizer}
        total_steps = int(self.trainer.estimated_stepping_batches)
        replanned(getattr(self, "_resumed_schedule", None), total_steps)
        self._schedule_steps = total_steps
        scheduler = hydra.utils.instantiate(self.hparams.scheduler)(
            optimizer=optimizer, total_steps=total_steps
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "name": "train/lr"},
        }

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        steps = getattr(self, "_schedule_steps", None)
        if steps is not None:
            checkpoint[SCHEDULE_KEY] = steps
        if self._trainer is not None:
            checkpoint[PRECISION_KEY] = precision_record(self._trainer)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        planned, step = checkpoint.get(SCHEDULE_KEY), checkpoint.get("global_step")
        counts = all(isinstance(n, int) and not isinstance(n, bool) for n in (planned, step))
        self._resumed_schedule = (planned, step) if counts else None


def precision_record(trainer: L.Trainer) -> dict[str, str]:
    """What a checkpoint records of the precision ``trainer`` runs at
    (:data:`~vitattn.runs.checkpoint_values.PRECISION_KEY`): ``vitattn-eval`` tests at it, so
    that a ``bf16-mixed`` run's best checkpoint gives its ``test/acc`` again (until 2026-12-02
    it tested at ``32-true`` in full float32: 0.2655 where the run said 0.2675; eval audit)."""
    return {"trainer": str(trainer.precision), "matmul": torch.get_float32_matmul_precision()}


def replanned(resumed: tuple[int, int] | None, total_steps: int) -> None:
    """Say in one warning when a resumed run's schedule is planned for other steps than the
    run's was (``resumed``: those steps and the step it resumes at), its length changed
    (``trainer.max_epochs=20``, to train longer): the learning rate then follows the new plan
    from there on, and jumps to it, a cosine annealed to its end for 40 steps being half-way
    for 80. Until 2026-12-02 it did so without a word, and the docs said the schedule went on
    where it stopped (training audit)."""
    if resumed is None or resumed[0] == total_steps:
        return
    planned, step = resumed
    log.warning(
        "the schedule was planned for %d steps and is now planned for %d (the run's length "
        "changed): resumed at step %d, the learning rate goes over to the %d-step schedule, a "
        "jump from where the %d-step one had brought it",
        planned,
        total_steps,
        step,
        total_steps,
        planned,
    )
