"""Overrides that add a key nothing reads, refused in one line.

Hydra refuses ``seeed=3`` (the key is not in the config) and its message suggests ``+seeed=3``,
which it then accepts: the key is added and nothing reads it, so a typo trains with the
default. A composed config is checked here for each addition (``+key=value``, and
``++key=value`` where the key was not there before) of a key the app does not read. Left to
other checks, or allowed by design:

* a config-group choice (``+hydra/sweeper=...``, anything with ``@package``, a group whose
  options write elsewhere, ``+experiment=...``), but for one that adds the group's node to a
  config whose own groups do not include it: no vitattn command reads a group its config does
  not choose (``vitattn-eval +attention=linear``, the addition Hydra's refusal of
  ``attention=linear`` suggests, tested the checkpoint's own network while its run recorded
  linear attention, until 2026-12-02; eval audit);
* Hydra's own settings (``hydra.``);
* a key under a node with a ``_target_``: the target's signature says what it takes
  (:func:`vitattn.cli.validation.check_types`, the data module's settings class), and a new
  node with a ``_target_`` of its own (``+callbacks.x={_target_: ...}``: the trust allow-list
  and ``check_types``);
* a key under a map by design: a structured config's field typed ``dict[str, ...]`` (the
  bench's ``variants`` and ``knobs``), whose keys are names the app reads as it finds them.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Callable, Container, Iterator, Sequence
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from vitattn.errors import ConfigError
from vitattn.runs.files import one_line
from vitattn.utils.config import cut_apart
from vitattn.utils.hydra_grammar import parsed

MAX_SHOWN = 200
"""Characters of an override or key a refusal shows (it may come from a run's recorded file)."""


def check_additions(
    cfg: DictConfig,
    overrides: Sequence[str],
    compose: Callable[[list[str]], DictConfig],
    typed: Sequence[str] | None = None,
) -> None:
    """Refuse in one :class:`ConfigError` line an override among ``overrides`` that adds to
    ``cfg`` (composed with them, Hydra's settings included) a key nothing reads: one naming the
    key, a close existing key if there is one, and the keys of the node it was added to.
    ``compose`` composes the same config with other overrides: it is called once, only when an
    addition is suspect, without the additions of values, to tell what was there before them
    (``++seed=3`` sets a key that was there; so does ``+variants={...}``, merged into it).
    ``typed``: the command line's overrides, one for each of ``overrides`` (a sweep's job's),
    which the refusal names (``+seed2=1,2``, not the job's ``+seed2=1``)."""
    choices = chosen_groups(cfg)
    parsed_overrides = list(map(parsed, overrides))
    groups = {
        at
        for at, override in enumerate(parsed_overrides)
        if group_node_added(cfg, str(override.key_or_group), choices)
    }
    added = [
        (at, override)
        for at, override in enumerate(parsed_overrides)
        if (override.is_add() or override.is_force_add())
        and not override.package
        and (at in groups or not group_choice(override.key_or_group, choices))
    ]
    suspects = [
        (at, key)
        for at, override in added
        for key, value in added_keys(str(override.key_or_group), value_of(override))
        if unread(cfg, key, value)
    ]
    if not suspects:
        return
    left_out = {at for at, override in added if not hydras(override.key_or_group)}
    try:
        before = compose([text for at, text in enumerate(overrides) if at not in left_out])
    except Exception:  # the overrides lean on an addition (~key of an added key): cannot tell
        return
    for at, key in suspects:
        parts = key.split(".")
        there = existing_prefix(before, parts)
        if there is None or len(there) == len(parts):
            continue  # there before the addition (``++seed=3``), or cannot tell
        if at in groups:
            raise ConfigError(group_refusal((typed or overrides)[at], key, before))
        raise ConfigError(refusal((typed or overrides)[at], key, before, there))


def chosen_groups(cfg: DictConfig) -> set[str]:
    """The config groups ``cfg`` (composed with Hydra's settings) chose an option of, as
    Hydra's ``hydra.runtime.choices`` records them (``model``, ``hydra/sweeper``)."""
    chosen = OmegaConf.select(cfg, "hydra.runtime.choices", default=None)
    return set(chosen.keys()) if isinstance(chosen, DictConfig) else set()


def group_choice(key: str, choices: Container[str]) -> bool:
    """Whether ``key``, the key of an override, is a config group's (``experiment``,
    ``hydra/sweeper``): Hydra's ``hydra.runtime.choices`` holds it, or it is a group's path
    (a ``/`` in it, which no key of a value holds)."""
    return "/" in key or key in choices


def group_node_added(cfg: DictConfig, key: str, choices: Container[str]) -> bool:
    """Whether ``key``, the key of an override, is one of vitattn's config groups chosen in
    ``cfg`` whose option wrote the group's own node (``attention``; not Hydra's groups, nor a
    group whose options are ``@package _global_``, such as ``experiment``)."""
    return key in choices and "/" not in key and not hydras(key) and key in keys_of(cfg)


def group_refusal(override: str, group: str, before: DictConfig) -> str:
    """The line refusing ``override``, which chose an option of ``group``, a group the command's
    config (``before``: without the additions) does not choose, and so nothing reads."""
    chosen = chosen_groups(before)
    read = sorted(key for key in keys_of(before) if key in chosen and not hydras(key))
    shown = cut_apart(one_line(override), MAX_SHOWN)
    why = ""
    if "ckpt_path" in keys_of(before) and group in ("attention", "model", "module"):
        why = " (the network is rebuilt from ckpt_path, as it was trained)"
    return (
        f"{shown} adds the group {cut_apart(one_line(group), MAX_SHOWN)}, which this command "
        f"does not read{why}; the groups it reads: {', '.join(read)}"
    )


def value_of(override: Any) -> Any:
    """The value an addition sets, as Hydra reads it; ``...`` where it cannot be told."""
    try:
        return override.value()
    except Exception:
        return ...


def added_keys(key: str, value: Any) -> Iterator[tuple[str, Any]]:
    """``key`` with ``value``, and where ``value`` is a mapping without a ``_target_``, each key
    inside it, which Hydra merges into a node that may be there (``summary.baselin`` of
    ``+summary={baselin: x}``)."""
    yield key, value
    if isinstance(value, dict) and "_target_" not in value:
        for inner, inner_value in value.items():
            yield from added_keys(f"{key}.{inner}", inner_value)


def unread(cfg: DictConfig, key: str, value: Any) -> bool:
    """Whether ``key``, added with ``value``, may be a key of ``cfg`` nothing reads: not one of
    Hydra's settings, not a new node with a ``_target_``, and under no node with a ``_target_``
    nor a map by design (:func:`map_by_design`)."""
    if hydras(key) or value is ...:
        return False
    if isinstance(value, dict) and "_target_" in value:
        return False
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig) or node._is_interpolation():
            return False
        if "_target_" in keys_of(node) or map_by_design(node):
            return False
        if part not in keys_of(node):
            return False  # deleted by a later override: nothing is added
        node = node._get_node(part)
    return True


