"""``impl=auto``: the faster of a mechanism's implementations on the device it runs on.

The feature-map kernels (``performer``, ``random_feature``) have two implementations of one
function: ``chunked`` (tiles, a hand-written backward that recomputes features, O(n d) memory)
and ``autograd`` (whole feature matrices kept for the backward). On a CPU the chunked kernel's
cache-sized tiles win at every size measured (``docs/results.md``), so ``auto`` takes it there
without timing anything, and CPU runs stay deterministic. On a GPU the answer depends on the
GPU, the sizes and the free memory, so ``auto`` does what cuDNN's benchmark mode does for
convolutions: the first call with a new shape times each implementation (forward, and backward
where gradients are on) on copies of the inputs, keeps the faster for that shape, and logs the
choice and the times once. An implementation that runs out of memory loses. Under
``torch.compile`` nothing is timed: the compiled graph gets the chunked kernel. Inside
:func:`untimed` (counting FLOPs, say, which would count the timing calls too) nothing is timed
either: a shape already measured gets its choice, a new one the default.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping

import torch

TIMED_DEVICES = {"cuda"}
"""Device types on which ``auto`` times the implementations; elsewhere it takes ``default``."""

REPEATS = 3
"""Timed calls per implementation after one warm-up call; the fastest counts."""

Implementation = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

_chosen: dict[tuple, str] = {}
_untimed = 0


def run(
    impl: str,
    owner: str,
    implementations: Mapping[str, Implementation],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    default: str,
    settings: tuple[object, ...] = (),
) -> torch.Tensor:
    """``implementations[impl](q, k, v)``, with ``impl="auto"`` resolved by :func:`choose`."""
    if impl == "auto":
        impl = choose(owner, implementations, q, k, v, default=default, settings=settings)
    return implementations[impl](q, k, v)


def choose(
    owner: str,
    implementations: Mapping[str, Implementation],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    default: str,
    settings: tuple[object, ...] = (),
) -> str:
    """The name of the implementation ``auto`` runs for these inputs: ``default`` off the
    :data:`TIMED_DEVICES` or while compiling, else the fastest of ``implementations`` (each a
    function of q, k, v) for this mechanism, device, input shape, ``settings`` (the mechanism's
    own that change its cost, such as its feature count) and whether gradients are on, timed
    once."""
    if q.device.type not in TIMED_DEVICES or torch.compiler.is_compiling():
        return default
    training = torch.is_grad_enabled()
    key = (owner, str(q.device), q.dtype, tuple(q.shape), tuple(k.shape), settings, training)
    if _untimed:
        return _chosen.get(key, default)
    if key not in _chosen:
        times = {
            name: fastest_call(run, q, k, v, training) for name, run in implementations.items()
        }
        _chosen[key] = min(times, key=times.__getitem__)
        what = "forward+backward" if training else "forward"
        measured = ", ".join(f"{name} {seconds * 1e3:.3g} ms" for name, seconds in times.items())
        logging.getLogger("vitattn.attention").info(
            "%s on %s, q %s: impl=auto takes %s (%s: %s)",
            owner,
            q.device,
            tuple(q.shape),
            _chosen[key],
            what,
            measured,
        )
    return _chosen[key]


def fastest_call(
    implementation: Implementation,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    backward: bool,
) -> float:
    """Seconds of the fastest of :data:`REPEATS` calls (after a warm-up) of ``implementation`` on
    copies of q, k, v, with a backward pass when ``backward``; infinite if it runs out of
    memory. The device is synchronised around each call, so the time is the kernels'."""
    inputs = [x.detach().clone().requires_grad_(backward) for x in (q, k, v)]

    def call() -> None:
        out = implementation(*inputs)
        if backward:
            out.backward(torch.ones_like(out))

    best = math.inf
    try:
        for repeat in range(REPEATS + 1):
            synchronize(q.device)
            start = time.perf_counter()
            call()
            synchronize(q.device)
            if repeat:  # the first call warms up (allocations, kernel selection)
                best = min(best, time.perf_counter() - start)
    except torch.OutOfMemoryError:
        best = math.inf
    finally:
        if q.device.type == "cuda":
            torch.cuda.empty_cache()
    return best


def synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work (a CUDA device; a CPU runs each call to its end)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def untimed() -> Iterator[None]:
    """Within this block ``auto`` times nothing: a shape already measured keeps its choice, a new
    one takes the default (for counting the FLOPs or memory of one call, not of the timing's)."""
    global _untimed
    _untimed += 1
    try:
        yield
    finally:
        _untimed -= 1


def forget() -> None:
    """Drop every choice made so far (tests; a process that changes GPUs)."""
    _chosen.clear()
