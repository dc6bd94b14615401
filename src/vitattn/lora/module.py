"""The LightningModule of ``vitattn-finetune``: a ViT classifier with LoRA adapters."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from vitattn.lora.adapters import (
    LoRASettings,
    apply_lora,
    base_network,
    count_parameters,
    load_plain_weights,
    merge,
    resolve_targets,
)
from vitattn.models.module import ViTClassifier
from vitattn.runs.checkpoint_values import PRECISION_KEY
from vitattn.runs.files import write_with


class LoRAClassifier(ViTClassifier):
    """:class:`ViTClassifier` whose network carries LoRA adapters (PEFT), the rest frozen.

    The network is built from its config as in :class:`ViTClassifier`, then wrapped by
    :func:`~vitattn.lora.adapters.apply_lora`. Its checkpoints therefore hold PEFT's parameter
    names (``net.base_model.model.blocks.0.attn.qkv.lora_A.default.weight``, ...) and are read
    back with ``LoRAClassifier.load_from_checkpoint(path)``; :meth:`merged_classifier` gives the
    plain :class:`ViTClassifier` that ``vitattn-eval`` reads. With ``lora.rank=0`` nothing is
    wrapped and every parameter trains (full fine-tuning).

    Args:
        lora: the ``lora`` settings (see :class:`~vitattn.lora.adapters.LoRASettings`).
        classifier: the arguments of :class:`ViTClassifier` (``net``, ``optimizer``, ...).
    """

    def __init__(self, lora: Mapping[str, Any] | None = None, **classifier: Any) -> None:
        super().__init__(**classifier)
        settings = LoRASettings.from_mapping(lora)
        if settings.rank > 0 and isinstance(settings.target_modules, str):
            # A pattern given on the command line is stored as the layer names it selects: a
            # checkpoint names layers, never a pattern (vitattn.runs.checkpoint_values).
            names = resolve_targets(self.net, settings.target_modules)
            settings = dataclasses.replace(settings, target_modules=names)
        # Rank 0 is stored as it trains: no adapter targets, the head (every weight) trained.
        settings = settings.in_effect()
        self.save_hyperparameters({**self.hparams, "lora": settings.as_dict()}, logger=False)
        self.net = apply_lora(self.net, settings)

    @property
    def rank(self) -> int:
        return int(self.hparams.lora["rank"])

    def load_base_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Load the plain network weights of a ``vitattn-train`` model (``net.`` keys or not)."""
        plain = {k.removeprefix("net."): v for k, v in state_dict.items()}
        load_plain_weights(self.net, plain)

    def parameter_counts(self) -> Any:
        return count_parameters(self.net)

    def merged_classifier(self) -> ViTClassifier:
        """A plain :class:`ViTClassifier` with the adapters folded in (this module is unchanged)."""
        import copy

        hparams = {k: v for k, v in self.hparams.items() if k != "lora"}
        plain = ViTClassifier(**hparams)
        merged = merge(copy.deepcopy(self.net))
        plain.net.load_state_dict(base_network(merged).state_dict())
        return plain.to(self.device)


def save_plain_checkpoint(
    module: ViTClassifier,
    path: str | Path,
    global_step: int = 0,
    data_settings: dict[str, Any] | None = None,
    precision: dict[str, str] | None = None,
) -> Path:
    """Write ``module`` as a Lightning checkpoint that ``ViTClassifier.load_from_checkpoint``
    (and so ``vitattn-eval ckpt_path=...``) reads: its hyperparameters and weights, and the data
    module's hyperparameters ``data_settings`` where the Trainer would have saved them, so that
    ``vitattn-eval`` sees the data as it was trained on (:mod:`vitattn.data.as_trained`), and
    tests at ``precision`` (:func:`vitattn.models.module.precision_record`) where given."""
    import lightning as L

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    checkpoint = {
        # an attention's extra state (Performer's redraw counter, a dict) is kept as it is
        "state_dict": {
            k: v.detach().cpu() if isinstance(v, torch.Tensor) else v
            for k, v in module.state_dict().items()
        },
        ViTClassifier.CHECKPOINT_HYPER_PARAMS_KEY: dict(module.hparams),
        "pytorch-lightning_version": L.__version__,
        "epoch": 0,
        "global_step": global_step,
    }
    if data_settings is not None:
        checkpoint[L.LightningDataModule.CHECKPOINT_HYPER_PARAMS_KEY] = data_settings
    if precision is not None:
        checkpoint[PRECISION_KEY] = precision
    write_with(path, lambda handle: torch.save(checkpoint, handle))  # never through a link
    return path
