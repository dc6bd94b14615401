"""A decimal a program wrote in full is shown to four significant digits; typed text as it is."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from vitattn.utils.decimals import shown, shown_in_name, significant_digits


@given(st.floats(min_value=1e-12, max_value=1e12))
def test_a_float_in_full_is_shown_close_and_short(value: float) -> None:
    text = repr(value)
    digits = significant_digits(text)
    if digits is None or digits < 9:  # written short (0.5, 1e-05): typed or not, shown as is
        assert shown(text) == text
        return
    assert math.isclose(float(shown(text)), value, rel_tol=5e-4)
    assert len(shown(text).lstrip("-").replace(".", "").split("e")[0].lstrip("0")) <= 4


def test_what_is_not_a_decimal_in_full_is_shown_as_it_is() -> None:
    for text in ("8", "linear", "1e-05", "0.0015", "2.50", "12345678.0", "/a/b", ""):
        assert shown(text) == text
    assert significant_digits("0.00019182157424526137") == 17
    assert shown("-0.00019182157424526137") == "-0.0001918"
    assert shown_in_name("attention=linear,optimizer.lr=0.06221087710398319,seed=1") == (
        "attention=linear,optimizer.lr=0.06221,seed=1"
    )
