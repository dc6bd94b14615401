"""Section 4 of ``vitattn-check``: every attention's forward+backward time against n next to fused
softmax (SDPA, which picks flash attention on a GPU where it applies), measured by the bench's
scaling runner (:class:`vitattn.bench.scaling.Runner`) with its guard: a size predicted slower
than ``kernels.max_call_seconds`` is skipped, and an out-of-memory error ends an attention's
sweep. Per attention: the crossover n (from which it beats softmax at every larger measured n)
and the largest n it ran. ``kernels.variants`` adds other settings of the mechanisms checked
(by default the plain autograd versions of the tiled feature maps; the mechanisms' own rows run
``impl=auto``, whose choice per shape, with both times, is in the log). Every row also has its
floor on this device, the share of it reached and the operators it dispatches
(:mod:`vitattn.bench.floor`); ``floor_device`` says which figures the floors are taken against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vitattn.bench.environment import half_the_memory
from vitattn.bench.grid import Guard, Sweep
from vitattn.bench.scaling import Runner, describe, log_row
from vitattn.bench.scaling_table import Row, crossover
from vitattn.check.settings import CheckSettings

REFERENCE = "softmax"
WARMUP, WARMUP_MAX = 2, 20
"""Each call's warm-up, as ``vitattn-bench``'s (``configs/bench.yaml``): at least 2 calls, then
until two in a row are within 10% of each other, 20 in all. One call left the second, still
slow on a CPU, to be measured (docs/check.md)."""


@dataclass
class KernelsRun:
    rows: list[Row]
    summary: list[dict[str, Any]]
    floor_device: dict[str, Any] = field(default_factory=dict)


def summarise(rows: list[Row], attentions: list[str], head_dim: int) -> list[dict[str, Any]]:
    """Per attention: its crossover n against softmax and the largest n it ran."""
    summary = []
    for attention in attentions:
        ran = [r.seq_len for r in rows if r.attention == attention and r.ok]
        summary.append(
            {
                "attention": attention,
                "largest_seq_len": max(ran, default=None),
                "crossover_seq_len": crossover(rows, attention, head_dim, REFERENCE),
            }
        )
    return summary


def run_kernels(settings: CheckSettings) -> KernelsRun:
    """Section 4: the timings (softmax first, so every other attention has its reference)."""
    assert settings.attentions is not None
    kernels, device = settings.kernels, settings.torch_device
    # each mechanism checked, then its variants (another setting of it, or it compiled) right
    # after its own rows, as vitattn-bench puts a compiled row beside its eager one
    checked = settings.attentions
    attentions: list[str] = []
    for attention in [REFERENCE, *(a for a in checked if a != REFERENCE)]:
        attentions.append(attention)
        if attention in checked:
            attentions += [
                v for v, spec in kernels.variants.items() if spec["attention"] == attention
            ]
    sweep = Sweep(
        attentions=attentions,
        seq_lens=kernels.seq_lens,
        head_dims=[kernels.head_dim],
        batch_size=kernels.batch_size,
        heads=kernels.heads,
        dtype=kernels.dtype.torch,
        device=device,
        warmup=WARMUP,
        warmup_max=WARMUP_MAX,
        repeats=kernels.repeats,
        variants=kernels.variants,
        reference=REFERENCE,
        seed=settings.seed,
        guard=Guard(
            max_memory_bytes=half_the_memory() if device.type == "cpu" else None,
            max_call_seconds=kernels.max_call_seconds,
            free_below=min(kernels.seq_lens),
            max_measure_seconds=2 * (kernels.max_call_seconds or 5),
        ),
    )
    runner = Runner(sweep, on_row=log_row)
    floor_device = describe(runner.spec, sweep.dtype)
    rows = runner.run()
    return KernelsRun(rows, summarise(rows, attentions, kernels.head_dim), floor_device)
