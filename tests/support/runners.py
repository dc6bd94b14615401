"""Commands as tests run them: the console scripts in a process of their own, ``vitattn-train``'s
task in this process, and the checks that a command refused in one line.

The console scripts run in the test's own process are :mod:`tests.support.in_process`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.presets import TINY, compose_config
from vitattn.utils.config import PROJECT_ROOT

BIN = Path(sys.executable).parent
"""Where the console scripts of this environment are."""


def run_cli(
    program: str,
    *args: str,
    data_dir: Path,
    check: bool = True,
    timeout: float = 600,
    env: dict[str, str] | None = None,
    memory: int | None = None,
    merged: bool = False,
    cpus: set[int] | None = None,
) -> subprocess.CompletedProcess:
    """Run console script ``program`` (``vitattn-train``, ...) with ``args`` on the data in
    ``data_dir``; with ``check``, a non-zero exit fails the test with the output's tail. The
    repository root is on ``PYTHONPATH``, so that a run can use the callbacks and plugins of
    :mod:`tests.support` (``+callbacks.x._target_=tests.support.faults.SigtermAtStep``). With
    ``memory``, the process's address space is capped at that many bytes
    (:func:`tests.support.bombs.capped`): a file that makes it take more fails the test. With
    ``merged``, stderr goes into stdout, in the order a terminal shows them (``stderr`` empty).
    With ``cpus``, the process may run on those CPUs only (its affinity, as ``taskset`` or
    SLURM's ``--cpus-per-task`` sets it)."""
    from tests.support.bombs import capped

    def limit() -> None:
        if memory is not None:
            capped(memory)()
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    environment = {
        **os.environ,
        "VITATTN_DATA_DIR": str(data_dir),
        "HYDRA_FULL_ERROR": "0",
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])
        ),
        **(env or {}),
    }
    result = subprocess.run(
        [str(BIN / program), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merged else subprocess.PIPE,
        text=True,
        env=environment,
        timeout=timeout,
        preexec_fn=None if memory is None and cpus is None else limit,
    )
    return checked(result) if check else result


def checked(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """``result``, or the test failed with its output's tail where the command exited non-zero."""
    if result.returncode != 0:
        command = " ".join(result.args)
        pytest.fail(f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def run_sweep(
    sweep: Path, *overrides: str, data_dir: Path, check: bool = True, in_process: bool = True
) -> Any:
    """``vitattn-train -m`` with ``overrides``, its jobs in ``sweep``; in this process (Hydra's
    basic launcher runs the jobs one after another in the command's process anyway) unless
    ``in_process`` is false."""
    from tests.support.in_process import run_in_process

    multirun = ["-m", *overrides, f"hydra.sweep.dir={sweep}"]
    run = run_in_process if in_process else run_cli
    return run("vitattn-train", *multirun, data_dir=data_dir, check=check)


def train_with(run_dir: Path, data_dir: Path, *overrides: str) -> dict[str, Any]:
    """``vitattn-train``'s task with ``overrides`` on the data in ``data_dir``, in this process.
    Hydra's global state is cleared before and after, so module and session fixtures (which run
    outside the per-test clean-up) may call it too."""
    from hydra.core.global_hydra import GlobalHydra

    from vitattn.train import train

    GlobalHydra.instance().clear()
    try:
        return train(compose_config("train", [f"paths.data_dir={data_dir}", *overrides], run_dir))
    finally:
        GlobalHydra.instance().clear()


def train_tiny(run_dir: Path, data_dir: Path, *overrides: str) -> dict[str, Any]:
    """``vitattn-train``'s task on the tiny settings (and ``overrides``), in this process."""
    return train_with(run_dir, data_dir, *TINY, *overrides)


def trained_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, data_dir: Path, *overrides: str
) -> Path:
    """The run directory of :func:`train_with` ``overrides``, a new folder ``name`` of the
    session's temporary folder: a run a module fixture trains once for its tests."""
    run_dir = tmp_path_factory.mktemp(name)
    train_with(run_dir, data_dir, *overrides)
    return run_dir


def refused(
    program: str,
    *args: str,
    data_dir: Path,
    creates: Path | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run ``program`` expecting a refusal: exit status 1, no traceback, one last line
    ``<program>: error: <message>``, and no ``creates`` (the run directory it would have made).
    Returns the message."""
    result = run_cli(program, *args, data_dir=data_dir, check=False, env=env)
    return refusal_message(program, result, creates)


def start_cli(program: str, *args: str, data_dir: Path, **environment: str) -> subprocess.Popen:
    """``program args`` started in a process group of its own (to be stopped whole), as
    :func:`run_cli` runs it, ``environment`` added to ours; stdout dropped, stderr piped."""
    return subprocess.Popen(
        [str(BIN / program), *args],
        env={
            **os.environ,
            "VITATTN_DATA_DIR": str(data_dir),
            # the tests' package, and the vitattn of a PYTHONPATH given (a checkout's src)
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])
            ),
            **environment,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def refusal_message(
    program: str, result: subprocess.CompletedProcess, creates: Path | None = None
) -> str:
    """The message of a refusal, once ``result`` is one: exit status 1, no traceback, one last
    line ``<program>: error: <message>``, and no ``creates``."""
    line = last_line(result)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert line.startswith(f"{program}: error: "), result.stderr[-3000:]
    if creates is not None:
        assert not creates.exists(), f"{creates} was created"
    return line.removeprefix(f"{program}: error: ")


def last_line(result: subprocess.CompletedProcess) -> str:
    """The last line a command printed on stderr (where a refusal's one line goes)."""
    lines = result.stderr.strip().splitlines()
    return lines[-1] if lines else ""


def assert_one_line_refusal(
    config_name: str, overrides: list[str], validate: Any, message: str, run_dir: Path
) -> None:
    """Composing ``configs/<config_name>.yaml`` with ``overrides`` and validating it with
    ``validate`` (as the app does before Hydra starts) raises one line matching ``message``,
    and nothing is created at ``run_dir``."""
    from vitattn.cli.console import check_composition
    from vitattn.errors import ConfigError

    with pytest.raises(ConfigError, match=message) as raised:
        check_composition(config_name, [*overrides, f"hydra.run.dir={run_dir}"], validate)
    assert "\n" not in str(raised.value)
    assert not run_dir.exists()


def checked_in_a_fresh_process(
    command: str, overrides: list[str], modules: tuple[str, ...] = ("lightning", "peft")
) -> tuple[str, list[str]]:
    """``vitattn-<command>``'s checks before its run (:func:`vitattn.cli.console.check_composition`
    with ``vitattn.<command>.validate``) on ``overrides``, in a Python process of their own: the
    line they refuse with (``accepted`` where none), and which of ``modules`` that process had
    imported by then."""
    script = (
        "import json, sys; from vitattn.cli.console import check_composition\n"
        f"from vitattn.{command} import validate; from vitattn.errors import ConfigError\n"
        f"try: check_composition({command!r}, {overrides!r}, validate)\n"
        "except ConfigError as error: print(error)\n"
        "else: print('accepted')\n"
        f"print(json.dumps(sorted(set({modules!r}) & set(sys.modules))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    lines = result.stdout.splitlines()
    if len(lines) < 2:
        pytest.fail(f"the checks of vitattn-{command} ended early:\n{result.stderr[-3000:]}")
    return lines[-2], json.loads(lines[-1])
