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
from dataclasses import dataclass, replace
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
RECORDING_PRECISION = 4 * 2.0**-23
"""How far apart, relative to the largest figure, two differences of figures may be and still be
the same difference: the figures are float32 values (torchmetrics' and TensorBoard's), each
rounded by half a unit (2^-24 of itself), so a difference of two moves by up to one unit of the
larger, and two differences apart by two; twice that leaves room. A whole test image on even a
million images (1e-6) is far above it, so counts that truly differ are never taken as alike."""

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
    :data:`SIGN` (pairs) or :data:`MANN_WHITNEY` (two samples), which give a p-value and no
    interval (nor does a difference of 0 without spread: an interval of zero width would claim a
    certainty no seeds give). ``spread`` is the standard deviation the test divides by: of the
    per-seed differences (paired), or the root mean square of the two samples' (Welch); what a
    power calculation needs. ``unpaired`` counts the seeds of either setting that the other did
    not run, left out of a paired test."""

    delta: float
    low: float | None
    high: float | None
    df: float | None
    test: str = WELCH
    n_a: int = 0
    n_b: int = 0
    p: float | None = None
    spread: float | None = None
    unpaired: int = 0

    @property
    def sizes(self) -> str:
        """``3`` (pairs) or ``3/2`` (the two samples' sizes)."""
        return str(self.n_a) if self.test in PAIRS else f"{self.n_a}/{self.n_b}"


def finite(values: Sequence[float | None]) -> list[float]:
    """The values that are finite numbers (``None``, NaN and infinities left out)."""
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def alike(values: Sequence[float], scale: float) -> bool:
    """Whether ``values`` (figures, or differences of figures no larger than ``scale``) are one
    value to the precision the figures were recorded at (:data:`RECORDING_PRECISION`)."""
    return max(values) - min(values) <= RECORDING_PRECISION * scale


def cut(low: float, high: float, bounds: tuple[float, float]) -> tuple[float, float]:
    """The interval ``low`` to ``high`` cut to ``bounds``, the range its figure lies in."""
    return max(float(low), bounds[0]), min(float(high), bounds[1])


def mean_interval(
    values: Sequence[float | None],
    confidence: float = CONFIDENCE,
    bounds: tuple[float, float] = UNBOUNDED,
) -> Estimate | None:
    """The mean of ``values`` with Student's t interval (``None`` if there is no value). With one
    value, no std and no interval; with identical values, an interval of zero width (which
    :func:`accuracy_estimate` replaces by the test set's).

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
    ``trials`` images, or seeds that all scored alike (whose spread, 0, bounds nothing), the
    binomial interval of one run's test set instead: the seeds agree, the finite test set still
    bounds what their accuracy says."""
    estimate = mean_interval(accuracies, confidence, ACCURACY)
    if estimate is None or (estimate.n > 1 and estimate.std != 0) or not trials:
        return estimate
    low, high = binomial_interval(estimate.mean, trials, confidence)
    return Estimate(estimate.n, estimate.mean, estimate.std, low, high, "binomial")


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
    scale = max(abs(v) for v in x + y)
    if alike(x, scale) and alike(y, scale):  # no spread: the difference is what it is
        if alike([statistics.mean(x), statistics.mean(y)], scale):
            return Difference(0.0, None, None, None, **sizes, p=1.0, spread=0.0)
        p = float(stats.mannwhitneyu(x, y, method="exact").pvalue)
        return Difference(delta, None, None, None, MANN_WHITNEY, len(x), len(y), p, 0.0)
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
    scale = max(abs(v) for v in a + b)
    # Alike to the figures' float32 precision, not to the last bit: 192/1017 - 191/1017 and
    # 500/1017 - 499/1017, one image each, differ by 1e-8 as float32 values, and a t-test
    # dividing by that called one image on every seed "better" at p = 1e-10.
    if alike(differences, scale) and alike([delta, 0.0], scale):  # no seed moved
        return Difference(0.0, None, None, None, PAIRED, n, n, 1.0, 0.0)
    if alike(differences, scale):  # every seed moved alike: how often n seeds agree by chance
        p = float(stats.binomtest(n if delta > 0 else 0, n).pvalue)
        return Difference(delta, None, None, None, SIGN, n, n, p, 0.0)
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
    (:func:`paired_difference`) over the seeds both have a value for, when there are two or
    more (the others counted as ``unpaired``: one seed failed on one side must not throw the
    pairing away for all the rest), Welch's (:func:`welch_difference`) otherwise; its interval
    cut to ``bounds`` (:data:`ACCURACY_DIFFERENCE` for two accuracies)."""
    x = {seed: v for seed, v in a.items() if finite([v])}
    y = {seed: v for seed, v in b.items() if finite([v])}
    shared = [seed for seed in x if seed in y]
    if len(shared) >= 2:
        pairs = [(float(x[s]), float(y[s])) for s in shared]  # type: ignore[arg-type]
        paired = paired_difference(pairs, confidence, bounds)
        return replace(paired, unpaired=len(x) + len(y) - 2 * len(shared))
    return welch_difference(list(x.values()), list(y.values()), confidence, bounds)


def verdict(
    difference: Difference | None, p: float | None = None, level: float = 1 - CONFIDENCE
) -> str:
    """``better`` or ``worse`` when ``p`` (the difference's own p-value unless a corrected one
    is given) is below ``level``, ``no detectable difference`` otherwise, ``one seed: no
    conclusion`` when there was no test (a setting with one seed), ``no data`` when there is no
    difference to judge."""
    if difference is None:
        return NO_DATA
    if difference.p is None:
        return ONE_SEED
    p = difference.p if p is None else p
    if math.isnan(p) or p >= level:
        return NO_DIFFERENCE
    return BETTER if difference.delta > 0 else WORSE
