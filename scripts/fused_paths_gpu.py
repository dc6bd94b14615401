"""The fused paths (``impl=triton``) on a CUDA GPU against their plain paths and flash SDPA.

For linear, taylor, efficient, performer and random_feature: the relative error of the output
and of the three gradients against the plain path at a few shapes and dtypes; forward+backward
ms of the fused path, the plain path and ``scaled_dot_product_attention`` (flash on a GPU where
it applies) at n = 16384, 8192 and the training shape (batch 256, 8 heads, n 1024, d 32), each
call synced alone, ten calls queued back to back (the device's time where it exceeds the
host's) and ten replays of the calls captured in a CUDA graph (the device's time alone: no host
in between); for random_feature also with libdevice's precise sines and cosines in place of the
GPU's fast ones (``fourier_kernels.FAST_TRIG``); the (warps, stages, row steps) the tuned
kernels chose at each shape; ``impl=auto``'s logged choice at the training shape; and the error
of the fused path compiled with ``fullgraph=True``.
docs/check.md holds the H200's figures.

    python scripts/fused_paths_gpu.py                       # every mechanism, about 3 minutes
    python scripts/fused_paths_gpu.py performer random_feature
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import time
from collections.abc import Callable, Iterator

import torch
import triton

from vitattn.attention.efficient import EfficientAttention
from vitattn.attention.linear import LinearAttention
from vitattn.attention.performer import PerformerAttention
from vitattn.attention.random_feature import RandomFeatureAttention
from vitattn.attention.taylor import TaylorAttention

# each mechanism's class, its plain path's impl, and the knobs that keep its draws fixed
PLAIN: dict[str, tuple[type, str, dict]] = {
    "linear": (LinearAttention, "torch", {}),
    "taylor": (TaylorAttention, "torch", {}),
    "efficient": (EfficientAttention, "torch", {}),
    "performer": (PerformerAttention, "autograd", {"redraw_interval": 0}),
    "random_feature": (RandomFeatureAttention, "autograd", {"redraw": False}),
}
ACCURACY_SHAPES = [
    ((1, 1, 130, 24), torch.float32),
    ((2, 3, 1000, 72), torch.float32),
    ((4, 8, 1024, 64), torch.bfloat16),
]
TIMING_SHAPES = [(4, 8, 16384, 64), (4, 8, 8192, 64), (256, 8, 1024, 32)]
TRAINING_SHAPE = (256, 8, 1024, 32)
DEVICE = "cuda"

Call = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def pair(name: str, shape: tuple[int, ...]) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The fused and the plain kernel of ``name`` for ``shape``, with the same weights."""
    kind, plain_impl, knobs = PLAIN[name]
    _, heads, n, d = shape
    torch.manual_seed(n * heads * d)
    fused = kind(seq_len=n, heads=heads, head_dim=d, impl="triton", **knobs).to(DEVICE)
    plain = kind(seq_len=n, heads=heads, head_dim=d, impl=plain_impl, **knobs).to(DEVICE)
    plain.load_state_dict(fused.state_dict())
    return fused, plain


def inputs(shape: tuple[int, ...], dtype: torch.dtype) -> list[torch.Tensor]:
    return [torch.randn(shape, device=DEVICE).to(dtype).requires_grad_() for _ in range(3)]


