"""Shared fixtures: the real CIFAR-10 subset and Hydra configs composed with the compose API.

Plain helpers (tiny settings, the CLI runner) are in :mod:`tests.helpers`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from tests.helpers import SHARED_DATA, TINY, compose_config
from vitattn.utils.config import PROJECT_ROOT


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


def files_under(root: Path) -> set[Path]:
    return {path for path in root.rglob("*") if path.is_file()} if root.is_dir() else set()


@pytest.fixture(scope="session", autouse=True)
def _nothing_written_into_the_repository() -> Iterator[None]:
    """Fail the session if any test left a run in the repository's ``outputs/`` (where a run
    without ``hydra.run.dir`` goes: a refusal test whose refusal broke, say)."""
    outputs = PROJECT_ROOT / "outputs"
    before = files_under(outputs)
    yield
    added = sorted(str(path) for path in files_under(outputs) - before)
    assert not added, f"tests wrote into {outputs}: {added[:3]}"


@pytest.fixture(autouse=True)
def _clean_hydra() -> Iterator[None]:
    GlobalHydra.instance().clear()
    yield
    GlobalHydra.instance().clear()


@pytest.fixture
def train_cfg(tmp_path: Path, data_dir: Path) -> DictConfig:
    return compose_config("train", [*TINY, f"paths.data_dir={data_dir}"], tmp_path)
