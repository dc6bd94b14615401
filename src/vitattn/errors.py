"""Exceptions that end a run with one clear line instead of a traceback, and that line."""

import sys


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


def fail(program: str, error: BaseException) -> None:
    """Print the one line that ends a run, on stderr: ``<program>: error: <message>``."""
    print(f"{program}: error: {error}", file=sys.stderr, flush=True)
