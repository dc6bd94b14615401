"""Values in Hydra's override grammar (``key=value`` on a command line): how Hydra reads one, and
how to write a value so that Hydra reads it back, also inside a command a message prints. A path
holding ``=`` or ``,`` (a sweep's job directory, named by its settings) must be quoted, and so
must each element of a list of overrides."""

from __future__ import annotations

import decimal
import functools
import math
from typing import Any

from vitattn.errors import ConfigError


@functools.lru_cache(maxsize=1024)
def parsed(text: str) -> Any:
    """Hydra's reading of one override (``hydra.core.override_parser``'s ``Override``); raises
    Hydra's ``OverrideParseException`` when the grammar cannot read it. Kept per text: a console
    script's checks read the same command line several times before the app starts."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_override(text)


def values_count(override: Any) -> int | None:
    """How many values a parsed sweep ``override`` gives, counted without listing them
    (``seed=range(0,10**8)`` is 10**8 strings): a choice's, or a range's as Hydra steps it;
    ``None`` where Hydra alone knows (a ``glob`` of a group's options, a range with step 0 or
    an ``interval``, which it refuses itself)."""
    from hydra.core.override_parser.types import ChoiceSweep, RangeSweep

    value = override.value()
    if isinstance(value, ChoiceSweep):
        return len(value.list)
    if not isinstance(value, RangeSweep) or not value.step:
        return None
    if all(isinstance(v, int) for v in (value.start, value.stop, value.step)):
        return len(range(value.start, value.stop, value.step))
    start, stop, step = (decimal.Decimal(v) for v in (value.start, value.stop, value.step))
    about = max(0, math.ceil((stop - start) / step))  # Hydra's sum of rounded decimals may
    if about > STEPPED_COUNT:  # take one more step or one fewer: only stepped, it says which
        return about
    return sum(1 for _ in value.range())


STEPPED_COUNT = 100_000
"""A range of floats with at most about this many values is counted by stepping it as Hydra
does (a tenth of a second); a longer one, by division."""


def as_override(key: str, value: str) -> str:
    """``key=value`` that Hydra reads back as ``value``: as it is where it can be, else quoted
    (a path holding ``=`` or ``,``), in double quotes where it can be, so that a shell's single
    quotes can hold it (:func:`for_the_shell`)."""
    from hydra.errors import HydraException

    candidates = [f"{key}={value}", f'{key}="{value}"', f"{key}='{value}'"]
    for text in candidates:
        try:
            override = parsed(text)
        except HydraException:
            continue
        if not override.is_sweep_override() and override.value() == value:
            return text
    raise ConfigError(
        f"{key}={value}: Hydra cannot read this value back, quoted or not; rename the "
        "directory without quotes in its name"
    )


def for_the_shell(key: str, value: str) -> str:
    """:func:`as_override` as a shell command line takes it, to be copied from a message:
    ``hydra.run.dir=outputs/run``, ``'hydra.run.dir="multiruns/x/attention=linear,seed=1"'``."""
    import shlex

    return shlex.quote(as_override(key, value))


def quoted_list(key: str, value: str) -> str | None:
    """``key=[a=1,~b,c=[1,2]]`` written so that Hydra reads a list of the texts ``a=1``, ``~b``
    and ``c=[1,2]`` (each element quoted), as a shell command line takes it; ``None`` where
    ``value`` is not a list of elements without quotes, or Hydra would not read it so."""
    import shlex

    from hydra.errors import HydraException

    if not (value.startswith("[") and value.endswith("]")) or '"' in value or "'" in value:
        return None
    items = [item.strip() for item in top_level_items(value[1:-1])]
    if not all(items):
        return None
    written = ",".join('"' + item + '"' for item in items)
    text = f"{key}=[{written}]"
    try:
        read = parsed(text).value()
    except HydraException:
        return None
    return shlex.quote(text) if read == items else None


def top_level_items(text: str) -> list[str]:
    """``text`` cut at each comma outside brackets and braces (``a=1,b=[1,2]``: two items)."""
    items, depth, start = [], 0, 0
    for at, character in enumerate(text):
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(character, 0)
        if character == "," and depth == 0:
            items.append(text[start:at])
            start = at + 1
    return [*items, text[start:]]
