"""The test harness itself: tests that share a module's fixture share one pytest-xdist worker
(so that the training behind such a fixture runs once per session, not once per worker), and a
console script run in the test's process (:mod:`tests.support.in_process`) refuses or leaves the
process as it found it."""

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


def test_fixtures_used_together_are_one_group_and_others_stay_apart() -> None:
    from tests.support.workers import fixture_groups

    uses = [["m:a"], ["m:b", "m:c"], [], ["m:d"], ["m:c", "m:d"], ["n:a"], ["m:e", "m:e"]]
    groups = fixture_groups(uses)
    assert groups == {
        "m:a": "m:a",
        "m:b": "m:b",
        "m:c": "m:b",
        "m:d": "m:b",  # through the test that uses m:c and m:d
        "n:a": "n:a",
        "m:e": "m:e",
    }


def test_refused_in_process_fails_when_nothing_refuses(tmp_path: Path, data_dir: Path) -> None:
    from tests.support.in_process import refused_in_process

    with pytest.raises(AssertionError, match="nothing refused it, the app started"):
        refused_in_process("vitattn-train", f"hydra.run.dir={tmp_path / 'run'}", data_dir=data_dir)


@pytest.mark.slow
def test_a_command_run_in_process_leaves_the_process_as_it_found_it(
    tmp_path: Path, data_dir: Path
) -> None:

    import lightning.pytorch  # noqa: F401  (its console handlers exist before the command)
    from hydra.core.hydra_config import HydraConfig

    from tests.support.in_process import console_handlers, logging_state, run_in_process
    from tests.support.presets import TINY
    from vitattn.runs.layout import RESERVE
    from vitattn.runs.process import this_process

    loggers, streams = logging_state(), console_handlers()
    run_dir = tmp_path / "run"
    result = run_in_process(
        "vitattn-train", *TINY, "debug=fdr", f"hydra.run.dir={run_dir}", data_dir=data_dir
    )
    assert "fast_dev_run" in result.stderr + result.stdout  # Lightning's console output, caught
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    after = logging_state()
    assert {logger: after[logger] for logger in loggers} == loggers
    assert {handler: handler.stream for handler in streams} == streams
    assert not this_process().held  # the command's locks went with its process state
    assert not HydraConfig.initialized()
    assert not (run_dir / RESERVE).exists()  # the lock's exit handler ran


def test_a_test_that_hangs_fails_at_the_suites_timeout(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    """pytest-timeout is installed and the suite sets its ``timeout`` (pyproject.toml), well
    above the slowest test and well below CI's 90 minutes: a test that hangs fails with its
    stack, and the tests after it run. Here, under the project's own configuration with a
    timeout of 2 s, a test that sleeps for a minute fails and the next passes."""
    import subprocess
    import sys

    assert 300 <= float(pytestconfig.getini("timeout")) <= 1200
    (tmp_path / "test_hangs.py").write_text(
        "import time\n\ndef test_hangs():\n    time.sleep(60)\n\ndef test_after():\n    pass\n"
    )
    project = Path(__file__).resolve().parents[1] / "pyproject.toml"
    command = [sys.executable, "-m", "pytest", "-c", str(project), "--rootdir", str(tmp_path)]
    command += ["-n", "0", "-p", "no:cacheprovider", "-o", "timeout=2", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=50, cwd=tmp_path)
    assert result.returncode == 1, result.stdout[-3000:]
    assert "Timeout (>2.0s) from pytest-timeout" in result.stdout, result.stdout[-3000:]
    assert "1 failed, 1 passed" in result.stdout, result.stdout[-3000:]
