"""Each setting of a summary against the baseline setting: its differences in the figures of
:data:`COMPARED` (paired over the seeds both ran, else Welch's), the verdict on the first of them
with the family-wise error over all the settings compared held at 5% (Holm-Bonferroni, through
``statsmodels.stats.multitest.multipletests``), and for an undecided verdict how many seeds would
decide it (:mod:`vitattn.analysis.power`).

The comparisons are a value of their own, one per setting in the settings' order, so that what
is judged (and how) can grow without touching how settings are grouped or tables are drawn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from vitattn.analysis.grouping import Setting
from vitattn.analysis.power import seeds_needed, smallest_detectable
from vitattn.analysis.uncertainty import (
    ACCURACY_DIFFERENCE,
    BASELINE,
    CONFIDENCE,
    NO_DATA,
    NO_DIFFERENCE,
    Difference,
    seed_difference,
    verdict,
)

COMPARED = {"test_acc": "test/acc", "best_val_acc": "best val/acc"}
"""The figures compared with the baseline, accuracies both (their differences' intervals are cut
to :data:`~vitattn.analysis.uncertainty.ACCURACY_DIFFERENCE`); the verdict is on the first (on
the second when a setting has no test accuracy)."""

FAMILY_LEVEL = 1 - CONFIDENCE
"""The family-wise error rate the verdicts hold, over all the settings compared."""


@dataclass(frozen=True)
class Comparison:
    """``setting`` against the baseline: its difference in each figure of :data:`COMPARED`
    (none for the baseline itself), the figure judged, its p-value adjusted for the ``family``
    of comparisons (Holm), the verdict (``""`` when there is no baseline), and, when undecided,
    the seeds per setting that would detect the difference (``None``: more than
    :data:`vitattn.analysis.power.MOST_SEEDS`) and the smallest difference the seeds run so far
    detect, at the corrected level."""

    setting: Setting
    differences: Mapping[str, Difference | None] = field(default_factory=dict)
    verdict: str = ""
    judged: str = ""
    p_adjusted: float | None = None
    family: int = 0
    seeds_needed: int | None = None
    detectable: float | None = None

    @property
    def difference(self) -> Difference | None:
        """The difference the verdict is on."""
        return self.differences.get(self.judged) if self.judged else None


def compare(settings: Sequence[Setting], baseline: Setting | None) -> tuple[Comparison, ...]:
    """Each setting of ``settings`` against ``baseline``, in their order, the verdicts
    corrected for the number of settings compared."""
    raw = tuple(compare_one(setting, baseline) for setting in settings)
    judged = [c for c in raw if c.difference is not None and c.difference.p is not None]
    if not judged:
        return raw
    from statsmodels.stats.multitest import multipletests

    raw_p = [_p(c.difference.p) for c in judged]  # type: ignore[union-attr,arg-type]
    adjusted = multipletests(raw_p, alpha=FAMILY_LEVEL, method="holm")[1]
    corrected = {id(c): float(p) for c, p in zip(judged, adjusted, strict=True)}
    return tuple(decide(c, corrected[id(c)], len(judged)) if id(c) in corrected else c for c in raw)


def decide(comparison: Comparison, p_adjusted: float, family: int) -> Comparison:
    """``comparison`` with its verdict on the Holm-adjusted p-value, and for an undecided one
    the seeds needed and the smallest detectable difference at Bonferroni's level (Holm's
    first step, the strictest: what a planned study must reach)."""
    difference = comparison.difference
    assert difference is not None
    decided = verdict(difference, p_adjusted, FAMILY_LEVEL)
    needed = detectable = None
    if decided == NO_DIFFERENCE:
        level = FAMILY_LEVEL / family
        needed, detectable = seeds_needed(difference, level), smallest_detectable(difference, level)
    return replace(
        comparison,
        verdict=decided,
        p_adjusted=p_adjusted,
        family=family,
        seeds_needed=needed,
        detectable=detectable,
    )


def compare_one(setting: Setting, baseline: Setting | None) -> Comparison:
    """``setting``'s differences from ``baseline`` (uncorrected) and the figure judged."""
    if baseline is None:
        return Comparison(setting)
    if setting is baseline:
        return Comparison(setting, verdict=BASELINE)
    differences = {
        key: seed_difference(
            setting.by_seed(key), baseline.by_seed(key), bounds=ACCURACY_DIFFERENCE
        )
        for key in COMPARED
    }
    judged = "test_acc" if differences["test_acc"] is not None else "best_val_acc"
    difference = differences[judged]
    decided = verdict(difference) if difference is not None else NO_DATA
    return Comparison(setting, differences, decided, judged if difference is not None else "")


def _p(value: float) -> float:
    return 1.0 if math.isnan(value) else value
