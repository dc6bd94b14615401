"""The grid ``mode=scaling`` measures (:class:`Sweep`, with its :class:`Guard`) and what one
grid point runs (:class:`Workload`: a kernel, or a transformer block around it, eager or, for a
variant with ``compile: true``, compiled)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from vitattn.attention.common.base import before_forward_of_kernels
from vitattn.bench.kernels import (
    attention_factory,
    build_kernel,
    compile_mode,
    compiled_variant,
    split_variant,
)
from vitattn.models.vit import Block
from vitattn.utils.recompiles import recompile_limit, recompile_limit_set_to


@dataclass
class Guard:
    """Limits that skip a size predicted to be too large for the machine."""

    max_memory_bytes: float | None = None
    max_call_seconds: float | None = None
    free_below: int = 1024  # sizes up to this always run, unpredicted
    max_measure_seconds: float | None = 30.0  # per timing: fewer repeats when calls are slow


@dataclass
class Sweep:
    """The grid and the settings shared by every measurement."""

    attentions: list[str]
    seq_lens: list[int]
    head_dims: list[int]
    batch_size: int
    heads: int
    dtype: torch.dtype
    device: torch.device
    warmup: int
    repeats: int
    level: str = "kernel"
    warmup_max: int | None = None  # None: exactly `warmup` calls (see vitattn.bench.timing)
    settle: float = 0.1
    steady_heap: bool = False
    mlp_ratio: float = 2.0
    knobs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    reference: str | None = "softmax"
    seed: int = 0
    guard: Guard = field(default_factory=Guard)


GRAPHS_PER_SIZE = 8
"""Room for a compiled variant's graphs at one size: with and without gradients, with room to
spare. Each is a recompile of the mechanism's ``forward`` (the guard probes smaller sizes eager)."""


def room_to_recompile(sizes: int) -> contextlib.AbstractContextManager[Any]:
    """Dynamo's recompile limit raised for a sweep over ``sizes`` sizes. Past its default of 8
    graphs per function a ``fullgraph=True`` call fails (``FailOnRecompileLimitHit``: linformer,
    whose projections are sized by n, at the third size of four)."""
    return recompile_limit_set_to(max(recompile_limit(), GRAPHS_PER_SIZE * sizes))


class Workload:
    """The module, inputs and the two calls (forward, forward+backward) of one grid point; with
    ``eager``, a compiled variant's mechanism run eager (the guard's probes, which only predict:
    compiled, each probe's size would be a graph and a build of its own)."""

    def __init__(
        self, sweep: Sweep, attention: str, seq_len: int, head_dim: int, eager: bool = False
    ) -> None:
        torch.manual_seed(sweep.seed)
        base, knobs = split_variant(attention, sweep.variants, sweep.knobs)
        self.attention: str | None = base if sweep.level == "kernel" else None  # its formula
        device, dtype = sweep.device, sweep.dtype
        shape: tuple[int, ...]
        if sweep.level == "block":
            dim = sweep.heads * head_dim
            self.module: nn.Module = Block(
                dim=dim,
                heads=sweep.heads,
                mlp_dim=round(dim * sweep.mlp_ratio),
                seq_len=seq_len,
                attention=attention_factory(base, knobs),
                dropout=0.0,
            )
            shape = (sweep.batch_size, seq_len, dim)
            self.inputs = [torch.randn(shape, device=device, dtype=dtype)]
        else:
            self.module = build_kernel(
                base, seq_len=seq_len, heads=sweep.heads, head_dim=head_dim, knobs=knobs
            )
            shape = (sweep.batch_size, sweep.heads, seq_len, head_dim)
            self.inputs = [torch.randn(shape, device=device, dtype=dtype) for _ in range(3)]
        self.module.to(device=device, dtype=dtype)
        self.eager = self.module  # FLOPs and least bytes: the mechanism's, compiled or not
        if compiled_variant(attention, sweep.variants) and not eager:
            # One graph or an error: a break would time the eager pieces between graphs. Each
            # size its own graph, as a run of one shape compiles (automatic dynamic shapes
            # would make n a symbol from the second size on).
            mode = compile_mode(attention, sweep.variants)
            self.module = torch.compile(self.module, fullgraph=True, mode=mode, dynamic=False)
        for tensor in self.inputs:
            tensor.requires_grad_(True)
        self.grad_out = torch.randn(shape, device=device, dtype=dtype)

    def forward(self, module: nn.Module | None = None) -> torch.Tensor:
        """One forward without gradients, of the timed module or the given one."""
        module = self.module if module is None else module
        module.eval()
        before_forward_of_kernels(self.eager, self.inputs[0].device)
        with torch.no_grad():
            return module(*self.inputs)

    def forward_backward(self, module: nn.Module | None = None) -> None:
        """One forward and backward, of the timed module or the given one."""
        module = self.module if module is None else module
        module.train()
        for tensor in self.inputs:
            tensor.grad = None
        module.zero_grad(set_to_none=True)
        # outside a compiled variant's graph, whose guards would see Python state change
        before_forward_of_kernels(self.eager, self.inputs[0].device)
        out = module(*self.inputs)
        out.backward(self.grad_out)
