"""Command-line overrides read as Hydra reads them.

A sweep names its jobs' directories by their settings (``attention=linear,seed=1``), and ``=``
and ``,`` are Hydra's own syntax: a path to such a job is given quoted
(``'ckpt_path="…/attention=linear,seed=1/checkpoints/last.ckpt"'``), and what the console
scripts check before Hydra runs (the runs a command names, where it writes) is the value Hydra
will use, without its quotes. Unquoted, such a path is refused in one line that shows it quoted.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Collection, Sequence
from typing import Any

from vitattn.errors import ConfigError
from vitattn.runs.files import one_line
from vitattn.utils.config import cut_apart
from vitattn.utils.hydra_grammar import for_the_shell, parsed, quoted_list

HYDRA_GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic/"

NAME_MAX = 255
"""The most bytes of one name in a path that Linux's file systems take (``NAME_MAX``): the
longest key an override may have too, since Hydra looks every key up as a config group, a
folder name, and a name longer than this ends its composition in ``OSError``."""
MAX_SHOWN = 500
"""Characters of an override a refusal shows."""


def overrides_of(arguments: Sequence[str]) -> list[str]:
    """The overrides among command-line arguments, as Hydra's own parser sorts them: every
    argument that is neither a flag nor the value of one (``key=value``, a deletion ``~key``,
    and a word the grammar will refuse, which :func:`check_syntax` then names)."""
    return [arguments[at] for at in override_positions(arguments)]


def override_positions(arguments: Sequence[str]) -> list[int]:
    """Where the overrides (:func:`overrides_of`) are among ``arguments``."""
    values = flag_values()
    found: list[int] = []
    flag: str | None = None
    for at, arg in enumerate(arguments):
        takes = values.get(flag or "", ())
        flag = None
        if takes is None or arg in takes:  # the value of the flag before it
            continue
        if arg.startswith("-"):
            flag = arg
        else:
            found.append(at)
    return found


@functools.cache
def flag_values() -> dict[str, Collection[str] | None]:
    """Hydra's flags that take a value (``-cd <dir>``, ``--cfg job``, ``--info [defaults]``),
    each with the values it takes where only some are (``None``: any), from Hydra's parser."""
    from hydra._internal.utils import get_args_parser

    return {
        flag: action.choices
        for action in get_args_parser()._actions
        if action.nargs in (None, "?")
        for flag in action.option_strings
    }


def check_syntax(arguments: Sequence[str]) -> None:
    """Refuse in one line, naming it, an override Hydra's grammar cannot read; where its value
    holds ``=`` (a sweep job's directory, say), the line shows it quoted, ready to copy."""
    from hydra.errors import HydraException

    for text in overrides_of(arguments):
        try:
            override = parsed(text)
        except HydraException as error:
            why = str(error).splitlines()[0].split("; See ")[0].strip()
            key, _, value = text.partition("=")
            hint = f"see {HYDRA_GRAMMAR}"
            if "=" in value and '"' not in value and "'" not in value:
                said = "Hydra reads '=' and ',' as its own syntax: quote the value"
                listed = quoted_list(key, value)
                if listed is not None:
                    hint = f"{said}s of the list, e.g. {one_line(listed)}"
                elif value.startswith("[") and value.endswith("]"):
                    hint = f"{said}s of the list, each in double quotes; see {HYDRA_GRAMMAR}"
                else:
                    with contextlib.suppress(ConfigError):  # no quoting reads it back: the link
                        hint = f"{said}, e.g. {one_line(for_the_shell(key, value))}"
            shown = cut_apart(one_line(text), MAX_SHOWN)
            raise ConfigError(f"{shown} cannot be read ({one_line(why)}); {hint}") from None
        size = len(str(override.key_or_group).encode(errors="surrogatepass"))
        if size > NAME_MAX:
            raise ConfigError(
                f"{cut_apart(one_line(text), MAX_SHOWN)}: its key is {size} bytes, more than "
                f"the {NAME_MAX} Hydra can take (it looks each key up as a file name)"
            )


def key_of(override: str) -> str:
    """The key an override sets, without Hydra's ``+``, ``++`` or ``~`` (``optimizer.lr`` of
    ``+optimizer.lr=0.1``, ``attention`` of ``attention=linear``)."""
    return override.split("=", 1)[0].lstrip("+~")


def given_values(arguments: Sequence[str]) -> dict[str, Any]:
    """What each override of one value sets, by key (without ``+``), as Hydra reads it: a
    quoted string without its quotes, ``true`` a bool, ``null`` None. Sweeps (``a,b``),
    deletions and overrides the grammar cannot read are left out."""
    from hydra.errors import HydraException

    values: dict[str, Any] = {}
    for text in overrides_of(arguments):
        try:
            override = parsed(text)
        except HydraException:
            continue
        if not override.is_delete() and not override.is_sweep_override():
            values[override.key_or_group] = override.value()
    return values


def given_path(arguments: Sequence[str], key: str) -> str | None:
    """The path ``key`` is set to on the command line, as Hydra reads it; ``None`` when it is
    not given, ``null``, not a string, or holds an interpolation (``${...}``) only the app
    resolves."""
    value = given_values(arguments).get(key)
    return value if isinstance(value, str) and value and "${" not in value else None
