"""Time and memory of each attention against sequence length (``vitattn-bench``, the default).

For every attention x head dimension x sequence length one :class:`Row`: forward time
(inference: ``eval()`` and ``no_grad``), forward+backward time (a training step: ``train()``,
gradients of q, k, v and of the kernel's parameters), and the memory of one forward+backward
(:mod:`vitattn.bench.memory`). ``level=block`` measures a whole pre-norm transformer block
(:class:`vitattn.models.vit.Block`, MLP included) on ``(batch, n, heads * head_dim)`` tokens
instead of the bare kernel. Each timing warms up until two consecutive calls agree and, with
``steady_heap``, runs on a heap whose thresholds do not move (:mod:`vitattn.bench.timing`), so a
grid point's numbers do not depend on the grid points measured before it.

A size that runs out of memory is recorded with status ``oom`` and larger sizes of that
attention are skipped. Before a large size runs, the guard decides whether it may: first from
arithmetic (the inputs, output and gradients alone take ``8 x batch x tokens x width`` values:
more than the memory limit, or than the device has, and the size is skipped without allocating
anything), then from its memory and time predicted from smaller sizes (a power law through the
last two). Those smaller sizes are measured on the way up, from small ones doubling, each only if
its own prediction fits the guard, so a probe never runs into the size it guards against. A
prediction above ``guard.max_memory_bytes`` or ``guard.max_call_seconds`` skips the size instead
of thrashing the machine. Any other failure is recorded in the row's status
(:func:`~vitattn.bench.kernels.failure_status`) and the sweep goes on. :func:`run_scaling` runs
the sweep the settings describe.
"""

from __future__ import annotations

import gc
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

import torch

from vitattn.attention.common import autotune
from vitattn.bench.devices import DeviceSpec, device_spec
from vitattn.bench.environment import environment, half_the_memory, load_average
from vitattn.bench.floor import (
    count_dispatches,
    floor_of,
    formula_flops,
    least_bytes,
    past_the_floor,
    share_of_floor,
)
from vitattn.bench.grid import Guard, Sweep, Workload, room_to_recompile
from vitattn.bench.kernels import as_given, compiled_variant, failure_status
from vitattn.bench.memory import measure_memory
from vitattn.bench.scaling_table import Row, add_speedups, scaling_table
from vitattn.bench.settings import BenchSettings
from vitattn.bench.timing import objects_before_frozen, steady_heap, time_call
from vitattn.models.flops import count_gflop

log = logging.getLogger(__name__)


@dataclass
class ScalingRun:
    """What ``mode=scaling`` measured, and on what."""

    sweep: Sweep
    rows: list[Row]
    scaling: list[dict[str, Any]]
    environment: dict[str, Any]


def sweep_of(settings: BenchSettings) -> Sweep:
    """The sweep the settings describe; ``guard.max_memory_bytes=auto`` is half the RAM on a CPU
    and no limit on a GPU."""
    device = settings.torch_device
    guard = settings.guard
    memory = guard.max_memory_bytes
    if memory == "auto":
        memory = half_the_memory() if device.type == "cpu" else None
    assert settings.attentions is not None

    def same_names(cls: Any, source: Any, **converted: Any) -> Any:
        """``cls`` with each field the setting of the same name, but those ``converted``."""
        return cls(**{spec.name: getattr(source, spec.name) for spec in fields(cls)} | converted)

    return same_names(
        Sweep,
        settings,
        dtype=settings.dtype.torch,
        device=device,
        level=settings.level.value,
        guard=same_names(Guard, guard, max_memory_bytes=memory),
    )


def run_scaling(settings: BenchSettings) -> ScalingRun:
    """``mode=scaling``: every grid point's row (logged as it comes) and the exponents."""
    sweep = sweep_of(settings)
    env = environment(sweep.device)
    env["load_average"] = load = load_average()
    if load is not None and load > (env["cpus"] or 1):
        log.warning(
            "the machine is busy (load %.1f on %s CPUs): timings include waiting for a CPU, "
            "most with several threads; threads=1 suffers least",
            load, env["cpus"],
        )  # fmt: skip
    log.info(
        "%s level, %s on %s (%s, %d threads): %s x n=%s x d=%s",
        sweep.level, env["device"], env["device_name"], str(sweep.dtype).removeprefix("torch."),
        env["threads"], ",".join(sweep.attentions), sweep.seq_lens, sweep.head_dims,
    )  # fmt: skip
    runner = Runner(sweep, on_row=log_row)
    env["floor_device"] = describe(runner.spec, sweep.dtype)
    rows = runner.run()
    env["steady_heap"] = runner.steady_heap
    return ScalingRun(sweep, rows, scaling_table(rows, sweep.reference), env)


