"""How far an undecided comparison is from a decision: the seeds per setting that would detect
the observed difference, and the smallest difference the seeds run so far can detect, both with
80% power at the corrected level, from scipy's noncentral t distribution.

A paired comparison (:data:`vitattn.analysis.uncertainty.PAIRED`) is a one-sample t test on the
per-seed differences (``n - 1`` degrees of freedom, noncentrality ``effect * sqrt(n)``); a Welch
one is planned as two samples of ``n`` seeds with the pooled spread (``2n - 2`` degrees of
freedom, noncentrality ``effect * sqrt(n / 2)``). The effect is the difference over its spread.
The observed spread stands in for the true one, so both figures are estimates, not promises.
"""

from __future__ import annotations

import math

from vitattn.analysis.uncertainty import PAIRED, Difference

POWER = 0.8
MOST_SEEDS = 50
"""Beyond this many seeds per setting a difference is below what a sweep can resolve."""


def power(paired: bool, effect: float, seeds: int, level: float) -> float:
    """The chance that a two-sided t test at ``level`` detects a standardized ``effect`` with
    ``seeds`` per setting: paired, or two samples of ``seeds`` each."""
    from scipy import stats

    df = seeds - 1 if paired else 2 * seeds - 2
    shift = effect * math.sqrt(seeds if paired else seeds / 2)
    critical = stats.t.isf(level / 2, df)
    # both tails as upper tails: the lower one, nct.cdf(-c), underflows to NaN far from zero
    return float(stats.nct.sf(critical, df, shift) + stats.nct.sf(critical, df, -shift))


def seeds_needed(difference: Difference, level: float) -> int | None:
    """The fewest seeds per setting (at least 2) that detect ``difference.delta`` with
    :data:`POWER` at ``level``; ``None`` where more than :data:`MOST_SEEDS` would be needed,
    the difference is zero, or there is no spread to plan from."""
    if not difference.spread or difference.delta == 0:
        return None
    paired, effect = difference.test == PAIRED, abs(difference.delta) / difference.spread
    if power(paired, effect, MOST_SEEDS, level) < POWER:
        return None
    low, high = 2, MOST_SEEDS
    while low < high:  # the power grows with the seeds
        middle = (low + high) // 2
        if power(paired, effect, middle, level) >= POWER:
            high = middle
        else:
            low = middle + 1
    return low


def seeds_agreeing_needed(level: float) -> int:
    """The fewest seeds that, all moved the same way, the sign test
    (:data:`vitattn.analysis.uncertainty.SIGN`) finds below ``level``: its two-sided p-value
    for n seeds that agree is 2^(1 - n), whatever the size of the move."""
    seeds = 2
    while 2.0 ** (1 - seeds) >= level:
        seeds += 1
    return seeds


def smallest_detectable(difference: Difference, level: float) -> float | None:
    """The smallest difference that the seeds compared detect with :data:`POWER` at ``level``,
    in the figure's units; ``None`` without spread or with fewer than two seeds a side."""
    from scipy.optimize import brentq

    seeds = min(difference.n_a, difference.n_b)
    if not difference.spread or seeds < 2:
        return None
    paired = difference.test == PAIRED
    effect = brentq(lambda e: power(paired, e, seeds, level) - POWER, 1e-9, 1e4)
    return float(effect) * difference.spread
