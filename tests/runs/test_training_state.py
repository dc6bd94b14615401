"""The training state a resume restores, checked against what vitattn's configured optimizer and
scheduler write (:mod:`vitattn.runs.training_state`): a real state passes, each wrong value is
one line naming the file and the key, and whatever passes, torch restores and steps."""

from __future__ import annotations

import copy
import functools
import re
from typing import Any

import hydra
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from tests.support.presets import tiny_net
from vitattn.models.module import ViTClassifier
from vitattn.runs.checkpoint_values import CheckpointValueError
from vitattn.runs.checkpoints import meta_network
from vitattn.runs.training_state import check_training_state
from vitattn.utils.config import CONFIG_DIR
from vitattn.utils.parameters import parameter_groups

SOURCE = "f.ckpt"
NET = tiny_net()


def config(group: str, option: str) -> dict[str, Any]:
    """``configs/<group>/<option>.yaml`` as the run's resolved config holds it."""
    return OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / group / f"{option}.yaml"))


OPTIMIZERS = {name: config("optimizer", name) for name in ("adamw", "adam")}
COSINE = config("scheduler", "cosine")


def built(module: ViTClassifier, optimizer: str, scheduler: dict[str, Any] | None) -> tuple:
    """``module``'s optimizer and scheduler, built from their configs as
    ``ViTClassifier.configure_optimizers`` builds them."""
    optim = hydra.utils.instantiate(OPTIMIZERS[optimizer])(params=module.parameter_groups())
    if scheduler is None:
        return optim, None
    return optim, hydra.utils.instantiate(scheduler)(optimizer=optim, total_steps=50)


def step(module: ViTClassifier, optim: Any, schedule: Any) -> None:
    module(torch.zeros(2, 3, 32, 32)).sum().backward()
    optim.step()
    optim.zero_grad()
    if schedule is not None:
        schedule.step()


@functools.cache
def pristine_module() -> ViTClassifier:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return ViTClassifier(NET, OPTIMIZERS["adamw"], COSINE)


def tiny_module() -> ViTClassifier:
    """A fresh copy of one module never stepped: every example starts from the same weights, so
    a failure Hypothesis finds replays as it failed."""
    return copy.deepcopy(pristine_module())


def real_state(optimizer: str = "adamw", with_schedule: bool = True) -> dict[str, Any]:
    """The training state a checkpoint holds after two steps (what Lightning saves: the
    optimizer's and the scheduler's ``state_dict()``), a copy of its own: an optimizer that
    loads it steps its moments in place."""
    return copy.deepcopy(stepped_state(optimizer, with_schedule))


@functools.cache
def stepped_state(optimizer: str, with_schedule: bool) -> dict[str, Any]:
    module = tiny_module()
    optim, schedule = built(module, optimizer, COSINE if with_schedule else None)
    for _ in range(2):
        step(module, optim, schedule)
    return {
        "optimizer_states": [optim.state_dict()],
        "lr_schedulers": [] if schedule is None else [schedule.state_dict()],
    }


def check(state: dict[str, Any], optimizer: str = "adamw", scheduler: Any = COSINE) -> None:
    check_training_state(state, meta_network(NET), OPTIMIZERS[optimizer], scheduler, SOURCE)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("with_schedule", [True, False])
def test_a_real_training_state_passes(optimizer: str, with_schedule: bool) -> None:
    state = real_state(optimizer, with_schedule)
    assert state["optimizer_states"][0]["state"]  # Adam's moments and step, per parameter
    check(state, optimizer, COSINE if with_schedule else None)


def names_and_shapes() -> list[tuple[str, tuple[int, ...]]]:
    """Each parameter's name and shape, in the optimizer's order (its ids)."""
    net = meta_network(NET)
    names = {id(p): f"net.{n}" for n, p in net.named_parameters()}
    return [(names[id(p)], tuple(p.shape)) for g in parameter_groups(net) for p in g["params"]]


def another_weights_shape(checkpoint: dict[str, Any]) -> tuple[int, ...]:
    """The shape of a weight other than parameter 0's, so that the old check (some weight has
    this shape) would pass it."""
    (_, first), *rest = names_and_shapes()
    return next(shape for _, shape in rest if shape != first)


def edited(change: Any, optimizer: str = "adamw", with_schedule: bool = True) -> dict[str, Any]:
    state = real_state(optimizer, with_schedule)
    change(state)
    return state


