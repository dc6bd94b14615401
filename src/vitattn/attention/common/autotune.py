"""``impl=auto``: the fastest of a mechanism's implementations on the device it runs on.

The feature-map kernels (``performer``, ``random_feature``) have several implementations of one
function: ``chunked`` (tiles, a hand-written backward that recomputes features, O(n d) memory),
``autograd`` (whole feature matrices kept for the backward) and, on a GPU, ``triton`` (fused
kernels); ``linear``, ``taylor`` and ``efficient`` have ``torch`` and ``triton``. On a CPU the
chunked kernel's cache-sized tiles win at every size measured (``docs/results.md``), so ``auto``
takes it there without timing anything, and CPU runs stay deterministic. On a GPU the answer depends
on the GPU, the sizes and the free memory, so ``auto`` does what cuDNN's benchmark mode does for
convolutions: the first call with a new shape times each implementation (forward, and backward where
gradients are on) on copies of the inputs, keeps the fastest for that shape, and logs the choice and
the times once. An implementation that runs out of memory loses. Under ``torch.compile`` nothing is
timed: the compiled graph gets the mechanism's default (:attr:`Implementations.default`: the fused
kernels where they run). Inside :func:`untimed` (counting FLOPs, say, which would count the timing
calls too) nothing is timed either: a shape already measured gets its choice, a new one the default.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import torch

TIMED_DEVICES = {"cuda"}
"""Device types on which ``auto`` times the implementations; elsewhere it takes ``default``."""

REPEATS = 3
"""Timed calls per implementation after one warm-up call; the fastest counts."""

Implementation = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class Choices:
    """What ``auto`` chose in this process (``chosen``: by mechanism, device, dtype, shapes,
    settings and gradient mode), and how many :func:`untimed` blocks are open."""

    chosen: dict[tuple, str] = field(default_factory=dict)
    untimed: int = 0


@functools.cache
def choices() -> Choices:
    """This process's :class:`Choices`; ``choices.cache_clear()`` forgets them (tests; a process
    that changes GPUs)."""
    return Choices()


@dataclass(frozen=True)
class Implementations:
    """One mechanism's implementations of the same function of q, k, v.

    Args:
        owner: the mechanism's name.
        functions: each implementation by name.
        default: what ``auto`` takes without timing.
        settings: the mechanism's own settings that change what a call costs (its feature
            count, say), part of what a choice is kept for.
    """

    owner: str
    functions: Mapping[str, Implementation]
    default: str
    settings: tuple[object, ...] = ()

    def run(self, impl: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``functions[impl](q, k, v)``, with ``impl="auto"`` resolved by :meth:`choose`."""
        if impl == "auto":
            impl = self.choose(q, k, v)
        return self.functions[impl](q, k, v)

    def choose(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str:
        """The name of the implementation ``auto`` runs for these inputs: :attr:`default` off the
        :data:`TIMED_DEVICES` or while compiling, else the fastest of :attr:`functions` for this
        mechanism, device, input shape, :attr:`settings` and whether gradients are on, timed
        once."""
        if q.device.type not in TIMED_DEVICES or torch.compiler.is_compiling():
            return self.default
        training = torch.is_grad_enabled()
        shapes = (q.dtype, tuple(q.shape), tuple(k.shape))
        key = (self.owner, str(q.device), *shapes, self.settings, training)
        made = choices()
        if made.untimed:
            return made.chosen.get(key, self.default)
        if key not in made.chosen:
            times = {
                name: fastest_call(function, q, k, v, training)
                for name, function in self.functions.items()
            }
            made.chosen[key] = min(times, key=times.__getitem__)
            self.log(q, made.chosen[key], times, training)
        return made.chosen[key]

    def log(self, q: torch.Tensor, chosen: str, times: dict[str, float], training: bool) -> None:
        """Say which implementation ``auto`` takes for inputs like ``q``, and the times."""
        what = "forward+backward" if training else "forward"
        measured = ", ".join(f"{name} {seconds * 1e3:.3g} ms" for name, seconds in times.items())
        logging.getLogger("vitattn.attention").info(
            "%s on %s, q %s: impl=auto takes %s (%s: %s)",
            self.owner,
            q.device,
            tuple(q.shape),
            chosen,
            what,
            measured,
        )


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
    made = choices()
    made.untimed += 1
    try:
        yield
    finally:
        made.untimed -= 1
