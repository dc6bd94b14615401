"""Fixtures of the benchmark tests: a checkpoint for ``mode=approx`` and ``mode=spectrum``."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

from tests.helpers import TINY, compose_config
from vitattn.train import train


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """Two training steps of a tiny softmax ViT (64 tokens, 2 heads of 16)."""
    GlobalHydra.instance().clear()
    run_dir = tmp_path_factory.mktemp("tiny") / "run"
    overrides = [*TINY, f"paths.data_dir={data_dir}", "trainer.max_steps=2", "test=false"]
    overrides += ["+trainer.limit_val_batches=1", "logger=csv"]
    train(compose_config("train", overrides, run_dir))
    GlobalHydra.instance().clear()
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    assert checkpoint.is_file()
    return checkpoint
