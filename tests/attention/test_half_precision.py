"""Every mechanism in bf16 and fp16 against the same module in fp32 (same weights and random
draws, the same half-precision inputs), with a tolerance derived from the dtype: the README says
exponentials and sums stay in fp32, so what is left is about the rounding of the output itself."""

from __future__ import annotations

import copy

import pytest
import torch

from vitattn.attention import ATTENTIONS
from vitattn.bench.kernels import build_kernel

DTYPES = [torch.bfloat16, torch.float16]

SCORES_IN_THE_DTYPE = {"softmax"}
"""Mechanisms whose q.k scores are products in the half dtype by design, as fused attention's
are on a GPU: their scores are rounded once more."""


def tolerance(name: str, dtype: torch.dtype) -> float:
    """One unit of the dtype's precision (machine epsilon) relative to the output's size, two
    where the scores are half-precision products: the rounding of the inputs is shared by both
    sides, that of the output alone is about half a unit, and an exponential or sum done in the
    half dtype costs many units."""
    return torch.finfo(dtype).eps * (2 if name in SCORES_IN_THE_DTYPE else 1)


def relative_error(output: torch.Tensor, reference: torch.Tensor) -> float:
    return float((output.float() - reference).norm() / reference.norm())


OPTIONAL_PATHS = {"nystrom-conv": ("nystrom", {"conv_kernel": 33})}
"""Knobs that add weights of their own in a path the defaults do not take (the paper's setting)."""

SETTINGS = {name: (name, {}) for name in sorted(ATTENTIONS)} | OPTIONAL_PATHS


@pytest.mark.parametrize("logit_scale", [1.0, 3.0], ids=["unit", "large-logits"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("setting", SETTINGS)
def test_half_precision_output_is_fp32_output_rounded(
    setting: str, dtype: torch.dtype, logit_scale: float
) -> None:
    name, knobs = SETTINGS[setting]
    torch.manual_seed(0)
    kernel = build_kernel(name, seq_len=64, heads=2, head_dim=16, knobs=knobs).eval()
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 64, 16, generator=generator) for _ in range(3))
    q, k, v = (t.to(dtype) for t in (q * logit_scale, k * logit_scale, v))
    half = copy.deepcopy(kernel).to(dtype)  # its weights rounded as the fp32 side's inputs are
    full = copy.deepcopy(half).float()
    with torch.no_grad():
        expected = full(q.float(), k.float(), v.float())
        got = half(q, k, v)
    assert got.dtype == dtype
    baseline = relative_error(v.float().mean(-2, keepdim=True).expand_as(expected), expected)
    assert baseline > 10 * tolerance(name, dtype)  # returning the mean of v would fail
    assert relative_error(got, expected) < tolerance(name, dtype)
