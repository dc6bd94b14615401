"""Wall-clock timing of a callable: a warm-up that lasts until the calls settle, repeats, median
and spread; and a process heap that does not change under the timings.

CPU times come from :func:`time.perf_counter`; on a GPU each repeat is bracketed by CUDA events
(``torch.cuda.Event(enable_timing=True)``), which time the device work rather than the launch.

Two things make a call's time depend on what ran before it, and both are handled here so that
every grid point of ``vitattn-bench`` is measured from the same state:

* **warm-up**: the first calls of a new module and new input sizes are slow (allocator, caches)
  and how many are slow varies, so :func:`warm_up` keeps calling until two consecutive calls
  agree (``settle``), between a least and a most number of calls;
* **the heap**: glibc's ``malloc`` adapts its mmap threshold to the blocks freed so far and gives
  freed memory at the top of its heap back to the system; whether a size's tensors then
  page-fault on *every* call, not only the first, depends on the blocks that happen to lie at the
  top of the heap, i.e. on what ran before. :func:`steady_heap` fixes both thresholds.

Between grid points the garbage collector runs, for what a grid point left in reference cycles;
:func:`objects_before_frozen` keeps the objects that were there before the sweep (torch's and
Dynamo's, hundreds of thousands) out of those collections, which would otherwise scan them all.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 2**20  # the largest mmap threshold glibc accepts on 64-bit systems
NEVER_TRIM = -1  # M_TRIM_THRESHOLD -1: never give the heap's top back (mallopt(3))


@dataclass(frozen=True)
class Timing:
    """Milliseconds per call over ``repeats`` measured calls, after ``warmup`` unmeasured ones."""

    median_ms: float
    q25_ms: float
    q75_ms: float
    min_ms: float
    max_ms: float
    repeats: int
    warmup: int = 0
    first_ms: float | None = None
    """The first warm-up call's milliseconds: a compiled call's compile, which the measured calls
    leave out (``None`` without a warm-up)."""


def summarize(samples_ms: list[float], warmup: int = 0, first_ms: float | None = None) -> Timing:
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
        warmup=warmup,
        first_ms=first_ms,
    )


def settled(previous_ms: float, last_ms: float, settle: float) -> bool:
    """Whether two consecutive calls differ by at most ``settle`` of the faster one."""
    return abs(last_ms - previous_ms) <= settle * min(previous_ms, last_ms)


def warm_up(
    call_ms: Callable[[], float],
    *,
    least: int,
    most: int,
    settle: float,
    budget_ms: float = float("inf"),
) -> int:
    """Run ``call_ms`` (one call, returning its milliseconds) unmeasured; return how many times.

    At least ``least`` calls, then more until the last two are within ``settle`` of each other,
    ``most`` calls in all (``most <= least``: exactly ``least``). The warm-up also ends once the
    calls after the first have spent ``budget_ms``: the first compiles a compiled call (seconds,
    once), and counted, a compile longer than the budget left one warm-up call, and the second,
    still slow, was measured (docs/bench.md).
    """
    times: list[float] = []
    while len(times) < max(least, most):
        if sum(times[1:]) > budget_ms:
            break
        if len(times) >= least and len(times) >= 2 and settled(times[-2], times[-1], settle):
            break
        times.append(call_ms())
    return len(times)


def _one_call_ms(
    call: Callable[[], Any], device: torch.device, clock: Callable[[], float] = time.perf_counter
) -> float:
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))
    started = clock()
    call()
    return (clock() - started) * 1e3


def time_call(
    call: Callable[[], Any],
    device: torch.device,
    *,
    warmup: int,
    repeats: int,
    max_seconds: float | None = None,
    warmup_max: int | None = None,
    settle: float = 0.1,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Time ``call``: a warm-up (:func:`warm_up`: at least ``warmup`` calls, then until two
    consecutive ones are within ``settle``, ``warmup_max`` in all; ``None``: exactly ``warmup``),
    then up to ``repeats`` measured calls. ``clock`` (seconds) times CPU calls.

    With ``max_seconds`` a slow call measures less: warm-up stops once it has used half of that
    budget, and the repeats stop once they have used all of it (at least one repeat is always
    measured), so a single size that takes a minute per call does not take ten.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    budget_ms = float("inf") if max_seconds is None else max_seconds * 1e3
    first: list[float] = []

    def warm_up_call() -> float:
        ms = _one_call_ms(call, device, clock)
        if not first:
            first.append(ms)
        return ms

    warmed = warm_up(
        warm_up_call,
        least=warmup,
        most=warmup if warmup_max is None else warmup_max,
        settle=settle,
        budget_ms=budget_ms / 2,
    )
    samples: list[float] = []
    for _ in range(repeats):
        samples.append(_one_call_ms(call, device, clock))
        if sum(samples) > budget_ms:
            break
    return summarize(samples, warmed, first[0] if first else None)


def steady_heap() -> bool:
    """Fix glibc's ``malloc`` thresholds for this process: freed memory stays in the heap (no
    trimming), and only blocks above 32 MiB are mmapped (each of those on every call).

    By default both thresholds adapt to what has been freed, so whether a tensor of a given size
    page-faults on every call depends on the history of the process. Returns whether it could
    be done (False where the C library is not glibc, e.g. macOS).
    """
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    trim = mallopt(M_TRIM_THRESHOLD, NEVER_TRIM)
    mmap = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)
    return bool(trim) and bool(mmap)


_FROZEN_BY_US = False
"""Whether an :func:`objects_before_frozen` block is open: an inner one changes nothing."""


@contextlib.contextmanager
def objects_before_frozen() -> Iterator[None]:
    """Within the block, ``gc.collect()`` scans only the objects made in it.

    The objects alive on entry (after one full collection) move to the collector's permanent
    generation (:func:`gc.freeze`) and come back on exit: with torch and Dynamo imported a full
    collection walks some 300,000 objects, a third of a second on a small CPU, and
    :func:`vitattn.bench.scaling.release` collects after every grid point. An object from
    before the block that is left in a reference cycle within it waits for the block's end.

    Objects frozen before the block come back with the rest: Python 3.12 freezes a few hundred
    as it starts, and where this block stepped aside for any frozen object (until 2026-11-29)
    it froze nothing on Python 3.12, the lent GPUs' Python. Freezing only spares the collector
    work, so unfreezing them changes what later collections scan, nothing else. A block inside
    another changes nothing.
    """
    global _FROZEN_BY_US
    if _FROZEN_BY_US:
        yield
        return
    gc.collect()
    gc.freeze()
    _FROZEN_BY_US = True
    try:
        yield
    finally:
        _FROZEN_BY_US = False
        gc.unfreeze()
