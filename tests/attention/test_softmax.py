"""Softmax attention: the fused SDPA path equals the explicit matrix."""

from __future__ import annotations

import math

import pytest
import torch

from vitattn.attention.softmax import SoftmaxAttention
from vitattn.errors import ConfigError


@pytest.mark.parametrize("seq_len", [1, 17, 64, 257])
def test_sdpa_equals_naive(seq_len: int) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 4, seq_len, 32) for _ in range(3))
    sizes = {"seq_len": seq_len, "heads": 4, "head_dim": 32}
    sdpa = SoftmaxAttention(**sizes, impl="sdpa")(q, k, v)
    naive = SoftmaxAttention(**sizes, impl="naive")(q, k, v)
    torch.testing.assert_close(sdpa, naive, rtol=1e-5, atol=1e-5)


def test_naive_matches_the_definition() -> None:
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 1, 5, 8, dtype=torch.float64) for _ in range(3))
    kernel = SoftmaxAttention(seq_len=5, heads=1, head_dim=8, impl="naive")
    scores = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(8))
    expected = (scores / scores.sum(-1, keepdim=True)) @ v
    torch.testing.assert_close(kernel(q, k, v), expected)
    weights = kernel.attention_matrix(q, k)
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 1, 5, dtype=torch.float64))


def test_gradients_agree() -> None:
    torch.manual_seed(2)
    grads = {}
    for impl in ("sdpa", "naive"):
        torch.manual_seed(3)
        q, k, v = (torch.randn(2, 2, 33, 16, requires_grad=True) for _ in range(3))
        SoftmaxAttention(seq_len=33, heads=2, head_dim=16, impl=impl)(q, k, v).sum().backward()
        grads[impl] = [t.grad for t in (q, k, v)]
    for a, b in zip(grads["sdpa"], grads["naive"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_dropout_only_in_training() -> None:
    torch.manual_seed(4)
    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    kernel = SoftmaxAttention(seq_len=16, heads=2, head_dim=8, impl="naive", dropout=0.5)
    reference = SoftmaxAttention(seq_len=16, heads=2, head_dim=8, impl="naive")
    torch.testing.assert_close(kernel.eval()(q, k, v), reference(q, k, v))
    assert not torch.allclose(kernel.train()(q, k, v), reference(q, k, v))


def test_bad_knobs_name_the_setting() -> None:
    with pytest.raises(
        ConfigError,
        match=r"attention.impl='flash' is not valid; choose one of auto \| sdpa \| naive",
    ):
        SoftmaxAttention(seq_len=4, heads=1, head_dim=4, impl="flash")
    with pytest.raises(ConfigError, match=r"attention.dropout=1.5"):
        SoftmaxAttention(seq_len=4, heads=1, head_dim=4, dropout=1.5)


@pytest.mark.parametrize(
    ("dtype", "seq_len", "fused"),
    [
        (torch.float32, 64, True),  # fp32: SDPA is never slower on a CPU
        (torch.bfloat16, 64, False),  # half precision, short: the explicit matrix is faster
        (torch.bfloat16, 600, True),  # half precision, long: back to SDPA
    ],
)
def test_auto_picks_the_faster_path_and_computes_the_same(
    dtype, seq_len: int, fused: bool, monkeypatch
) -> None:
    import vitattn.attention.softmax as softmax_module

    calls = []
    sdpa = softmax_module.F.scaled_dot_product_attention

    def recording(*args, **kwargs):
        calls.append(args[0].shape)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(softmax_module.F, "scaled_dot_product_attention", recording)
    torch.manual_seed(5)
    q, k, v = (torch.randn(2, 2, seq_len, 16).to(dtype) for _ in range(3))
    sizes = {"seq_len": seq_len, "heads": 2, "head_dim": 16}
    auto = SoftmaxAttention(**sizes)(q, k, v)
    assert bool(calls) == fused
    reference = SoftmaxAttention(**sizes, impl="naive")(q.double(), k.double(), v.double())
    torch.testing.assert_close(auto.double(), reference, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("backend", ["flash", "math"])
def test_each_sdpa_backend_that_runs_on_a_cpu_computes_softmax(backend: str) -> None:
    torch.manual_seed(4)
    q, k, v = (torch.randn(2, 2, 40, 16) for _ in range(3))
    sizes = {"seq_len": 40, "heads": 2, "head_dim": 16}
    chosen = SoftmaxAttention(**sizes, impl="sdpa", sdpa_backend=backend)(q, k, v)
    naive = SoftmaxAttention(**sizes, impl="naive")(q, k, v)
    torch.testing.assert_close(chosen, naive, rtol=1e-5, atol=1e-5)


def test_a_backend_that_cannot_run_is_one_line_naming_the_knob() -> None:
    q = torch.randn(1, 1, 8, 4)
    kernel = SoftmaxAttention(seq_len=8, heads=1, head_dim=4, impl="sdpa", sdpa_backend="cudnn")
    if torch.cuda.is_available():
        pytest.skip("on this machine the refusal is for a CPU tensor only")
    with pytest.raises(ConfigError, match=r"attention.sdpa_backend=cudnn cannot run here \(cpu, "):
        kernel(q, q, q)
    with pytest.raises(
        ConfigError, match=r"attention.sdpa_backend='fast' is not valid; choose one"
    ):
        SoftmaxAttention(seq_len=8, heads=1, head_dim=4, sdpa_backend="fast")
