"""The one way a setting is checked (:mod:`vitattn.utils.checks`): every bad value is one line
naming the setting and what is valid, every good one passes, in the same words wherever used."""

from __future__ import annotations

import math
import sys
import typing
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vitattn.errors import ConfigError
from vitattn.utils import checks

SETTINGS = st.from_regex(r"[a-z][a-z_]{0,8}(\.[a-z][a-z_]{0,8}){0,2}", fullmatch=True)
"""Full setting names: ``seed``, ``guard.max_call_seconds``, ``data.crop_padding``."""

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and the infinities too
    st.text(max_size=12),  # newlines and quotes too
    st.sampled_from(["sdpa", "naive", "true", "1", ""]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def whole(value: Any) -> bool:
    finite = number(value) and math.isfinite(value)
    return finite and (isinstance(value, int) or value == math.floor(value))


# Each checker, and (written apart from it) the values it must accept.
CHECKERS: dict[str, tuple[Callable[[str, Any], Any], Callable[[Any], bool]]] = {
    "integer": (lambda s, v: checks.integer(s, v), lambda v: whole(v) and v >= 1),
    "integer in 0..8": (
        lambda s, v: checks.integer(s, v, 0, 8, " (a hint)"),
        lambda v: whole(v) and 0 <= v <= 8,
    ),
    "positive": (
        lambda s, v: checks.positive(s, v),
        lambda v: (
            number(v) and 0 < v < math.inf and not (isinstance(v, int) and v > sys.float_info.max)
        ),
    ),
    "fraction": (lambda s, v: checks.fraction(s, v), lambda v: number(v) and 0 <= v < 1),
    "one_of": (
        lambda s, v: checks.one_of(s, v, ("sdpa", "naive")),
        lambda v: isinstance(v, str) and v in ("sdpa", "naive"),
    ),
    "flag": (checks.flag, lambda v: isinstance(v, bool)),
    "of_type int or null": (
        lambda s, v: checks.of_type(s, v, int | None),
        lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
    ),
    "of_type a number": (lambda s, v: checks.of_type(s, v, float), number),
    "of_type a Literal": (
        lambda s, v: checks.of_type(s, v, typing.Literal["sdpa", "naive"] | None),
        lambda v: v is None or (isinstance(v, str) and v in ("sdpa", "naive")),
    ),
}


@pytest.mark.parametrize("checker", CHECKERS)
@settings(max_examples=150, deadline=None)
@given(setting=SETTINGS, value=VALUES)
def test_every_bad_value_is_one_line_naming_the_setting(
    checker: str, setting: str, value: Any
) -> None:
    check, accepts = CHECKERS[checker]
    try:
        accepted = check(setting, value)
    except ConfigError as error:
        message = str(error)
        assert not accepts(value), message
        assert "\n" not in message
        assert message.startswith(f"{setting}={checks.shown(value)} is not valid; choose "), message
        return
    assert accepts(value), f"{checker} accepted {value!r}"
    assert accepted == value or (math.isnan(accepted) and math.isnan(value))
    if checker.startswith("integer"):
        assert type(accepted) is int


@pytest.mark.parametrize(
    ("refuse", "message"),
    [
        (
            lambda: checks.integer("guard.free_below", -1, 0),
            "guard.free_below=-1 is not valid; choose an integer >= 0",
        ),
        (
            lambda: checks.integer("attention.stride", 9, 1, 8, " (the 8 tokens)"),
            "attention.stride=9 is not valid; choose an integer 1 <= attention.stride <= 8 "
            "(the 8 tokens)",
        ),
        (  # was a ValueError from int(nan), a traceback
            lambda: checks.integer("attention.k", float("nan")),
            "attention.k=nan is not valid; choose an integer >= 1",
        ),
        (
            lambda: checks.positive("settle", 0.0, " or null"),
            "settle=0.0 is not valid; choose a positive number or null",
        ),
        (
            lambda: checks.fraction("attention.dropout", 1.0),
            "attention.dropout=1.0 is not valid; choose 0 <= attention.dropout < 1",
        ),
        (
            lambda: checks.one_of("attention.impl", "fast", ("auto", "sdpa")),
            "attention.impl='fast' is not valid; choose one of auto | sdpa",
        ),
        (
            lambda: checks.flag("attention.share_kv", 1),
            "attention.share_kv=1 is not valid; choose true or false",
        ),
        (
            lambda: checks.of_type("data.augment_seed", 0.5, int | None),
            "data.augment_seed=0.5 is not valid; choose an integer or null",
        ),
        (
            lambda: checks.of_type("model.heads", "abc", int),
            "model.heads='abc' is not valid; choose an integer",
        ),
    ],
)
def test_the_words_of_each_check(refuse: Callable[[], Any], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        refuse()
    assert str(raised.value) == message


def test_a_positive_number_comes_back_as_given_and_one_no_float_holds_is_refused() -> None:
    """Hypothesis found both on the code before: 2**53 + 1 came back as 2**53 (``float()``
    rounds past 53 bits), and an integer of 400 digits was an ``OverflowError``."""
    assert checks.positive("a", 2**53 + 1) == 2**53 + 1
    with pytest.raises(
        ConfigError, match=r"^attention\.eps=1000.* is not valid; choose a positive"
    ):
        checks.positive("attention.eps", 10**400)
    # inf made every row of the bench fail and the check blame the machine (red team)
    with pytest.raises(ConfigError, match=r"^mlp_ratio=inf is not valid; choose a positive"):
        checks.positive("mlp_ratio", math.inf)


@pytest.mark.parametrize("width", [1, 3, 7, 21, 25, 32, 192, 256, 1000, 4096])
def test_a_least_value_shown_rounded_up_passes_when_typed_back(width: int) -> None:
    shown = checks.rounded_up(1 / width)
    assert float(shown) * width >= 1 and len(shown.lstrip("0.").rstrip("0")) <= 3
    assert float(shown) <= 1.01 / width  # up by less than the third digit: 1% at most
