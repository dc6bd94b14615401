"""What a resume restores of a checkpoint's training state, typed against what vitattn builds.

A resume hands the checkpoint's ``optimizer_states`` and ``lr_schedulers`` to torch, which takes
them as they are: an optimizer's ``load_state_dict`` maps the listed parameters to its own and
keeps their state tensors, a scheduler's does ``self.__dict__.update(state)``. A wrong value
would fail mid-restore or at the first step, with a traceback and the interrupted run marked
failed. :func:`check_training_state` refuses it first, in one line naming the file and the key,
against what vitattn's own objects write, built from the run's config:

* the optimizer: the parameter groups of the network (:func:`vitattn.utils.parameters.
  parameter_groups`, on the network built on the meta device), and the state and group settings
  the configured optimizer writes after one step on a dummy parameter per group; each state
  tensor is a float tensor with the shape of the parameter it belongs to, or a scalar count
  where the optimizer keeps one (Adam's ``step``); a group's settings are of the types the
  optimizer writes, its flags the configured ones, and within the ranges its constructor checks;
* the schedule: the ``state_dict()`` of the configured scheduler on that dummy optimizer (none
  with ``~scheduler``): the same keys, each value of the same type, lists of the same length,
  numbers finite, integers counts, both within
  :data:`~vitattn.runs.checkpoint_values.MAX_COUNT` (10^12).

Nothing here is a list of keys: what is valid is what the configured objects write.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vitattn.runs.checkpoint_values import MAX_COUNT, CheckpointValueError
from vitattn.utils.parameters import parameter_groups

if TYPE_CHECKING:
    from torch import nn

DUMMY_SHAPE = (2, 2)
"""The shape of the dummy parameters the configured optimizer is stepped on: a state it keeps
per parameter has this shape, a state it keeps as a scalar (``step``) has none."""

MAX_TEXT = 1000
"""The longest string a training state may hold where vitattn's objects write a string."""


@dataclass(frozen=True)
class WrittenState:
    """What vitattn's configured optimizer and scheduler write into a checkpoint."""

    state: dict[str, Any]
    """One parameter's optimizer state (``exp_avg``, ``step``...), of a dummy parameter."""
    groups: list[dict[str, Any]]
    """The optimizer's parameter groups' settings (``lr``, ``betas``...), without ``params``."""
    schedulers: list[dict[str, Any]]
    """The ``state_dict()`` of each scheduler: one, or none with ``~scheduler``."""
    optimizer: type
    """The configured optimizer's class, whose constructor checks a group's settings' ranges."""


def written_state(
    groups: list[dict[str, Any]], optimizer: Mapping[str, Any], scheduler: Mapping[str, Any] | None
) -> WrittenState:
    """Build the configured optimizer on one dummy parameter per group of ``groups``, and the
    configured scheduler on it; step both once and read what they write."""
    import hydra
    import torch

    dummies = [
        {**{k: v for k, v in group.items() if k != "params"}, "params": [dummy]}
        for group in groups
        for dummy in [torch.nn.Parameter(torch.zeros(DUMMY_SHAPE))]
    ]
    built = hydra.utils.instantiate(dict(optimizer))(params=dummies)
    schedule = None
    if scheduler is not None:
        schedule = hydra.utils.instantiate(dict(scheduler))(optimizer=built, total_steps=100)
    for group in built.param_groups:
        for param in group["params"]:
            param.grad = torch.zeros_like(param)
    built.step()
    if schedule is not None:
        schedule.step()
    written = built.state_dict()
    return WrittenState(
        state=dict(written["state"][0]),
        groups=[{k: v for k, v in g.items() if k != "params"} for g in written["param_groups"]],
        schedulers=[] if schedule is None else [schedule.state_dict()],
        optimizer=type(built),
    )


def check_training_state(
    checkpoint: Mapping[str, Any],
    net: nn.Module,
    optimizer: Mapping[str, Any],
    scheduler: Mapping[str, Any] | None,
    source: str,
) -> None:
    """Refuse in one line (:class:`CheckpointValueError`, naming ``source``) a checkpoint whose
    ``optimizer_states`` or ``lr_schedulers`` differ from what the configured ``optimizer`` and
    ``scheduler`` write for ``net`` (built on the meta device; its parameters are named
    ``net.<name>``, as the LightningModule holds it)."""
    groups = parameter_groups(net)
    try:
        written = written_state(groups, optimizer, scheduler)
    except Exception:  # objects that do not build here: the trial build names them
        return
    names = {id(param): f"net.{name}" for name, param in net.named_parameters()}
    params = [(names[id(p)], tuple(p.shape)) for group in groups for p in group["params"]]
    check_optimizer_state(checkpoint.get("optimizer_states"), groups, params, written, source)
    writer = "a constant rate (~scheduler)" if scheduler is None else str(scheduler.get("_target_"))
    check_like(checkpoint.get("lr_schedulers"), written.schedulers, "lr_schedulers", source, writer)


