"""Where the configs live, the resolvers the configs use (project root, ``--help`` groups, run and
job directory names), and what a composed config chose."""

from __future__ import annotations

import contextlib
import hashlib
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vitattn.errors import ConfigError
from vitattn.utils.decimals import shown_in_name

PROJECT_ROOT = Path(__file__).resolve().parents[3]
"""The repository root (``src/vitattn/utils/config.py`` is three levels below it)."""

CONFIG_DIR = PROJECT_ROOT / "configs"


def is_group_folder(group: str, config_dir: Path = CONFIG_DIR) -> bool:
    """Whether ``config_dir/group`` is a folder: a config group of the tree. An override's key
    may be of any length, and a name longer than the file system takes is no group (``is_dir``
    raises there, "File name too long")."""
    try:
        return (config_dir / group).is_dir()
    except OSError:
        return False


@contextlib.contextmanager
def hydra_configs(extra_dirs: Sequence[Path] = (), config_dir: Path = CONFIG_DIR) -> Iterator[None]:
    """Hydra's compose API over ``config_dir``, with ``extra_dirs`` in its search path as Hydra's
    ``--config-dir`` puts a folder there (after the app's configs, before the structured ones):
    group options and primary configs of the user's own are found as the app finds them."""
    from hydra import initialize_config_dir
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        if extra_dirs:
            search_path = create_config_search_path(str(config_dir))
            for folder in extra_dirs:
                search_path.prepend(
                    provider="command-line",
                    path=f"file://{folder}",
                    anchor=SearchPathQuery(provider="schema"),
                )
            GlobalHydra.instance().clear()  # initialize_config_dir puts the one before it back
            Hydra.create_main_hydra2(task_name="app", config_search_path=search_path)
        yield


def all_group_options(
    group: str, extra_dirs: Sequence[Path] = (), config_dir: Path = CONFIG_DIR
) -> list[str]:
    """The choices of a config group in ``config_dir`` and ``extra_dirs`` (``--config-dir``)."""
    folders = group_folders(group, extra_dirs, config_dir)
    return sorted({option for folder in folders for option in group_options(group, folder)})


def group_folders(
    group: str, extra_dirs: Sequence[Path] = (), config_dir: Path = CONFIG_DIR
) -> list[Path]:
    """The folders among ``config_dir`` and ``extra_dirs`` (``--config-dir``) that hold the
    config group ``group``."""
    return [folder for folder in (config_dir, *extra_dirs) if is_group_folder(group, folder)]


def group_options(group: str, config_dir: Path = CONFIG_DIR) -> list[str]:
    """The choices of a config group: the names of its yaml files."""
    return sorted(path.stem for path in (config_dir / group).glob("*.yaml"))


def default_parts(group: str, config_dir: Path = CONFIG_DIR) -> list[str]:
    """The options of ``group`` that its ``default`` option composes (``callbacks/default.yaml``
    lists one file per callback): parts of a choice rather than choices of their own."""
    default = config_dir / group / "default.yaml"
    if not default.is_file():
        return []
    listed = OmegaConf.load(default).get("defaults") or []
    options = set(group_options(group, config_dir))
    return sorted(str(entry) for entry in listed if isinstance(entry, str) and entry in options)


def groups_help(*groups: str) -> str:
    """``group: option, option, ...`` lines for a command's ``--help``, read from the config
    tree so a new option shows up without editing the help text. A group whose ``default``
    composes several of its files (``callbacks``) shows those as parts of ``default``, each
    one dropped with ``~group.part``."""
    for group in groups:  # a name, never a path: the resolver's argument may come from a file
        if not (isinstance(group, str) and group.isidentifier() and (CONFIG_DIR / group).is_dir()):
            known = sorted(p.name for p in CONFIG_DIR.iterdir() if p.is_dir())
            raise ConfigError(
                f"vitattn_groups: {str(group)[:80]!r} is not a config group; choose among "
                f"{', '.join(known)}"
            )
    width = max(len(group) for group in groups)
    lines = []
    for group in groups:
        parts = default_parts(group)
        choices = [option for option in group_options(group) if option not in parts]
        lines.append(f"  {group:<{width}}  {', '.join(choices)}")
        if parts:
            described = f"default is {', '.join(parts)}; drop one with ~{group}.<name>"
            indent = " " * (width + 4)
            lines.extend(
                textwrap.wrap(described, 100, initial_indent=indent, subsequent_indent=indent)
            )
    return "\n".join(lines)


