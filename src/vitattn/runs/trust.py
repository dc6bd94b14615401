"""What vitattn builds from a file: only what vitattn itself builds.

A checkpoint, a run directory and a sweep directory are data, and may come from someone else (a
colleague's checkpoint, a shared cluster disk). Some of that data is configuration that vitattn
turns back into objects: a checkpoint's ``hyper_parameters`` (the network, optimizer and
schedule, rebuilt by ``load_from_checkpoint``), Lightning's legacy ``hparams`` keys, the data
module's ``datamodule_hyper_parameters``, and a run's ``.hydra/overrides.yaml`` on
``resume=true``. Hydra's ``instantiate`` calls whatever ``_target_`` a config names, and its own
target policy is a blocklist ("best-effort ... not a complete security boundary"), so everything
read from a file is checked here first, against an allowlist:

* a ``_target_`` (anywhere: nested nodes, ``_args_``, ``_partial_`` ones) must be one that the
  project's own ``configs/`` name: the attention registry, vitattn's model, data, callback and
  logger classes, and the torch optimizers and Lightning callbacks and loggers it uses
  (:func:`allowed_targets`); in a checkpoint's module settings, only what the module builds
  from them: the network, its attention, the optimizer and the schedule
  (:func:`module_targets`: a trainer, a logger or a data module there would be built with
  paths from the file);
* a string may interpolate other settings (``${model.embed_dim}``) but call no resolver other
  than vitattn's own: ``${oc.env:...}`` would read the environment, others run code;
* data settings (``shift``, ``grayscale``, ``normalize``, ...) are plain values, never configs.

What a user types on the command line is not checked here: that is the user's choice
(``vitattn-train +callbacks.mine._target_=mypkg.MyCallback``).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from vitattn.errors import ConfigError
from vitattn.runs.files import inside
from vitattn.utils.config import CONFIG_DIR

VITATTN_RESOLVERS = ("project_root",)
"""vitattn's own OmegaConf resolvers besides those named ``vitattn_*``."""

CONFIG_KEYS = ("_target_", "_args_", "_partial_", "_recursive_", "_convert_")
"""The keys through which Hydra's ``instantiate`` reads a node as something to build."""

MAX_CONFIG_NODES = 100_000
"""The most containers a stored config may have (vitattn's have about fifty)."""
MAX_CONFIG_DEPTH = 64
"""The deepest a stored config may nest (vitattn's: four levels)."""

COMMAND_LINE = "a target you trust can be given on the command line"


class UntrustedFileError(ConfigError):
    """A file asks vitattn to build something vitattn does not build itself: nothing was built."""


@functools.cache
def allowed_targets(config_dir: Path = CONFIG_DIR) -> frozenset[str]:
    """Every ``_target_`` the project's ``configs/`` name outside Hydra's own settings: what
    vitattn itself builds, and so all that a file may ask it to build."""
    targets: set[str] = set()
    for path in sorted(config_dir.rglob("*.yaml")):
        if path.relative_to(config_dir).parts[0] == "hydra":
            continue  # Hydra's own settings: a file may never set them
        content = yaml.safe_load(path.read_text())
        targets.update(_targets_in(content))
    return frozenset(targets)


MODULE_GROUPS = ("model", "attention", "optimizer", "scheduler")
"""The config groups whose objects the LightningModule builds from its settings
(``configs/module/classifier.yaml``: ``net``, its ``attention``, ``optimizer``, ``scheduler``)."""


@functools.cache
def module_targets(config_dir: Path = CONFIG_DIR) -> frozenset[str]:
    """The ``_target_`` s of :data:`MODULE_GROUPS` in the project's ``configs/``: all that a
    checkpoint's module settings may ask vitattn to build."""
    targets: set[str] = set()
    for group in MODULE_GROUPS:
        for path in sorted((config_dir / group).rglob("*.yaml")):
            targets.update(_targets_in(yaml.safe_load(path.read_text())))
    return frozenset(targets)


