"""The sweep summary's statistics against values worked out by hand (t quantiles from the
table, Welch's degrees of freedom from its formula, Clopper-Pearson's closed forms at the ends),
and the verdicts on constructed cases."""

from __future__ import annotations

import math
import statistics

import pytest

from vitattn.analysis.uncertainty import (
    ACCURACY_DIFFERENCE,
    BETTER,
    NO_DATA,
    NO_DIFFERENCE,
    NOT_NEGATIVE,
    ONE_SEED,
    WORSE,
    accuracy_estimate,
    binomial_interval,
    mean_interval,
    paired_difference,
    seed_difference,
    verdict,
    welch_difference,
)

T_975_DF2 = 4.302653  # Student's t, 97.5% quantile, 2 degrees of freedom (printed tables)
T_975_DF4 = 2.776445


def test_mean_std_and_t_interval_of_three_seeds() -> None:
    estimate = mean_interval([0.50, 0.52, 0.54])
    assert estimate is not None and estimate.n == 3 and estimate.interval == "t"
    assert estimate.mean == pytest.approx(0.52)
    assert estimate.std == pytest.approx(0.02)  # sqrt((0.02^2 + 0 + 0.02^2) / 2)
    half = T_975_DF2 * 0.02 / math.sqrt(3)
    assert (estimate.low, estimate.high) == pytest.approx((0.52 - half, 0.52 + half), abs=1e-6)


def test_two_seeds_interval_stays_within_an_accuracys_range() -> None:
    """Two seeds: t(1) puts 12.7 standard errors either side of the mean, and an accuracy of
    0.25 and 0.35 showed an interval from -0.33: cut to 0..1, the t interval inside it."""
    half = 12.706205 * statistics.stdev([0.25, 0.35]) / math.sqrt(2)
    assert 0.30 - half < 0 < 0.30 + half < 1  # the whole t interval reaches below 0
    estimate = accuracy_estimate([0.25, 0.35], trials=1017)
    assert estimate is not None and estimate.interval == "t"
    assert (estimate.low, estimate.high) == pytest.approx((0.0, 0.30 + half), abs=1e-6)
    times = mean_interval([1.0, 30.0], bounds=NOT_NEGATIVE)
    assert times is not None and times.low == 0.0 and times.high > 30.0
    whole = mean_interval([1.0, 30.0])
    assert whole is not None and whole.low < 0


def test_a_difference_of_accuracies_stays_within_minus_one_and_one() -> None:
    """Two seeds that disagree (0.1 and 0.9 against 0.9 and 0.1): t(1) puts the paired and the
    Welch interval of the difference past -1 and 1, which no two accuracies are apart; cut to
    :data:`ACCURACY_DIFFERENCE` (only ``bounds`` cuts: a figure of no range keeps it whole)."""
    a, b = {0: 0.1, 1: 0.9}, {0: 0.9, 1: 0.1}
    whole = paired_difference([(0.1, 0.9), (0.9, 0.1)])
    assert whole.low is not None and whole.high is not None
    assert whole.low < -1 and whole.high > 1
    cut = seed_difference(a, b, bounds=ACCURACY_DIFFERENCE)
    assert cut is not None and (cut.low, cut.high) == (-1.0, 1.0)
    assert (cut.delta, cut.p, cut.df) == (whole.delta, whole.p, whole.df)
    apart = welch_difference([0.1, 0.9], [0.9, 0.1, 0.5], bounds=ACCURACY_DIFFERENCE)
    assert apart is not None and (apart.low, apart.high) == (-1.0, 1.0)
    welch = welch_difference([0.1, 0.9], [0.9, 0.1, 0.5])
    assert welch is not None and welch.low is not None and welch.low < -1


def test_one_value_has_no_spread_and_no_interval() -> None:
    estimate = mean_interval([0.5, None, float("nan")])
    assert estimate is not None and (estimate.n, estimate.mean) == (1, 0.5)
    assert estimate.std is None and estimate.low is None and estimate.high is None
    assert mean_interval([]) is None and mean_interval([None]) is None


