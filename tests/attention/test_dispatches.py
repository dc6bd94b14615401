"""Fewer dispatches where the mechanism does not need them (issue 42): the fused forms of linear
and Taylor attention and of Nyström's pseudoinverse iteration compute what the textbook forms
written here compute, with fewer aten operations per forward+backward (counted by
:mod:`tests.support.dispatches`; the counts per mechanism are in docs/attention.md)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.support.dispatches import DispatchCounter, forward_backward_dispatches
from vitattn.attention.linear import LinearAttention
from vitattn.attention.nystrom import iterative_pinv
from vitattn.attention.taylor import TaylorAttention

SHAPE = (2, 3, 40, 8)


def qkv() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(*SHAPE, generator=generator) for _ in range(3)]


def textbook_linear(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Katharopoulos et al. 2020, eq. 6, as written: numerator and normaliser apart."""
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    numerator = phi_q @ (phi_k.transpose(-2, -1) @ v)
    return numerator / (phi_q @ phi_k.sum(dim=-2).unsqueeze(-1) + 1e-6)


def textbook_taylor(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(sum_j v_j + q^ K^^T V) / (n + q^ . sum_j k^_j), numerator and normaliser apart."""
    q_hat, k_hat = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    numerator = v.sum(dim=-2, keepdim=True) + q_hat @ (k_hat.transpose(-2, -1) @ v)
    return numerator / (k.shape[-2] + q_hat @ k_hat.sum(dim=-2).unsqueeze(-1) + 1e-6)


def textbook_pinv(matrix: torch.Tensor, iterations: int) -> torch.Tensor:
    """Xiong et al. 2021, eq. 12, as written (with the per-matrix start of the module)."""
    identity = torch.eye(matrix.shape[-1])
    absolute = matrix.abs()
    start = absolute.sum(dim=-2).amax(dim=-1) * absolute.sum(dim=-1).amax(dim=-1)
    z = matrix.transpose(-2, -1) / start[..., None, None]
    for _ in range(iterations):
        az = matrix @ z
        z = 0.25 * z @ (13 * identity - az @ (15 * identity - az @ (7 * identity - az)))
    return z


def test_the_counter_counts_each_operation_and_tells_views_apart() -> None:
    a = torch.randn(3, 4)
    with DispatchCounter() as counter:
        (a.t() @ a).sum()
    assert counter.ops == {"aten.t": 1, "aten.mm": 1, "aten.sum": 1}
    assert counter.count == 3 and counter.computing == 2


def test_linear_and_taylor_give_the_textbook_result_in_fewer_dispatches() -> None:
    q, k, v = qkv()
    for kernel, textbook in (
        (LinearAttention(seq_len=40, heads=3, head_dim=8), textbook_linear),
        (TaylorAttention(seq_len=40, heads=3, head_dim=8), textbook_taylor),
    ):
        torch.testing.assert_close(kernel(q, k, v), textbook(q, k, v), rtol=1e-5, atol=1e-6)
        fused = forward_backward_dispatches(kernel, q, k, v)
        plain = forward_backward_dispatches(textbook, q, k, v)
        assert fused.count < plain.count, kernel.name
        assert fused.computing <= plain.computing, kernel.name


def test_nystroms_pseudoinverse_gives_the_textbook_iteration_in_fewer_dispatches() -> None:
    matrix = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(1)).softmax(-1)
    torch.testing.assert_close(
        iterative_pinv(matrix, 6), textbook_pinv(matrix, 6), rtol=1e-4, atol=1e-5
    )
    with DispatchCounter() as fused:
        iterative_pinv(matrix, 6)
    with DispatchCounter() as plain:
        textbook_pinv(matrix, 6)
    assert fused.computing < plain.computing and fused.count < plain.count
