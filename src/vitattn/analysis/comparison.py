"""Each setting of a summary against the baseline setting: its differences in the figures of
:data:`COMPARED` (Welch's interval over seeds) and the verdict they support
(:mod:`vitattn.analysis.uncertainty`).

The comparisons are a value of their own, one per setting in the settings' order, so that what
is judged (and how) can grow without touching how settings are grouped or tables are drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vitattn.analysis.grouping import Setting
from vitattn.analysis.uncertainty import (
    BASELINE,
    NO_DATA,
    Difference,
    verdict,
    welch_difference,
)

COMPARED = {"test_acc": "test/acc", "best_val_acc": "best val/acc"}
"""The figures compared with the baseline; the verdict is on the first (on the second when a
setting has no test accuracy)."""


@dataclass(frozen=True)
class Comparison:
    """``setting`` against the baseline: its difference in each figure of :data:`COMPARED`
    (none for the baseline itself) and the verdict (``""`` when there is no baseline)."""

    setting: Setting
    differences: Mapping[str, Difference | None] = field(default_factory=dict)
    verdict: str = ""


def compare(settings: Sequence[Setting], baseline: Setting | None) -> tuple[Comparison, ...]:
    """Each setting of ``settings`` against ``baseline``, in their order."""
    return tuple(compare_one(setting, baseline) for setting in settings)


def compare_one(setting: Setting, baseline: Setting | None) -> Comparison:
    """``setting``'s differences from ``baseline`` and its verdict."""
    if baseline is None:
        return Comparison(setting)
    if setting is baseline:
        return Comparison(setting, verdict=BASELINE)
    differences = {
        key: welch_difference(setting.values(key), baseline.values(key)) for key in COMPARED
    }
    judged = differences["test_acc"]
    if judged is None:
        judged = differences["best_val_acc"]
    return Comparison(setting, differences, verdict(judged) if judged is not None else NO_DATA)
