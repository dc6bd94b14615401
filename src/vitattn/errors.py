"""Exceptions that end a run with one clear line instead of a traceback, and that line; the one
line for an object that would not build from its settings."""

import contextlib
import sys
from collections.abc import Iterator

from hydra.errors import CompactHydraException


class VitattnError(Exception):
    """A problem the user can fix: the message names the setting and what would be valid."""


class ConfigError(VitattnError, ValueError):
    """A configuration value is invalid (for example ``model.embed_dim`` not divisible by heads)."""


class DataError(VitattnError):
    """The data set is missing, cannot be downloaded, or a file of it is damaged."""


class TrainingError(VitattnError):
    """Training started and cannot go on (for example the loss became NaN).

    Unlike the errors above it is raised after the run directory has checkpoints and logs, which
    are kept.
    """


class MissingDependencyError(VitattnError):
    """An optional package a command needs is not installed; the message names the extra."""


class FailedJob(CompactHydraException):
    """A sweep's job that ended with its one line (the job printed it, and its ``metrics.json``
    records it). Raised from the job, so that Hydra records it as failed and the command exits
    with status 1 once the sweep's jobs have run; Hydra prints a ``CompactHydraException`` as its
    text alone, so the sweep ends on ``<program>: error: <message>``, not on a traceback."""

    def __init__(self, program: str, message: str) -> None:
        super().__init__(f"{program}: error: {message}")
        self.message = message

    def __reduce__(self) -> tuple:  # a job of another process (joblib, SLURM) sends it back
        return (type(self), (str(self).partition(": error: ")[0], self.message))


def fail(program: str, error: BaseException | str) -> None:
    """Print the one line that ends a run, on stderr: ``<program>: error: <message>``."""
    print(f"{program}: error: {error}", file=sys.stderr, flush=True)


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s text, or its type's name where it says nothing."""
    return next(iter(str(error).strip().splitlines()), "") or type(error).__name__


def own_refusal(error: BaseException) -> VitattnError | None:
    """The :class:`VitattnError` in ``error``'s chain of causes (a class of vitattn refused its
    settings; Hydra's instantiate wraps it), or ``None``."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, VitattnError):
            return seen
        seen = seen.__cause__
    return None


def refused(group: str, error: BaseException) -> ConfigError:
    """The one line for an object that would not build from the ``group`` settings."""
    own = own_refusal(error)
    if own is not None:
        return ConfigError(str(own))
    root = error
    while root.__cause__ is not None:
        root = root.__cause__
    reason = first_line(root)
    return ConfigError(f"{group}: these settings are refused ({type(root).__name__}: {reason})")


@contextlib.contextmanager
def refusing(group: str) -> Iterator[None]:
    """Whatever the block raises, one :func:`refused` line for ``group``."""
    try:
        yield
    except Exception as error:
        raise refused(group, error) from error
