"""The warm-up that lasts until the calls settle, and the steady heap (:mod:`vitattn.bench.timing`).

The warm-up is tested with scripted call times (a fake clock), so these tests do not depend on
how busy the machine is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import weakref
from collections.abc import Callable, Iterable

import pytest
import torch

from vitattn.bench.timing import (
    objects_before_frozen,
    settled,
    steady_heap,
    time_call,
    warm_up,
)

CPU = torch.device("cpu")
SLOW_START = [100.0, 60.0, 30.0, 20.0, 14.0, 14.5, 14.2, 14.1]  # settles at the 6th call


def scripted(times_ms: Iterable[float]) -> Callable[[], float]:
    """A call that takes the next of ``times_ms``, and fails when asked for one more."""
    times = iter(times_ms)
    return lambda: next(times)


def test_two_calls_within_ten_percent_have_settled() -> None:
    assert settled(10.0, 11.0, 0.1) and settled(11.0, 10.0, 0.1)
    assert not settled(10.0, 11.5, 0.1) and not settled(11.5, 10.0, 0.1)


def test_the_warm_up_stops_when_two_consecutive_calls_agree() -> None:
    assert warm_up(scripted(SLOW_START), least=2, most=20, settle=0.1) == 6
    assert warm_up(scripted(SLOW_START), least=2, most=20, settle=0.5) == 4  # 30 -> 20


def test_the_warm_up_stops_at_its_cap_when_the_calls_never_agree() -> None:
    alternating = [10.0, 20.0] * 10
    assert warm_up(scripted(alternating), least=2, most=7, settle=0.1) == 7


def test_the_warm_up_makes_at_least_its_least_calls() -> None:
    steady = [5.0] * 10
    assert warm_up(scripted(steady), least=4, most=20, settle=0.1) == 4
    assert warm_up(scripted(steady), least=0, most=20, settle=0.1) == 2  # a pair to compare
    assert warm_up(scripted(SLOW_START), least=3, most=3, settle=0.1) == 3  # a fixed warm-up
    assert warm_up(scripted([]), least=0, most=0, settle=0.1) == 0


def test_the_warm_up_ends_when_it_has_spent_its_budget() -> None:
    assert warm_up(scripted(SLOW_START), least=2, most=20, settle=0.1, budget_ms=50.0) == 2


def test_a_first_call_that_compiles_is_not_counted_against_the_budget() -> None:
    """A compile longer than the budget ended the warm-up after that one call, and the next,
    still slow, was measured; the calls after it settle within the budget."""
    compiling = [5000.0, *SLOW_START[1:]]
    assert warm_up(scripted(compiling), least=2, most=20, settle=0.1, budget_ms=150.0) == 6


class FakeClock:
    """Seconds that advance only when a timed call runs, by the call's scripted duration."""

    def __init__(self, durations_ms: Iterable[float]) -> None:
        self.now = 0.0
        self.durations = iter(durations_ms)

    def __call__(self) -> float:
        return self.now

    def call(self) -> None:
        self.now += next(self.durations) / 1e3


def test_time_call_measures_only_after_the_warm_up() -> None:
    clock = FakeClock([*SLOW_START[:6], 11.0, 13.0, 12.0])
    timing = time_call(clock.call, CPU, warmup=2, repeats=3, warmup_max=20, clock=clock)
    assert (timing.warmup, timing.repeats) == (6, 3)
    # the first call, a compiled call's compile, is kept apart from the steady time
    assert timing.first_ms == pytest.approx(SLOW_START[0])
    cold = FakeClock([5.0])
    assert time_call(cold.call, CPU, warmup=0, repeats=1, clock=cold).first_ms is None
    assert (timing.min_ms, timing.median_ms, timing.max_ms) == pytest.approx((11.0, 12.0, 13.0))
    clock = FakeClock([*SLOW_START[:2], 30.0, 20.0, 14.0])  # warmup_max=None: exactly warmup
    timing = time_call(clock.call, CPU, warmup=2, repeats=3, clock=clock)
    assert (timing.warmup, timing.median_ms) == (2, pytest.approx(20.0))


def test_a_steady_heap_gives_freed_memory_back_to_the_next_call_without_page_faults() -> None:
    """Six 16 MiB blocks at a time, as linear attention's forward at n = 4096 allocates (torch's
    CPU tensors come from the same ``malloc``): by default glibc gives their memory back to the
    system when they are freed, and every round page-faults on all of it again; on a steady heap
    only the first round does. Plain ``malloc`` and ``free``, so that nothing else allocated in
    between decides where the blocks land."""
    resource = pytest.importorskip("resource")  # Unix only
    if not steady_heap():
        pytest.skip("not glibc: no mallopt to steady the heap with")
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size = 16 * 2**20
    pages = 6 * size // resource.getpagesize()
    faults = []
    for _ in range(4):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        blocks = [libc.malloc(size) for _ in range(6)]
        for block in blocks:
            ctypes.memset(block, 1, size)
        for block in blocks:
            libc.free(block)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    assert max(faults[1:]) < pages / 100, faults


class Cycle:
    """An object that refers to itself: only the garbage collector frees it."""

    def __init__(self) -> None:
        self.me = self
        self.tensor = torch.zeros(4)


def test_within_the_frozen_block_collections_free_what_it_made_and_skip_what_was_there() -> None:
    """A grid point's cycles still go at each collection; the objects from before the sweep
    are not scanned (so one left in a cycle waits for the block's end), and come back after."""
    before = Cycle()
    before_ref = weakref.ref(before)
    with objects_before_frozen():
        assert gc.get_freeze_count() > 0
        del before
        made = Cycle()
        made_ref = weakref.ref(made)
        del made
        gc.collect()
        assert made_ref() is None  # what the block made is collected
        assert before_ref() is not None  # what was there before is not scanned
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert before_ref() is None


def test_objects_frozen_before_the_block_are_frozen_in_it_and_come_back_after() -> None:
    """A cycle frozen before the block (Python 3.12 freezes a few hundred objects as it starts)
    is not scanned within it, and is collected after it, as the objects the block froze. The
    block used to step aside wherever anything was frozen: on Python 3.12 it froze nothing."""
    cycle = Cycle()
    cycle_ref = weakref.ref(cycle)
    gc.freeze()
    try:
        del cycle  # only its own cycle holds it now: a collection that scans it frees it
        with objects_before_frozen():
            made = Cycle()
            made_ref = weakref.ref(made)
            del made
            gc.collect()
            assert made_ref() is None and cycle_ref() is not None
        assert gc.get_freeze_count() == 0
        gc.collect()
        assert cycle_ref() is None
    finally:
        gc.unfreeze()


def test_a_block_inside_another_keeps_the_outer_ones_objects_frozen() -> None:
    before = Cycle()
    before_ref = weakref.ref(before)
    with objects_before_frozen():
        with objects_before_frozen():
            pass
        del before
        gc.collect()
        assert before_ref() is not None  # still frozen: the inner block unfroze nothing
    gc.collect()
    assert before_ref() is None
