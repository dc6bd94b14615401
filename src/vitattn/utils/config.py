"""Where the configs live, the ``project_root`` resolver, and what a composed config chose."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

PROJECT_ROOT = Path(__file__).resolve().parents[3]
"""The repository root (``src/vitattn/utils/config.py`` is three levels below it)."""

CONFIG_DIR = PROJECT_ROOT / "configs"


def group_options(group: str, config_dir: Path = CONFIG_DIR) -> list[str]:
    """The choices of a config group: the names of its yaml files."""
    return sorted(path.stem for path in (config_dir / group).glob("*.yaml"))


def groups_help(*groups: str) -> str:
    """``group: option, option, ...`` lines for a command's ``--help``, read from the config
    tree so a new option shows up without editing the help text."""
    width = max(len(group) for group in groups)
    return "\n".join(f"  {group:<{width}}  {', '.join(group_options(group))}" for group in groups)


OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT), replace=True)
OmegaConf.register_new_resolver("vitattn_groups", groups_help, replace=True)


def chosen_option(cfg: DictConfig, group: str) -> str | None:
    """The option chosen for ``group`` (e.g. ``attention`` -> ``softmax``), if known: from the
    running Hydra app, or from a config composed with ``return_hydra_config=True``."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return HydraConfig.get().runtime.choices.get(group)
    if "hydra" in cfg:
        return cfg.hydra.runtime.choices.get(group)
    return None
