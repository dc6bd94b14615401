"""A run's recorded overrides, replayed by ``resume=true`` and ``ckpt_path=<run>``: typed
settings of vitattn's own configs, never where anything goes.

``<run>/.hydra/overrides.yaml`` is a file of the run, and the run may be someone else's. A line
of it is replayed only when it is one of (:class:`RecordedSettings`):

* a choice of one of vitattn's config groups that exists in ``configs/`` (``attention=linear``)
  and sets none of Hydra's own settings (not ``hparams_search=optuna``, which a search's
  trials record: its mode and sweeper would start a search of its own);
* a setting that the config composed from vitattn's own ``configs/`` (with the recorded group
  choices) already has, given in that setting's type: a flag for a flag, an integer for an
  integer, a finite number for a number (all within :data:`LARGEST_NUMBER`), and for a word
  setting a plain word (``val/acc``, ``bf16-mixed``; no ``..``, no leading ``/`` or ``~``, no
  interpolation);
* an argument of Lightning's ``Trainer`` that ``configs/trainer/`` does not set, added with
  ``+trainer.<name>`` and given in its type (:data:`TRAINER_ADDITIONS`:
  ``+trainer.limit_val_batches=0``);
* the deletion of one of the callbacks or loggers (``~callbacks.throughput``);
* a plain value (a flag, a number, a word) of a node whose ``_target_`` the command line gives
  now (``+callbacks.mine._target_=mypkg.Mine``: the user's own callback, and its recorded
  ``+callbacks.mine.step=3``).

Never a setting that says *where* (:func:`says_where`): a file or folder name, a URL, anything
under ``paths`` or ``hydra``, or a setting whose default is derived from another
(``${paths.output_dir}/checkpoints``). Those come from the command line or the defaults.
Anything else is refused in one line naming the file, its line and the override.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from vitattn.errors import ConfigError
from vitattn.utils.config import CONFIG_DIR, all_group_options, group_folders, hydra_configs

LARGEST_NUMBER = 10**9
"""The largest magnitude a recorded number may have (a step count, a size, a seed)."""

WHERE_NAMES = re.compile(r"(dir|dirpath|path|paths|file|filename|url|uri|name|root|version)$")
"""Names of settings that say where something is read or written (``data_dir``, ``url``,
``filename``, ``logger.csv.name``, ``default_root_dir``, ``ckpt_path``, ``task_name``...)."""

WHERE_GROUPS = ("hydra", "paths")

WORD = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+:-]{0,63}(/[A-Za-z0-9_+-][A-Za-z0-9_.+:-]{0,63})?")
"""A word setting's value from a file: ``val/acc``, ``bf16-mixed``, ``mean``."""

DELETABLE = ("callbacks", "logger")
"""Groups whose parts a recorded override may delete (``~callbacks.throughput``)."""

COMMAND_LINE = "give it on the command line if you mean it"

TRAINER_ADDITIONS = {
    "limit_train_batches": "number",
    "limit_val_batches": "number",
    "limit_test_batches": "number",
    "overfit_batches": "number",
    "min_steps": "integer",
    "min_epochs": "integer",
    "accumulate_grad_batches": "integer",
    "reload_dataloaders_every_n_epochs": "integer",
    "gradient_clip_algorithm": "word",
    "benchmark": "flag",
    "detect_anomaly": "flag",
    "enable_progress_bar": "flag",
}
"""Arguments of ``lightning.pytorch.Trainer`` that ``configs/trainer/`` leaves out, which a run
adds with ``+trainer.<name>=<value>`` and a resume replays, each with its type (Lightning's own
annotation, of which this is the plain part). Lightning's other arguments are not replayed from
a file: they take objects (``profiler``, ``plugins``), say where (``model_registry``), or start
processes (``num_nodes``); a resume takes them from the command line."""


class RecordedOverrideError(ConfigError):
    """A recorded override is not a typed setting of vitattn's: nothing was run or written."""


def says_where(key: str) -> bool:
    """Whether the setting ``key`` (``logger.csv.name``) names a place: a path, a file name, a
    URL, or anything under ``paths`` or ``hydra``."""
    parts = key.replace("/", ".").split(".")
    return parts[0] in WHERE_GROUPS or any(WHERE_NAMES.search(part.lower()) for part in parts)