def hydras(key: str) -> bool:
    """Whether ``key`` is one of Hydra's own settings."""
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


def map_by_design(node: DictConfig) -> bool:
    """Whether ``node`` is a structured config's field typed as a mapping (``dict[str, Any]``:
    OmegaConf records the annotation as the node's ``ref_type``), whose keys are names the app
    reads as it finds them. A node of a YAML file has ``ref_type`` ``Any``, and a dataclass
    field the dataclass; both read a fixed set of keys."""
    ref_type = node._metadata.ref_type
    return ref_type is dict or typing.get_origin(ref_type) is dict


def keys_of(node: DictConfig) -> list[str]:
    """The keys of ``node``, those whose value is missing (``???``) too, which ``in`` leaves
    out; none where ``node`` is itself missing, null or an interpolation."""
    if node._is_missing() or node._is_none() or node._is_interpolation():
        return []
    return [str(key) for key in node]


def node_at(cfg: DictConfig, parts: list[str]) -> Any:
    """The node at the key ``parts`` of ``cfg``, as written (an interpolation not resolved), or
    ``None`` where there is none: a part missing, or under a value or an interpolation."""
    node: Any = cfg
    for part in parts:
        if not isinstance(node, DictConfig) or part not in keys_of(node):
            return None
        node = node._get_node(part)
    return node


