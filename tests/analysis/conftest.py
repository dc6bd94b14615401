"""Fixtures of the analysis tests: fake run directories laid out as ``vitattn-train`` writes
them (``.hydra/``, TensorBoard events, ``metrics.json``, ``attention/maps.npz``), made in the
test in a moment instead of by training."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

KNOBS = {"softmax": {}, "linear": {"eps": 1e-6}, "performer": {"features": 64}}


def write_run(
    path: Path,
    overrides: Sequence[str],
    *,
    val_acc: Sequence[tuple[int, float]] = ((99, 0.3), (199, 0.4), (299, 0.5)),
    train_loss: Sequence[tuple[int, float]] = ((49, 2.2), (149, 1.9), (249, 1.7)),
    steps: int = 300,
    maps: bool = True,
    images: int = 4,
    metrics: dict[str, Any] | None = None,
    events_in: str = "",
) -> Path:
    """A finished run at ``path`` with ``overrides`` (``attention=``, ``seed=``, ... shape its
    config), the curves given as TensorBoard events in ``path / events_in`` (older runs have
    them in ``tensorboard/``), and ``maps`` an ``attention/maps.npz`` of ``images`` images."""
    settings = dict(o.split("=", 1) for o in overrides)
    attention = settings.get("attention", "softmax")
    seed = int(settings.get("seed", 42))
    config = {
        "seed": seed,
        "ckpt_path": None,  # as every run's config has it
        "trainer": {"max_steps": steps},
        "model": {"_target_": "vitattn.models.vit.VisionTransformer", "depth": 2},
        "attention": {
            "_target_": f"vitattn.attention.{attention}.Kernel",
            **KNOBS.get(attention, {}),
        },
    }
    hydra = {"hydra": {"runtime": {"choices": {"attention": attention, "model": "vit"}}}}
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (path / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(list(overrides)))
    (path / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(hydra))
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(path / events_in))
    for tag, points in (("val/acc", val_acc), ("train/loss", train_loss)):
        for step, value in points:
            writer.add_scalar(tag, value, step)
    writer.close()
    final = {
        "val/acc": val_acc[-1][1] if val_acc else None,
        "test/acc": 0.42,
        "train/images_per_sec": 1234.5,
        "steps": steps,
        "seconds": 12.0,
        "params": 12554,
        "attention": attention,
        "model": "vit",
        "status": "completed",
    }
    (path / "metrics.json").write_text(json.dumps({**final, **(metrics or {})}))
    if maps:
        write_maps(path, attention, images, steps)
    return path


def write_maps(path: Path, attention: str, count: int, step: int, size: int = 32) -> None:
    """``attention/maps.npz`` as the attention-maps callback writes it: coloured test patterns
    and a blob of attention whose place depends on ``attention``."""
    rows, columns = np.mgrid[0:size, 0:size] / (size - 1)
    images = np.stack(
        [
            np.stack([rows, columns, (i / max(count - 1, 1)) * np.ones_like(rows)], axis=-1)
            for i in range(count)
        ]
    )
    centre = {"softmax": (0.3, 0.3), "linear": (0.5, 0.7), "performer": (0.7, 0.4)}[attention]
    blobs = np.stack(
        [
            np.exp(-((rows - centre[0] - 0.05 * i) ** 2 + (columns - centre[1]) ** 2) / 0.03)
            for i in range(count)
        ]
    )
    layers = np.stack([blobs ** (1 + layer) for layer in range(2)])
    (path / "attention").mkdir(parents=True, exist_ok=True)
    np.savez(
        path / "attention" / "maps.npz",
        images=(images * 255).astype(np.uint8),
        rollout=blobs.astype(np.float32),
        layers=layers.astype(np.float32),
        step=np.int64(step),
        attention=np.str_(attention),
    )


def write_seeded_sweep(
    root: Path,
    accuracies: dict[str, Sequence[float]],
    extra: Callable[[str, int], dict[str, Any]] = lambda attention, seed: {},
) -> Path:
    """A sweep ``attention=...`` x ``seed=1..`` under ``root``: each run's test accuracy from
    ``accuracies[attention]`` (one per seed, its final val/acc the same), and ``extra`` metrics."""
    for attention, values in accuracies.items():
        for seed, accuracy in enumerate(values, start=1):
            write_run(
                root / f"attention={attention},seed={seed}",
                [f"attention={attention}", f"seed={seed}"],
                val_acc=[(99, accuracy - 0.1), (199, accuracy)],
                maps=False,
                metrics={"test/acc": accuracy, **extra(attention, seed)},
            )
    return root


@pytest.fixture
def make_run() -> Callable[..., Path]:
    """:func:`write_run`."""
    return write_run


@pytest.fixture
def three_attentions(tmp_path: Path) -> Path:
    """A sweep ``attention=softmax,linear,performer`` as Hydra names its jobs by what they
    override (``attention=linear``); softmax and linear have the very same curve."""
    sweep = tmp_path / "multiruns" / "2026-01-01_00-00-00_000000"
    shared = ["trainer=cpu", "trainer.max_steps=300"]
    curves = {
        "softmax": [(99, 0.3), (199, 0.4), (299, 0.5)],
        "linear": [(99, 0.3), (199, 0.4), (299, 0.5)],
        "performer": [(99, 0.25), (199, 0.35), (299, 0.38)],
    }
    for attention, curve in curves.items():
        write_run(
            sweep / f"attention={attention}", [*shared, f"attention={attention}"], val_acc=curve
        )
    return sweep