def test_an_infinite_value_is_left_out_as_nan_is() -> None:
    """An infinity (a best val/acc from a planted event file) reached ``statistics.stdev``,
    whose AttributeError ended the whole summary in one warning."""
    assert mean_interval([0.4, float("inf"), 0.5, float("-inf")]) == mean_interval([0.4, 0.5])


def test_identical_values_have_an_interval_of_zero_width() -> None:
    estimate = mean_interval([0.1, 0.1, 0.1])
    assert estimate is not None and estimate.std == 0.0 and estimate.low == estimate.high == 0.1


def test_clopper_pearson_at_the_ends_is_the_closed_form() -> None:
    # k = n: lower = (alpha/2)^(1/n); k = 0: upper = 1 - (alpha/2)^(1/n)
    assert binomial_interval(1.0, 10) == pytest.approx((0.025**0.1, 1.0), abs=1e-9)
    assert binomial_interval(0.0, 10) == pytest.approx((0.0, 1 - 0.025**0.1), abs=1e-9)


def test_binomial_interval_of_a_test_set_of_1017_images() -> None:
    low, high = binomial_interval(0.5, 1017)
    wald = 1.959964 * math.sqrt(0.5 * 0.5 / 1017)  # the normal approximation, about 3.1 points
    assert low < 0.5 < high and (high - low) / 2 == pytest.approx(wald, abs=0.002)
    with pytest.raises(ValueError, match="trials"):
        binomial_interval(0.5, 0)


def test_one_run_shows_its_test_sets_interval_and_seeds_their_t_interval() -> None:
    one = accuracy_estimate([0.5], trials=1017)
    assert one is not None and one.interval == "binomial" and one.std is None
    assert (one.low, one.high) == pytest.approx(binomial_interval(0.5, 1017))
    assert accuracy_estimate([0.5], trials=None).interval == ""  # type: ignore[union-attr]
    seeds = accuracy_estimate([0.50, 0.52, 0.54], trials=1017)
    assert seeds is not None and seeds.interval == "t"


def test_welch_with_equal_sizes_and_variances_has_2n_minus_2_degrees_of_freedom() -> None:
    difference = welch_difference([0.50, 0.52, 0.54], [0.44, 0.46, 0.48])
    assert difference is not None and difference.delta == pytest.approx(0.06)
    assert difference.df == pytest.approx(4.0)
    half = T_975_DF4 * math.sqrt(0.02**2 / 3 + 0.02**2 / 3)
    assert (difference.low, difference.high) == pytest.approx((0.06 - half, 0.06 + half), abs=1e-6)
    assert verdict(difference) == BETTER


def test_welch_satterthwaite_degrees_of_freedom_with_unequal_sizes() -> None:
    # variances 0.0004 (n=3) and 0.0008 (n=2): (a + b)^2 / (a^2/2 + b^2/1) with a = 0.0004/3,
    # b = 0.0004 gives 32/19
    difference = welch_difference([0.50, 0.52, 0.54], [0.40, 0.44])
    assert difference is not None and difference.df == pytest.approx(32 / 19)
    assert difference.delta == pytest.approx(0.10)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([0.50], [0.40, 0.41, 0.42], ONE_SEED),
        ([0.50, 0.51], [0.40], ONE_SEED),
        ([0.50, 0.60, 0.40], [0.52, 0.42, 0.62], NO_DIFFERENCE),  # overlapping spreads
        ([0.40, 0.41, 0.42], [0.60, 0.61, 0.62], WORSE),
        ([0.60, 0.61, 0.62], [0.40, 0.41, 0.42], BETTER),
        ([], [0.40, 0.41], NO_DATA),
    ],
)
def test_verdicts(a: list[float], b: list[float], expected: str) -> None:
    assert verdict(welch_difference(a, b)) == expected


def test_a_gap_of_two_points_between_single_runs_is_no_conclusion() -> None:
    difference = welch_difference([0.52], [0.50])
    assert difference is not None and difference.delta == pytest.approx(0.02)
    assert difference.low is None and verdict(difference) == ONE_SEED