def forward_backward(call: Call, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list:
    """The output and the gradients of q, k and v under a fixed output gradient."""
    out = call(q, k, v)
    grad = torch.linspace(-1, 1, out.numel(), device=DEVICE).view_as(out).to(out.dtype)
    return [out, *torch.autograd.grad(out, (q, k, v), grad)]


def relative_errors(call: Call, reference: Call, xs: list[torch.Tensor]) -> str:
    pairs = zip(forward_backward(call, *xs), forward_backward(reference, *xs), strict=True)
    errors = [
        ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()
        for a, b in pairs
    ]
    return " ".join(f"{e:.2e}" for e in errors)


def timed(call: Call, xs: list[torch.Tensor], repeats: int = 10) -> tuple[float, float]:
    """(ms of one call synced alone, best of ``repeats``; ms per call of ``repeats`` calls
    queued back to back)."""
    for _ in range(3):
        forward_backward(call, *xs)
    torch.cuda.synchronize()
    alone = []
    for _ in range(repeats):
        start = time.perf_counter()
        forward_backward(call, *xs)
        torch.cuda.synchronize()
        alone.append(time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(repeats):
        forward_backward(call, *xs)
    torch.cuda.synchronize()
    return min(alone) * 1e3, (time.perf_counter() - start) / repeats * 1e3


def graphed(call: Call, xs: list[torch.Tensor], repeats: int = 10) -> str:
    """ms per call of ``repeats`` replays of one forward+backward captured in a CUDA graph (the
    kernels and the gaps between them, no host), or why it could not be captured."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm up outside the capture (allocator, tuning)
                forward_backward(call, *xs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward_backward(call, *xs)
        graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            graph.replay()
        end.record()
        end.synchronize()
        return f"{start.elapsed_time(end) / repeats:.3f}"
    except Exception as error:  # a kernel or a host step that a graph cannot hold
        torch.cuda.synchronize()
        return f"(no graph: {type(error).__name__}: {str(error).splitlines()[0][:80]})"


def chosen_configs(name: str) -> str:
    """The (warps, stages, and HALVES where tuned) each tuned kernel of ``name`` launched last
    (``tiles.tuned``)."""
    from triton.runtime.autotuner import Autotuner

    module = {"performer": "favor_kernels", "random_feature": "fourier_kernels"}.get(name)
    if module is None:
        return ""
    kernels = vars(importlib.import_module(f"vitattn.attention.fused.{module}"))
    chosen = [
        f"{kernel}={best.num_warps}w{best.num_stages}s"
        + "".join(f",{name}={value}" for name, value in best.kwargs.items())
        for kernel, tuner in kernels.items()
        if isinstance(tuner, Autotuner) and (best := getattr(tuner, "best_config", None))
    ]
    return f"; tuned: {' '.join(chosen)}"


@contextlib.contextmanager
def precise_trig() -> Iterator[None]:
    """random_feature's kernels with libdevice's ``sinf`` and ``cosf`` (as before the fast ones)."""
    from vitattn.attention.fused import fourier_kernels

    before, fourier_kernels.FAST_TRIG = fourier_kernels.FAST_TRIG, False
    try:
        yield
    finally:
        fourier_kernels.FAST_TRIG = before


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mechanisms", nargs="*", help=f"some of {', '.join(PLAIN)} (default: all)")
    names = parser.parse_args().mechanisms or list(PLAIN)
    unknown = [name for name in names if name not in PLAIN]
    if unknown:
        parser.error(f"{', '.join(unknown)}: no fused path; choose from {', '.join(PLAIN)}")
    if not torch.cuda.is_available():
        raise SystemExit("fused_paths_gpu.py: needs a CUDA GPU")
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)

    torch.set_float32_matmul_precision("highest")
    for name in names:
        for shape, dtype in ACCURACY_SHAPES:
            fused, plain = pair(name, shape)
            errors = relative_errors(fused, plain, inputs(shape, dtype))
            print(f"{name} {shape} {dtype}: relative error out, dq, dk, dv: {errors}", flush=True)

    torch.set_float32_matmul_precision("high")
    for shape in TIMING_SHAPES:
        xs = inputs(shape, torch.bfloat16)
        flash = timed(sdpa, xs)
        print(
            f"sdpa {shape} bf16: {flash[0]:.3f} / {flash[1]:.3f} / {graphed(sdpa, xs)} ms "
            "(alone / queued / graphed)"
        )
        for name in names:
            fused, plain = pair(name, shape)
            f, p = timed(fused, xs), timed(plain, xs)
            print(
                f"{name} {shape} bf16: fused {f[0]:.3f} / {f[1]:.3f} / {graphed(fused, xs)} ms, "
                f"plain {p[0]:.3f} / {p[1]:.3f} / {graphed(plain, xs)} ms "
                f"(alone / queued / graphed); queued: plain/fused {p[1] / f[1]:.2f}x, "
                f"flash/fused {flash[1] / f[1]:.2f}x{chosen_configs(name)}",
                flush=True,
            )
            if name == "random_feature":
                with precise_trig():
                    slow = timed(fused, xs)
                    print(
                        f"{name} {shape} bf16: fused with precise sin/cos {slow[0]:.3f} / "
                        f"{slow[1]:.3f} / {graphed(fused, xs)} ms (alone / queued / graphed); "
                        f"queued: precise/fast {slow[1] / f[1]:.2f}x{chosen_configs(name)}",
                        flush=True,
                    )

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in names:  # impl=auto times every implementation on its first call and logs it
        kind, _, knobs = PLAIN[name]
        auto = kind(seq_len=1024, heads=8, head_dim=32, **knobs).to(DEVICE)
        auto(*inputs(TRAINING_SHAPE, torch.bfloat16)).sum().backward()

    xs = inputs(TRAINING_SHAPE, torch.bfloat16)
    for name in names:
        fused, plain = pair(name, TRAINING_SHAPE)
        torch._dynamo.reset()
        errors = relative_errors(torch.compile(fused, fullgraph=True), plain, xs)
        print(f"{name} compiled fullgraph {TRAINING_SHAPE} bf16: relative error {errors}")


if __name__ == "__main__":
    main()
