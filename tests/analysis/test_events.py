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

VALUES = st.floats(allow_nan=True, allow_infinity=False, width=32)


@given(st.lists(VALUES, max_size=400), st.integers(4, 60))
def test_a_thinned_curve_keeps_the_bound_its_ends_and_its_extremes(
    values: list[float], bound: int
) -> None:
    points = [(step, float(step), value) for step, value in enumerate(values)]
    kept = thinned(points, bound)
    if len(points) <= bound:
        assert kept == points
        return
    assert len(kept) <= bound
    assert kept == sorted(kept) and set(kept) <= set(points)
    assert kept[0] == points[0] and kept[-1] == points[-1]
    finite = [value for value in values if math.isfinite(value)]
    if finite:
        assert max(finite) in [value for *_, value in kept]
        assert min(finite) in [value for *_, value in kept]


def test_seeds_that_logged_the_same_steps_keep_the_same_steps() -> None:
    """Each seed's best and worst points are its own; the steps between are the same, so the
    mean of seeds is taken at every thinned step."""
    first = [(step, float(step), math.sin(step)) for step in range(0, 5000, 5)]
    second = [(step, float(step), math.cos(step)) for step in range(0, 5000, 5)]
    one, two = thinned(first, 100), thinned(second, 100)
    shared = {step for step, *_ in one} & {step for step, *_ in two}
    assert len(one) - len(shared) <= 2 and len(two) - len(shared) <= 2
    assert {0, 4995} <= shared


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
    assert 30 <= len(steps) <= 40 and steps[0] == 0 and steps[-1] == 399


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
