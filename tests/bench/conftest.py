"""Fixtures of the benchmark tests: a checkpoint for ``mode=approx`` and ``mode=spectrum``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.runners import train_tiny


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """Two training steps of a tiny softmax ViT (64 tokens, 2 heads of 16)."""
    run_dir = tmp_path_factory.mktemp("tiny") / "run"
    overrides = ["trainer.max_steps=2", "test=false", "+trainer.limit_val_batches=1", "logger=csv"]
    train_tiny(run_dir, data_dir, *overrides)
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    assert checkpoint.is_file()
    return checkpoint