def is_group(key: str, config_dir: Path = CONFIG_DIR, extra_dirs: Sequence[Path] = ()) -> bool:
    """Whether ``key`` is one of vitattn's config groups (``attention``, ``logger``), or of the
    folders ``extra_dirs`` the command line adds (``--config-dir``)."""
    if "." in key or "/" in key:
        return False
    return bool(group_folders(key, extra_dirs, config_dir))


class RecordedSettings:
    """The settings a run's recorded overrides may set: those of the config that vitattn's own
    ``configs/<config_name>.yaml`` composes with ``group_choices`` (the recorded and the given
    group choices, each checked first), with their types."""

    def __init__(
        self,
        group_choices: Iterable[str],
        config_name: str = "train",
        config_dir: Path = CONFIG_DIR,
        extra_dirs: Sequence[Path] = (),
    ) -> None:
        from hydra import compose
        from hydra.core.global_hydra import GlobalHydra
        from omegaconf import open_dict

        self.config_dir = config_dir
        self.extra_dirs = tuple(extra_dirs)
        self.user_nodes: set[str] = set()
        """Nodes whose ``_target_`` the command line gives now: the user's own (a callback of
        theirs), whose recorded plain settings are replayed under it."""
        choices = list(group_choices)
        was_initialized = GlobalHydra.instance().is_initialized()
        try:
            with hydra_configs(extra_dirs, config_dir):
                self.config = compose(config_name, overrides=choices, return_hydra_config=True)
            self.hydra = hydra_settings(self.config)  # Hydra's own, by dotted key
            with open_dict(self.config):
                del self.config["hydra"]  # none is replayed: a key there says where
        except Exception as error:  # a combination of choices that does not compose
            first = next(iter(str(error).splitlines()), type(error).__name__)
            raise RecordedOverrideError(
                f"the group choices {choices} do not compose ({first})"
            ) from None
        finally:
            if not was_initialized:
                GlobalHydra.instance().clear()

    @classmethod
    def of(
        cls,
        recorded: Iterable[tuple[str, str]],
        given: Iterable[str],
        config_name: str = "train",
        extra_dirs: Sequence[Path] = (),
    ) -> RecordedSettings:
        """The settings of the config composed with the recorded group choices (``(text,
        source)``; each refused in one line unless its option exists, in ``configs/`` or in the
        folders ``extra_dirs`` the command line adds now) and then those ``given`` on the
        command line (an unknown one is left to the command line's own check)."""
        chosen: list[tuple[str, str]] = []
        given_choices: list[str] = []
        given = list(given)
        for text, source in recorded:
            override = cls.parse(text, source)
            if is_group(override.key_or_group, extra_dirs=extra_dirs) and not override.is_delete():
                check_group_choice(override, text, source, extra_dirs=extra_dirs)
                chosen.append((text, source))
        for text in given:
            try:
                override = cls.parse(text, "the command line")
                if (
                    is_group(override.key_or_group, extra_dirs=extra_dirs)
                    and not override.is_delete()
                ):
                    check_group_choice(override, text, "the command line", extra_dirs=extra_dirs)
                    given_choices.append(text)
            except RecordedOverrideError:
                continue
        choices = [text for text, _ in chosen] + given_choices
        settings = cls(choices, config_name, extra_dirs=extra_dirs)
        settings.refuse_hydra_settings(chosen, given_choices, config_name)
        settings.user_nodes = {
            text.split("=", 1)[0].lstrip("+").removesuffix("._target_")
            for text in given
            if text.split("=", 1)[0].endswith("._target_")
        }
        return settings

    def refuse_hydra_settings(
        self, recorded: list[tuple[str, str]], given: list[str], config_name: str
    ) -> None:
        """Refuse in one line a recorded group choice whose option sets Hydra's own settings
        (``hparams_search=optuna``: ``hydra.mode`` and ``hydra.sweeper``, a search of its own),
        found by composing without it (this composition has them all); a choice given now is
        the user's."""
        if not recorded:
            return
        without = composed_hydra_settings(config_name, given, self.config_dir, self.extra_dirs)
        if not changed_settings(without, self.hydra):
            return
        for text, source in recorded:
            changed = hydra_changes(config_name, given, [text], self.config_dir, self.extra_dirs)
            if changed:
                raise RecordedOverrideError(
                    f"{source}: {text!r} chooses an option that sets {', '.join(changed)} "
                    "(Hydra's own: a search or sweep of its own); a run's recorded overrides "
                    "never set hydra.*; to continue the search a run came from, run it again "
                    "into its hydra.sweep.dir"
                )
        raise RecordedOverrideError(  # only together: each alone changes nothing of Hydra's
            f"the group choices {[text for text, _ in recorded]} recorded in the run set "
            "Hydra's own settings together; a run's recorded overrides never set hydra.*"
        )

    @staticmethod
    def parse(text: str, source: str) -> Any:
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.errors import HydraException

        try:
            return OverridesParser.create().parse_override(text)
        except HydraException:
            raise RecordedOverrideError(
                f"{source}: {text!r} is not an override (key=value)"
            ) from None

    def check(self, text: str, source: str) -> None:
        """Refuse in one line the recorded override ``text`` (``source``: the file and its line)
        unless it is a typed setting of vitattn's (see the module's docstring)."""
        override = self.parse(text, source)
        key = override.key_or_group
        if says_where(key) or says_where(override.package or ""):
            raise RecordedOverrideError(
                f"{source}: {text!r} says where something is read or written ({key}); a run's "
                f"files never do: that comes from the command line or the defaults; {COMMAND_LINE}"
            )
        if override.is_delete():
            if (
                key.split(".")[0] in DELETABLE
                and key.count(".") == 1
                and self.node(key) is not None
            ):
                return
            raise RecordedOverrideError(
                f"{source}: {text!r} deletes {key}; a run's recorded overrides may delete only "
                f"one of the callbacks or loggers (~callbacks.<name>); {COMMAND_LINE}"
            )
        if is_group(key, self.config_dir, self.extra_dirs):
            check_group_choice(override, text, source, self.config_dir, self.extra_dirs)
            return
        node = self.node(key)
        parent, _, name = key.rpartition(".")
        if node is None and parent in self.user_nodes:
            expected = "optional"  # a setting of a node the user gives now: plain values only
        elif node is None and parent == "trainer" and name in TRAINER_ADDITIONS:
            expected = TRAINER_ADDITIONS[name]
        elif node is None:
            raise RecordedOverrideError(
                f"{source}: {text!r} sets {key}, which is not a setting of vitattn's configs; a "
                f"run's recorded overrides may only change existing settings; {COMMAND_LINE}"
            )
        elif name == "_target_":
            return  # checked against vitattn's own targets (vitattn.runs.trust.check_target)
        else:
            expected = self.type_of(node, key, text, source)
        if not fits(override.value(), expected):
            raise RecordedOverrideError(
                f"{source}: {text!r} is not {DESCRIBED[expected]}, the type of {key}; a run's "
                f"recorded overrides hold plain settings only; {COMMAND_LINE}"
            )

    def node(self, key: str) -> Any:
        """The config node at ``key`` in the composed defaults, or ``None``."""
        from omegaconf import OmegaConf

        node: Any = self.config
        for part in key.split("."):
            if not OmegaConf.is_dict(node) or part not in node:
                return None
            node = node._get_node(part)
        return node

    @staticmethod
    def type_of(node: Any, key: str, text: str, source: str) -> str:
        """``flag``, ``integer``, ``number`` or ``word``: the type of the setting at ``node``."""
        from omegaconf import OmegaConf

        value = None if OmegaConf.is_config(node) else node._value()
        if OmegaConf.is_config(node) or (isinstance(value, str) and "${" in value):
            raise RecordedOverrideError(
                f"{source}: {text!r} sets {key}, which is not a plain setting (a config node or "
                f"one derived from others); {COMMAND_LINE}"
            )
        if isinstance(value, bool):
            return "flag"
        if isinstance(value, int):
            return "integer"
        if isinstance(value, float):
            return "number"
        if isinstance(value, str):
            return "word"
        return "optional"  # null by default: a flag, a number or a word


