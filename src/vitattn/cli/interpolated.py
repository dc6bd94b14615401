"""Overrides that set a key inside an interpolation, told in one line.

``model.attention`` is ``${attention}``: a copy of the ``attention`` group's node. Hydra cannot
set ``model.attention.landmarks=3`` (the interpolation has no keys) and suggests
``+model.attention.landmarks=3``, which replaces the interpolation with ``{landmarks: 3}``: the
network is then built without its attention's ``_target_``, and the refusal that follows names
a ``TypeError``. The setting the user means is ``attention.landmarks=3``. :func:`crossing`
looks for an override whose key goes through an interpolation of the config and, where it finds
one, names it and what to set instead: for each addition before the app's own checks, for any
override where Hydra refused to compose it.

An override whose value is an interpolation that cannot be resolved (``data.shift=${nope}``,
``optimizer.lr=${oc.env:UNSET}``) is one line naming it (:func:`unresolved`), before the app's
own checks: a mode that never reads the setting would otherwise take it, and a check that
builds the setting's object names the node, not the override.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vitattn.cli.additions import (
    MAX_SHOWN,
    chosen_groups,
    existing_prefix,
    hydras,
    keys_of,
    map_by_design,
    node_at,
)
from vitattn.runs.files import one_line
from vitattn.utils.config import cut_apart
from vitattn.utils.hydra_grammar import parsed


def crossing(
    overrides: Sequence[str],
    compose: Callable[[list[str]], DictConfig],
    additions_only: bool = False,
    typed: Sequence[str] | None = None,
) -> str | None:
    """The line telling that an override among ``overrides`` sets a key inside a node that is an
    interpolation (``model.attention.landmarks=3``, ``+module.net.depth=2``), or ``None`` where
    none does. The nodes are looked up in the config ``compose`` gives without the overrides of
    dotted keys (those that might cross one); ``None`` too where it cannot compose that. With
    ``additions_only``, only additions (``+``, ``++``) are looked at, and nothing is composed
    where there is none: Hydra itself refuses ``key=value`` through an interpolation, but takes
    an addition and replaces the interpolation. ``typed``: the command line's overrides, one
    for each of ``overrides`` (a sweep's job's), which the line names."""
    settings = settings_overrides(overrides)
    if settings is None:
        return None
    dotted, values = {}, []
    for at, key, override in settings:
        if not override.is_delete():
            values.append((at, key))
        if "." in key:
            dotted[at] = override
    looked_at = {
        at: override
        for at, override in dotted.items()
        if not additions_only or override.is_add() or override.is_force_add()
    }
    if not looked_at:
        return None
    # model.attention=${attention}: the command line set the node, but to a copy again
    copies = {
        at
        for at, override in dotted.items()
        if not (override.is_add() or override.is_force_add())
        and overrides[at].partition("=")[2].lstrip().startswith("${")
    }
    try:
        left_out = dotted.keys() - copies
        base = compose([text for at, text in enumerate(overrides) if at not in left_out])
    except Exception:
        try:  # one of them sets a key inside an interpolation itself
            base = compose([text for at, text in enumerate(overrides) if at not in dotted])
        except Exception:
            return None
    groups = chosen_groups(base)
    replaced = [  # not model=vit, a group's choice
        (at, key.split(".")) for at, key in values if key not in groups and at not in copies
    ]
    for at, override in looked_at.items():
        parts = str(override.key_or_group).split(".")
        found = interpolation_on(base, parts[:-1])
        if found is None:
            continue
        node = parts[: found[0]]
        if any(other != at and node[: len(key)] == key for other, key in replaced):
            continue  # the command line set the node itself (model.attention={...}): it is read
        return refusal((typed or overrides)[at], override, parts, *found, base)
    return None


def settings_overrides(overrides: Sequence[str]) -> list[tuple[int, str, Any]] | None:
    """``(position, key, override)`` of each of ``overrides`` that sets a setting of the config
    (not a group's choice by its path, a package's, nor Hydra's own), as Hydra's grammar reads
    it; ``None`` where one cannot be read (the syntax check names it)."""
    found = []
    for at, text in enumerate(overrides):
        try:
            override = parsed(text)
        except Exception:
            return None
        key = str(override.key_or_group)
        if "/" not in key and not override.package and not hydras(key):
            found.append((at, key, override))
    return found


RUNNING_APP_ONLY = "HydraConfig was not set"
"""Hydra's message for ``${hydra:...}`` (``${paths.output_dir}``, say) resolved outside a running
app: such a value is resolved when the app runs, not before."""


def unresolved(
    cfg: DictConfig, overrides: Sequence[str], typed: Sequence[str] | None = None
) -> str | None:
    """The line naming the first of ``overrides`` whose value holds an interpolation that
    ``cfg``, the config composed with them, cannot resolve, or ``None`` where each one can (or
    only the running app can: :data:`RUNNING_APP_ONLY`). Hydra's own settings are left to
    Hydra. ``typed``: the command line's overrides, one for each of ``overrides``, which the
    line names."""
    for at, key, override in settings_overrides(overrides) or []:
        if override.is_delete() or "${" not in overrides[at].partition("=")[2]:
            continue
        try:
            value = OmegaConf.select(cfg, key, throw_on_missing=False)
            if isinstance(value, DictConfig | ListConfig):
                OmegaConf.to_container(value, resolve=True)
        except OmegaConfBaseException as error:
            why = one_line(str(error).splitlines()[0] if str(error) else type(error).__name__)
            if RUNNING_APP_ONLY in why:
                continue
            shown = cut_apart(one_line((typed or overrides)[at]), MAX_SHOWN)
            return (
                f"{shown} cannot be resolved ({cut_apart(why, MAX_SHOWN)}): an interpolation "
                "names a setting of this config, ${<key>}, or a resolver's value, "
                "${oc.env:NAME,default}"
            )
    return None


MAX_HOPS = 8
"""Interpolations followed from one to the next (``module.net`` is ``${model}``, whose
``attention`` is ``${attention}``) before the key to set is named."""


def meant_key(cfg: DictConfig, parts: list[str]) -> list[str] | None:
    """The key that ``parts``, which goes through a plain interpolation of ``cfg``, means: the
    key it refers to, followed through each interpolation on the way (``attention.impl`` for
    ``module.net.attention.impl``); ``None`` where one on the way is not plain (a resolver's)."""
    for _ in range(MAX_HOPS):
        found = interpolation_on(cfg, parts[:-1])
        if found is None:
            return parts
        depth, interpolation = found
        target = referred(interpolation)
        if target is None:
            return None
        parts = [*target.split("."), *parts[depth:]]
    return None


def interpolation_on(cfg: DictConfig, parts: list[str]) -> tuple[int, str] | None:
    """The depth and text of the first node along ``parts`` that is an interpolation
    (``(2, "${attention}")`` for ``model.attention``), or ``None`` where none is, or where it
    is a map by design (a structured config's ``dict[str, ...]`` field, which the app reads
    as it finds it: ``+kernels.variants.fast.attention=linear`` replaces the device profile's
    variants of ``vitattn-check`` with its own, as meant)."""
    node: Any = cfg
    for depth, part in enumerate(parts, start=1):
        if not isinstance(node, DictConfig) or part not in keys_of(node):
            return None
        node = node._get_node(part)
        if node._is_interpolation():
            return None if map_by_design(node) else (depth, str(node._value()))
    return None


def settings_node(cfg: DictConfig, parts: list[str]) -> bool:
    """Whether the key ``parts`` of ``cfg`` holds a node of settings (not a value, not through
    an interpolation, which is not resolved)."""
    node = node_at(cfg, parts)
    return isinstance(node, DictConfig) and not node._is_interpolation()


def referred(interpolation: str) -> str | None:
    """The absolute key a plain interpolation refers to (``attention`` of ``${attention}``), or
    ``None`` for any other (a resolver's ``${oc.select:...}``, a nested or relative one)."""
    if not (interpolation.startswith("${") and interpolation.endswith("}")):
        return None
    inner = interpolation[2:-1]
    parts = inner.split(".")
    plain = all(part and part.replace("_", "a").isalnum() and part.isascii() for part in parts)
    return inner if plain and not parts[0][0].isdigit() else None


def refusal(
    text: str, override: Any, parts: list[str], depth: int, interpolation: str, base: DictConfig
) -> str:
    """The line for ``text`` (``override``, of the key ``parts``) whose node ``parts[:depth]`` is
    ``interpolation`` in ``base``: what to set instead where it refers plainly to a key (without
    a ``+`` where that key is in ``base``, as Hydra wants it), or the settings of the node it
    refers to where that node has no such key."""
    node = ".".join(parts[:depth])
    shown = cut_apart(one_line(text), MAX_SHOWN)
    shown_interpolation = cut_apart(one_line(interpolation), MAX_SHOWN)
    target = referred(interpolation)
    what = f"{node}, which is {shown_interpolation}"
    if target is not None and not settings_node(base, target.split(".")):
        return f"{shown} sets a key inside {what}, a value: no key can be set inside it"
    meant = meant_key(base, parts) if target is not None else None
    if target is None or meant is None:
        return (
            f"{shown} sets a key inside {what}: a key set there replaces the interpolation and "
            "nothing reads it; set the setting it refers to"
        )
    copy = f"{shown} sets a key inside {what} (a copy of {target}): a key set there replaces "
    copy += "the copy"
    if existing_prefix(base, meant) == meant:
        sign = "++" if override.is_force_add() else ""
        value = text.split("=", 1)[1] if "=" in text else ""
        if referred(value.strip()) == ".".join(meant):
            copied = ".".join(parts)
            return f"{copy}; {copied} is {value.strip()} already: there is nothing to set"
        instead = cut_apart(one_line(f"{sign}{'.'.join(meant)}={value}"), MAX_SHOWN)
        return f"{copy} and nothing reads it; set {instead}"
    parent = ".".join(meant[:-1])
    if not settings_node(base, meant[:-1]):
        return f"{copy} and nothing reads it; {parent} holds no settings to set"
    settings = [
        f"{parent}.{key}" for key in keys_of(node_at(base, meant[:-1])) if not key.startswith("_")
    ]
    missing = cut_apart(one_line(meant[-1]), MAX_SHOWN)
    return (
        f"{copy} and nothing reads it; {parent} has no {missing}: choose among "
        f"{', '.join(settings) or 'none'}"
    )
