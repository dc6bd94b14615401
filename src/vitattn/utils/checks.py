"""One way to check a setting, and one message for every refusal::

    <setting>=<value> is not valid; choose <what is valid>[<hint>]

``<setting>`` is the full name (``data.crop_padding``, ``guard.max_call_seconds``), so the one
:class:`ConfigError` line names it and what would be valid. The range checks return the value they
accepted (:func:`integer` an ``int``); :func:`of_type` checks a value against a type hint, worded
by :func:`describe`. Used by :mod:`vitattn.attention.common.knobs` (``attention.<knob>``), the
settings of ``vitattn-bench`` and ``vitattn-check``, :mod:`vitattn.data.settings`,
:mod:`vitattn.cli.validation`, and the model's, module's, scheduler's, LoRA's and trainer's own
checks.
"""

from __future__ import annotations

import inspect
import math
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vitattn.errors import ConfigError


def shown(value: Any) -> Any:
    """A value as a one-line error shows it: text quoted, the rest as it prints."""
    return repr(value) if isinstance(value, str) else value


def invalid(setting: str, value: Any, valid: str, hint: str = "") -> ConfigError:
    """The error for ``<setting>=<value>``; ``valid`` says what to choose, ``hint`` follows it."""
    return ConfigError(f"{setting}={shown(value)} is not valid; choose {valid}{hint}")


def is_number(value: Any) -> bool:
    """An int or a float, not a bool."""
    return not isinstance(value, bool) and isinstance(value, int | float)


def as_count(value: Any) -> int | None:
    """``value`` as a count of one or more (an ``int``, or digits as text:
    ``trainer.devices="4"``), or ``None`` where it is none (``auto``, ``-1``: every device there
    is, a list of devices)."""
    if type(value) is int:
        return value if value >= 1 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def integer(setting: str, value: Any, low: int = 1, high: int | None = None, hint: str = "") -> int:
    """``value`` as an int in ``[low, high]`` (no upper bound if ``high`` is ``None``)."""
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if not (is_number(value) and whole and value >= low) or (high is not None and value > high):
        bound = f"{low} <= {setting} <= {high}" if high is not None else f">= {low}"
        raise invalid(setting, value, f"an integer {bound}", hint)
    return int(value)


def positive(setting: str, value: Any, hint: str = "") -> float:
    """``value``, as given, if it is a finite number above zero that a float holds (an integer
    of 400 digits is not: ``float()`` overflowed on it, and one past 2**53 came back another;
    ``inf`` made every row of the bench fail, or blamed the machine in the check)."""
    too_long = isinstance(value, int) and value > sys.float_info.max
    if not is_number(value) or not value > 0 or too_long or value == math.inf:
        raise invalid(setting, value, "a positive number", hint)
    return value


def rounded_up(bound: float) -> str:
    """A positive ``bound`` shown to three significant digits, rounded up: a least value a
    refusal names passes when typed back (``1/32`` as ``0.0313``; ``.3g`` showed ``0.0312``,
    which was refused)."""
    step = 10 ** (math.floor(math.log10(bound)) - 2)
    return f"{math.ceil(round(bound / step, 6)) * step:.3g}"


def fraction(setting: str, value: Any, hint: str = "") -> float:
    """``value`` if it is a number with ``0 <= value < 1`` (a dropout rate, say)."""
    if not is_number(value) or not 0 <= value < 1:
        raise invalid(setting, value, f"0 <= {setting} < 1", hint)
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


def of_type(setting: str, value: Any, hint: Any) -> Any:
    """``value`` if it can be what the type ``hint`` describes (:func:`matches`)."""
    if not matches(value, hint):
        raise invalid(setting, value, describe(hint))
    return value


def matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` (from a config) can be what ``hint`` describes. Classes other than the
    plain Python types (tensors, accelerators, callables) accept anything: they are built by
    their own constructors, which check them."""
    if hint is Any or value is ...:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, arm) for arm in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return is_number(value)
    if hint is str:
        return isinstance(value, str)
    plain = origin or hint
    if plain in (list, tuple, Sequence, typing.Sequence):
        return isinstance(value, list | tuple)
    if plain in (dict, Mapping, typing.Mapping):
        return isinstance(value, dict)
    # Any other class (a tensor, an accelerator, a callable): a config gives it as a nested
    # config (a dict with its own _target_); a bare number or word is not one.
    return isinstance(value, dict) or not isinstance(plain, type)


def literal_values(hint: Any) -> list[Any] | None:
    """All values a union of ``Literal``s (and ``None``) allows, or ``None`` if ``hint`` is
    not one."""
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return list(typing.get_args(hint))
    if hint is type(None):
        return [None]
    if origin in (typing.Union, types.UnionType):
        values: list[Any] = []
        for arm in typing.get_args(hint):
            arm_values = literal_values(arm)
            if arm_values is None:
                return None
            values += [v for v in arm_values if v not in values]
        return values
    return None


def _is_object_class(hint: Any) -> bool:
    """A class a config can only give as a nested config (not a plain type or a container)."""
    plain = typing.get_origin(hint) or hint
    containers = (list, tuple, dict, Sequence, Mapping, typing.Sequence, typing.Mapping)
    simple = (bool, int, float, str, type(None))
    return isinstance(plain, type) and plain not in simple and plain not in containers


def describe(hint: Any) -> str:
    """A type hint in words, for the one-line error."""
    if hint is type(None):
        return "null"
    origin = typing.get_origin(hint)
    allowed = literal_values(hint)
    if allowed is not None:
        shown_values = dict.fromkeys("null" if v is None else str(v) for v in allowed)
        return "one of " + " | ".join(shown_values)
    if origin in (typing.Union, types.UnionType):
        arms = typing.get_args(hint)
        plain = [arm for arm in arms if not _is_object_class(arm)] or list(arms)
        return " or ".join(dict.fromkeys(describe(arm) for arm in plain))
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if hint in names:
        return names[hint]
    if (origin or hint) in (list, tuple, Sequence, typing.Sequence):
        return "a list"
    return getattr(hint, "__name__", str(hint))


def signature_of(target: Callable[..., Any]) -> tuple[dict[str, Any], set[str], bool]:
    """``(type hints, parameter names, takes **kwargs)`` of a class's constructor or a
    function."""
    function = target.__init__ if inspect.isclass(target) else target
    parameters = inspect.signature(function).parameters
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # annotations naming something not importable here
        hints = {}
    names = {name for name in parameters if name != "self"}
    variadic = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    return hints, names, variadic
