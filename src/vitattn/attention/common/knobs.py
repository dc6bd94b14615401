"""Checking a mechanism's settings (``attention.<knob>``): :mod:`vitattn.utils.checks`, the one
way every setting is checked, with the knob's name under ``attention.``.

Every check returns the value it accepted (converted: ``integer`` gives an ``int``) or raises a
:class:`~vitattn.errors.ConfigError` of the form::

    attention.<knob>=<value> is not valid; choose <what is valid>[<hint>]

so that a bad value ends the run in one line that names the setting and what would be valid.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vitattn.errors import ConfigError
from vitattn.utils import checks

PREFIX = "attention."


def invalid(setting: str, value: Any, valid: str, hint: str = "") -> ConfigError:
    """The error for ``attention.<setting>=<value>``; ``valid`` says what to choose."""
    return checks.invalid(PREFIX + setting, value, valid, hint)


def integer(setting: str, value: Any, low: int = 1, high: int | None = None, hint: str = "") -> int:
    """``value`` as an int in ``[low, high]`` (no upper bound if ``high`` is ``None``)."""
    return checks.integer(PREFIX + setting, value, low, high, hint)


def positive(setting: str, value: Any, hint: str = "") -> float:
    """``value`` if it is a number above zero."""
    return checks.positive(PREFIX + setting, value, hint)


def fraction(setting: str, value: Any, hint: str = "") -> float:
    """``value`` if it is a number with ``0 <= value < 1`` (a dropout rate, say)."""
    return checks.fraction(PREFIX + setting, value, hint)


def one_of(setting: str, value: Any, options: Sequence[str], hint: str = "") -> str:
    """``value`` if it is one of ``options``."""
    return checks.one_of(PREFIX + setting, value, options, hint)


def flag(setting: str, value: Any) -> bool:
    """``value`` if it is ``true`` or ``false``."""
    return checks.flag(PREFIX + setting, value)
