"""The attention matrix any mechanism implies (:mod:`vitattn.attention.common.probe`), read by
feeding identity columns as V, against matrices written out here from their definitions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.support.presets import tiny_vit
from vitattn.attention import ATTENTIONS
from vitattn.attention.common.probe import (
    attention_layers,
    capture_qkv,
    implied_matrix,
    probe_matrix,
    relative_error,
)
from vitattn.bench.approx import errors_of, random_qkv
from vitattn.bench.kernels import build_kernel


def explicit_softmax(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)), Vaswani et al. 2017, in float64."""
    logits = q.double() @ k.double().transpose(-2, -1) / q.shape[-1] ** 0.5
    return logits.softmax(dim=-1)


def explicit_linear(q: torch.Tensor, k: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """phi(q) phi(k)^T with each row divided by its sum (+ eps), phi = elu + 1 (Katharopoulos
    et al. 2020), in float64."""
    phi_q, phi_k = F.elu(q.double()) + 1, F.elu(k.double()) + 1
    weights = phi_q @ phi_k.transpose(-2, -1)
    return weights / (weights.sum(dim=-1, keepdim=True) + eps)


@pytest.mark.parametrize("impl", ["sdpa", "naive"])
def test_probed_softmax_is_the_explicit_softmax_matrix(impl: str) -> None:
    # 40 tokens with head_dim 16: three probes, the last one partly padded.
    q, k, _ = random_qkv(2, 2, 40, 16, seed=1)
    kernel = build_kernel("softmax", seq_len=40, heads=2, head_dim=16, knobs={"impl": impl})
    probed = probe_matrix(kernel.eval(), q, k)
    assert torch.allclose(probed.double(), explicit_softmax(q, k), atol=1e-5)


def test_probed_linear_attention_is_the_normalised_feature_product() -> None:
    q, k, v = random_qkv(1, 2, 32, 16, seed=2)
    kernel = build_kernel("linear", seq_len=32, heads=2, head_dim=16).eval()
    probed = probe_matrix(kernel, q, k).double()
    assert torch.allclose(probed, explicit_linear(q, k), atol=1e-5)
    assert torch.allclose(probed @ v.double(), kernel(q, k, v).double(), atol=1e-5)
    matrix, how = implied_matrix(kernel, q, k, v, kernel(q, k, v))
    assert how == "probe" and matrix is not None
    _, matrix_error, method = errors_of(kernel, q, k, v)
    assert method == "probe" and matrix_error is not None and matrix_error > 0


def test_a_kernel_not_linear_in_v_has_no_implied_matrix() -> None:
    class Squares(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return v * v

    q, k, v = random_qkv(1, 1, 16, 8, seed=3)
    matrix, how = implied_matrix(Squares(), q, k, v, v * v)
    assert matrix is None and "not linear" in how


@pytest.mark.parametrize("name", sorted(ATTENTIONS))
def test_every_mechanism_has_an_implied_matrix_and_fidelity_is_zero_only_for_softmax(
    name: str,
) -> None:
    # 256 tokens: more than the default budgets (features, landmarks, window, blocks, buckets)
    # cover, so every approximation is one here.
    q, k, v = random_qkv(1, 2, 256, 16, seed=4)
    kernel = build_kernel(name, seq_len=256, heads=2, head_dim=16).eval()
    out = kernel(q, k, v)
    matrix, how = implied_matrix(kernel, q, k, v, out)
    assert matrix is not None, f"{name}: {how}"
    assert torch.allclose(matrix.double() @ v.double(), out.double(), atol=1e-3, rtol=1e-3)
    fidelity = relative_error(out, F.scaled_dot_product_attention(q, k, v))
    if name == "softmax":
        assert fidelity < 1e-5
    else:
        assert fidelity > 1e-3, f"{name} is exact at 256 tokens: not an approximation here"


def test_captured_qkv_are_each_layers_projections_of_its_input() -> None:
    net = tiny_vit()
    images = torch.randn(3, 3, 16, 16)
    inputs: list[torch.Tensor] = []
    handles = [
        layer.register_forward_pre_hook(lambda _m, args: inputs.append(args[0]))
        for layer in attention_layers(net)
    ]
    layers = capture_qkv(net, images)
    for handle in handles:
        handle.remove()
    assert not net.training and len(layers) == len(inputs) == 2
    for layer, x, (q, k, v) in zip(attention_layers(net), inputs, layers, strict=True):
        projected = layer.qkv(x).reshape(3, 16, 3, 2, 16).permute(2, 0, 3, 1, 4)
        assert torch.allclose(q, projected[0]) and torch.allclose(k, projected[1])
        assert torch.allclose(v, projected[2])
