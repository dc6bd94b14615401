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
    assert state == {"rates": [100.0, 120.0], "seconds": None, "attempts": 1}
    resumed = ImagesPerSecond()
    resumed.load_state_dict({"rates": [100.0, 120.0], "seconds": 2.5, "attempts": 1})
    assert resumed.earlier_rates == [100.0, 120.0]
    assert resumed.earlier_seconds == 2.5 and resumed.attempts == 2


@pytest.mark.parametrize(
    "state",
    [
        {},
        {"rates": "fast", "seconds": "long", "attempts": "two"},
        {"rates": [1.0, math.nan], "seconds": math.inf, "attempts": True},
        {"rates": [1.0, -5.0], "seconds": -1.0, "attempts": 0},
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