def did_you_mean(name: str, names: list[str], prefix: str = "") -> str:
    """``did you mean <prefix><the closest of names>? `` where one is close to ``name``, else
    nothing."""
    close = difflib.get_close_matches(name, names, n=1)
    return f"did you mean {prefix}{close[0]}? " if close else ""


def existing_prefix(cfg: DictConfig, parts: list[str]) -> list[str] | None:
    """The longest start of ``parts`` that is a key of ``cfg`` (all of them: the key is there;
    fewer where the path meets a key that is missing, or a value, ``null`` included, where no
    key can be), or ``None`` where the path goes through an interpolation or a list, where what
    is there cannot be told."""
    node: Any = cfg
    for depth, part in enumerate(parts):
        if node._is_interpolation() or isinstance(node, ListConfig):
            return None
        if not isinstance(node, DictConfig) or part not in keys_of(node):
            return parts[:depth]
        node = node._get_node(part)
    return parts


def keys_there(parent: DictConfig, there: list[str], name: str) -> tuple[str, str]:
    """What a refusal of the key ``name`` under the node ``there`` (``parent``) says of that
    node: a close key (``did you mean seed? ``, or nothing) and its keys by their full names
    (``choose among: ...``, Hydra's own left out at the top)."""
    prefix = "".join(f"{part}." for part in there)
    valid = sorted(f"{prefix}{key}" for key in keys_of(parent) if there or key != "hydra")
    hint = did_you_mean(name, [key[len(prefix) :] for key in valid], prefix)
    where = f"choose among: {', '.join(valid)}" if valid else f"{prefix[:-1]} has no settings"
    return hint, where


def refusal(override: str, key: str, before: DictConfig, there: list[str]) -> str:
    """The line refusing ``override``, which adds ``key`` under the node ``there`` of ``before``
    (the config without the additions): its keys, by their full names, and a close one first.
    An ``override`` without ``+`` (``seeed=3``, which Hydra refused, suggesting ``+seeed=3``)
    is told it sets a key that is not a setting."""
    parent = node_at(before, there)
    prefix = "".join(f"{part}." for part in there)
    shown_override = cut_apart(one_line(override), MAX_SHOWN)
    shown_key = cut_apart(one_line(key), MAX_SHOWN)
    adds = override.startswith("+")
    if not isinstance(parent, DictConfig):
        what = "null" if parent._is_none() else "a value"
        return (
            f"{shown_override} {'adds' if adds else 'sets'} {shown_key} under {prefix[:-1]}, "
            f"which is {what}, not a "
            "node of settings: nothing reads keys there"
        )
    hint, where = keys_there(parent, there, key.split(".")[len(there)])
    if not adds:
        return f"{shown_override} sets {shown_key}, which is not a setting; {hint}{where}"
    return f"{shown_override} adds {shown_key}, which vitattn does not read; {hint}{where}"


def deletion_refusal(
    error: BaseException,
    overrides: Sequence[str],
    compose: Callable[[list[str]], DictConfig],
    typed: Sequence[str] | None = None,
) -> str | None:
    """The line refusing a deletion of a key the config does not have (``~callbacks.throughputt``,
    which Hydra ends in "Could not delete from config. '...' does not exist"): the key, a close
    existing one, and the keys of the node it names (``compose``: the config without that
    deletion); ``None`` where ``error`` is another refusal or the node cannot be told."""
    text = str(error)
    if not text.startswith("Could not delete from config. '"):
        return None
    for at, override in enumerate(map(parsed, overrides)):
        key = str(override.key_or_group)
        if (
            not override.is_delete()
            or text != f"Could not delete from config. '{key}' does not exist."
        ):
            continue
        try:
            before = compose([o for index, o in enumerate(overrides) if index != at])
        except Exception:  # another override leans on it: Hydra's line stands
            return None
        parts = key.split(".")
        there = existing_prefix(before, parts)
        if there is None or len(there) == len(parts):
            return None
        parent = node_at(before, there)
        if not isinstance(parent, DictConfig):
            return None
        hint, where = keys_there(parent, there, parts[len(there)])
        shown = cut_apart(one_line((typed or overrides)[at]), MAX_SHOWN)
        named = cut_apart(one_line(key), MAX_SHOWN)
        return f"{shown} deletes {named}, which is not there; {hint}{where}"
    return None