def refuse(source: str, key: str, problem: str) -> CheckpointValueError:
    """The one line refusing ``key`` of the checkpoint ``source``: ``<source>: <key> <problem>;
    nothing was loaded``."""
    return CheckpointValueError(f"{source}: {key} {problem}; nothing was loaded")


def check_optimizer_state(
    states: Any,
    groups: list[dict[str, Any]],
    params: list[tuple[str, tuple[int, ...]]],
    written: WrittenState,
    source: str,
) -> None:
    """Exactly one optimizer state, of ``groups``' parameter groups; each listed parameter once,
    and the state of each one it holds as the configured optimizer writes it (``params``: the
    name and shape of each parameter, in the groups' order)."""
    if not isinstance(states, list | tuple) or len(states) != 1:
        held = (
            f"{len(states)} optimizer states"
            if isinstance(states, list | tuple)
            else ("none" if states is None else f"a {type(states).__name__}")
        )
        raise refuse(
            source,
            "optimizer_states",
            f"holds {held}; vitattn-train builds one optimizer, whose state a resume restores",
        )
    state = states[0]
    key = "optimizer_states.0"
    if not isinstance(state, Mapping) or not isinstance(state.get("state"), Mapping):
        raise refuse(source, key, "is not an optimizer's state (a state and param_groups)")
    listed = check_param_groups(state.get("param_groups"), groups, written, key, source)
    for index, values in state["state"].items():
        if index not in listed:
            raise refuse(
                source,
                f"{key}.state.{index!r}",
                "is the state of no parameter its param_groups list",
            )
        name, shape = params[listed[index]]
        check_parameter_state(values, name, shape, written.state, f"{key}.state.{index}", source)


def check_param_groups(
    saved: Any,
    groups: list[dict[str, Any]],
    written: WrittenState,
    key: str,
    source: str,
) -> dict[int, int]:
    """The saved groups are ``groups``, each listing as many distinct parameter ids, and their
    settings those the optimizer writes (a setting torch adds later may be missing). Returns the
    position, among all parameters in the groups' order, of each listed id."""
    if not isinstance(saved, list | tuple) or len(saved) != len(groups):
        raise refuse(
            source,
            f"{key}.param_groups",
            f"is not a list of {len(groups)} parameter groups "
            f"({', '.join(str(g.get('name')) for g in groups)}), as vitattn's optimizer has",
        )
    listed: dict[int, int] = {}
    for number, (group, expected) in enumerate(zip(saved, groups, strict=True)):
        where = f"{key}.param_groups.{number}"
        ids = group.get("params") if isinstance(group, Mapping) else None
        size = len(expected["params"])
        if not (
            isinstance(ids, list | tuple)
            and len(ids) == size
            and all(isinstance(i, int) and not isinstance(i, bool) and i not in listed for i in ids)
            and len(set(ids)) == size
        ):
            raise refuse(
                source,
                f"{where}.params",
                f"is not a list of {size} distinct parameter ids (integers), as the group "
                f"{expected.get('name')} of the network its config builds has",
            )
        listed.update((i, len(listed)) for i in ids)
        settings = written.groups[number]
        for setting, value in group.items():
            if setting == "params":
                continue
            if setting not in settings:
                raise refuse(
                    source,
                    f"{where}.{setting}",
                    "is no setting of the configured optimizer's groups "
                    f"({', '.join(sorted(settings))})",
                )
            check_like(value, settings[setting], f"{where}.{setting}", source, "the optimizer")
            if isinstance(value, bool) and value != settings[setting]:
                raise refuse(  # amsgrad=True, with no state of it, fails at the first step
                    source,
                    f"{where}.{setting}",
                    f"is {value}, but the configured optimizer has {settings[setting]} (a "
                    "resume continues with the run's optimizer settings)",
                )
        check_group_ranges(group, written.optimizer, where, source)
    return listed


def check_group_ranges(group: Mapping[str, Any], optimizer: type, where: str, source: str) -> None:
    """A group's settings within the ranges the optimizer's own constructor accepts (``betas``
    below 1, ``lr`` and ``eps`` not negative...): torch checks them when it builds an optimizer,
    not when it loads a state, and a beta of 1 fails at the first step."""
    import inspect

    import torch

    accepted = inspect.signature(optimizer).parameters
    settings = {k: v for k, v in group.items() if k in accepted and k != "params"}
    try:
        optimizer([torch.nn.Parameter(torch.zeros(DUMMY_SHAPE))], **settings)
    except (ValueError, TypeError, RuntimeError) as error:
        reason = " ".join(str(error).split())[:200]
        raise refuse(
            source,
            where,
            f"has settings {optimizer.__module__}.{optimizer.__name__} refuses ({reason})",
        ) from None


