"""The verdicts of a 3-attention x 3-seed sweep: a paired interval for each setting against the
baseline, raw and Holm-adjusted p in ``settings.csv``, verdicts from the adjusted p, and the
seeds each undecided comparison needs; every number computed here again through scipy and
statsmodels, independently of vitattn's code."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from tests.analysis.conftest import write_run, write_seeded_sweep
from tests.support.tables import read_csv
from vitattn.analysis.summary import summarize

TEST_ACC = {
    "softmax": (0.50, 0.52, 0.54),
    "linear": (0.47, 0.46, 0.50),  # 4.3 points worse: p 0.039, but not after the correction
    "performer": (0.51, 0.51, 0.56),  # 0.7 points better, within the seeds' spread
}


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return write_seeded_sweep(tmp_path / "sweep", TEST_ACC)


def settings(sweep: Path) -> dict[str, dict[str, str]]:
    return {row["setting"]: row for row in read_csv(sweep / "settings.csv")}


def test_each_setting_is_paired_with_the_baseline_over_its_seeds(sweep: Path) -> None:
    summarize([sweep])
    records = settings(sweep)
    for attention in ("linear", "performer"):
        record = records[f"attention={attention}"]
        expected = stats.ttest_rel(TEST_ACC[attention], TEST_ACC["softmax"])
        interval = expected.confidence_interval(0.95)
        assert record["test_acc_diff_test"] == "paired t"
        assert record["test_acc_diff_sizes"] == "3"
        assert float(record["test_acc_diff_low"]) == pytest.approx(interval.low)
        assert float(record["test_acc_diff_high"]) == pytest.approx(interval.high)
        assert float(record["test_acc_diff_p"]) == pytest.approx(expected.pvalue)
        assert float(record["test_acc_diff_df"]) == 2


def test_verdicts_come_from_holm_adjusted_p_values(sweep: Path) -> None:
    summarize([sweep])
    records = settings(sweep)
    names = ["attention=linear", "attention=performer"]
    raw = [stats.ttest_rel(TEST_ACC[n.split("=")[1]], TEST_ACC["softmax"]).pvalue for n in names]
    adjusted = multipletests(raw, alpha=0.05, method="holm")[1]
    for name, p, p_holm in zip(names, raw, adjusted, strict=True):
        assert float(records[name]["test_acc_diff_p"]) == pytest.approx(p)
        assert float(records[name]["p_holm"]) == pytest.approx(p_holm)
        assert records[name]["comparisons"] == "2"
    assert raw[0] < 0.05 < adjusted[0]  # linear: worse on its own, not once corrected
    assert records["attention=linear"]["verdict"] == "no detectable difference"
    assert records["attention=performer"]["verdict"] == "no detectable difference"
    assert records["attention=softmax"]["verdict"] == "baseline"
    assert records["attention=softmax"]["p_holm"] == ""


def seeds_for_power(attention: str, level: float) -> int | None:
    """statsmodels' own answer: the paired t test's sample size for 80% power, rounded up."""
    differences = [a - b for a, b in zip(TEST_ACC[attention], TEST_ACC["softmax"], strict=True)]
    effect = abs(sum(differences) / 3) / stats.tstd(differences)
    needed = math.ceil(TTestPower().solve_power(effect_size=effect, alpha=level, power=0.8))
    return max(2, needed) if needed <= 50 else None


def test_each_undecided_comparison_says_the_seeds_it_needs(sweep: Path) -> None:
    summarize([sweep])
    records = settings(sweep)
    level = 0.05 / 2  # Bonferroni's, Holm's strictest step, for two comparisons
    linear = seeds_for_power("linear", level)
    assert linear is not None and 3 < linear <= 50
    assert records["attention=linear"]["seeds_needed"] == str(linear)
    assert seeds_for_power("performer", level) is None  # beyond 50 seeds
    assert records["attention=performer"]["seeds_needed"] == ""
    differences = [a - b for a, b in zip(TEST_ACC["linear"], TEST_ACC["softmax"], strict=True)]
    smallest = float(records["attention=linear"]["smallest_detectable"])
    effect = smallest / stats.tstd(differences)  # detected with 80% power by 3 seeds, no less
    # the two-sided test's power is its upper tail's: the lower one is nil this far from zero
    upper = TTestPower().power(effect_size=effect, nobs=3, alpha=level / 2, alternative="larger")
    assert upper == pytest.approx(0.8)


def test_summary_md_opens_with_each_verdict(sweep: Path) -> None:
    summarize([sweep])
    lines = (sweep / "summary.md").read_text().splitlines()
    assert lines[0] == (
        "Against attention=softmax, on test/acc: 2 comparisons, corrected for "
        "(Holm-Bonferroni: at most a 5% chance of any false verdict; each interval is its "
        "comparison's own, not corrected)."
    )
    linear, performer = lines[2], lines[3]
    assert linear.startswith("- attention=linear: -0.043 [")
    assert "(paired t over 3 seeds), p = 0.039, 0.078 after correction" in linear
    assert "**no detectable difference**" in linear
    needed = seeds_for_power("linear", 0.025)
    assert f"; about {needed} seeds per setting would detect it, if the difference and" in linear
    assert "same hydra.sweep.dir: only the new jobs run" in linear
    assert performer.startswith("- attention=performer: +0.007 [")
    assert "below what this sweep can resolve (more than 50 seeds per setting)" in performer


@pytest.mark.parametrize(
    ("softmax", "linear"),
    [
        ((0.50, 0.52, 0.54), (0.50, 0.52, 0.54)),
        ((0.5, 0.5, 0.5), (0.625, 0.375, 0.5)),  # the differences, exact in binary: +-1/8, 0
    ],
    ids=["the same in every seed", "zero on average"],
)
def test_a_difference_of_zero_claims_no_seeds_it_would_need(
    tmp_path: Path, softmax: tuple[float, ...], linear: tuple[float, ...]
) -> None:
    """A tiny first sweep whose two settings score the same: no plan of more seeds, rather than
    "below what this sweep can resolve (more than 50 seeds per setting)", which no seeds were
    counted for."""
    sweep = write_seeded_sweep(tmp_path / "same", {"softmax": softmax, "linear": linear})
    summarize([sweep])
    line = (sweep / "summary.md").read_text().splitlines()[2]
    assert line.startswith("- attention=linear: +0.000 ")
    if softmax == linear:  # no interval of zero width
        assert line.startswith("- attention=linear: +0.000 (paired t over 3 seeds), p = 1:")
    assert "**no detectable difference**; the difference observed is 0: there is none" in line
    assert "seeds per setting" not in line
    assert settings(sweep)["attention=linear"]["seeds_needed"] == ""


def test_a_single_comparison_is_not_corrected(tmp_path: Path) -> None:
    accuracies = {name: TEST_ACC[name] for name in ("softmax", "linear")}
    sweep = write_seeded_sweep(tmp_path / "two", accuracies)
    summarize([sweep])
    record = settings(sweep)["attention=linear"]
    assert float(record["p_holm"]) == pytest.approx(float(record["test_acc_diff_p"]))
    assert record["verdict"] == "worse"  # p 0.039 < 0.05: one comparison, nothing to correct
    first = (sweep / "summary.md").read_text().splitlines()[0]
    assert first == "Against attention=softmax, on test/acc: 1 comparison (no correction needed)."


@pytest.mark.parametrize(
    ("first_linear_seed", "test", "plan"),
    [
        (
            1,
            "+0.001 (sign test over 2 seeds both ran; 1 without a pair left out), p = 0.5",
            "every seed moved alike: 6 seeds that all do would decide it",
        ),
        (
            4,
            "+0.001 (Mann-Whitney U, 2 and 3 runs), p = 0.2",
            "each setting's seeds scored alike: no spread",
        ),
    ],
    ids=["paired", "two samples"],
)
def test_seeds_that_moved_by_the_same_image_are_tested_without_dividing_by_no_spread(
    tmp_path: Path, first_linear_seed: int, test: str, plan: str
) -> None:
    """Two seeds of linear, each one test image above softmax's (paired over the two seeds both
    ran), or two settings whose seeds each scored alike (two samples, the seeds not shared): a
    spread observed to be 0, which accuracies counted in whole images give often, is no
    evidence that the spread is 0. It was taken as certain, p = 0, and the summary called linear
    **better** at any correction with an interval of zero width; scipy's t-test, dividing by
    that spread, says the same. The exact tests that do not divide by it say how likely the
    agreement is by chance, and give no interval: two seeds that agree, p = 0.5 (the sign
    test); 2 and 3 runs apart, p = 0.2 (Mann-Whitney's U)."""
    sweep = write_seeded_sweep(tmp_path / "sweep", {"softmax": (0.5, 0.5, 0.5)})
    for seed in (first_linear_seed, first_linear_seed + 1):
        overrides = ["attention=linear", f"seed={seed}"]
        accuracy = 0.5 + 1 / 1024
        metrics = {"test/acc": accuracy}
        write_run(sweep / f"attention=linear,seed={seed}", overrides, maps=False, metrics=metrics)
    summarize([sweep])
    record = settings(sweep)["attention=linear"]
    assert record["test_acc_diff_delta"] != "" and float(record["test_acc_diff_delta"]) > 0
    assert (record["test_acc_diff_low"], record["test_acc_diff_high"]) == ("", "")
    assert record["verdict"] == "no detectable difference"
    line = next(
        line for line in (sweep / "summary.md").read_text().splitlines() if "=linear:" in line
    )
    assert test in line, line
    assert f"**no detectable difference**; {plan}" in line, line
    assert record["test_acc_diff_unpaired"] == ("1" if first_linear_seed == 1 else "0")


def test_seeds_one_image_apart_in_float32_are_alike(tmp_path: Path) -> None:
    """Test accuracies as torchmetrics records them, float32 counts of 1017 images: three seeds
    of linear each one image above softmax's. As float32 values the three differences are not
    equal (1e-8 apart), and the paired t-test, dividing by that rounding, called linear
    **better** at p = 1e-10 on one image a seed; they are the same difference, and the sign
    test says three seeds agree by chance with p = 0.25."""
    counts = (190, 300, 450)
    recorded = {
        "softmax": tuple(float(np.float32(k / 1017)) for k in counts),
        "linear": tuple(float(np.float32((k + 1) / 1017)) for k in counts),
    }
    differences = [a - b for a, b in zip(recorded["linear"], recorded["softmax"], strict=True)]
    assert len(set(differences)) > 1  # the float32 rounding this is about
    sweep = write_seeded_sweep(tmp_path / "sweep", recorded)
    summarize([sweep])
    record = settings(sweep)["attention=linear"]
    assert (record["test_acc_diff_test"], record["verdict"]) == (
        "sign test",
        "no detectable difference",
    )
    assert float(record["test_acc_diff_p"]) == pytest.approx(stats.binomtest(3, 3).pvalue)


def test_seeds_that_all_scored_alike_show_their_test_sets_interval(tmp_path: Path) -> None:
    """Two seeds of one accuracy have a spread of 0 and a t interval of zero width: the table
    showed a bare 0.404, as exact as a FLOP count; the test set (1017 images) still bounds it,
    as it does one run's."""
    accuracy = float(np.float32(411 / 1017))
    accuracies = {"softmax": (accuracy, accuracy), "linear": (0.3, 0.31)}
    sweep = write_seeded_sweep(
        tmp_path / "sweep",
        accuracies,
        extra=lambda attention, seed: {"test/confusion_matrix": [[1000, 17]]},
    )
    summarize([sweep])
    record = settings(sweep)["attention=softmax"]
    low, high = stats.binomtest(411, 1017).proportion_ci(0.95, method="exact")
    assert record["test_acc_interval"] == "binomial"
    assert float(record["test_acc_low"]) == pytest.approx(low)
    assert float(record["test_acc_high"]) == pytest.approx(high)
    assert f"0.404 ± 0.000 [{low:.3f}, {high:.3f}]" in (sweep / "summary.md").read_text()


def test_a_verdict_says_what_it_was_reached_on(tmp_path: Path) -> None:
    """A setting that lost runs is compared on those that completed, and one without a test
    accuracy on its best validation accuracy: the sentence said neither (the runs not completed
    were only in the table's notes, the figure only in the opening line, which names test/acc)."""
    accuracies = {
        "softmax": (0.50, 0.52, 0.54),
        "linear": (0.47, 0.46, 0.50),
        "performer": (0.51, 0.51, 0.56),
    }
    sweep = write_seeded_sweep(tmp_path / "sweep", accuracies)
    write_run(
        sweep / "attention=linear,seed=4",
        ["attention=linear", "seed=4"],
        maps=False,
        metrics={"status": "failed", "test/acc": None},
    )
    for seed in (1, 2, 3):
        run = sweep / f"attention=performer,seed={seed}" / "metrics.json"
        metrics = json.loads(run.read_text())
        del metrics["test/acc"]
        run.write_text(json.dumps(metrics))
    summarize([sweep])
    lines = (sweep / "summary.md").read_text().splitlines()
    assert lines[0].startswith("Against attention=softmax, on test/acc: 2 comparisons")
    linear = next(line for line in lines if line.startswith("- attention=linear:"))
    assert "(paired t over 3 seeds; on the completed runs only: attention=linear 3 of 4)" in linear
    performer = next(line for line in lines if line.startswith("- attention=performer:"))
    assert performer.startswith("- attention=performer: on best val/acc, +0.007 [")


def test_six_seeds_that_each_moved_by_the_same_image_are_better_by_the_sign_test(
    tmp_path: Path,
) -> None:
    """Six seeds each one image better agree by chance with p = 2 / 2^6 = 0.031: a verdict,
    where the t-test divided by a spread of 0."""
    softmax = tuple(0.25 + seed / 64 for seed in range(6))
    linear = tuple(accuracy + 1 / 1024 for accuracy in softmax)
    sweep = write_seeded_sweep(tmp_path / "sweep", {"softmax": softmax, "linear": linear})
    summarize([sweep])
    record = settings(sweep)["attention=linear"]
    assert (record["verdict"], record["test_acc_diff_test"]) == ("better", "sign test")
    assert float(record["test_acc_diff_p"]) == pytest.approx(2 / 2**6)
    assert stats.binomtest(6, 6).pvalue == pytest.approx(2 / 2**6)


def test_a_difference_interval_in_the_summary_stays_within_minus_one_and_one(
    tmp_path: Path,
) -> None:
    """Two seeds of linear that disagree with softmax's in opposite ways: the paired t interval
    (t(1), 12.7 standard errors) ran from -10 to 10 points of accuracy in ``settings.csv`` and
    ``summary.md``; two accuracies are never more than 1 apart, so it is cut there, the test's
    p-value untouched."""
    accuracies = {"softmax": (0.1, 0.9), "linear": (0.9, 0.1)}
    sweep = write_seeded_sweep(tmp_path / "sweep", accuracies)
    summarize([sweep])
    record = settings(sweep)["attention=linear"]
    assert (float(record["test_acc_diff_low"]), float(record["test_acc_diff_high"])) == (-1, 1)
    whole = stats.ttest_rel([0.9, 0.1], [0.1, 0.9]).confidence_interval(0.95)
    assert whole.low < -1 < 1 < whole.high
    assert float(record["test_acc_diff_p"]) == pytest.approx(1.0)


def test_runs_trained_apart_under_one_label_are_said_to_be(tmp_path: Path) -> None:
    """Two sweeps read together whose configs differ where no override said so (a default
    changed between them: 300 steps, then 5000), and a run tested on another test set: their
    runs share a label and were counted as one setting's seeds without a word."""
    first, second = tmp_path / "first", tmp_path / "second"
    write_seeded_sweep(first, {"softmax": (0.50,), "linear": (0.47,)})
    for attention, accuracy in (("softmax", 0.52), ("linear", 0.46)):
        overrides = [f"attention={attention}", "seed=2"]
        metrics = {"test/acc": accuracy}
        if attention == "linear":
            metrics["test/confusion_matrix"] = [[9000, 1000]]
        write_run(second / f"attention={attention},seed=2", overrides, steps=5000, metrics=metrics)
    write_run(
        first / "attention=linear,seed=3",
        ["attention=linear", "seed=3"],
        metrics={"test/acc": 0.48, "test/confusion_matrix": [[1000, 17]]},
    )
    summary = summarize([first, second])
    notes = {setting.label: setting.notes for setting in summary.settings}
    assert notes["attention=softmax"] == [
        "runs trained apart, not seeds of one setting alone: trainer.max_steps 300, 5000"
    ]
    assert notes["attention=linear"] == [
        "runs trained apart, not seeds of one setting alone: trainer.max_steps 300, 5000; "
        "test images 10000, 1017"
    ]
