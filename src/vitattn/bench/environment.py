"""Where the benchmark runs: the device a setting names, and what the numbers were measured on."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from vitattn.errors import ConfigError


def resolve_device(value: str) -> torch.device:
    """``device``: ``auto`` is cuda if available, else cpu; a CUDA device must exist."""
    if value == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    invalid = ConfigError(f"device={value} is not valid; choose auto, cpu, cuda or cuda:<index>")
    try:
        device = torch.device(value)
    except RuntimeError as error:
        raise invalid from error
    if device.type not in ("cpu", "cuda"):
        raise invalid
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"device={value}: no CUDA device is available; use device=cpu")
        if device.index is not None and device.index >= count:
            raise ConfigError(f"device={value}: only {count} CUDA device(s); choose cuda:0..")
    return device


def half_the_memory() -> float | None:
    """Half the physical RAM in bytes (``guard.max_memory_bytes=auto`` on a CPU), if known."""
    try:
        return 0.5 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_limit(device: Any) -> float | None:
    """What a device holds for one measurement, as ``guard.max_memory_bytes=auto`` reads outside
    the scaling sweep: half the RAM on a CPU (:func:`half_the_memory`), the memory of a GPU."""
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    return half_the_memory()


def load_average() -> float | None:
    """The system's load over the last minute (runnable processes), if the platform says."""
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def busy_line(loads: Mapping[str, float | None], cpus: int | None) -> str | None:
    """One line where a load of ``loads`` (by when it was read: ``start``, ``end``) was above
    the ``cpus``, else ``None``: the timings then include waiting for a CPU."""
    cpus = cpus or 1
    if not any(load is not None and load > cpus for load in loads.values()):
        return None
    shown = ", ".join(
        f"{'-' if load is None else f'{load:.1f}'} at the {when}" for when, load in loads.items()
    )
    return (
        f"the machine was busy (load {shown}, on {cpus} CPUs): its timings include waiting for "
        "a CPU"
    )


def cpu_name() -> str:
    """The processor's model name (from ``/proc/cpuinfo`` on Linux), else the machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: torch.device) -> dict[str, Any]:
    """What the numbers were measured on."""
    return {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "matmul_precision": torch.get_float32_matmul_precision(),  # TF32 or not for float32
    }
