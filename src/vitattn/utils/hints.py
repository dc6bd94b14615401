"""Type hints in words and values checked against them: what a config's ``_target_`` expects of
each setting (:mod:`vitattn.cli.validation`) and what the data settings accept
(:mod:`vitattn.data.settings`)."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any


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
        return isinstance(value, int | float) and not isinstance(value, bool)
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
        shown = dict.fromkeys("null" if v is None else str(v) for v in allowed)
        return "one of " + " | ".join(shown)
    if origin in (typing.Union, types.UnionType):
        arms = typing.get_args(hint)
        plain = [arm for arm in arms if not _is_object_class(arm)] or list(arms)
        return " or ".join(dict.fromkeys(describe(arm) for arm in plain))
    if hint is type(None):
        return "null"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if hint in names:
        return names[hint]
    plain = origin or hint
    if plain in (list, tuple, Sequence, typing.Sequence):
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
