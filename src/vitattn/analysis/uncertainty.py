"""How sure a sweep's numbers are: a mean over seeds with its Student's t interval, the binomial
interval of one run's test accuracy, the difference between two settings (paired over the seeds
both ran, else Welch's) with its interval and p-value, and the verdict it supports. The
distributions are scipy.stats'; nothing here is a hand-written quantile.

A *setting* is a group of runs that differ only by their seed. With two or more seeds the spread
between seeds is the uncertainty (it includes the initialisation, the data order and the
augmentation). With one seed there is no spread to measure; the finite test set still bounds
what one run's test accuracy says about the accuracy on all images, so that interval is shown
instead and one run never looks exact.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CONFIDENCE = 0.95
ACCURACY = (0.0, 1.0)
"""The range of an accuracy, which its interval is cut to (:func:`mean_interval`)."""
NOT_NEGATIVE = (0.0, math.inf)
"""The range of a count, a speed, a size or a time."""
ACCURACY_DIFFERENCE = (-1.0, 1.0)
"""The range of the difference between two accuracies, which its interval is cut to."""
UNBOUNDED = (-math.inf, math.inf)
"""No range: an interval left whole."""

BETTER = "better"
WORSE = "worse"
NO_DIFFERENCE = "no detectable difference"
ONE_SEED = "one seed: no conclusion"
BASELINE = "baseline"
NO_DATA = "no data"


@dataclass(frozen=True)
class Estimate:
    """A mean with its ``confidence`` interval; ``std`` is the sample standard deviation
    (``ddof=1``). ``interval`` names where ``low`` and ``high`` come from: ``t`` (Student's t
    over seeds), ``binomial`` (Clopper-Pearson over test images, one run) or ``""`` (none)."""

    n: int
    mean: float
    std: float | None = None
    low: float | None = None
    high: float | None = None
    interval: str = ""


PAIRED = "paired t"
WELCH = "Welch"
SIGN = "sign test"
"""Paired seeds whose differences are all the same, not zero: the t-test's spread is 0."""
MANN_WHITNEY = "Mann-Whitney U"
"""Two samples each without spread (the seeds of each setting scored alike), means apart."""
PAIRS = (PAIRED, SIGN)


@dataclass(frozen=True)
class Difference:
    """``mean(a) - mean(b)`` with its ``confidence`` interval, degrees of freedom and two-sided
    p-value from ``test``: :data:`PAIRED` (Student's t over the per-seed differences, ``n_a ==
    n_b`` pairs) or :data:`WELCH` (two samples, unequal variances), and where the spread they
    divide by is 0 but the difference is not, the exact tests that do not divide by it:
    :data:`SIGN` (pairs) or :data:`MANN_WHITNEY` (two samples). ``spread`` is the standard
    deviation the test divides by: of the per-seed differences (paired), or the root mean square
    of the two samples' (Welch); what a power calculation needs."""

    delta: float
    low: float | None
    high: float | None
    df: float | None
    test: str = WELCH
    n_a: int = 0
    n_b: int = 0
    p: float | None = None
    spread: float | None = None

    @property
    def sizes(self) -> str:
        """``3`` (pairs) or ``3/2`` (the two samples' sizes)."""
        return str(self.n_a) if self.test in PAIRS else f"{self.n_a}/{self.n_b}"


def finite(values: Sequence[float | None]) -> list[float]:
    """The values that are numbers (``None`` and NaN left out)."""
    return [float(v) for v in values if v is not None and not math.isnan(float(v))]


def cut(low: float, high: float, bounds: tuple[float, float]) -> tuple[float, float]:
    """The interval ``low`` to ``high`` cut to ``bounds``, the range its figure lies in."""
    return max(float(low), bounds[0]), min(float(high), bounds[1])


def mean_interval(
    values: Sequence[float | None],
    confidence: float = CONFIDENCE,
    bounds: tuple[float, float] = UNBOUNDED,
) -> Estimate | None:
    """The mean of ``values`` with Student's t interval (``None`` if there is no value). With one
    value, no std and no interval; with identical values, an interval of zero width.

    The interval is cut to ``bounds``, the range the figure's mean lies in (an accuracy's 0 to
    1): with two seeds it reaches 12.7 standard errors either side of the mean, and an accuracy
    near 0.3 showed an interval from below 0. The mean lies in its range, so the cut interval
    holds it exactly as often as the whole one."""
    from scipy import stats

    data = finite(values)
    if not data:
        return None
    n, mean = len(data), statistics.mean(data)  # exact: three 0.1s average to 0.1
    if n == 1:
        return Estimate(1, mean)
    std = statistics.stdev(data)  # exact arithmetic: identical values give 0, not 1e-17
    if std == 0:
        return Estimate(n, mean, 0.0, mean, mean, "t")
    low, high = stats.t.interval(confidence, n - 1, loc=mean, scale=std / math.sqrt(n))
    return Estimate(n, mean, std, *cut(low, high, bounds), "t")


