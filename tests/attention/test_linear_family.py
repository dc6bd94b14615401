"""linear, efficient, taylor: each equals its explicit n x n formula, and stays finite."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vitattn.attention.efficient import EfficientAttention
from vitattn.attention.linear import LinearAttention
from vitattn.attention.taylor import TaylorAttention
from vitattn.errors import ConfigError

SIZES = {"seq_len": 50, "heads": 3, "head_dim": 16}


def qkv(scale: float = 1.0, seed: int = 0) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    return tuple(scale * torch.randn(2, 3, 50, 16, generator=generator) for _ in range(3))


def normalised(weights: torch.Tensor, v: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    return (weights / (weights.sum(dim=-1, keepdim=True) + eps)) @ v


def test_linear_equals_explicit_formula() -> None:
    q, k, v = qkv()
    weights = (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1)  # the n x n matrix
    expected = normalised(weights, v, eps=1e-6)
    torch.testing.assert_close(LinearAttention(**SIZES)(q, k, v), expected, rtol=1e-5, atol=1e-5)


def test_efficient_equals_explicit_formula() -> None:
    q, k, v = qkv()
    weights = q.softmax(dim=-1) @ k.softmax(dim=-2).transpose(-2, -1)
    torch.testing.assert_close(
        EfficientAttention(**SIZES)(q, k, v), weights @ v, rtol=1e-5, atol=1e-5
    )
    # Rows of the implied matrix sum to 1: each query averages convex combinations of values.
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 50))


def test_taylor_equals_explicit_formula() -> None:
    q, k, v = qkv()
    similarity = 1 + F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
    assert (similarity >= 0).all()
    expected = normalised(similarity, v, eps=1e-6)
    torch.testing.assert_close(TaylorAttention(**SIZES)(q, k, v), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel_class", [LinearAttention, EfficientAttention, TaylorAttention])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_large_inputs_stay_finite(kernel_class, dtype) -> None:
    # Large norms and many tokens: the key sums of linear attention overflow fp16 if not kept
    # in fp32, and elu(x)+1 rounds to 0 in bf16 for very negative x.
    generator = torch.Generator().manual_seed(1)
    q, k = (10 * torch.randn(1, 2, 4096, 16, generator=generator).to(dtype) for _ in range(2))
    v = torch.randn(1, 2, 4096, 16, generator=generator).to(dtype)
    kernel = kernel_class(seq_len=4096, heads=2, head_dim=16)
    with torch.autocast("cpu", dtype=dtype):
        out = kernel(q, k, v)
    assert torch.isfinite(out).all()
    reference = kernel(q.float(), k.float(), v.float())  # same inputs, fp32 arithmetic
    torch.testing.assert_close(out.float(), reference, rtol=0.02, atol=0.02)


@pytest.mark.parametrize("kernel_class", [LinearAttention, TaylorAttention])
def test_eps_must_be_positive(kernel_class) -> None:
    with pytest.raises(ConfigError, match=r"attention.eps=0 is not valid"):
        kernel_class(**SIZES, eps=0)
