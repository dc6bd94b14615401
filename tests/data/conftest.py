"""Fixtures the data tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from vitattn.data.cifar10 import FOLDER


@pytest.fixture(scope="module")
def served(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``cifar-10-python.tar.gz`` made from the real subset, to serve from
    loopback."""
    import tarfile

    folder = tmp_path_factory.mktemp("served")
    with tarfile.open(folder / "cifar-10-python.tar.gz", "w:gz") as archive:
        archive.add(data_dir / FOLDER, arcname=FOLDER)
    return folder
