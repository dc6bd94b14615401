"""A mechanism's knobs (:mod:`vitattn.attention.common.knobs`) are checked as every setting is
(:mod:`vitattn.utils.checks`), named ``attention.<knob>``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vitattn.attention.common import knobs
from vitattn.errors import ConfigError
from vitattn.utils import checks

VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 40), st.floats(), st.text(max_size=6))

PAIRS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "integer": (
        lambda v: knobs.integer("stride", v, 1, 32, " (a hint)"),
        lambda v: checks.integer("attention.stride", v, 1, 32, " (a hint)"),
    ),
    "positive": (lambda v: knobs.positive("eps", v), lambda v: checks.positive("attention.eps", v)),
    "fraction": (
        lambda v: knobs.fraction("dropout", v),
        lambda v: checks.fraction("attention.dropout", v),
    ),
    "one_of": (
        lambda v: knobs.one_of("impl", v, ("sdpa", "naive")),
        lambda v: checks.one_of("attention.impl", v, ("sdpa", "naive")),
    ),
    "flag": (lambda v: knobs.flag("redraw", v), lambda v: checks.flag("attention.redraw", v)),
}


def outcome(check: Callable[[Any], Any], value: Any) -> tuple[str, Any]:
    try:
        return "accepted", check(value)
    except ConfigError as error:
        return "refused", str(error)


@pytest.mark.parametrize("knob", PAIRS)
@settings(max_examples=100, deadline=None)
@given(value=VALUES)
def test_a_knob_is_checked_as_the_setting_attention_dot_knob(knob: str, value: Any) -> None:
    ours, shared = PAIRS[knob]
    assert repr(outcome(ours, value)) == repr(outcome(shared, value))


def test_a_knob_message_names_attention_and_keeps_its_hint() -> None:
    odd = " (the output keeps the token count), or 0 for no convolution"
    with pytest.raises(ConfigError) as raised:
        raise knobs.invalid("conv_kernel", 4, "an odd integer", odd)
    assert str(raised.value) == f"attention.conv_kernel=4 is not valid; choose an odd integer{odd}"
    with pytest.raises(ConfigError) as raised:
        knobs.integer("landmarks", 0)
    assert str(raised.value) == "attention.landmarks=0 is not valid; choose an integer >= 1"
