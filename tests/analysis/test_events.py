"""What a summary keeps of a run's curves: each thinned to a bound, read once per summary."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.analysis.conftest import write_run
from tests.support.tables import read_csv
from vitattn.analysis import events, figures, records
from vitattn.analysis.events import read_curves, thinned
from vitattn.analysis.seed_runs import band_tags
from vitattn.analysis.summary import summarize

VALUES = st.floats(allow_nan=True, allow_infinity=True, width=32)


@given(st.lists(st.tuples(st.integers(-50, 1000), VALUES), max_size=400), st.integers(5, 60))
def test_a_thinned_curve_keeps_the_bound_its_last_point_and_its_extremes(
    logged: list[tuple[int, float]], bound: int
) -> None:
    points = sorted((step, float(at), value) for at, (step, value) in enumerate(logged))
    kept = thinned(points, bound)
    if len(points) <= bound:
        assert kept == points
        return
    assert len(kept) <= bound
    assert kept == sorted(kept) and set(kept) <= set(points)
    assert kept[-1] == points[-1]
    values = [value for value in (point[-1] for point in points) if not math.isnan(value)]
    if values:  # infinities too: the best a summary reports is the run's own
        assert max(values) in [value for *_, value in kept]
        assert min(values) in [value for *_, value in kept]


def test_steps_either_side_of_zero_are_thinned_to_five() -> None:
    """Spans of any width split at step 0: the bound of four this once allowed never ended."""
    points = [(step, 0.0, float(step)) for step in range(-50, 1000)]
    assert len(thinned(points, 5)) <= 5
    with pytest.raises(ValueError, match="at least 5 points"):
        thinned(points, 4)


def shared_steps(*curves: list[tuple[int, float, float]]) -> set[int]:
    return set.intersection(*({step for step, *_ in curve} for curve in curves))


def curve(steps: list[int], value: float) -> list[tuple[int, float, float]]:
    return [(step, float(step), value * step) for step in steps]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (list(range(0, 5000, 5)), list(range(0, 5000, 5))),
        (list(range(1, 1001)), list(range(0, 1001))),  # one started a step earlier
        (list(range(1001)), sorted([*range(1001), 100])),  # one logged step 100 twice
    ],
    ids=["the same steps", "one step earlier", "a step twice"],
)
def test_seeds_that_logged_the_same_steps_keep_the_same_steps(
    first: list[int], second: list[int]
) -> None:
    """Each seed's highest and lowest points are its own; the steps between are the same, so the
    mean of seeds is taken at every thinned step (thinned by position, a seed that started one
    step earlier, or logged one twice, shared 5 and 54 of about 10,000 steps: red team)."""
    one, two = thinned(curve(first, 1.0), 100), thinned(curve(second, -1.0), 100)
    assert len(one) - len(shared_steps(one, two)) <= 3
    assert len(two) - len(shared_steps(one, two)) <= 3
    assert max(first) in shared_steps(one, two)


def test_seeds_of_spans_a_power_of_two_apart_share_the_coarser_steps() -> None:
    """Steps 0..193 fit 97 spans of 2; 0..199 need spans of 4: the second's steps are among the
    first's."""
    fine, coarse = (
        thinned(curve(list(range(194)), 1.0), 100),
        thinned(curve(list(range(200)), 1.0), 100),
    )
    assert len(coarse) <= 53 and len(fine) > 90
    assert len(coarse) - len(shared_steps(fine, coarse)) <= 3


def test_the_curves_a_summary_draws_are_among_those_it_reads() -> None:
    assert {tag for tag, *_ in figures.CURVES} <= set(records.CURVE_TAGS)


def test_only_the_tags_asked_for_are_read(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", ["attention=softmax", "seed=1"], maps=False)
    assert set(read_curves(run, ["val/acc"])) == {"val/acc"}
    assert set(read_curves(run, ["val/acc", "no/such"])) == {"val/acc"}


def test_a_summary_holds_long_curves_thinned_with_the_runs_own_best(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep of two seeds whose curves hold ten times the bound: the summary keeps each curve
    within it, reports each run's best and final accuracy as logged, and writes the TensorBoard
    run of their mean at the thinned steps."""
    monkeypatch.setattr(events, "MAX_CURVE_POINTS", 40)
    sweep = tmp_path / "sweep"
    best = {1: (123, 0.91), 2: (277, 0.93)}
    for seed, (best_step, best_value) in best.items():
        val_acc = [(step, 0.5 + 0.001 * step / 400) for step in range(400)]
        val_acc[best_step] = (best_step, best_value)
        train_loss = [(step, 2.0 - step / 400) for step in range(400)]
        write_run(
            sweep / f"seed={seed}",
            ["attention=linear", f"seed={seed}"],
            val_acc=val_acc,
            train_loss=train_loss,
            maps=False,
        )
    summary = summarize([sweep])
    for member in summary.runs:
        assert all(0 < len(points) <= 40 for points in member.run.events.values())
    rows = {row["run"]: row for row in read_csv(sweep / "summary.csv")}
    for seed, (_, best_value) in best.items():
        row = rows[f"seed={seed}"]
        assert float(row["best_val_acc"]) == pytest.approx(best_value)
        assert float(row["final_val_acc"]) == pytest.approx(0.5 + 0.001 * 399 / 400)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (aggregate,) = summary.seed_runs
    accumulator = EventAccumulator(str(aggregate), size_guidance={"scalars": 0})
    accumulator.Reload()
    mean_tag = band_tags("train/loss")[0]
    steps = [event.step for event in accumulator.Scalars(mean_tag)]
    assert 20 <= len(steps) <= 40 and steps[-1] == 399


def test_a_summary_reads_each_runs_event_files_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary's figures and the TensorBoard runs of its seed means share what it read (each
    read was TensorBoard's pure-Python reader over the whole run, 8 s for 300,000 records)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sweep = tmp_path / "sweep"
    for attention in ("softmax", "linear"):
        for seed in (1, 2):
            write_run(
                sweep / f"attention={attention},seed={seed}",
                [f"attention={attention}", f"seed={seed}"],
                maps=False,
            )
    reads: list[str] = []
    reload = EventAccumulator.Reload

    def counted(self: EventAccumulator) -> EventAccumulator:
        reads.append(self.path)
        return reload(self)

    monkeypatch.setattr(EventAccumulator, "Reload", counted)
    summary = summarize([sweep])
    assert len(summary.seed_runs) == 2
    assert sorted(reads) == sorted(str(member.run.path) for member in summary.runs)
