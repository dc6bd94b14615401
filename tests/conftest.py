"""Shared fixtures: the real CIFAR-10 subset and Hydra configs composed with the compose API."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

from vitattn.utils.config import CONFIG_DIR, PROJECT_ROOT

SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"

# Settings small enough for a CPU test, used by every training test.
TINY = [
    "trainer=cpu",
    "model.embed_dim=32",
    "model.depth=1",
    "model.heads=2",
    "data.batch_size=64",
    "data.eval_batch_size=512",
    "callbacks.progress_bar.refresh_rate=0",
]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The directory holding ``cifar-10-batches-py``: ``VITATTN_DATA_DIR``, else the project's
    ``data/`` (the training default), else ``../shared/data`` (the real subset next to the repo).
    """
    if "VITATTN_DATA_DIR" in os.environ:
        candidates = [Path(os.environ["VITATTN_DATA_DIR"])]
    else:
        candidates = [PROJECT_ROOT / "data", SHARED_DATA]
    for path in candidates:
        if (path / "cifar-10-batches-py").is_dir():
            return path
    pytest.fail(f"no cifar-10-batches-py/ in {[str(p) for p in candidates]}; set VITATTN_DATA_DIR")


@pytest.fixture(autouse=True)
def _clean_hydra() -> Iterator[None]:
    GlobalHydra.instance().clear()
    yield
    GlobalHydra.instance().clear()


def compose_config(name: str, overrides: list[str], output_dir: Path) -> DictConfig:
    """Compose ``configs/<name>.yaml`` as the CLI would, with the run directory set."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name=name, overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)
        cfg.hydra.runtime.output_dir = str(output_dir)
    return cfg


@pytest.fixture
def train_cfg(tmp_path: Path, data_dir: Path) -> DictConfig:
    return compose_config("train", [*TINY, f"paths.data_dir={data_dir}"], tmp_path)