def binomial_interval(
    accuracy: float, trials: int, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Clopper-Pearson interval of an accuracy measured on ``trials`` images (the count of
    correct images is ``accuracy * trials``, rounded)."""
    from scipy import stats

    if trials < 1:
        raise ValueError(f"trials must be at least 1, got {trials}")
    correct = min(trials, max(0, round(accuracy * trials)))
    interval = stats.binomtest(correct, trials).proportion_ci(confidence, method="exact")
    return float(interval.low), float(interval.high)


def accuracy_estimate(
    accuracies: Sequence[float | None],
    trials: int | None,
    confidence: float = CONFIDENCE,
) -> Estimate | None:
    """:func:`mean_interval` of test accuracies (within 0 and 1); for a single run evaluated on
    ``trials`` images, its binomial interval instead."""
    estimate = mean_interval(accuracies, confidence, ACCURACY)
    if estimate is None or estimate.n > 1 or not trials:
        return estimate
    low, high = binomial_interval(estimate.mean, trials, confidence)
    return Estimate(1, estimate.mean, None, low, high, "binomial")


def welch_difference(
    a: Sequence[float | None],
    b: Sequence[float | None],
    confidence: float = CONFIDENCE,
    bounds: tuple[float, float] = UNBOUNDED,
) -> Difference | None:
    """``mean(a) - mean(b)`` and Welch's interval (unequal variances,
    Welch-Satterthwaite degrees of freedom, cut to ``bounds``) and p-value; no interval unless
    both have two values or more. ``None`` if either has none."""
    from scipy import stats

    x, y = finite(a), finite(b)
    if not x or not y:
        return None
    delta = statistics.mean(x) - statistics.mean(y)
    sizes = {"test": WELCH, "n_a": len(x), "n_b": len(y)}
    if len(x) < 2 or len(y) < 2:
        return Difference(delta, None, None, None, **sizes)
    spread = math.sqrt((statistics.variance(x) + statistics.variance(y)) / 2)
    if max(x) == min(x) and max(y) == min(y):  # no spread: the difference is what it is
        if delta == 0:
            return Difference(delta, delta, delta, None, **sizes, p=1.0, spread=0.0)
        p = float(stats.mannwhitneyu(x, y, method="exact").pvalue)
        return Difference(delta, delta, delta, None, MANN_WHITNEY, len(x), len(y), p, 0.0)
    result = stats.ttest_ind(x, y, equal_var=False)
    return _tested(delta, result, confidence, bounds, spread, WELCH, len(x), len(y))


def paired_difference(
    pairs: Sequence[tuple[float, float]],
    confidence: float = CONFIDENCE,
    bounds: tuple[float, float] = UNBOUNDED,
) -> Difference:
    """``mean(a - b)`` over ``(a, b)`` pairs (one per seed) with Student's t interval (cut to
    ``bounds``) and p-value over the per-seed differences (``scipy.stats.ttest_rel``); at least
    two pairs."""
    from scipy import stats

    a, b = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
    differences = [x - y for x, y in pairs]
    delta, n = statistics.mean(differences), len(pairs)
    spread = statistics.stdev(differences)
    if spread == 0 and delta == 0:  # no seed moved: there is no difference
        return Difference(delta, delta, delta, n - 1, PAIRED, n, n, 1.0, 0.0)
    if spread == 0:  # every seed moved by the same amount: how often n seeds agree by chance
        p = float(stats.binomtest(n if delta > 0 else 0, n).pvalue)
        return Difference(delta, delta, delta, None, SIGN, n, n, p, 0.0)
    return _tested(delta, stats.ttest_rel(a, b), confidence, bounds, spread, PAIRED, n, n)


def _tested(
    delta: float,
    result: Any,
    confidence: float,
    bounds: tuple[float, float],
    spread: float,
    test: str,
    n_a: int,
    n_b: int,
) -> Difference:
    """The :class:`Difference` of a scipy t-test ``result`` (its interval cut to ``bounds``, as
    :func:`mean_interval` cuts, its df and p-value)."""
    interval = result.confidence_interval(confidence)
    low, high = cut(interval.low, interval.high, bounds)
    p = float(result.pvalue)
    return Difference(delta, low, high, float(result.df), test, n_a, n_b, p, spread)


def seed_difference(
    a: Mapping[object, float | None],
    b: Mapping[object, float | None],
    confidence: float = CONFIDENCE,
    bounds: tuple[float, float] = UNBOUNDED,
) -> Difference | None:
    """The difference between two settings' values by seed: paired
    (:func:`paired_difference`) when both have a value for the same two or more seeds and for
    no other, Welch's (:func:`welch_difference`) otherwise; its interval cut to ``bounds``
    (:data:`ACCURACY_DIFFERENCE` for two accuracies)."""
    x = {seed: v for seed, v in a.items() if finite([v])}
    y = {seed: v for seed, v in b.items() if finite([v])}
    if len(x) >= 2 and x.keys() == y.keys():
        pairs = [(float(x[s]), float(y[s])) for s in x]  # type: ignore[arg-type]
        return paired_difference(pairs, confidence, bounds)
    return welch_difference(list(x.values()), list(y.values()), confidence, bounds)


def verdict(
    difference: Difference | None, p: float | None = None, level: float = 1 - CONFIDENCE
) -> str:
    """``better`` or ``worse`` when ``p`` (the difference's own p-value unless a corrected one
    is given) is below ``level``, ``no detectable difference`` otherwise, ``one seed: no
    conclusion`` when there is no interval, ``no data`` when there is no difference to judge."""
    if difference is None:
        return NO_DATA
    if difference.low is None or difference.high is None:
        return ONE_SEED
    p = difference.p if p is None else p
    if p is None or math.isnan(p) or p >= level:
        return NO_DIFFERENCE
    return BETTER if difference.delta > 0 else WORSE
