"""Where the configs live, the ``project_root`` resolver, and checks of config-group choices."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf

from vitattn.utils.errors import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parents[3]
"""The repository root (``src/vitattn/utils/config.py`` is three levels below it)."""

CONFIG_DIR = PROJECT_ROOT / "configs"

OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT), replace=True)


def group_options(group: str, config_dir: Path = CONFIG_DIR) -> list[str]:
    """The choices of a config group: the names of its yaml files."""
    return sorted(path.stem for path in (config_dir / group).glob("*.yaml"))


def check_group_choices(arguments: Sequence[str], config_dir: Path = CONFIG_DIR) -> None:
    """Reject ``group=name`` overrides (sweeps included) whose config file does not exist.

    Hydra would fail too, but with a multi-line message; this names the setting and the valid
    choices in one line, before any run directory exists.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    candidates = [arg for arg in arguments if "=" in arg and not arg.startswith("-")]
    try:
        overrides = OverridesParser.create().parse_overrides(candidates)
    except HydraException:
        return  # not ours to report: Hydra explains syntax errors itself
    for override in overrides:
        group = override.key_or_group
        if override.is_delete() or override.package or group.startswith("hydra/"):
            continue
        if not (config_dir / group).is_dir():
            continue
        if override.is_sweep_override():
            values = list(override.sweep_string_iterator())
        else:
            values = [override.get_value_element_as_str()]
        valid = group_options(group, config_dir)
        for value in values:
            if value != "null" and value not in valid:
                raise ConfigError(
                    f"{group}={value} is not a known {group}; choose one of: {', '.join(valid)}"
                )


OUTPUT_SETTINGS = ("hydra.run.dir", "hydra.sweep.dir", "paths.log_dir")


def check_output_dirs(arguments: Sequence[str], default: Path = PROJECT_ROOT / "outputs") -> None:
    """Reject, before Hydra creates anything, an output location that cannot be written.

    Looks at ``hydra.run.dir``, ``hydra.sweep.dir`` and ``paths.log_dir`` when given (else the
    default ``outputs/``): the nearest existing folder on the path must be a writable directory.
    Paths with interpolations (``${...}``) are left to Hydra.
    """
    given = {
        key: value
        for key, value in (arg.split("=", 1) for arg in arguments if "=" in arg)
        if key in OUTPUT_SETTINGS
    }
    if not given:
        given = {"paths.log_dir": str(default)}
    for setting, value in given.items():
        if "${" in value:
            continue
        path = Path(value).expanduser().absolute()
        existing = next((p for p in (path, *path.parents) if p.exists()), None)
        if existing is None:
            continue
        if not existing.is_dir():
            raise ConfigError(
                f"{setting}={value} is not writable: {existing} is a file, not a directory; "
                "choose another location"
            )
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ConfigError(
                f"{setting}={value} is not writable (no write permission in {existing}); "
                "choose a directory you can write to"
            )
