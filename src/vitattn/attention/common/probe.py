"""Reading the attention matrix any mechanism implies, and exact softmax to compare it with.

Every mechanism here is linear in V: its output is O~ = A~ V for an n x n matrix A~ that depends
on q and k only. Feeding the columns of the identity matrix as V, ``head_dim`` at a time, returns
A~ column by column (n / head_dim calls), whatever the mechanism computes inside: no
per-mechanism code. ``vitattn-bench mode=approx`` compares these matrices with softmax's, and
training draws them as attention maps (:mod:`vitattn.training.callbacks.insight`).
"""

from __future__ import annotations

from typing import Any

import torch

from vitattn.attention.common.multihead import MultiHeadAttention

QKV = tuple[torch.Tensor, torch.Tensor, torch.Tensor]

PROBE_TOLERANCE = 1e-3
"""Relative difference between A~ V and the kernel's own output above which a kernel is taken
not to be linear in V (and has no implied matrix)."""


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    """|approx - exact|_F / |exact|_F, in float64."""
    exact = exact.detach().double()
    return float((approx.detach().double() - exact).norm() / exact.norm().clamp_min(1e-300))


def softmax_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact ``(A, A V)`` in float64 with the kernels' scale 1/sqrt(head_dim)."""
    scale = q.shape[-1] ** -0.5
    matrix = ((q.double() * scale) @ k.double().transpose(-2, -1)).softmax(dim=-1)
    return matrix, matrix @ v.double()


def probe_matrix(kernel: torch.nn.Module, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The n x n matrix A~ with kernel(q, k, V) = A~ V, read off by feeding identity columns."""
    tokens, head_dim = q.shape[-2], q.shape[-1]
    eye = torch.eye(tokens, dtype=q.dtype, device=q.device)
    columns = []
    for start in range(0, tokens, head_dim):
        block = eye[:, start : start + head_dim]
        width = block.shape[1]
        if width < head_dim:
            block = torch.nn.functional.pad(block, (0, head_dim - width))
        values = block.expand(*q.shape[:-2], tokens, head_dim).contiguous()
        columns.append(kernel(q, k, values)[..., :width])
    return torch.cat(columns, dim=-1)


def implied_matrix(
    kernel: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor
) -> tuple[torch.Tensor | None, str]:
    """The kernel's attention matrix and how it was obtained (``attention_matrix``/``probe``);
    ``None`` for a kernel whose output ``out`` on ``v`` is not the probed matrix times ``v``."""
    if callable(getattr(kernel, "attention_matrix", None)):
        return kernel.attention_matrix(q, k), "attention_matrix"
    matrix = probe_matrix(kernel, q, k)
    if relative_error(matrix.double() @ v.double(), out) > PROBE_TOLERANCE:
        return None, "none (not linear in V)"
    return matrix, "probe"


def attention_layers(net: torch.nn.Module) -> list[MultiHeadAttention]:
    """The network's multi-head attention layers, in the order they run."""
    return [m for m in net.modules() if isinstance(m, MultiHeadAttention)]


@torch.no_grad()
def capture_qkv(net: torch.nn.Module, images: torch.Tensor) -> list[QKV]:
    """``[(q, k, v) per layer]``, each ``(images, heads, tokens, head_dim)``, in layer order: a
    forward pre-hook on each layer's kernel receives exactly what the model attends with, after
    its learned projections. ``net`` is run in evaluation mode (and left so), eager where it
    has a ``forward_eager`` (a compiled network's graph would not call the hooks)."""
    layers = attention_layers(net)
    captured: dict[int, QKV] = {}

    def hook_for(index: int) -> Any:
        def hook(_module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            q, k, v = args[:3]
            captured[index] = (q.detach().clone(), k.detach().clone(), v.detach().clone())

        return hook

    handles = [
        layer.kernel.register_forward_pre_hook(hook_for(i)) for i, layer in enumerate(layers)
    ]
    try:
        net.eval()
        getattr(net, "forward_eager", net)(images)
    finally:
        for handle in handles:
            handle.remove()
    return [captured[i] for i in range(len(layers))]
