"""What a resumed fit takes from a checkpoint's throughput state: the costs of its earlier attempts
when the state is what :meth:`ImagesPerSecond.state_dict` writes, and nothing (costs unknown, no
error) when a file holds anything else."""

from __future__ import annotations

import math
from typing import Any

import pytest

from vitattn.training.callbacks.throughput import ImagesPerSecond


def test_the_state_written_is_the_state_read() -> None:
    first = ImagesPerSecond()
    first.rates, first.earlier_seconds, first._fit_started = [100.0, 120.0], 0.0, None
    state = first.state_dict()
    assert state == {
        "rates": [100.0, 120.0],
        "seconds": None,
        "attempts": 1,
        "startup_seconds": None,  # no warm-up measured
    }
    resumed = ImagesPerSecond()
    resumed.load_state_dict(
        {"rates": [100.0, 120.0], "seconds": 2.5, "attempts": 1, "startup_seconds": 4.0}
    )
    assert resumed.earlier_rates == [100.0, 120.0]
    assert resumed.earlier_seconds == 2.5 and resumed.attempts == 2
    assert resumed.earlier_startup == 4.0


def test_the_startup_seconds_are_the_warm_up_beyond_the_steady_rate_over_every_attempt() -> None:
    """Five warm-up steps of 64 images took 4.2 s; at the median steady 100 images/s they would
    have taken 3.2 s: 1 s of start-up (compilation), plus an earlier attempt's 2 s."""
    throughput = ImagesPerSecond()
    throughput.rates, throughput.earlier_startup = [90.0, 100.0, 110.0], 2.0
    assert throughput.startup_seconds() is None  # the warm-up is not over
    throughput._warmup_seconds, throughput._warmup_images = 4.2, 5 * 64
    assert throughput.startup_seconds() == pytest.approx(3.0)
    throughput._warmup_seconds = 1.0  # faster than steady: no start-up cost, never negative
    assert throughput.startup_seconds() == pytest.approx(2.0)


@pytest.mark.parametrize(
    "state",
    [
        {},
        {"rates": "fast", "seconds": "long", "attempts": "two", "startup_seconds": "slow"},
        {"rates": [1.0, math.nan], "seconds": math.inf, "attempts": True},
        {"rates": [1.0, -5.0], "seconds": -1.0, "attempts": 0, "startup_seconds": -1.0},
        {"rates": [{"__reduce__": 1}], "seconds": [3.0], "attempts": 2.5},
    ],
)
def test_a_state_that_is_not_what_was_written_leaves_the_costs_unknown(
    state: dict[str, Any],
) -> None:
    resumed = ImagesPerSecond()
    resumed.load_state_dict(state)
    assert resumed.earlier_rates == []
    assert resumed.earlier_seconds is None
    assert resumed.attempts == 2  # a resume, however its count was written
    assert resumed.total_seconds() is None
    assert resumed.earlier_startup is None