def _targets_in(content: Any) -> Iterator[str]:
    if isinstance(content, Mapping):
        for key, value in content.items():
            if key == "hydra":
                continue
            if key == "_target_" and isinstance(value, str):
                yield value
            else:
                yield from _targets_in(value)
    elif isinstance(content, list):
        for value in content:
            yield from _targets_in(value)


def plain(content: Any) -> Any:
    """``content`` as plain dicts and lists, interpolations left as written (an OmegaConf
    container, as earlier checkpoints hold, is read without resolving anything)."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(content, DictConfig | ListConfig):
        return OmegaConf.to_container(content, resolve=False)
    return content


def check_stored_config(
    content: Any, source: str, key: str, allowed: frozenset[str] | None = None
) -> None:
    """Refuse in one line a config read from ``source`` (a file) that names a ``_target_``
    outside ``allowed`` (:func:`allowed_targets` if not given), or calls a resolver other than
    vitattn's own. ``key`` is where ``content`` sits in the file (``hyper_parameters.net``).
    The walk has no recursion (a file's nesting has no bound of its own) and visits each
    container once: one the file refers to twice (a few KB that expand to billions of nodes in
    any copy), past :data:`MAX_CONFIG_NODES` containers or :data:`MAX_CONFIG_DEPTH` levels, is
    refused."""
    seen: dict[int, Path_] = {}
    pending: list[tuple[Path_, Any]] = [((None, key), plain(content))]
    while pending:
        path, node = pending.pop()
        if isinstance(node, Mapping | list | tuple):
            if id(node) in seen or len(seen) >= MAX_CONFIG_NODES:
                again = f"the same node as {shown(seen[id(node)])}" if id(node) in seen else ""
                raise UntrustedFileError(
                    f"{source}: {shown(path)} is {again or f'past node {MAX_CONFIG_NODES}'}; a "
                    "stored config is a tree of settings, as vitattn writes it"
                )
            seen[id(node)] = path
            if depth(path) > MAX_CONFIG_DEPTH:
                raise UntrustedFileError(
                    f"{source}: {key} is nested deeper than {MAX_CONFIG_DEPTH} levels; a stored "
                    "config is a tree of settings, as vitattn writes it"
                )
        if isinstance(node, Mapping):
            if "_target_" in node:
                check_target(node["_target_"], source, f"{shown(path)}._target_", allowed)
            partial = node.get("_partial_", False)
            if not isinstance(partial, bool):
                raise UntrustedFileError(
                    f"{source}: {shown(path)}._partial_={partial!r} is not true or false; "
                    "nothing was built"
                )
            pending.extend(((path, f".{name}"), value) for name, value in node.items())
        elif isinstance(node, list | tuple):
            pending.extend(((path, f"[{index}]"), value) for index, value in enumerate(node))
        elif isinstance(node, str) and "${" in node:
            check_interpolations(node, source, shown(path))


Path_ = tuple[Any, str] | None
"""Where a node sits, as ``(the parent's, this step)``: spelled out only for a message."""


def depth(path: Path_) -> int:
    """How many steps ``path`` has (at most :data:`MAX_CONFIG_DEPTH` + 2 are counted)."""
    steps = 0
    while path is not None and steps <= MAX_CONFIG_DEPTH + 1:
        path, _ = path
        steps += 1
    return steps


def shown(path: Path_) -> str:
    """``hyper_parameters.net[0].x`` from a :data:`Path_`."""
    steps: list[str] = []
    while path is not None:
        path, step = path
        steps.append(step)
    return "".join(reversed(steps))


def check_target(target: Any, source: str, key: str, allowed: frozenset[str] | None = None) -> None:
    """Refuse a ``_target_`` read from a file unless vitattn builds it itself, there: one of
    ``allowed`` (:func:`allowed_targets` if not given; a checkpoint's module settings give
    :func:`module_targets`, and the line says so of a target vitattn builds elsewhere)."""
    if isinstance(target, str) and target in (allowed or allowed_targets()):
        return
    if isinstance(target, str) and target in allowed_targets():
        raise UntrustedFileError(
            f"{source}: {key}={target} is built by vitattn elsewhere, never from a module's "
            f"settings (the network, its attention, the optimizer, the schedule), so it was "
            f"not built ({COMMAND_LINE})"
        )
    raise UntrustedFileError(
        f"{source}: {key}={target} is not something vitattn builds, so it was not built "
        f"(vitattn builds only the classes its configs/ name; {COMMAND_LINE})"
    )


MOVED_TARGETS = {
    **{
        f"vitattn.callbacks.{name}": f"vitattn.training.callbacks.{name}"
        for name in (
            "CheckpointOnInterrupt",
            "ImagesPerSecond",
            "NanGuard",
            "ProgressBar",
            "RandomStateInCheckpoint",
            "ValidateAtEnd",
        )
    },
    "vitattn.confusion.ConfusionReport": "vitattn.training.callbacks.ConfusionReport",
    "vitattn.insight.AttentionInsight": "vitattn.training.callbacks.AttentionInsight",
    "vitattn.preemption.RequeueOnPreemption": "vitattn.training.callbacks.RequeueOnPreemption",
    "vitattn.logger.RunTensorBoard": "vitattn.training.logger.RunTensorBoard",
}
"""Targets that earlier versions' configs named, and the names those classes have now: a run
recorded before its callbacks moved into ``vitattn.training`` continues under the new names."""


def with_current_targets(text: str) -> str:
    """``text`` (a recorded override) with each target's earlier name (:data:`MOVED_TARGETS`)
    replaced by its current one; the result is checked as any recorded override is."""
    for old, new in MOVED_TARGETS.items():
        text = re.sub(rf"(?<![\w.]){re.escape(old)}(?![\w.])", new, text)
    return text


def check_data_settings(settings: Any, source: str, key: str) -> None:
    """Refuse in one line data settings read from ``source`` unless each is a plain value (a
    number, a word, true/false, null, or a list of them) with no interpolation."""
    settings = plain(settings)
    if settings is None:
        return
    if not isinstance(settings, Mapping):
        raise UntrustedFileError(
            f"{source}: {key} is a {type(settings).__name__}, not a mapping of data settings"
        )
    for name, value in settings.items():
        values = value if isinstance(value, list | tuple) else [value]
        for item in values:
            if item is not None and not isinstance(item, bool | int | float | str | Path):
                raise UntrustedFileError(
                    f"{source}: {key}.{name} is a {type(item).__name__}, not a plain value: "
                    "data settings are numbers, words or true/false, never configs; nothing "
                    "was built"
                )
            if isinstance(item, str) and "${" in item:
                raise UntrustedFileError(
                    f"{source}: {key}.{name}={item!r} is an interpolation, not a plain value: "
                    "data settings are numbers, words or true/false"
                )


def check_interpolations(text: str, source: str, key: str) -> None:
    """Refuse a string from a file whose interpolations call a resolver other than vitattn's
    own (``${oc.env:...}`` reads the environment), or that OmegaConf cannot parse."""
    if "${" not in text:
        return
    for resolver in resolvers_in(text, source, key):
        if not resolver.startswith("vitattn_") and resolver not in VITATTN_RESOLVERS:
            raise UntrustedFileError(
                f"{source}: {key}={text!r} calls the resolver {resolver!r}; a setting read from "
                "a file may refer to other settings (${a.b}) but call no resolver other than "
                f"vitattn's own (it could read the environment or run code); {COMMAND_LINE}"
            )


def resolvers_in(text: str, source: str, key: str) -> list[str]:
    """The names of the resolvers ``text`` calls, nested ones included, as OmegaConf parses it.
    A resolver whose name is itself an interpolation is returned as written (and refused)."""
    from omegaconf.errors import GrammarParseError
    from omegaconf.grammar.gen.OmegaConfGrammarParser import OmegaConfGrammarParser
    from omegaconf.grammar_parser import parse

    try:
        tree = parse(text)
    except GrammarParseError:
        raise UntrustedFileError(f"{source}: {key}={text!r} is not a valid interpolation") from None
    found: list[str] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, OmegaConfGrammarParser.InterpolationResolverContext):
            found.append(node.resolverName().getText())
        pending.extend(node.getChildren() if hasattr(node, "getChildren") else [])
    return found


def check_recorded_override(text: str, source: str) -> None:
    """Refuse in one line a run's recorded override (``source``: the file and its line) that is
    not a plain setting of vitattn's: one that sets, adds or deletes Hydra's own settings (in any
    prefix form, or through a package ``@hydra``), names a ``_target_`` vitattn does not build,
    or calls a resolver other than vitattn's own. What is left must then be a typed setting of
    vitattn's own configs (:mod:`vitattn.runs.recorded`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        override = OverridesParser.create().parse_override(text)
    except HydraException:
        raise UntrustedFileError(f"{source}: {text!r} is not an override (key=value)") from None
    key, package = override.key_or_group, override.package or ""
    if any(name == "hydra" or name.startswith(("hydra.", "hydra/")) for name in (key, package)):
        raise UntrustedFileError(
            f"{source}: {text!r} sets Hydra's own settings; a run's recorded overrides may set "
            "only vitattn's settings (give it on the command line if you mean it)"
        )
    if override.is_sweep_override():
        raise UntrustedFileError(
            f"{source}: {text!r} is a sweep; a run's recorded overrides hold one value each"
        )
    if override.is_delete():
        return
    value = override.value()
    name = key.rsplit(".", 1)[-1]
    if name == "_target_":
        check_target(value, source, key)
    else:
        check_stored_config(value, source, key)


CHECKPOINT_PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")
"""The paths Lightning's ``ModelCheckpoint`` keeps in its state (besides ``best_k_models``),
and deletes when a better checkpoint replaces them."""


def within(path: Any, folder: Path) -> bool:
    """Whether ``path`` (a path from a file) lies in ``folder`` both as written (``..``
    collapsed, no link followed) and where it really is (links resolved), with ``folder`` not a
    link itself: a ``checkpoints`` folder linked to another run's holds nothing of this run's. A
    value that is no path (a NUL byte in it, a number) does not lie in it."""
    try:
        if folder.is_symlink():
            return False
        written = Path(os.path.normpath(os.path.abspath(str(path))))
        homes = (Path(os.path.normpath(os.path.abspath(folder))), folder.resolve())
        return any(written.is_relative_to(home) for home in homes) and inside(written, folder)
    except (ValueError, OSError):
        return False


def checkpoint_of(path: Any, folder: Path) -> bool:
    """Whether ``path`` (a path from a file) names a checkpoint file of the run whose
    ``checkpoints/`` is ``folder``: a ``.ckpt`` directly in it (:func:`within`, and its parent
    that folder), as vitattn's ``ModelCheckpoint`` writes them. A user's own file kept beside
    them (``notes.txt``) or in a folder of its own is none: a checkpoint naming it never has
    Lightning delete it."""
    if not within(path, folder):
        return False
    written = Path(os.path.normpath(os.path.abspath(str(path))))
    return written.suffix == ".ckpt" and written.parent.resolve() == folder.resolve()


def confine_callback_state(checkpoint: dict[str, Any], folder: Path) -> list[str]:
    """Drop from the callbacks' state in ``checkpoint`` every path that is no checkpoint file
    of the run in ``folder`` (its ``checkpoints/``: :func:`checkpoint_of`), so that Lightning
    never deletes or reads a file outside the run, or one of the user's in it, because a
    checkpoint says so; the paths dropped."""
    dropped: list[str] = []
    states = checkpoint.get("callbacks")
    if not isinstance(states, dict):
        return dropped
    for state in states.values():
        if not isinstance(state, dict):
            continue
        for key in CHECKPOINT_PATH_KEYS:
            path = state.get(key)
            if isinstance(path, str) and path and not checkpoint_of(path, folder):
                dropped.append(path)
                state[key] = ""
        best = state.get("best_k_models")
        if isinstance(best, dict):
            outside = [path for path in best if not checkpoint_of(path, folder)]
            dropped += [str(path) for path in outside]
            state["best_k_models"] = {k: v for k, v in best.items() if k not in outside}
    return sorted(set(dropped))
