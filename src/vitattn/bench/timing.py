"""Wall-clock timing of a callable: warm-up, repeats, median and spread.

CPU times come from :func:`time.perf_counter`; on a GPU each repeat is bracketed by CUDA events
(``torch.cuda.Event(enable_timing=True)``), which time the device work rather than the launch.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Timing:
    """Milliseconds per call over ``repeats`` measured calls."""

    median_ms: float
    q25_ms: float
    q75_ms: float
    min_ms: float
    max_ms: float
    repeats: int


def summarize(samples_ms: list[float]) -> Timing:
    """Median, quartiles and range of a list of per-call times."""
    if not samples_ms:
        raise ValueError("no timing samples")
    ordered = sorted(samples_ms)
    if len(ordered) >= 2:
        q25, _, q75 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q25 = q75 = ordered[0]
    return Timing(
        median_ms=statistics.median(ordered),
        q25_ms=q25,
        q75_ms=q75,
        min_ms=ordered[0],
        max_ms=ordered[-1],
        repeats=len(ordered),
    )


def _one_call_ms(call: Callable[[], Any], device: torch.device) -> float:
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1e3


def time_call(
    call: Callable[[], Any],
    device: torch.device,
    *,
    warmup: int,
    repeats: int,
    max_seconds: float | None = None,
) -> Timing:
    """Time ``call``: ``warmup`` unmeasured calls, then up to ``repeats`` measured ones.

    With ``max_seconds`` a slow call measures less: warm-up stops once it has used half of that
    budget, and the repeats stop once they have used all of it (at least one repeat is always
    measured), so a single size that takes a minute per call does not take ten.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    budget_ms = float("inf") if max_seconds is None else max_seconds * 1e3
    spent = 0.0
    for _ in range(warmup):
        spent += _one_call_ms(call, device)
        if spent > budget_ms / 2:
            break
    samples: list[float] = []
    for _ in range(repeats):
        samples.append(_one_call_ms(call, device))
        if sum(samples) > budget_ms:
            break
    return summarize(samples)
