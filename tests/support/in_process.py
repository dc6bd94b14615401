"""Console scripts run in the test's own process: what :func:`tests.support.runners.run_cli` and
:func:`tests.support.runners.refused` do, without starting Python with torch, Lightning and Hydra
again.

For commands whose files or refusal a test reads, where the process itself is not what it tests:
signals, the death of a process, what the interpreter prints, the environment a process starts
with stay with the ``run_cli`` family. What a command leaves in a process (the logging Hydra
configured, run directory locks, Hydra's global state, ``atexit`` handlers) is undone or run
when it ends, as the end of its process would.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import logging
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from tests.support.runners import checked, refusal_message


def print_warning(
    stream: io.StringIO,
    message: Any,
    category: Any,
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """``warnings.showwarning`` writing to ``stream``."""
    stream.write(warnings.formatwarning(message, category, filename, lineno, line))


class ExitHandlers:
    """``atexit`` as a command run in this process sees it: what it registers runs when the
    command ends (last registered first), as it would when its process exits, instead of when
    the test session does."""

    def __init__(self) -> None:
        self.handlers: list[tuple[Callable[..., Any], tuple, dict]] = []

    def register(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.handlers.append((function, args, kwargs))
        return function

    def unregister(self, function: Callable[..., Any]) -> None:
        self.handlers = [entry for entry in self.handlers if entry[0] != function]

    def run(self) -> None:
        for function, args, kwargs in reversed(self.handlers):
            function(*args, **kwargs)
        self.handlers = []


def console_handlers() -> dict[logging.StreamHandler, Any]:
    """The logging handlers that write to a console stream (not a file), with that stream."""
    loggers = [logging.getLogger(), *logging.root.manager.loggerDict.values()]
    return {
        handler: handler.stream
        for logger in loggers
        if isinstance(logger, logging.Logger)
        for handler in logger.handlers
        if type(handler) is logging.StreamHandler
    }


def all_loggers() -> list[logging.Logger]:
    return [
        logging.getLogger(),
        *(lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)),
    ]


def logging_state() -> dict[logging.Logger, tuple]:
    """Each logger's handlers, filters, level, propagation and switch, to restore them."""
    return {
        logger: (
            list(logger.handlers),
            list(logger.filters),
            logger.level,
            logger.propagate,
            logger.disabled,
        )
        for logger in all_loggers()
    }


def restore_logging(state: dict[logging.Logger, tuple]) -> None:
    """Put the loggers back as ``state`` has them; close the handlers a command added (Hydra's
    console and ``train.log`` handlers): a process that ends closes them too."""
    kept = {handler for handlers, *_ in state.values() for handler in handlers}
    for logger in all_loggers():
        for handler in logger.handlers:
            if handler not in kept:
                handler.close()
        if logger in state:
            handlers, filters, level, propagate, disabled = state[logger]
            logger.handlers[:], logger.filters[:] = handlers, filters
            logger.level, logger.propagate, logger.disabled = level, propagate, disabled
        else:  # a logger the command made: it keeps its level, but writes nowhere of its own
            logger.handlers[:] = []


@contextlib.contextmanager
def as_a_process(
    program: str, args: tuple[str, ...], data_dir: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[io.StringIO, io.StringIO, pytest.MonkeyPatch]]:
    """Set this process up as ``program args`` would start (``sys.argv``, the environment, a
    clean Hydra), yield its stdout and stderr (console logging and warnings included) and the
    monkeypatch that undoes it, and end it as its process would end."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from vitattn.runs.lock import release_all
    from vitattn.runs.process import this_process

    loggers = logging_state()
    stdout, stderr = io.StringIO(), io.StringIO()
    exit_handlers = ExitHandlers()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", [program, *args])
        this_process.cache_clear()  # the command's own process state, as a new process has
        patch.setattr(atexit, "register", exit_handlers.register)
        patch.setattr(atexit, "unregister", exit_handlers.unregister)
        for name, value in {"VITATTN_DATA_DIR": str(data_dir), **(env or {})}.items():
            patch.setenv(name, value)
        GlobalHydra.instance().clear()
        streams = console_handlers()
        for handler in streams:  # Lightning's, made when it was imported: to this stderr
            handler.setStream(stderr)
        with (
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
            warnings.catch_warnings(),  # the command's filters end with it
        ):
            warnings.simplefilter("default")
            warnings.showwarning = partial(print_warning, stderr)  # where a process prints them
            try:
                yield stdout, stderr, patch
            finally:
                exit_handlers.run()
                restore_logging(loggers)
                release_all()  # the kernel drops a process's locks
                this_process.cache_clear()
                GlobalHydra.instance().clear()
                HydraConfig.instance().cfg = None  # type: ignore[assignment]
                for handler, stream in streams.items():
                    handler.setStream(stream)


def exit_status(main: Callable[[], Any]) -> int:
    """Call a console script's ``main`` and return its exit status: ``sys.exit``'s, or 0."""
    try:
        main()
    except SystemExit as exited:  # as the interpreter maps it: None is 0, a message is 1
        if exited.code is None or isinstance(exited.code, int):
            return exited.code or 0
        return 1
    return 0


def run_in_process(
    program: str, *args: str, data_dir: Path, check: bool = True
) -> subprocess.CompletedProcess:
    """:func:`tests.support.runners.run_cli` in this process: the console script's ``main`` with
    ``sys.argv`` set; its exit status, stdout and stderr as a ``CompletedProcess``."""
    (entry_point,) = entry_points(group="console_scripts", name=program)
    with as_a_process(program, args, data_dir, {"HYDRA_FULL_ERROR": "0"}) as (stdout, stderr, _):
        returncode = exit_status(entry_point.load())
    result = subprocess.CompletedProcess(
        [program, *args], returncode, stdout.getvalue(), stderr.getvalue()
    )
    return checked(result) if check else result


def refused_in_process(program: str, *args: str, creates: Path | None = None, **run: Any) -> str:
    """:func:`tests.support.runners.refused` for a refusal that comes before the app starts (the
    command line, the composed config, a resume's or a checkpoint's checks): exit status 1, no
    traceback, one last line ``<program>: error: <message>``, nothing at ``creates``. Fails if
    the app starts, that is, if nothing refused the command line. ``run``: ``data_dir`` and
    ``env`` of :func:`run_before_the_app`. Returns the message."""
    return refusal_message(program, run_before_the_app(program, *args, **run), creates)


def run_before_the_app(
    program: str, *args: str, data_dir: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``program args`` in this process up to the start of its app, which fails the test: what
    it printed and its exit status once something refused it."""
    (entry_point,) = entry_points(group="console_scripts", name=program)
    app = importlib.import_module(entry_point.module)
    console_main = app.console_main

    def console_main_without_the_app(program: str, hydra_main: Any, *rest: Any, **named: Any):
        def started() -> None:
            raise AssertionError(f"{program} {' '.join(args)}: nothing refused it, the app started")

        console_main(program, started, *rest, **named)

    with as_a_process(program, args, data_dir, env) as (stdout, stderr, patch):
        patch.setattr(app, "console_main", console_main_without_the_app)
        status = exit_status(entry_point.load())
    return subprocess.CompletedProcess(
        [program, *args], status, stdout.getvalue(), stderr.getvalue()
    )