def hydra_changes(
    config_name: str,
    base: Sequence[str],
    added: Sequence[str],
    config_dir: Path = CONFIG_DIR,
    extra_dirs: Sequence[Path] = (),
) -> list[str]:
    """The settings under ``hydra`` (``hydra.mode``, ``hydra.sweeper``) that the group choices
    ``added`` change in the config composed with ``base``, compared as written (before
    interpolation); what Hydra derives from the overrides themselves (``hydra.overrides``,
    ``hydra.runtime``, ``hydra.job.override_dirname``) is not a setting."""
    before = composed_hydra_settings(config_name, base, config_dir, extra_dirs)
    after = composed_hydra_settings(config_name, [*base, *added], config_dir, extra_dirs)
    return changed_settings(before, after)


def changed_settings(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """``hydra.<node>`` of each of Hydra's settings that differs between two of
    :func:`hydra_settings`, but those Hydra derives from the overrides themselves."""
    derived = ("overrides", "runtime", "job.override_dirname")
    changed = {
        key.split(".")[0]
        for key in before.keys() | after.keys()
        if before.get(key, MISSING) != after.get(key, MISSING)
        and not any(key == d or key.startswith(f"{d}.") for d in derived)
    }
    return sorted(f"hydra.{key}" for key in changed)


def hydra_settings(config: Any) -> dict[str, Any]:
    """Hydra's own settings of a config composed with them, by dotted key, as written (before
    interpolation)."""
    from omegaconf import OmegaConf

    return flattened(OmegaConf.to_container(config.hydra, resolve=False))


def composed_hydra_settings(
    config_name: str,
    overrides: Sequence[str],
    config_dir: Path = CONFIG_DIR,
    extra_dirs: Sequence[Path] = (),
) -> dict[str, Any]:
    """:func:`hydra_settings` of ``configs/<config_name>.yaml`` composed with ``overrides``."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra

    was_initialized = GlobalHydra.instance().is_initialized()
    try:
        with hydra_configs(extra_dirs, config_dir):
            config = compose(config_name, overrides=list(overrides), return_hydra_config=True)
    finally:
        if not was_initialized:
            GlobalHydra.instance().clear()
    return hydra_settings(config)


MISSING = object()


def flattened(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"sweeper.n_trials": 20, ...}``: every leaf of a nested container by its dotted key."""
    if isinstance(tree, dict) and tree:
        return {
            key: value
            for name, child in tree.items()
            for key, value in flattened(child, f"{prefix}.{name}" if prefix else str(name)).items()
        }
    return {prefix: tree}


def check_group_choice(
    override: Any,
    text: str,
    source: str,
    config_dir: Path = CONFIG_DIR,
    extra_dirs: Sequence[Path] = (),
) -> None:
    """Refuse in one line a group choice that is not an option of ``configs/<group>/``, or of
    ``<dir>/<group>/`` for a folder of ``extra_dirs`` (the command line's ``--config-dir``)."""
    group = override.key_or_group
    values = override.value()
    values = values if isinstance(values, list) else [values]
    options = all_group_options(group, extra_dirs, config_dir)
    if override.package or not all(isinstance(v, str) and v in options for v in values):
        among = " and the --config-dir given" if extra_dirs else ""
        raise RecordedOverrideError(
            f"{source}: {text!r} is not a choice of {group} ({', '.join(options)}); a run's "
            f"recorded overrides may only choose among configs/{group}/{among}"
        )


DESCRIBED = {
    "flag": "true or false",
    "integer": f"an integer within +-{LARGEST_NUMBER}",
    "number": f"a finite number within +-{LARGEST_NUMBER}",
    "word": "a plain word (letters, digits, _.+:- and one /; no path)",
    "optional": "null, a flag, a number or a plain word",
}


def fits(value: Any, expected: str) -> bool:
    """Whether a recorded ``value`` (as Hydra parses it) has the ``expected`` type."""
    if value is None:
        return expected in ("word", "optional", "number", "integer")
    if isinstance(value, bool):
        return expected in ("flag", "optional")
    if isinstance(value, int | float):
        if not (math.isfinite(value) and abs(value) <= LARGEST_NUMBER):
            return False
        return expected in ("number", "optional") or (
            expected == "integer" and isinstance(value, int)
        )
    if isinstance(value, str):
        plain = WORD.fullmatch(value) is not None and ".." not in value
        return plain and expected in ("word", "optional")
    return False
