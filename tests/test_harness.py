"""The test harness itself: tests that share a module's fixture share one pytest-xdist worker,
so that the training behind such a fixture runs once per session, not once per worker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.fixture(scope="module")
def workers_that_built_it(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A module fixture that records, in a file all workers see, each worker that built it."""
    session = tmp_path_factory.getbasetemp()  # under pytest-xdist, one folder per worker in it
    record = (session.parent if WORKER != "main" else session) / "test_harness.workers"
    with record.open("a") as handle:
        handle.write(f"{WORKER}\n")
    return record


@pytest.mark.parametrize("test", range(6))
def test_tests_sharing_a_module_fixture_run_on_one_worker(
    test: int, workers_that_built_it: Path
) -> None:
    builders = workers_that_built_it.read_text().split()
    assert builders == [WORKER], (
        f"the module fixture was built by {builders}: pytest-xdist's --dist loadgroup did not "
        "keep this module's tests together (see the pytest pin in pyproject.toml)"
    )


@pytest.fixture(scope="module")
def another_shared_fixture() -> str:
    return WORKER


@pytest.mark.parametrize("test", range(3))
def test_a_test_with_two_shared_fixtures_joins_the_group_of_each(
    test: int, workers_that_built_it: Path, another_shared_fixture: str
) -> None:
    """Grouped by fixture set alone, these tests would form a group of their own, and the
    fixture above would be built again on the worker that runs it."""
    assert workers_that_built_it.read_text().split() == [WORKER] == [another_shared_fixture]
