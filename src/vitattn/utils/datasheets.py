"""The one table of GPU figures from their vendors' datasheets, and the lookup by CUDA's name.

Both the floor of a benchmarked call (``vitattn.bench.devices``) and MFU in training results
(``vitattn.models.flops``) read these figures: dense peak TFLOP/s per dtype (without the 2:4
sparsity the datasheets also quote, which no attention here uses) and the memory bandwidth.

``float32`` is the CUDA cores' fp32 rate (PyTorch multiplies fp32 matrices so unless told
otherwise); ``tensorfloat32`` the tensor cores' dense TF32 rate (Ampere and later), at which fp32
products run once ``torch.set_float32_matmul_precision("high")`` (or ``"medium"``) allows it, as
vitattn's commands do by default (``matmul_precision``); ``bfloat16`` and ``float16`` are the
tensor cores' dense rates. A dtype a part has no tensor-core path for is absent from its figures
(bf16 and TF32 on a T4 or a V100): MFU then has no peak to compare with, and a floor takes the
fp32 figure. Nothing here imports torch or the rest of vitattn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Datasheet:
    """A GPU's datasheet figures: ``tflops`` maps ``float32``, ``bfloat16``, ``float16`` to dense
    peak TFLOP/s (a dtype without a path of its own is absent), ``tb_per_s`` is the memory
    bandwidth, ``parts`` the words that must all be in the name CUDA gives it."""

    name: str
    parts: tuple[str, ...]
    tflops: dict[str, float]
    tb_per_s: float
    source: str

    def matches(self, device_name: str) -> bool:
        """Whether ``device_name`` has every one of :attr:`parts` as a whole word: "NVIDIA L40"
        is not an L4, "NVIDIA A10G" not an A10, "Tesla V100S-PCIE-32GB" not a V100."""
        return set(self.parts) <= words(device_name)


def words(device_name: str) -> set[str]:
    """The words of a device's name, upper case, split at anything but a letter or digit:
    "NVIDIA A100-SXM4-80GB" is {"NVIDIA", "A100", "SXM4", "80GB"}."""
    return set(re.findall(r"[A-Z0-9]+", device_name.upper()))


def _sheet(
    name: str,
    parts: tuple[str, ...],
    fp32: float,
    tb_per_s: float,
    source: str,
    *,
    bf16: float | None,
    fp16: float | None,
    tf32: float | None = None,
) -> Datasheet:
    tflops = {"float32": fp32}
    tflops |= {} if tf32 is None else {"tensorfloat32": tf32}
    tflops |= {} if bf16 is None else {"bfloat16": bf16}
    tflops |= {} if fp16 is None else {"float16": fp16}
    return Datasheet(name, parts, tflops, tb_per_s, source)


A100_SHEET = (
    "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf, "
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)"
)
A10_SHEET = (
    "NVIDIA A10 Tensor Core GPU datasheet (https://www.nvidia.com/content/dam/en-zz/Solutions/"
    "Data-Center/a10/pdf/a10-datasheet.pdf)"
)
H100_SHEET = (
    "NVIDIA H100 Tensor Core GPU datasheet "
    "(https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet)"
)
H200_SHEET = (
    "NVIDIA H200 Tensor Core GPU datasheet (https://www.nvidia.com/en-us/data-center/h200/)"
)
L4_SHEET = "NVIDIA L4 Tensor Core GPU datasheet (https://www.nvidia.com/en-us/data-center/l4/)"
L40S_SHEET = "NVIDIA L40S datasheet (https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413)"
T4_SHEET = (
    "NVIDIA T4 Tensor Core GPU datasheet (https://www.nvidia.com/content/dam/en-zz/Solutions/"
    "Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf); Turing has no bf16 path"
)
V100_SHEET = (
    "NVIDIA V100 Tensor Core GPU datasheet (https://images.nvidia.com/content/technologies/volta/"
    "pdf/volta-v100-datasheet-update-us-1165301-r5.pdf); Volta's tensor cores have no bf16 path"
)

DATASHEETS: tuple[Datasheet, ...] = (
    # The first match wins, so the more specific names come first. TFLOP/s fp32, bf16, fp16 and
    # TF32 dense (a datasheet's TF32 figure "with sparsity" halved); TB/s.
    _sheet(
        "NVIDIA H200 NVL",
        ("H200", "NVL"),
        60.0,
        4.8,
        H200_SHEET,
        bf16=835.5,
        fp16=835.5,
        tf32=417.5,
    ),
    _sheet("NVIDIA H200 SXM", ("H200",), 67.0, 4.8, H200_SHEET, bf16=989.5, fp16=989.5, tf32=494.5),
    _sheet(
        "NVIDIA H100 NVL",
        ("H100", "NVL"),
        60.0,
        3.9,
        H100_SHEET,
        bf16=835.5,
        fp16=835.5,
        tf32=417.5,
    ),
    _sheet(
        "NVIDIA H100 PCIe",
        ("H100", "PCIE"),
        51.0,
        2.0,
        H100_SHEET,
        bf16=756.5,
        fp16=756.5,
        tf32=378.0,
    ),
    # The SXM part calls itself "NVIDIA H100 80GB HBM3".
    _sheet(
        "NVIDIA H100 SXM", ("H100",), 67.0, 3.35, H100_SHEET, bf16=989.5, fp16=989.5, tf32=494.5
    ),
    _sheet(
        "NVIDIA A100 80GB PCIe",
        ("A100", "80GB", "PCIE"),
        19.5,
        1.935,
        A100_SHEET,
        bf16=312.0,
        fp16=312.0,
        tf32=156.0,
    ),
    _sheet(
        "NVIDIA A100 80GB SXM",
        ("A100", "80GB"),
        19.5,
        2.039,
        A100_SHEET,
        bf16=312.0,
        fp16=312.0,
        tf32=156.0,
    ),
    _sheet(
        "NVIDIA A100 40GB", ("A100",), 19.5, 1.555, A100_SHEET, bf16=312.0, fp16=312.0, tf32=156.0
    ),
    _sheet("NVIDIA A10", ("A10",), 31.2, 0.6, A10_SHEET, bf16=125.0, fp16=125.0, tf32=62.5),
    _sheet("NVIDIA L40S", ("L40S",), 91.6, 0.864, L40S_SHEET, bf16=362.05, fp16=362.05, tf32=183.0),
    _sheet("NVIDIA L4", ("L4",), 30.3, 0.3, L4_SHEET, bf16=121.0, fp16=121.0, tf32=60.0),
    _sheet("NVIDIA V100 PCIe", ("V100", "PCIE"), 14.0, 0.9, V100_SHEET, bf16=None, fp16=112.0),
    _sheet("NVIDIA V100 SXM2", ("V100", "SXM2"), 15.7, 0.9, V100_SHEET, bf16=None, fp16=125.0),
    _sheet("NVIDIA T4", ("T4",), 8.1, 0.32, T4_SHEET, bf16=None, fp16=65.0),
)
"""The GPUs whose figures come from their datasheets (docs/bench.md lists them)."""


def datasheet(device_name: str) -> Datasheet | None:
    """The datasheet of a GPU named ``device_name`` (as ``torch.cuda.get_device_name`` says it:
    "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "Tesla T4"), or ``None`` if it is not listed."""
    return next((sheet for sheet in DATASHEETS if sheet.matches(device_name)), None)
