"""Decimals a program wrote in full, shown to a few significant digits where people read them.

Optuna suggests floats in full (``optimizer.lr=0.00019182157424526137``); a search's job
directories (TensorBoard's run names) and its summary's labels show them as
``optimizer.lr=0.0001918``. A decimal with fewer digits was typed by someone and is shown as
typed. The jobs' ``.hydra/overrides.yaml`` and the study keep every value in full.
"""

from __future__ import annotations

import re

SHOWN_DIGITS = 4
"""Significant digits a program's decimal is shown to."""

MACHINE_DIGITS = 9
"""A decimal with this many significant digits or more was written by a program, not typed."""

DECIMAL = re.compile(r"-?(\d+)\.(\d+)(?:[eE][-+]?\d+)?")

VALUE_IN_NAME = re.compile(r"(?<==)[^,=]+(?=,|$)")
"""A value of a ``key=value,key=value`` name (Hydra's ``override_dirname``)."""


def significant_digits(text: str) -> int | None:
    """How many significant digits the decimal ``text`` is written with, zeros at either end
    not counted; ``None`` for text that is not a decimal with a point (``8``, ``1e-05``,
    ``linear``)."""
    match = DECIMAL.fullmatch(text.strip())
    if match is None:
        return None
    digits = (match[1] + match[2]).strip("0")  # 12345678.0 has eight, 0.000191 three
    return len(digits) or 1


def shown(text: str) -> str:
    """``text`` to :data:`SHOWN_DIGITS` significant digits where it is a decimal a program wrote
    (:data:`MACHINE_DIGITS` or more), else as it is."""
    digits = significant_digits(text)
    if digits is None or digits < MACHINE_DIGITS:
        return text
    return f"{float(text):.{SHOWN_DIGITS}g}"


def shown_in_name(name: str) -> str:
    """Each value of a ``key=value,...`` ``name`` :func:`shown`."""
    return VALUE_IN_NAME.sub(lambda value: shown(value[0]), name)
