"""Timing and memory (:mod:`vitattn.bench.timing`, :mod:`vitattn.bench.memory`): known answers."""

from __future__ import annotations

import pytest
import torch

from vitattn.attention.common import flex
from vitattn.bench.kernels import build_kernel
from vitattn.bench.memory import measure_memory
from vitattn.bench.scaling_table import fit_exponent
from vitattn.bench.timing import summarize

CPU = torch.device("cpu")


def test_memory_of_a_matmul_is_its_saved_inputs_plus_its_output() -> None:
    n, d = 96, 16
    x = torch.randn(n, d, requires_grad=True)
    y = torch.randn(n, d, requires_grad=True)

    def step() -> None:
        (x @ y.T).backward(torch.ones(n, n))

    report = measure_memory(step, CPU)
    assert report.saved_bytes == 2 * n * d * 4  # x and y (y.T is a view of y's storage)
    assert report.peak_tensor_bytes == n * n * 4  # the n x n product
    assert report.memory_bytes == report.saved_bytes + report.peak_tensor_bytes
    assert report.method == "saved+largest"


def test_saved_memory_counts_a_shared_storage_once() -> None:
    x = torch.randn(40, 8, requires_grad=True)
    report = measure_memory(lambda: (x @ x.T).sum().backward(), CPU)
    assert report.saved_bytes == 40 * 8 * 4


def test_naive_softmax_memory_is_quadratic_and_linear_attention_linear() -> None:
    def memory(name: str, n: int, **knobs: str) -> int:
        kernel = build_kernel(name, seq_len=n, heads=1, head_dim=8, knobs=knobs)
        q, k, v = (torch.randn(1, 1, n, 8, requires_grad=True) for _ in range(3))
        return measure_memory(lambda: kernel(q, k, v).sum().backward(), CPU).memory_bytes

    naive = fit_exponent([(n, memory("softmax", n, impl="naive")) for n in (128, 256, 512)])
    linear = fit_exponent([(n, memory("linear", n)) for n in (128, 256, 512)])
    assert naive is not None and naive > 1.7
    assert linear is not None and 0.9 < linear < 1.1


def test_timing_summary() -> None:
    timing = summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (timing.median_ms, timing.q25_ms, timing.q75_ms) == (3.0, 2.0, 4.0)
    assert (timing.min_ms, timing.max_ms, timing.repeats) == (1.0, 5.0, 5)


def flex_local(n: int) -> torch.nn.Module:
    return build_kernel("local", seq_len=n, heads=2, head_dim=16, knobs={"impl": "flex"})


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_memory_of_an_uncompiled_flex_kernel_counts_its_output_not_its_internals(
    monkeypatch,
) -> None:
    """Issue 42: FlexAttention's operator is a higher-order one, and the dispatch mode of the
    largest tensor refused it ("no rule registered for HigherOrderOperator flex_attention"), so
    local, bigbird and sparse had no kernel rows on a GPU. Here it runs uncompiled (the dense
    math, quick on a CPU): one operator whose outputs count, its n x n internals not."""
    from torch.nn.attention import flex_attention as module

    monkeypatch.setattr(flex, "compiled_flex_attention", lambda: flex.flex_attention)
    monkeypatch.setattr(module, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", True)
    n = 64
    kernel = flex_local(n)
    q, k, v = (torch.randn(1, 2, n, 16) for _ in range(3))
    with torch.no_grad():
        expected = kernel(q, k, v)  # builds the BlockMask once, as a timed call before it would

        def forward() -> torch.Tensor:
            return kernel(q, k, v)

        report = measure_memory(forward, CPU)
    assert report.peak_tensor_bytes == expected.numel() * 4  # (1, 2, n, 16), not (1, 2, n, n)
    torch.testing.assert_close(forward(), expected)


@pytest.mark.slow
def test_memory_of_compiled_flex_kernels_at_two_sizes_in_a_row() -> None:
    """The real path: FlexAttention compiled stays compiled under the measurement (a dispatch
    mode would make dynamo skip it), and a second size measures as the first did."""
    for n in (64, 96):
        kernel = flex_local(n)
        q, k, v = (torch.randn(1, 2, n, 16) for _ in range(3))
        with torch.no_grad():
            report = measure_memory(lambda: kernel(q, k, v), CPU)  # noqa: B023
        assert report.peak_tensor_bytes == 2 * n * 16 * 4, n
