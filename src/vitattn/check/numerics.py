"""Section 1 of ``vitattn-check``: every attention on the device in fp32, bf16 and fp16 against
its own fp32 result on the CPU.

Each mechanism is built once on the CPU (its projections, random features, rotations and random
blocks drawn there) and copied to the device, so both sides compute the same function; the
comparison runs in evaluation mode, where no mechanism draws anything new. The half-precision
runs get q, k, v in that dtype under autocast, as in mixed-precision training. The error of a
tensor is ``max |x - x_ref| / max |x_ref|``; a row's error is the largest over the output and the
gradients of q, k and v. A second pass with q and k scaled by ``stress_scale`` (logits ~100x
larger, far past any trained model's) only has to stay finite.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

import torch

from vitattn.bench.kernels import build_kernel, failure_status
from vitattn.check.settings import CheckSettings, NumericsSettings

log = logging.getLogger(__name__)

TOLERANCE_UNITS = 8
"""A row is ``ok`` when its error is within this many units of the dtype's rounding (eps), or
1e-3 for fp32 (other summation orders on another device, TF32 where enabled)."""


def tolerance(dtype: torch.dtype) -> float:
    """The largest error a row of ``dtype`` may have and still be ``ok``."""
    return max(1e-3, TOLERANCE_UNITS * torch.finfo(dtype).eps)


@dataclass
class NumericsRow:
    """One line of the numerics table."""

    attention: str
    dtype: str
    device: str
    error: float | None = None  # largest of output, dq, dk, dv
    output_error: float | None = None
    finite: bool | None = None
    finite_stressed: bool | None = None
    tolerance: float | None = None
    status: str = "ok"  # ok | large error | not finite | <failure status>


Tensors = list[torch.Tensor | None]


def relative_error(value: torch.Tensor | None, reference: torch.Tensor | None) -> float:
    """``max |value - reference| / max |reference|`` (0 where both are absent or zero)."""
    if value is None or reference is None:
        return 0.0
    reference = reference.double()
    scale = reference.abs().max().item()
    difference = (value.double().cpu() - reference).abs().max().item()
    return difference / scale if scale > 0 else difference


def forward_backward(
    kernel: torch.nn.Module,
    device: torch.device,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cotangent: torch.Tensor,
    dtype: torch.dtype,
) -> Tensors:
    """The output and the gradients of q, k, v (``None`` where a mechanism gives none) of
    ``kernel`` (on ``device``) on q, k, v cast to ``dtype``, under autocast for a half dtype."""
    inputs = [
        x.detach().to(device=device, dtype=dtype, copy=True).requires_grad_() for x in (q, k, v)
    ]
    half = dtype in (torch.float16, torch.bfloat16)
    with torch.autocast(device_type=device.type, dtype=dtype, enabled=half):
        out = kernel(*inputs)
    out.float().backward(cotangent.to(device))
    return [out.detach().float(), *(None if x.grad is None else x.grad.float() for x in inputs)]


def all_finite(tensors: Tensors) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors if t is not None)


def check_attention(
    name: str, numerics: NumericsSettings, device: torch.device, seed: int
) -> list[NumericsRow]:
    """The rows of one attention, one per dtype of ``numerics.dtypes``."""
    shape = (numerics.batch_size, numerics.heads, numerics.seq_len, numerics.head_dim)
    generator = torch.Generator().manual_seed(seed)
    # Inputs every dtype holds exactly (bf16's values are fp16's and fp32's too), so a row
    # measures the kernel's arithmetic in that dtype, not the rounding of its inputs: for a
    # discrete choice such as Reformer's hash buckets, rounded inputs pick other buckets, a
    # different attention pattern rather than an error of the arithmetic.
    q, k, v, cotangent = (
        torch.randn(shape, generator=generator).bfloat16().float() for _ in range(4)
    )
    stressed = (q * numerics.stress_scale, k * numerics.stress_scale)
    try:
        torch.manual_seed(seed)
        kernel = build_kernel(
            name, seq_len=numerics.seq_len, heads=numerics.heads, head_dim=numerics.head_dim
        ).eval()
        reference = forward_backward(kernel, torch.device("cpu"), q, k, v, cotangent, torch.float32)
    except Exception as error:
        status = failure_status(error)
        return [NumericsRow(name, d.value, str(device), status=status) for d in numerics.dtypes]
    rows = []
    on_device = copy.deepcopy(kernel).to(device)
    for choice in numerics.dtypes:
        dtype = choice.torch
        row = NumericsRow(name, choice.value, str(device), tolerance=tolerance(dtype))
        try:
            result = forward_backward(on_device, device, q, k, v, cotangent, dtype)
            stress = forward_backward(on_device, device, *stressed, v, cotangent, dtype)
        except Exception as error:
            row.status = failure_status(error)
            rows.append(row)
            continue
        errors = [relative_error(x, r) for x, r in zip(result, reference, strict=True)]
        row.output_error, row.error = errors[0], max(errors)
        row.finite, row.finite_stressed = all_finite(result), all_finite(stress)
        if not (row.finite and row.finite_stressed):
            row.status = "not finite"
        elif row.error > row.tolerance:
            row.status = "large error"
        rows.append(row)
    return rows


def run_numerics(settings: CheckSettings) -> list[NumericsRow]:
    """Section 1: every attention's rows, float32 products at full precision whatever
    ``matmul_precision`` says (TF32's rounding is not what the float32 tolerance is about)."""
    assert settings.attentions is not None
    rows: list[NumericsRow] = []
    chosen = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        for name in settings.attentions:
            rows.extend(check_and_log(name, settings))
    finally:
        torch.set_float32_matmul_precision(chosen)
    return rows


def check_and_log(name: str, settings: CheckSettings) -> list[NumericsRow]:
    """:func:`check_attention`'s rows for ``name``, each logged."""
    found = check_attention(name, settings.numerics, settings.torch_device, settings.seed)
    for row in found:
        log.info(
            "numerics %-14s %-8s error %s, %s",
            row.attention,
            row.dtype,
            "-" if row.error is None else f"{row.error:.2e}",
            row.status,
        )
    return found
