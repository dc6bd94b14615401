"""Building any registered attention kernel from its ``configs/attention/<name>.yaml``, and the
status a result row records when building or running one fails.

Nothing here knows a mechanism by name: the registry :data:`vitattn.attention.ATTENTIONS` says
which exist, the config file says how to build each and which knobs it has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from vitattn.attention import ATTENTIONS
from vitattn.attention.common.base import AttentionKernel
from vitattn.errors import ConfigError, own_refusal
from vitattn.utils.config import CONFIG_DIR


def registered() -> list[str]:
    """Names of every registered mechanism, sorted."""
    return sorted(ATTENTIONS)


def attention_config_path(name: str, config_dir: Path = CONFIG_DIR) -> Path:
    return config_dir / "attention" / f"{name}.yaml"


def resolve_attentions(
    selected: Sequence[str] | None,
    setting: str = "attentions",
    variants: Mapping[str, Any] | None = None,
) -> list[str]:
    """The mechanisms to measure: ``selected`` in its order, or all registered ones if ``None``.

    A name may also be one of ``variants`` (a registered attention with settings, see
    :func:`split_variant`). Unknown names end in one line naming ``setting`` and the choices.
    """
    valid = registered()
    if selected is None:
        return valid
    one = isinstance(selected, str)  # a setting of one name (``reference``), not a list
    names = [str(selected)] if one else [str(name) for name in selected]
    known = set(ATTENTIONS) | set(variants or {})
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        shown = ",".join(unknown) if unknown else ""
        extra = f"; variants: {', '.join(sorted(variants))}" if variants else ""
        if one:
            raise ConfigError(
                f"{setting}={shown} is not a registered attention; choose from: "
                f"{', '.join(valid)}{extra}"
            )
        raise ConfigError(
            f"{setting}=[{shown}] names no registered attention; choose from: {', '.join(valid)} "
            f"(or null for all){extra}"
        )
    return list(dict.fromkeys(names))  # keep order, drop repeats


COMPILE = "compile"
"""A variant's setting that is not a knob: ``compile: true`` times the mechanism compiled
(``torch.compile(fullgraph=True)``), a row beside its eager one."""


COMPILE_MODE = "compile_mode"
"""With ``compile: true``, ``torch.compile``'s ``mode``: ``reduce-overhead`` replays CUDA graphs,
so a call costs one launch from the host whatever its operators; ``default`` without."""

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


COMPILED_SUFFIX = "_compiled"
"""The name of a mechanism's compiled row (``linear_compiled``) where a list of names asks for
them (``vitattn-bench compiled=[...]``, ``vitattn-check kernels.compiled=[...]``)."""


def compiled_variants(selected: Sequence[str] | None, setting: str) -> dict[str, dict[str, Any]]:
    """The variants ``<name>_compiled``, ``{attention: <name>, compile: true}``: each attention of
    ``selected`` (the setting ``setting``; ``[]``: none; null: every registered one, of which a
    command times those it measures) timed compiled."""
    none = selected is not None and len(selected) == 0
    names = [] if none else resolve_attentions(selected, setting)
    return {f"{name}{COMPILED_SUFFIX}": {"attention": name, COMPILE: True} for name in names}


def compiled_variant(label: str, variants: Mapping[str, Mapping[str, Any]] | None) -> bool:
    """Whether the results' name ``label`` is a variant that runs compiled."""
    return bool((variants or {}).get(label, {}).get(COMPILE, False))


def compile_mode(label: str, variants: Mapping[str, Mapping[str, Any]] | None) -> str:
    """The ``torch.compile`` mode of the compiled variant ``label``."""
    return str((variants or {}).get(label, {}).get(COMPILE_MODE, "default"))


