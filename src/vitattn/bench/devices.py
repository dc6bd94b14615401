"""What a device can do at best: its dense peak FLOP/s per dtype and its memory bandwidth.

GPUs named in :data:`DATASHEETS` take the figures of their vendor's datasheet (dense, without
the 2:4 sparsity the datasheets also quote, which no attention here uses). Any other device, a
CPU always, is measured once per process (:func:`measured`): the peak as the best of a few timed
square matrix products in the dtype, the bandwidth as the best of a few copies of a tensor far
larger than any cache (read once, written once). Measured figures say so (``source``), and they
are what this process reaches with its threads, not what the part could reach alone.

fp32 is the CUDA cores' fp32 rate (PyTorch multiplies fp32 matrices without TF32 unless told);
a dtype a part has no faster path for (bf16 on a T4) takes its fp32 figure.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from vitattn.bench.environment import cpu_name

TERA = 1e12


@dataclass(frozen=True)
class DeviceSpec:
    """A device's dense peak FLOP/s per dtype (``float32``, ``bfloat16``, ``float16``) and its
    memory bandwidth in bytes/s, with where they come from."""

    name: str
    peak_flops: dict[str, float] = field(default_factory=dict)
    bandwidth: float = 0.0
    source: str = ""
    measured: bool = False

    def peak(self, dtype: torch.dtype) -> float:
        """Peak FLOP/s in ``dtype``: its own figure, else the fp32 one."""
        name = str(dtype).removeprefix("torch.")
        return self.peak_flops.get(name, self.peak_flops["float32"])

    def summary(self, dtype: torch.dtype) -> dict[str, Any]:
        """The figures that apply to ``dtype``, as results files carry them."""
        return {
            "name": self.name,
            "dtype": str(dtype).removeprefix("torch."),
            "peak_tflops": self.peak(dtype) / TERA,
            "bandwidth_gb_s": self.bandwidth / 1e9,
            "source": self.source,
            "measured": self.measured,
        }


def _sheet(name: str, fp32: float, half: float | None, tb_per_s: float, source: str) -> DeviceSpec:
    flops = {"float32": fp32 * TERA}
    if half is not None:
        flops |= {"bfloat16": half * TERA, "float16": half * TERA}
    return DeviceSpec(name, flops, tb_per_s * TERA, source)


A100_SHEET = (
    "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf, "
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)"
)
H100_SHEET = (
    "NVIDIA H100 Tensor Core GPU datasheet "
    "(https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet)"
)
H200_SHEET = (
    "NVIDIA H200 Tensor Core GPU datasheet (https://www.nvidia.com/en-us/data-center/h200/)"
)
L4_SHEET = "NVIDIA L4 Tensor Core GPU datasheet (https://www.nvidia.com/en-us/data-center/l4/)"
T4_SHEET = (
    "NVIDIA T4 Tensor Core GPU datasheet (https://www.nvidia.com/content/dam/en-zz/Solutions/"
    "Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf); Turing has no bf16 path"
)

DATASHEETS: tuple[tuple[tuple[str, ...], DeviceSpec], ...] = (
    # (parts that must all be in torch.cuda.get_device_name(), figures); the first match wins,
    # so the more specific names come first. TFLOP/s fp32, bf16/fp16 dense; TB/s.
    (("H200", "NVL"), _sheet("NVIDIA H200 NVL", 60.0, 835.5, 4.8, H200_SHEET)),
    (("H200",), _sheet("NVIDIA H200 SXM", 67.0, 989.5, 4.8, H200_SHEET)),
    (("H100", "NVL"), _sheet("NVIDIA H100 NVL", 60.0, 835.5, 3.9, H100_SHEET)),
    (("H100", "PCIe"), _sheet("NVIDIA H100 PCIe", 51.0, 756.5, 2.0, H100_SHEET)),
    (("H100",), _sheet("NVIDIA H100 SXM", 67.0, 989.5, 3.35, H100_SHEET)),
    (("A100", "80GB", "PCIE"), _sheet("NVIDIA A100 80GB PCIe", 19.5, 312.0, 1.935, A100_SHEET)),
    (("A100", "80GB"), _sheet("NVIDIA A100 80GB SXM", 19.5, 312.0, 2.039, A100_SHEET)),
    (("A100",), _sheet("NVIDIA A100 40GB", 19.5, 312.0, 1.555, A100_SHEET)),
    (("L4",), _sheet("NVIDIA L4", 30.3, 121.0, 0.3, L4_SHEET)),
    (("T4",), _sheet("NVIDIA T4", 8.1, None, 0.32, T4_SHEET)),
)
"""The GPUs whose figures come from their datasheets (docs/bench.md lists them)."""


def from_datasheet(device_name: str) -> DeviceSpec | None:
    """The datasheet figures of a GPU named ``device_name`` (as ``torch.cuda.get_device_name``
    says it: "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "Tesla T4"), or ``None`` if unlisted."""
    upper = device_name.upper()
    for parts, spec in DATASHEETS:
        if all(part.upper() in upper for part in parts):
            if "L4" in parts and "L40" in upper:  # an L40 or L40S is not an L4
                continue
            return spec
    return None


def device_spec(device: torch.device, dtype: torch.dtype) -> DeviceSpec:
    """The figures of ``device``: its datasheet's if listed, else measured (once per process)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        sheet = from_datasheet(name)
        if sheet is not None:
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


def _best_seconds(call: functools.partial | object, device: torch.device, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        call()  # type: ignore[operator]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def matmul_flops(device: torch.device, dtype: torch.dtype, size: int | None = None) -> float:
    """FLOP/s of the best of a few ``size x size`` matrix products (2 size^3 FLOPs each)."""
    size = size or (1024 if device.type == "cpu" else 8192)
    a, b = (torch.randn(size, size, device=device).to(dtype) for _ in range(2))
    torch.mm(a, b)  # warm-up: the library picks its kernel
    seconds = _best_seconds(functools.partial(torch.mm, a, b), device, repeats=5)
    return 2 * size**3 / seconds


def copy_bandwidth(device: torch.device, nbytes: int | None = None) -> float:
    """Bytes/s of the best of a few copies of ``nbytes`` (each reads and writes them once)."""
    nbytes = nbytes or (256 * 2**20 if device.type == "cpu" else 2**30)
    source = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    target = torch.empty_like(source)
    target.copy_(source)  # warm-up: the pages are touched
    seconds = _best_seconds(functools.partial(target.copy_, source), device, repeats=5)
    return 2 * nbytes / seconds