def moments(state: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return state["optimizer_states"][0]["state"][index]


def groups(state: dict[str, Any]) -> list[dict[str, Any]]:
    return state["optimizer_states"][0]["param_groups"]


def schedule(state: dict[str, Any]) -> dict[str, Any]:
    return state["lr_schedulers"][0]


CASES: dict[str, tuple[Any, str]] = {
    "no optimizer state": (
        lambda s: s.pop("optimizer_states"),
        r"optimizer_states holds none; vitattn-train builds one optimizer",
    ),
    "optimizer states as a mapping": (
        lambda s: s.__setitem__("optimizer_states", {0: s["optimizer_states"][0]}),
        r"optimizer_states holds a dict; vitattn-train builds one optimizer",
    ),
    "two optimizer states": (
        lambda s: s["optimizer_states"].append(s["optimizer_states"][0]),
        r"optimizer_states holds 2 optimizer states",
    ),
    "one parameter group": (
        lambda s: groups(s).pop(),
        r"optimizer_states\.0\.param_groups is not a list of 2 parameter groups \(decay, no_decay",
    ),
    "a parameter listed twice": (
        lambda s: groups(s)[1]["params"].__setitem__(0, groups(s)[0]["params"][0]),
        r"param_groups\.1\.params is not a list of \d+ distinct parameter ids",
    ),
    "a group one parameter short": (
        lambda s: groups(s)[0]["params"].pop(),
        r"param_groups\.0\.params is not a list of \d+ distinct parameter ids",
    ),
    "a parameter id as text": (
        lambda s: groups(s)[0]["params"].__setitem__(0, "0"),
        r"param_groups\.0\.params is not a list",
    ),
    "a learning rate as text": (
        lambda s: groups(s)[0].__setitem__("lr", "1e-3"),
        r"param_groups\.0\.lr is '1e-3'; the optimizer writes a finite number between -10\^12 "
        r"and 10\^12 there",
    ),
    "a learning rate whose first step overflows float32": (  # found by the property test
        lambda s: groups(s)[1].__setitem__("lr", 3.094263397064763e38),
        r"param_groups\.1\.lr is 3\.094263397064763e\+38; the optimizer writes a finite number "
        r"between -10\^12 and 10\^12 there",
    ),
    "three betas": (
        lambda s: groups(s)[0].__setitem__("betas", (0.9, 0.99, 0.9)),
        r"param_groups\.0\.betas is a list of 3; the optimizer writes a list of 2",
    ),
    "an infinite epsilon": (
        lambda s: groups(s)[1].__setitem__("eps", float("inf")),
        r"param_groups\.1\.eps is inf; the optimizer writes a finite number",
    ),
    "amsgrad without its state": (
        lambda s: groups(s)[0].__setitem__("amsgrad", True),
        r"param_groups\.0\.amsgrad is True, but the configured optimizer has False",
    ),
    "a beta of 1": (
        lambda s: groups(s)[0].__setitem__("betas", (1.0, 0.999)),
        r"param_groups\.0 has settings torch\.optim\.adamw\.AdamW refuses \(Invalid beta",
    ),
    "a negative learning rate": (
        lambda s: groups(s)[1].__setitem__("lr", -1.0),
        r"param_groups\.1 has settings torch\.optim\.adamw\.AdamW refuses \(Invalid learning",
    ),
    "a step of -1": (
        lambda s: moments(s).__setitem__("step", torch.tensor(-1.0)),
        r"state\.0\.step is -1\.0, but the optimizer keeps a count there",
    ),
    "a step of a half": (
        lambda s: moments(s).__setitem__("step", torch.tensor(0.5)),
        r"state\.0\.step is 0\.5, but the optimizer keeps a count there",
    ),
    "a setting torch does not have": (
        lambda s: groups(s)[0].__setitem__("__class__", 1),
        r"param_groups\.0\.__class__ is no setting of the configured optimizer's groups",
    ),
    "the state of no listed parameter": (
        lambda s: s["optimizer_states"][0]["state"].__setitem__(999, moments(s)),
        r"optimizer_states\.0\.state\.999 is the state of no parameter its param_groups list",
    ),
    "a moment missing": (
        lambda s: moments(s).pop("exp_avg_sq"),
        r"state\.0 holds \['exp_avg', 'step'\], but the configured optimizer keeps",
    ),
    "a moment of another weight's shape": (
        lambda s: moments(s).__setitem__("exp_avg_sq", torch.zeros(another_weights_shape(s))),
        r"state\.0\.exp_avg_sq has shape \(\d+,( \d+,?)*\), but parameter 0 \(net\.\S+\) has \(",
    ),
    "a step of many elements": (
        lambda s: moments(s).__setitem__("step", torch.zeros(3, 3)),
        r"state\.0\.step has shape \(3, 3\), but the optimizer keeps a scalar there",
    ),
    "a moment as a list": (
        lambda s: moments(s).__setitem__("exp_avg", [0.0]),
        r"state\.0\.exp_avg is no tensor; the optimizer writes a torch\.float32 tensor",
    ),
    "an integer moment": (
        lambda s: moments(s, 3).__setitem__("exp_avg", moments(s, 3)["exp_avg"].long()),
        r"state\.3\.exp_avg is a torch\.int64 tensor; the optimizer writes a torch\.float32",
    ),
    "no scheduler state": (
        lambda s: s.pop("lr_schedulers"),
        r"lr_schedulers is None; vitattn\.models\.schedulers\.cosine_with_warmup writes a list "
        r"of 1",
    ),
    "two scheduler states": (
        lambda s: s["lr_schedulers"].append({}),
        r"lr_schedulers is a list of 2; .* writes a list of 1",
    ),
    "last_epoch as text": (
        lambda s: schedule(s).__setitem__("last_epoch", "7"),
        r"lr_schedulers\.0\.last_epoch is '7'; .* writes an integer 0 <= n <= 10+ there",
    ),
    "a step count of 10^13": (
        lambda s: schedule(s).__setitem__("_step_count", 10**13),
        r"lr_schedulers\.0\._step_count is 10000000000000; .* writes an integer",
    ),
    "base_lrs one short": (
        lambda s: schedule(s)["base_lrs"].pop(),
        r"lr_schedulers\.0\.base_lrs is a list of 1; .* writes a list of 2",
    ),
    "a NaN learning rate": (
        lambda s: schedule(s)["_last_lr"].__setitem__(1, float("nan")),
        r"lr_schedulers\.0\._last_lr\.1 is nan; .* writes a finite number",
    ),
    "a lambda's state": (
        lambda s: schedule(s)["lr_lambdas"].__setitem__(0, {"__code__": 1}),
        r"lr_schedulers\.0\.lr_lambdas\.0 is a mapping; .* writes None there",
    ),
    "an attribute of the scheduler's choosing": (
        lambda s: schedule(s).__setitem__("optimizer", 1),
        r"lr_schedulers\.0 holds _get_lr_called_within_step, .*optimizer.*; .* writes a mapping "
        r"of _get_lr_called",
    ),
    "a flag as a number": (
        lambda s: schedule(s).__setitem__("_get_lr_called_within_step", 0),
        r"_get_lr_called_within_step is 0; .* writes a flag \(True or False\) there",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_wrong_training_state_is_one_line(case: str) -> None:
    change, refusal = CASES[case]
    with pytest.raises(CheckpointValueError) as refused:
        check(edited(change))
    message = str(refused.value)
    assert message.startswith(f"{SOURCE}: ") and message.endswith("; nothing was loaded")
    assert "\n" not in message
    assert re.search(refusal, message), message


def test_a_constant_rate_takes_no_scheduler_state() -> None:
    """``~scheduler``: the checkpoint holds no scheduler state, and one that holds some is
    refused (torch would set its values as attributes of nothing vitattn built)."""
    constant = real_state("adamw", False)
    check(constant, scheduler=None)
    scheduled = {**constant, "lr_schedulers": real_state("adamw", True)["lr_schedulers"]}
    refusal = r"lr_schedulers is a list of 1; a constant rate \(~scheduler\) writes a list of 0"
    with pytest.raises(CheckpointValueError, match=refusal):
        check(scheduled, scheduler=None)


def leaves(state: Any, path: tuple = ()) -> list[tuple]:
    """The path of every leaf of a training state (tensors are leaves)."""
    if isinstance(state, dict):
        return [p for key, value in state.items() for p in leaves(value, (*path, key))]
    if isinstance(state, list | tuple):
        return [p for i, value in enumerate(state) for p in leaves(value, (*path, i))]
    return [path]


def replaced(state: Any, path: tuple, value: Any) -> Any:
    """``state`` with the leaf at ``path`` replaced (tuples stay tuples)."""
    if not path:
        return value
    head, *rest = path
    if isinstance(state, tuple):
        return tuple(
            replaced(v, tuple(rest), value) if i == head else v for i, v in enumerate(state)
        )
    copied = copy.copy(state)
    copied[head] = replaced(state[head], tuple(rest), value)
    return copied


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**15), max_value=10**15),
    st.just(10**5000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.lists(st.floats(-1, 1), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(0, 3), max_size=2),
    st.sampled_from([(2, 2), (3,), (1,), ()]).map(torch.ones),
    st.sampled_from([-1.0, 0.5, 0.0, float("nan")]).map(torch.tensor),
    st.sampled_from([torch.int64, torch.bool, torch.float16]).map(lambda t: torch.ones(1, dtype=t)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_one_value_is_refused_in_one_line_or_restores_and_steps(data: Any) -> None:
    """Any leaf of a real training state (a moment, a step, a group's setting, the scheduler's
    counts and rates) replaced by any value: either one line naming the file and the key, or
    torch restores the state into vitattn's optimizer and scheduler and takes a step."""
    state = real_state()
    path = data.draw(st.sampled_from(leaves(state)))
    state = replaced(state, path, data.draw(VALUES))
    try:
        check(state)
    except CheckpointValueError as refused:
        message = str(refused)
        assert message.startswith(f"{SOURCE}: ") and "\n" not in message, message
        return
    module = tiny_module()
    optim, schedule = built(module, "adamw", COSINE)
    optim.load_state_dict(state["optimizer_states"][0])
    schedule.load_state_dict(state["lr_schedulers"][0])
    step(module, optim, schedule)
