"""The tiny settings every training test uses, the overrides that plug a test's callback into a
run, configs composed as the CLI composes them, and tiny models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

from vitattn.models.vit import VisionTransformer
from vitattn.utils.config import CONFIG_DIR, PROJECT_ROOT

SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"
"""The real CIFAR-10 subset next to the repository, where no other is given."""

QUIET_CPU = ["trainer=cpu", "data.eval_batch_size=512", "callbacks.progress_bar.refresh_rate=0"]
"""A CPU trainer without a progress bar, evaluating in large batches."""

TINY = [*QUIET_CPU, "model.embed_dim=32", "model.depth=1", "model.heads=2", "data.batch_size=64"]
"""Settings small enough for a CPU test, used by every training test."""


def steps(max_steps: int, validate_every: int) -> list[str]:
    """Overrides for a run of ``max_steps`` training steps validating every ``validate_every``."""
    return [f"trainer.max_steps={max_steps}", f"trainer.val_check_interval={validate_every}"]


FEW_STEPS = [*TINY, *steps(8, 4)]
"""A few steps of the tiny model, validating twice."""

RUN_40 = [*TINY, *steps(40, 10)]
"""Forty steps of the tiny model, long enough to be stopped in the middle."""


def plug(name: str, callback: type, **settings: object) -> list[str]:
    """Overrides that add the callback class ``callback`` (one of :mod:`tests.support.faults` or
    :mod:`tests.support.probes`) to a run as ``callbacks.<name>``, with ``settings``: also to a
    console script run as a process, which imports it by name."""
    return [
        f"+callbacks.{name}._target_={callback.__module__}.{callback.__qualname__}",
        *(f"+callbacks.{name}.{key}={value}" for key, value in settings.items()),
    ]


def compose_config(name: str, overrides: list[str], output_dir: Path) -> DictConfig:
    """Compose ``configs/<name>.yaml`` as the CLI would, with the run directory set."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name=name, overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)
        cfg.hydra.runtime.output_dir = str(output_dir)
    return cfg


def tiny_net(**settings: Any) -> dict[str, Any]:
    """A tiny ViT's ``net`` settings as ``ViTClassifier`` takes them and a checkpoint of
    ``vitattn-train`` stores them (softmax attention, one layer of 32 dimensions and 2 heads,
    8 x 8 patches); ``settings`` change or add some."""
    return {
        "_target_": "vitattn.models.vit.VisionTransformer",
        "attention": {"_target_": "vitattn.attention.softmax.SoftmaxAttention", "_partial_": True},
        "embed_dim": 32,
        "depth": 1,
        "heads": 2,
        "patch_size": 8,
        **settings,
    }


def tiny_vit(
    attention: str = "softmax", knobs: dict[str, Any] | None = None, compile: bool = False
) -> VisionTransformer:
    """A seeded two-layer ViT of 16 tokens (16 x 16 images, 4 x 4 patches) with ``attention``,
    its forward compiled with ``compile``."""
    from vitattn.bench.kernels import attention_factory

    torch.manual_seed(0)
    return VisionTransformer(
        image_size=16,
        patch_size=4,
        embed_dim=32,
        depth=2,
        heads=2,
        num_classes=10,
        attention=attention_factory(attention, knobs),
        compile=compile,
    )
