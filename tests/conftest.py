"""Shared fixtures: the real CIFAR-10 subset and Hydra configs composed with the compose API.

Plain helpers (tiny settings, the command runners, fault injectors, ...) are in
:mod:`tests.support`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from tests.support.presets import FEW_STEPS, SHARED_DATA, TINY, compose_config
from tests.support.trees import KEPT
from tests.support.workers import group_by_shared_fixtures, slow_first
from vitattn.utils.config import PROJECT_ROOT


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, share the CPU between the workers: each one (and the console scripts
    it starts) gets its part of the cores, so that workers do not oversubscribe them."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = max(1, (os.cpu_count() or 1) // workers)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that share a module's training (a module-scoped fixture) run on one pytest-xdist
    worker, so that it trains once; under pytest-xdist, the slow modules start first
    (:mod:`tests.support.workers`). ``tests/test_harness.py`` checks that it works."""
    group_by_shared_fixtures(items)
    if "PYTEST_XDIST_WORKER" in os.environ:  # in one process (-n 0, -x) quick tests come first
        slow_first(items)


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


def untracked_files() -> set[str] | None:
    """The repository's files git neither tracks nor ignores; ``None`` where it is not a git
    checkout."""
    listed = subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "ls-files", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
    )
    return set(listed.stdout.splitlines()) if listed.returncode == 0 else None


UNTRACKED = pytest.StashKey[set[str] | None]()


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # pytest-xdist's controller, or -n 0
        session.config.stash[UNTRACKED] = untracked_files()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the session if the tests left a file anywhere in the repository (a knob that says
    where, relative to the working directory, say): checked once every worker has ended."""
    before = session.config.stash.get(UNTRACKED, None)
    after = untracked_files() if before is not None else None
    if before is None or after is None or not after - before:
        return
    left = sorted(after - before)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"tests left files in the repository: {left[:5]}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _clean_hydra() -> Iterator[None]:
    GlobalHydra.instance().clear()
    yield
    GlobalHydra.instance().clear()


@pytest.fixture
def train_cfg(tmp_path: Path, data_dir: Path) -> DictConfig:
    return compose_config("train", [*TINY, f"paths.data_dir={data_dir}"], tmp_path)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """A tiny run of ``vitattn-train`` through its console script (8 steps, complete): its
    checkpoints, ``.hydra/`` and log, trained once for the module; tests plant things in a copy
    of it (:func:`tests.support.trees.copy_run`)."""
    from tests.support.in_process import run_in_process

    run = tmp_path_factory.mktemp("tiny_run") / "run"
    run_in_process("vitattn-train", *FEW_STEPS, f"hydra.run.dir={run}", data_dir=data_dir)
    return run


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A folder outside the run, holding ``kept.txt`` (:data:`tests.support.trees.KEPT`): what a
    link planted in a run points at."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "kept.txt").write_bytes(KEPT)
    return folder