def check_parameter_state(
    values: Any,
    name: str,
    shape: tuple[int, ...],
    written: dict[str, Any],
    key: str,
    source: str,
) -> None:
    """One parameter's optimizer state: the keys the optimizer writes, each tensor a float
    tensor of the parameter's shape, or a scalar where the optimizer keeps a scalar."""
    import torch

    if not isinstance(values, Mapping) or set(values) != set(written):
        held = sorted(map(str, values)) if isinstance(values, Mapping) else type(values).__name__
        raise refuse(
            source,
            key,
            f"holds {held}, but the configured optimizer keeps {sorted(written)} per parameter",
        )
    for state_key, expected in written.items():
        value, where = values[state_key], f"{key}.{state_key}"
        if not isinstance(expected, torch.Tensor):
            check_like(value, expected, where, source, "the optimizer")
            continue
        if not isinstance(value, torch.Tensor) or (
            expected.is_floating_point() and not value.is_floating_point()
        ):
            kind = f"a {value.dtype} tensor" if isinstance(value, torch.Tensor) else "no tensor"
            raise refuse(
                source,
                where,
                f"is {kind}; the optimizer writes a {expected.dtype} tensor there",
            )
        if tuple(expected.shape) != DUMMY_SHAPE:  # a scalar: a count, as Adam's step
            if value.numel() != 1:
                raise refuse(
                    source,
                    where,
                    f"has shape {tuple(value.shape)}, but the optimizer keeps a scalar there",
                )
            number = value.item()
            if not (math.isfinite(number) and float(number).is_integer()) or not (
                0 <= number <= MAX_COUNT
            ):
                raise refuse(  # a step of -1 divides by zero at the first step
                    source,
                    where,
                    f"is {number}, but the optimizer keeps a count there (a whole number 0 <= "
                    f"n <= {MAX_COUNT})",
                )
        elif tuple(value.shape) != shape:
            index = key.rsplit(".", 1)[-1]
            raise refuse(
                source,
                where,
                f"has shape {tuple(value.shape)}, but parameter {index} ({name}) has {shape}",
            )


def kind(written: Any) -> str:
    """What a value like ``written`` is, in words."""
    if isinstance(written, bool):
        return "a flag (True or False)"
    if isinstance(written, int):
        return f"an integer 0 <= n <= {MAX_COUNT}"
    if isinstance(written, float):
        return "a finite number between -10^12 and 10^12"
    if isinstance(written, str):
        return f"a string of at most {MAX_TEXT} characters"
    if written is None:
        return "None"
    if isinstance(written, list | tuple):
        return f"a list of {len(written)}"
    if isinstance(written, Mapping):
        return f"a mapping of {', '.join(sorted(map(str, written))) or 'nothing'}"
    return f"a {type(written).__name__}"


def like(value: Any, written: Any) -> bool:
    """Whether ``value`` (a leaf read from a file) is of ``written``'s type, within bounds."""
    import torch

    if isinstance(written, bool):
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if isinstance(written, int):
        return isinstance(value, int) and 0 <= value <= MAX_COUNT
    if isinstance(written, float):
        # finite is not enough: the optimizer's float32 arithmetic overflows on a rate of 3e38
        # divided by its bias correction (a RuntimeError at the first step; the property test)
        if isinstance(value, int):  # a whole number where a float is written: no huge int
            return abs(value) <= MAX_COUNT
        return isinstance(value, float) and math.isfinite(value) and abs(value) <= MAX_COUNT
    if isinstance(written, str):
        return isinstance(value, str) and len(value) <= MAX_TEXT
    if written is None:
        return value is None
    if isinstance(written, torch.Tensor):
        return (
            isinstance(value, torch.Tensor)
            and value.dtype == written.dtype
            and value.shape == written.shape
        )
    return type(value) is type(written)


def check_like(value: Any, written: Any, key: str, source: str, writer: str) -> None:
    """Refuse in one line a ``value`` that is not of the type ``writer`` writes there
    (``written``): mappings with the same keys, lists of the same length, leaves by
    :func:`like`. Nested only as deep as ``written``, which vitattn built."""
    if isinstance(written, Mapping):
        if not isinstance(value, Mapping) or set(value) != set(written):
            held = (
                f"holds {', '.join(sorted(map(str, value)))}"
                if isinstance(value, Mapping)
                else f"is {shown(value)}"
            )
            raise refuse(source, key, f"{held}; {writer} writes {kind(written)}")
        for name, item in written.items():
            check_like(value[name], item, f"{key}.{name}", source, writer)
        return
    if isinstance(written, list | tuple):
        if not isinstance(value, list | tuple) or len(value) != len(written):
            raise refuse(source, key, f"is {shown(value)}; {writer} writes {kind(written)}")
        for index, (item, expected) in enumerate(zip(value, written, strict=True)):
            check_like(item, expected, f"{key}.{index}", source, writer)
        return
    if not like(value, written):
        raise refuse(source, key, f"is {shown(value)}; {writer} writes {kind(written)} there")


def shown(value: Any) -> str:
    """A value read from a file, short, on one line."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else f"{text[:57]}..."
