"""Checking a mechanism's settings (``attention.<knob>``), with one message style for all.

Every check returns the value it accepted (converted: ``integer`` gives an ``int``) or raises a
:class:`~vitattn.errors.ConfigError` of the form::

    attention.<knob>=<value> is not valid; choose <what is valid>[<hint>]

so that a bad value ends the run in one line that names the setting and what would be valid.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vitattn.errors import ConfigError


def invalid(setting: str, value: Any, valid: str, hint: str = "") -> ConfigError:
    """The error for ``attention.<setting>=<value>``; ``valid`` says what to choose."""
    shown = repr(value) if isinstance(value, str) else value
    return ConfigError(f"attention.{setting}={shown} is not valid; choose {valid}{hint}")


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float)


def integer(setting: str, value: Any, low: int = 1, high: int | None = None, hint: str = "") -> int:
    """``value`` as an int in ``[low, high]`` (no upper bound if ``high`` is ``None``)."""
    valid = _is_number(value) and int(value) == value and value >= low
    if not valid or (high is not None and value > high):
        bound = f"{low} <= attention.{setting} <= {high}" if high is not None else f">= {low}"
        raise invalid(setting, value, f"an integer {bound}", hint)
    return int(value)


def positive(setting: str, value: Any, hint: str = "") -> float:
    """``value`` if it is a number above zero."""
    if not _is_number(value) or not value > 0:
        raise invalid(setting, value, "a positive number", hint)
    return float(value)


def fraction(setting: str, value: Any, hint: str = "") -> float:
    """``value`` if it is a number with ``0 <= value < 1`` (a dropout rate, say)."""
    if not _is_number(value) or not 0 <= value < 1:
        raise invalid(setting, value, f"0 <= attention.{setting} < 1", hint)
    return float(value)


def one_of(setting: str, value: Any, options: Sequence[str], hint: str = "") -> str:
    """``value`` if it is one of ``options``."""
    if value not in options:
        raise invalid(setting, value, f"one of {' | '.join(options)}", hint)
    return str(value)


def flag(setting: str, value: Any) -> bool:
    """``value`` if it is ``true`` or ``false``."""
    if not isinstance(value, bool):
        raise invalid(setting, value, "true or false")
    return value