MAX_NAME = 120
"""Longest directory name made from overrides; longer ones are cut and end with a hash."""

MAX_LABEL = 160
"""Longest label a summary gives a setting or a run (the overrides that differ, an attention's
name), read from run directories that anyone may have written; longer ones are cut and end with
a hash."""


def cut_apart(text: str, limit: int) -> str:
    """``text`` where it has at most ``limit`` characters, else its first ones, ``~`` and eight
    hex digits of its SHA-1: two texts that start alike stay apart."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha1(text.encode(errors="surrogatepass")).hexdigest()[:8]
    return f"{text[: limit - 9]}~{digest}"


def job_directory_name(override_dirname: str, number: int | str, sweeper: str = "") -> str:
    """A sweep job's directory: what differs between the jobs (Hydra's ``override_dirname``,
    e.g. ``attention=linear,seed=1``) with ``/`` made ``_``, or the job's number if nothing
    differs. Names past :data:`MAX_NAME` characters are cut and made unique with a hash. A
    ``sweeper`` other than Hydra's basic one (Optuna, say) may try the same values twice: its
    jobs' names start with their number, which keeps them apart, and the decimals it wrote in
    full are shown to four significant digits (``3_optimizer.lr=0.0001918``:
    :mod:`vitattn.utils.decimals`)."""
    name = str(override_dirname).replace("/", "_").replace("\\", "_").strip()
    if sweeper and not str(sweeper).endswith("BasicSweeper"):
        name = shown_in_name(name)
        name = f"{number}_{name}" if name else str(number)
    if not name:
        return str(number)
    return cut_apart(name, MAX_NAME)


def run_directory_name(stamp: str, attention: str | None = None) -> str:
    """A single run's directory: its time stamp, then the attention it trains if any."""
    return f"{stamp}_{attention}" if attention else str(stamp)


class MatmulPrecision(Enum):
    """``torch.set_float32_matmul_precision``: ``high`` lets float32 products use TF32 (Ampere
    and later); ``highest`` keeps them float32. torch itself takes any other word with a
    warning and keeps what it had, so the commands refuse it first."""

    highest = "highest"
    high = "high"
    medium = "medium"


def gpu_precision() -> str:
    """``trainer=gpu``'s precision: ``bf16-mixed`` where the GPU computes in bf16 natively
    (compute capability 8.0 and up: A100, H100, L4, RTX 30xx and later), else ``16-mixed``
    (fp16 with Lightning's gradient scaler: T4, V100). Without a visible GPU, ``bf16-mixed``."""
    import torch

    if torch.cuda.is_available() and torch.cuda.get_device_capability() < (8, 0):
        return "16-mixed"
    return "bf16-mixed"


OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT), replace=True)
OmegaConf.register_new_resolver("vitattn_groups", groups_help, replace=True)
OmegaConf.register_new_resolver("vitattn_job_dir", job_directory_name, replace=True)
OmegaConf.register_new_resolver("vitattn_run_dir", run_directory_name, replace=True)
OmegaConf.register_new_resolver("vitattn_gpu_precision", gpu_precision, replace=True)


def sweep_job() -> bool:
    """Whether this process runs a job of a Hydra multirun (``-m``): ``False`` for a single run
    and outside a Hydra app."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def chosen_option(cfg: DictConfig, group: str) -> str | None:
    """The option chosen for ``group`` (e.g. ``attention`` -> ``softmax``), if known: from the
    running Hydra app, or from a config composed with ``return_hydra_config=True``."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return HydraConfig.get().runtime.choices.get(group)
    if "hydra" in cfg:
        return cfg.hydra.runtime.choices.get(group)
    return None


def flatten(tree: Mapping[str, Any], separator: str = "/", prefix: str = "") -> dict[str, Any]:
    """``{"model": {"heads": 8}}`` to ``{"model/heads": 8}``; values other than numbers,
    strings, booleans and ``None`` (lists, say) become strings."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, separator, f"{name}{separator}"))
        elif value is None or isinstance(value, bool | int | float | str):
            flat[name] = value
        else:
            flat[name] = str(value)
    return flat