def split_variant(
    label: str,
    variants: Mapping[str, Mapping[str, Any]] | None = None,
    knobs: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[str, dict[str, Any]]:
    """``(registered attention, settings)`` behind a name of the results.

    A registered name stands for itself; a variant ``{attention: softmax, impl: naive}`` for
    its ``attention`` with the other entries as settings. ``knobs[label]`` is merged on top.
    """
    variant = dict((variants or {}).get(label) or {})
    attention = str(variant.pop("attention", label))
    variant.pop(COMPILE, None)
    variant.pop(COMPILE_MODE, None)
    return attention, {**variant, **dict((knobs or {}).get(label) or {})}


def load_attention_config(name: str, config_dir: Path = CONFIG_DIR) -> DictConfig:
    path = attention_config_path(name, config_dir)
    if not path.is_file():
        raise ConfigError(f"attention {name!r} is registered but {path} is missing")
    cfg = OmegaConf.load(path)
    assert isinstance(cfg, DictConfig)
    return cfg


def knob_names(name: str, config_dir: Path = CONFIG_DIR) -> list[str]:
    """The settings of ``configs/attention/<name>.yaml`` other than ``_target_``/``_partial_``."""
    return [
        str(key) for key in load_attention_config(name, config_dir) if not str(key).startswith("_")
    ]


def require_knob(shown: str, name: str, knob: Any, config_dir: Path = CONFIG_DIR) -> None:
    """Refuse ``knob`` unless it is a setting of ``configs/attention/<name>.yaml``; the error
    starts with ``shown`` (how the user wrote it)."""
    valid = knob_names(name, config_dir)
    if knob not in valid:
        raise ConfigError(
            f"{shown} is not a setting of configs/attention/{name}.yaml; "
            f"choose one of: {', '.join(valid) or '(none)'}"
        )


def attention_config(
    name: str, knobs: Mapping[str, Any] | None = None, config_dir: Path = CONFIG_DIR
) -> DictConfig:
    """``configs/attention/<name>.yaml`` with ``knobs`` merged in (each must be one of its keys)."""
    cfg = load_attention_config(name, config_dir)
    for key, value in dict(knobs or {}).items():
        require_knob(str(key), name, key, config_dir)
        cfg[key] = value
    return cfg


def build_kernel(
    name: str,
    *,
    seq_len: int,
    heads: int,
    head_dim: int,
    knobs: Mapping[str, Any] | None = None,
) -> AttentionKernel:
    """Instantiate mechanism ``name`` for ``seq_len`` tokens, as the model would."""
    factory = hydra.utils.instantiate(attention_config(name, knobs))
    return factory(seq_len=seq_len, heads=heads, head_dim=head_dim)


def refused_at_every_size(
    name: str,
    knobs: Mapping[str, Any],
    seq_lens: Sequence[int],
    head_dims: Sequence[int],
    heads: int,
) -> ConfigError | None:
    """Mechanism ``name``'s refusal of ``knobs`` where it refuses them at every size (each
    ``seq_len`` with each ``head_dim``), as at the first; ``None`` where it builds at one size,
    or fails there otherwise than by refusing (that row's status will say how). Built on the
    meta device: no memory and no arithmetic, whatever the sizes."""
    refusal: ConfigError | None = None
    for seq_len in seq_lens:
        for head_dim in head_dims:
            try:
                with torch.device("meta"):
                    build_kernel(name, seq_len=seq_len, heads=heads, head_dim=head_dim, knobs=knobs)
            except Exception as error:
                own = own_refusal(error)
                if not isinstance(own, ConfigError):
                    return None
                refusal = refusal or own
                continue
            return None
    return refusal


def attention_factory(name: str, knobs: Mapping[str, Any] | None = None) -> Any:
    """The ``_partial_`` factory of mechanism ``name`` (what ``Block`` takes as ``attention``)."""
    return hydra.utils.instantiate(attention_config(name, knobs))


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is an allocation failure (CUDA or host)."""
    if isinstance(error, torch.OutOfMemoryError | MemoryError):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )


def first_line(error: BaseException, limit: int = 200) -> str:
    """``Type: message`` on one line, cut to ``limit`` characters."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    message = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return message if len(message) <= limit else message[: limit - 3] + "..."


def as_given(
    message: str,
    row: str,
    knobs: Mapping[str, Mapping[str, Any]] | None,
    variants: Mapping[str, Mapping[str, Any]] | None,
) -> str:
    """A mechanism's refusal of one of its settings (``attention.k=-3 is not valid; ...``) with
    the setting named as the bench's command line gave it for row ``row``: ``knobs.<row>.k``, or
    ``variants.<row>.k`` for a variant's own setting. A refusal of a setting the command line
    did not give (a default of ``configs/attention/<name>.yaml``) is left as it is."""
    from vitattn.attention.common.knobs import PREFIX

    knob = refused_knob(message)
    for setting, given in (("knobs", knobs), ("variants", variants)):
        if knob is not None and knob in ((given or {}).get(row) or {}):
            return message.replace(PREFIX, f"{setting}.{row}.")
    return message


def refused_knob(message: str) -> str | None:
    """The setting a mechanism's refusal names (``attention.k=-3 is not valid; ...``: ``k``), or
    ``None`` where it names none."""
    from vitattn.attention.common.knobs import PREFIX

    if not message.startswith(PREFIX):
        return None
    return message.removeprefix(PREFIX).split("=")[0].split(" ")[0]


def as_budgeted(
    message: str,
    row: str,
    budget_knob: str,
    knobs: Mapping[str, Mapping[str, Any]] | None,
    variants: Mapping[str, Mapping[str, Any]] | None,
) -> str:
    """:func:`as_given` for ``mode=approx``, where row ``row``'s ``budget_knob`` takes the values
    of ``approx.budgets.<row>.values`` (over any ``knobs.<row>`` of it): a refusal of that knob
    names the list it came from (``approx.budgets.linformer.values: k=-3 is not valid; ...``)."""
    from vitattn.attention.common.knobs import PREFIX

    if budget_knob and refused_knob(message) == budget_knob:
        return f"approx.budgets.{row}.values: {message.replace(PREFIX, '')}"
    return as_given(message, row, knobs, variants)


def failure_status(error: BaseException, named: Callable[[str], str] = str) -> str:
    """The status of a row whose kernel could not be built or run: ``unsupported: <why>`` for a
    setting the kernel refuses (its setting ``named`` as given, :func:`as_given`), ``oom``, or
    ``error: <Type: message>``."""
    problem = own_refusal(error)
    if problem is not None:
        return f"unsupported: {named(str(problem))}"
    return "oom" if is_out_of_memory(error) else f"error: {first_line(error)}"