def describe(spec: DeviceSpec, dtype: torch.dtype) -> dict[str, Any]:
    """What the floors are taken against, logged (and written to results.json, check.json)."""
    figures = spec.summary(dtype)
    log.info(
        "floors against %s: %.4g TFLOP/s (%s), %.4g GB/s (%s)", figures["name"],
        figures["peak_tflops"], figures["dtype"], figures["bandwidth_gb_s"], figures["source"],
    )  # fmt: skip
    return figures


def log_row(row: Row) -> None:
    if row.ok:
        log.info(
            "%-14s n=%-6d d=%-4d fwd %9.3f ms  fwd+bwd %9.3f ms  memory %8.1f MiB  "
            "floor %s ms (%s%%, %s)  %s ops",
            row.attention, row.seq_len, row.head_dim, row.fwd_ms, row.fwd_bwd_ms,
            (row.memory_bytes or 0) / 2**20, _g(row.fwd_bwd_floor_ms), _g(row.fwd_bwd_floor_pct),
            row.floor_bound or "-", row.fwd_bwd_dispatches,
        )  # fmt: skip
    else:
        log.info("%-14s n=%-6d d=%-4d %s", row.attention, row.seq_len, row.head_dim, row.status)


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def add_floor(row: Row, work: Workload, spec: DeviceSpec) -> None:
    """The FLOPs of ``row``'s two calls (counted, else by the mechanism's formula), their floors
    on ``spec`` and the operators each dispatches (:mod:`vitattn.bench.floor`)."""
    with autotune.untimed():  # count the calls, not impl=auto's timing of them
        row.fwd_dispatches = count_dispatches(work.forward)
        row.fwd_bwd_dispatches = count_dispatches(work.forward_backward)
        output = work.forward()
    # FLOPs of the eager calls: a compiled call's are the same, and its fused kernels uncounted
    calls = (partial(work.forward, work.eager), partial(work.forward_backward, work.eager))
    counted = [count_gflop(call, quiet=True) for call in calls]
    flops = [None if gflop is None else gflop * 1e9 for gflop in counted]
    row.flops_source = "counted"
    if None in flops and work.attention is not None:  # FlexAttention's operator, say
        row.flops_source = "formula"
        shape = work.inputs[0].shape
        flops = [formula_flops(work.attention, work.eager, shape, t) for t in (False, True)]
    if flops == [None, None]:
        row.flops_source = None  # neither counted nor a formula: no floor
    if flops[0] is not None:
        row.fwd_gflop = flops[0] / 1e9
    if flops[1] is not None:
        row.gflop = flops[1] / 1e9
    for training, count in zip((False, True), flops, strict=True):
        if count is None:
            continue
        least = least_bytes(work.eager, work.inputs, output, training)
        floor = floor_of(count, least, spec, work.inputs[0].dtype, row.flops_source)
        prefix = "fwd_bwd" if training else "fwd"
        setattr(row, f"{prefix}_floor_ms", floor.ms)
        setattr(row, f"{prefix}_least_bytes", least)
        setattr(row, "floor_bound" if training else "fwd_floor_bound", floor.bound)


LARGEST_EXPONENT = 2.0
"""The steepest growth a prediction assumes: no mechanism here does more than quadratic work
or memory in the tokens, and a steeper slope between two small sizes is their noise."""


def predict(history: list[tuple[int, float]], seq_len: int) -> float | None:
    """Power-law extrapolation to ``seq_len`` through the two largest smaller sizes measured,
    with an exponent from 0 to :data:`LARGEST_EXPONENT`."""
    points = sorted({n: v for n, v in history if n < seq_len and v and v > 0}.items())
    if len(points) < 2:
        return None
    (n1, v1), (n2, v2) = points[-2], points[-1]
    slope = min(LARGEST_EXPONENT, max(0.0, math.log(v2 / v1) / math.log(n2 / n1)))
    return v2 * (seq_len / n2) ** slope


