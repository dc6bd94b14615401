"""Where the configs live, the ``project_root`` resolver, and checks of config-group choices."""

from __future__ import annotations

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
