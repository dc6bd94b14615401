"""What ``mode=scaling`` measures and concludes: one :class:`Row` per attention x head dimension x
sequence length, the speed-up against the reference, and per attention the exponents of time and
memory in n and the crossover n from which it beats the reference (:func:`scaling_table`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vitattn.bench.floor import past_the_floor


@dataclass
class Row:
    """One line of ``results.csv``."""

    attention: str
    seq_len: int
    head_dim: int
    fwd_ms: float | None = None  # medians
    fwd_bwd_ms: float | None = None
    gflop: float | None = None  # of one forward+backward (flops_source says how it was found)
    memory_bytes: int | None = None  # see vitattn.bench.memory
    status: str = "ok"
    fwd_q25_ms: float | None = None  # quartiles and the fastest repeat
    fwd_q75_ms: float | None = None
    fwd_min_ms: float | None = None
    fwd_bwd_q25_ms: float | None = None
    fwd_bwd_q75_ms: float | None = None
    fwd_bwd_min_ms: float | None = None
    repeats: int | None = None  # fewer than asked when guard.max_measure_seconds cut them
    fwd_warmup: int | None = None  # unmeasured calls until the times settled
    fwd_bwd_warmup: int | None = None
    fwd_first_ms: float | None = None  # the first call, unmeasured: a compiled row compiles in it
    fwd_bwd_first_ms: float | None = None
    saved_bytes: int | None = None
    peak_tensor_bytes: int | None = None
    memory_method: str | None = None
    speedup_vs_reference: float | None = None
    # the floor (vitattn.bench.floor): the least time on this device, and the share of it reached
    fwd_floor_ms: float | None = None
    fwd_bwd_floor_ms: float | None = None
    fwd_floor_pct: float | None = None  # floor / measured median, percent
    fwd_bwd_floor_pct: float | None = None
    floor_bound: str | None = None  # compute or memory (forward+backward)
    fwd_floor_bound: str | None = None  # compute or memory (the forward's own)
    fwd_gflop: float | None = None  # of the forward alone
    flops_source: str | None = None  # counted (torch.utils.flop_counter) or formula
    fwd_least_bytes: int | None = None
    fwd_bwd_least_bytes: int | None = None
    fwd_dispatches: int | None = None  # operators dispatched by one call
    fwd_bwd_dispatches: int | None = None
    compiled: bool = False  # a variant with compile: true (torch.compile, one graph)
    level: str = "kernel"
    batch_size: int = 0
    heads: int = 0
    dtype: str = ""
    device: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def add_speedups(rows: list[Row], reference: str | None) -> None:
    """``speedup_vs_reference``: the reference's forward+backward time over each row's."""
    if not reference:
        return
    base = {
        (r.seq_len, r.head_dim): r.fwd_bwd_ms
        for r in rows
        if r.attention == reference and r.ok and r.fwd_bwd_ms
    }
    for row in rows:
        ref = base.get((row.seq_len, row.head_dim))
        if row.ok and ref and row.fwd_bwd_ms:
            row.speedup_vs_reference = ref / row.fwd_bwd_ms


def fit_exponent(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of log(value) against log(n): the scaling exponent in n."""
    points = [(n, v) for n, v in points if v is not None and v > 0]
    if len({n for n, _ in points}) < 2:
        return None
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(v) for _, v in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx


SCALED = ("fwd_ms", "fwd_bwd_ms", "memory_bytes", "saved_bytes")


def scaling_table(rows: list[Row], reference: str | None = "softmax") -> list[dict[str, Any]]:
    """Per attention and head dimension: exponents of time and memory in n, and the crossover.

    ``crossover_seq_len`` is the smallest measured n from which on the attention's
    forward+backward is faster than the reference's at every larger measured n (empty if never).
    """
    table: list[dict[str, Any]] = []
    keys = list(dict.fromkeys((r.attention, r.head_dim) for r in rows))
    for attention, head_dim in keys:
        mine = [r for r in rows if (r.attention, r.head_dim) == (attention, head_dim) and r.ok]
        entry: dict[str, Any] = {
            "attention": attention,
            "head_dim": head_dim,
            "points": len(mine),
            "seq_lens": " ".join(str(r.seq_len) for r in mine),
        }
        for column in SCALED:
            exponent = fit_exponent([(r.seq_len, getattr(r, column)) for r in mine])
            entry[f"{column}_exponent"] = None if exponent is None else round(exponent, 3)
        entry["crossover_seq_len"] = crossover(rows, attention, head_dim, reference)
        table.append(entry)
    return table


def crossover(rows: list[Row], attention: str, head_dim: int, reference: str | None) -> int | None:
    """Smallest n from which ``attention`` beats ``reference`` at every larger measured n.

    Beating is beyond the timings' spread: the attention's upper quartile of forward+backward
    below the reference's lower quartile (the medians where a row has no quartiles). Medians alone
    named a different n from one run to the next where two sub-millisecond times overlap. A size
    the reference could not run (out of memory, skipped) counts as a win for an attention that did
    run there.
    """
    if not reference or attention == reference:
        return None
    ref_rows = {r.seq_len: r for r in rows if r.attention == reference and r.head_dim == head_dim}
    mine = sorted(
        (
            r
            for r in rows
            if r.attention == attention
            and r.head_dim == head_dim
            and r.ok
            and r.seq_len in ref_rows
        ),
        key=lambda r: r.seq_len,
    )
    found: int | None = None
    for row in mine:
        ref = ref_rows[row.seq_len]
        slowest, fastest = upper_quartile(row), lower_quartile(ref)
        wins = not ref.ok or (slowest is not None and fastest is not None and slowest < fastest)
        if not wins:
            found = None
        elif found is None:
            found = row.seq_len
    return found


def upper_quartile(row: Row) -> float | None:
    """The row's forward+backward upper quartile, or its median where it has none."""
    return row.fwd_bwd_q75_ms if row.fwd_bwd_q75_ms is not None else row.fwd_bwd_ms


def lower_quartile(row: Row) -> float | None:
    """The row's forward+backward lower quartile, or its median where it has none."""
    return row.fwd_bwd_q25_ms if row.fwd_bwd_q25_ms is not None else row.fwd_bwd_ms


def past_floors(rows: list[Row], floor_device: dict[str, Any] | None, measured: bool) -> list[str]:
    """A line per row measured past its floor (:func:`~vitattn.bench.floor.past_the_floor`)
    where the floors are taken against figures ``measured`` in this process (a shared machine's
    load moves them: a caution) or, with ``measured`` false, against a datasheet's (which no
    call beats: the FLOPs are wrong, a problem of ``vitattn-check``)."""
    # figures that do not say they are a datasheet's are taken as measured
    if floor_device is None or (floor_device.get("measured") is not False) != measured:
        return []
    found = (
        past_the_floor(r.attention, r.seq_len, r.fwd_floor_pct, r.fwd_bwd_floor_pct) for r in rows
    )
    return [line for line in found if line is not None]
