"""What a device can do at best: its dense peak FLOP/s per dtype and its memory bandwidth.

GPUs listed in :data:`vitattn.utils.datasheets.DATASHEETS` (the one table, which MFU reads too)
take the figures of their vendor's datasheet (dense, without the 2:4 sparsity the datasheets also
quote, which no attention here uses). Any other device, a CPU always, is measured once per
process (:func:`measured`): the peak as the best of timed square matrix products in the
dtype, the bandwidth as the best of copies of a tensor far larger than any cache (read once,
written once), each repeated for a quarter of a second (:func:`best_seconds`). Measured figures
say so (``source``), and they are what this process reaches with its threads, not what the part
could reach alone.

fp32 is the CUDA cores' fp32 rate, or the tensor cores' TF32 rate where the part has one and
PyTorch multiplies fp32 matrices as TF32 (``matmul_precision`` high or medium, vitattn's default:
:meth:`DeviceSpec.rate`); a dtype a part has no tensor-core path for (bf16 on a T4 or a V100)
takes its fp32 figure.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from vitattn.bench.environment import cpu_name
from vitattn.utils.datasheets import datasheet

TERA = 1e12

TF32 = "tensorfloat32"
"""The datasheet column of the tensor cores' TF32 rate."""


def tf32_products() -> bool:
    """Whether PyTorch multiplies float32 matrices as TF32 (or bf16) now:
    ``torch.set_float32_matmul_precision`` high or medium."""
    return torch.get_float32_matmul_precision() in ("high", "medium")


@dataclass(frozen=True)
class DeviceSpec:
    """A device's dense peak FLOP/s per dtype (``float32``, ``bfloat16``, ``float16``) and its
    memory bandwidth in bytes/s, with where they come from."""

    name: str
    peak_flops: dict[str, float] = field(default_factory=dict)
    bandwidth: float = 0.0
    source: str = ""
    measured: bool = False

    def rate(self, dtype: torch.dtype) -> str:
        """The figure ``dtype``'s products run at: float32's is TF32's (``tensorfloat32``) where
        the part has one and PyTorch multiplies float32 as TF32 now (``matmul_precision`` high or
        medium); another dtype's is its own, else the fp32 one."""
        name = str(dtype).removeprefix("torch.")
        if name == "float32" and TF32 in self.peak_flops and tf32_products():
            return TF32
        return name if name in self.peak_flops else "float32"

    def peak(self, dtype: torch.dtype) -> float:
        """Peak FLOP/s of ``dtype``'s products (:meth:`rate`)."""
        return self.peak_flops[self.rate(dtype)]

    def summary(self, dtype: torch.dtype) -> dict[str, Any]:
        """The figures that apply to ``dtype``, as results files carry them (``rate``: the
        figure its products run at, :meth:`rate`)."""
        return {
            "name": self.name,
            "dtype": str(dtype).removeprefix("torch."),
            "rate": self.rate(dtype),
            "peak_tflops": self.peak(dtype) / TERA,
            "bandwidth_gb_s": self.bandwidth / 1e9,
            "source": self.source,
            "measured": self.measured,
        }


def from_datasheet(device_name: str) -> DeviceSpec | None:
    """The datasheet figures (:mod:`vitattn.utils.datasheets`) of a GPU named ``device_name`` (as
    ``torch.cuda.get_device_name`` says it: "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "Tesla T4"),
    or ``None`` if unlisted."""
    sheet = datasheet(device_name)
    if sheet is None:
        return None
    flops = {dtype: tflops * TERA for dtype, tflops in sheet.tflops.items()}
    return DeviceSpec(sheet.name, flops, sheet.tb_per_s * TERA, sheet.source)


def device_spec(device: torch.device, dtype: torch.dtype) -> DeviceSpec:
    """The figures of ``device``: its datasheet's if listed, else measured (once per process).
    float64, which no datasheet row has a figure for and which runs at 1/2 to 1/64 of the fp32
    rate, is measured on a listed GPU too (its fp32 figure made floors up to 64x too low)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        sheet = from_datasheet(name)
        if sheet is not None and (dtype != torch.float64 or "float64" in sheet.peak_flops):
            return sheet
    else:
        name = cpu_name()
    return measured(str(device), name, dtype)


@functools.cache
def measured(device: str, name: str, dtype: torch.dtype) -> DeviceSpec:
    """Peak FLOP/s in ``dtype`` and bandwidth of ``device``, measured (cached per process)."""
    where = torch.device(device)
    flops = {str(dtype).removeprefix("torch."): matmul_flops(where, dtype)}
    if dtype != torch.float32:
        flops["float32"] = matmul_flops(where, torch.float32)
    source = f"measured in this process ({torch.get_num_threads()} threads)"
    return DeviceSpec(name, flops, copy_bandwidth(where), source, measured=True)


MEASURED_FOR = 0.25
"""The least seconds a peak is measured for (:func:`best_seconds`): long enough that a slow
moment of a shared machine does not set the peak, and with it every floor (docs/bench.md)."""
MOST_REPEATS = 10_000


def best_seconds(
    call: functools.partial | object,
    device: torch.device,
    repeats: int = 5,
    at_least: float = MEASURED_FOR,
) -> float:
    """The fastest of at least ``repeats`` calls, repeated until ``at_least`` seconds passed
    (at most :data:`MOST_REPEATS`): a peak is the best the device does, so a slow moment of
    the machine shorter than that does not set it."""
    best = float("inf")
    started = time.perf_counter()
    for count in range(MOST_REPEATS):
        if count >= repeats and time.perf_counter() - started >= at_least:
            break
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        call()  # type: ignore[operator]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def matmul_flops(device: torch.device, dtype: torch.dtype, size: int | None = None) -> float:
    """FLOP/s of the best of ``size x size`` matrix products (2 size^3 FLOPs each)."""
    size = size or (1024 if device.type == "cpu" else 8192)
    a, b = (torch.randn(size, size, device=device).to(dtype) for _ in range(2))
    torch.mm(a, b)  # warm-up: the library picks its kernel
    seconds = best_seconds(functools.partial(torch.mm, a, b), device)
    return 2 * size**3 / seconds


def copy_bandwidth(device: torch.device, nbytes: int | None = None) -> float:
    """Bytes/s of the best of copies of ``nbytes`` (each reads and writes them once)."""
    nbytes = nbytes or (256 * 2**20 if device.type == "cpu" else 2**30)
    source = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    target = torch.empty_like(source)
    target.copy_(source)  # warm-up: the pages are touched
    seconds = best_seconds(functools.partial(target.copy_, source), device)
    return 2 * nbytes / seconds