class Runner:
    """Runs a :class:`Sweep`, one :class:`Row` per grid point."""

    def __init__(self, sweep: Sweep, on_row: Callable[[Row], None] | None = None) -> None:
        self.sweep = sweep
        self.on_row = on_row
        self.memory_history: dict[tuple[str, int], list[tuple[int, float]]] = {}
        self.time_history: dict[tuple[str, int], list[tuple[int, float]]] = {}
        self.steady_heap = False  # whether Sweep.steady_heap could be applied (glibc only)
        self.spec = device_spec(sweep.device, sweep.dtype)  # peaks the floors are taken against

    def new_row(self, attention: str, seq_len: int, head_dim: int) -> Row:
        sweep = self.sweep
        return Row(
            attention=attention,
            seq_len=seq_len,
            head_dim=head_dim,
            level=sweep.level,
            batch_size=sweep.batch_size,
            heads=sweep.heads,
            dtype=str(sweep.dtype).removeprefix("torch."),
            device=str(sweep.device),
            compiled=compiled_variant(attention, sweep.variants),
        )

    def run(self) -> list[Row]:
        if self.sweep.steady_heap:
            self.steady_heap = steady_heap()
        rows: list[Row] = []
        with room_to_recompile(len(self.sweep.seq_lens)), objects_before_frozen():
            for attention in self.sweep.attentions:
                for head_dim in self.sweep.head_dims:
                    rows.extend(self.sweep_sizes(attention, head_dim))
        add_speedups(rows, self.sweep.reference)
        return rows

    def sweep_sizes(self, attention: str, head_dim: int) -> list[Row]:
        """``attention``'s rows at every size, smallest first; after an out-of-memory error or a
        skip, the larger sizes are skipped too."""
        rows: list[Row] = []
        stopped: str | None = None
        for seq_len in sorted(self.sweep.seq_lens):
            row = self.new_row(attention, seq_len, head_dim)
            if stopped is not None:
                row.status = stopped
            else:
                self.measure(row)
                if row.status == "oom" or row.status.startswith("skipped"):
                    stopped = f"skipped: n={seq_len} was {row.status.split(':')[0]}"
            rows.append(row)
            if self.on_row is not None:
                self.on_row(row)
        return rows

    def too_large(self, attention: str, seq_len: int, head_dim: int) -> str | None:
        """Why ``seq_len`` should be skipped, from arithmetic or from what smaller sizes
        measured; else ``None``."""
        guard = self.sweep.guard
        floor, limit = self.least_bytes(seq_len, head_dim), self.memory_limit()
        if limit is not None and floor > limit:
            return (
                f"skipped: its inputs, output and gradients alone take {size(floor)} > "
                f"{size(limit)} (guard.max_memory_bytes, or the device's memory)"
            )
        if seq_len <= guard.free_below:
            return None
        self.probe(attention, seq_len, head_dim)
        return self.predicted_too_large(attention, seq_len, head_dim)

    def predicted_too_large(self, attention: str, seq_len: int, head_dim: int) -> str | None:
        """Why the prediction from the sizes measured so far rules ``seq_len`` out, if it does."""
        guard, key = self.sweep.guard, (attention, head_dim)
        memory = predict(self.memory_history.get(key, []), seq_len)
        if memory is not None and guard.max_memory_bytes and memory > guard.max_memory_bytes:
            return (
                f"skipped: predicted {size(memory)} > guard.max_memory_bytes="
                f"{size(guard.max_memory_bytes)}"
            )
        seconds = predict(self.time_history.get(key, []), seq_len)
        if seconds is not None and guard.max_call_seconds and seconds > guard.max_call_seconds:
            return (
                f"skipped: predicted {seconds:.0f} s per call > guard.max_call_seconds="
                f"{guard.max_call_seconds:g}"
            )
        return None

    def least_bytes(self, seq_len: int, head_dim: int) -> int:
        """Bytes that any mechanism needs at this size: inputs, output, the gradient of the
        output and of every input (``level=kernel``: q, k, v; ``block``: the tokens)."""
        sweep = self.sweep
        width = sweep.heads * head_dim
        tensors = 8 if sweep.level == "kernel" else 4
        itemsize = torch.empty((), dtype=sweep.dtype).element_size()
        return tensors * sweep.batch_size * seq_len * width * itemsize

    def memory_limit(self) -> float | None:
        """``guard.max_memory_bytes``, else all of the GPU's memory on a GPU."""
        limit = self.sweep.guard.max_memory_bytes
        device = self.sweep.device
        if limit is None and device.type == "cuda":
            return float(torch.cuda.get_device_properties(device).total_memory)
        return limit

    def probe(self, attention: str, seq_len: int, head_dim: int) -> None:
        """Measure one forward+backward at sizes doubling up to ``seq_len / 8`` (from
        ``seq_len / 4096``, at least 16 tokens), each only if the sizes before it predict that it
        fits the guard, so that ``seq_len`` can be predicted from the two largest; a compiled
        variant's mechanism eager."""
        key = (attention, head_dim)
        measured = {n for n, _ in self.memory_history.get(key, [])}
        sizes = sorted({seq_len >> shift for shift in range(3, 13)} - measured)
        for size in (n for n in sizes if n >= 16):
            if self.predicted_too_large(attention, size, head_dim) is not None:
                return
            try:
                work = Workload(self.sweep, attention, size, head_dim, eager=True)
                timing = time_call(work.forward_backward, self.sweep.device, warmup=1, repeats=1)
                memory = measure_memory(work.forward_backward, self.sweep.device)
            except Exception:  # a probe that fails predicts nothing; the real run will tell
                return
            finally:
                work = None
                release(self.sweep.device)
            self.memory_history.setdefault(key, []).append((size, float(memory.memory_bytes)))
            self.time_history.setdefault(key, []).append((size, timing.median_ms / 1e3))

    def measure(self, row: Row) -> None:
        """Fill ``row`` with timings and memory, or with why it has none."""
        sweep = self.sweep
        attention, seq_len, head_dim = row.attention, row.seq_len, row.head_dim
        reason = self.too_large(attention, seq_len, head_dim)
        if reason is not None:
            row.status = reason
            return
        work = None
        try:
            work = Workload(sweep, attention, seq_len, head_dim)
            fwd, fwd_bwd = (
                time_call(
                    call,
                    sweep.device,
                    warmup=sweep.warmup,
                    repeats=sweep.repeats,
                    max_seconds=sweep.guard.max_measure_seconds,
                    warmup_max=sweep.warmup_max,
                    settle=sweep.settle,
                )
                for call in (work.forward, work.forward_backward)
            )
            memory = measure_memory(work.forward_backward, sweep.device)
            add_floor(row, work, self.spec)
        except Exception as error:
            row.status = failure_status(
                error, lambda message: as_given(message, attention, sweep.knobs, sweep.variants)
            )
            return
        finally:
            del work  # what this grid point allocated goes before the next one starts
            release(sweep.device)
        row.fwd_floor_pct = share_of_floor(row.fwd_floor_ms, fwd.median_ms)
        row.fwd_bwd_floor_pct = share_of_floor(row.fwd_bwd_floor_ms, fwd_bwd.median_ms)
        past = past_the_floor(attention, seq_len, row.fwd_floor_pct, row.fwd_bwd_floor_pct)
        if past is not None:
            log.warning(past)
        row.fwd_ms, row.fwd_q25_ms, row.fwd_q75_ms = fwd.median_ms, fwd.q25_ms, fwd.q75_ms
        row.fwd_min_ms = fwd.min_ms
        row.fwd_bwd_ms, row.fwd_bwd_min_ms = fwd_bwd.median_ms, fwd_bwd.min_ms
        row.fwd_bwd_q25_ms, row.fwd_bwd_q75_ms = fwd_bwd.q25_ms, fwd_bwd.q75_ms
        row.repeats = min(fwd.repeats, fwd_bwd.repeats)
        row.fwd_warmup, row.fwd_bwd_warmup = fwd.warmup, fwd_bwd.warmup
        row.fwd_first_ms, row.fwd_bwd_first_ms = fwd.first_ms, fwd_bwd.first_ms
        row.saved_bytes, row.peak_tensor_bytes = memory.saved_bytes, memory.peak_tensor_bytes
        row.memory_bytes, row.memory_method = memory.memory_bytes, memory.method
        key = (attention, head_dim)
        self.memory_history.setdefault(key, []).append((seq_len, float(memory.memory_bytes)))
        self.time_history.setdefault(key, []).append((seq_len, fwd_bwd.median_ms / 1e3))


def size(bytes_: float) -> str:
    """Bytes in GiB, or MiB below one GiB."""
    return f"{bytes_ / 2**30:.1f} GiB" if bytes_ >= 2**30 else f"{bytes_ / 2**20:.1f} MiB"


def release(device: torch.device) -> None:
    """Give back what the last grid point allocated before the next one starts (within
    :meth:`Runner.run` the collection scans only what the sweep made)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
