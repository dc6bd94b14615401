"""Properties every registered attention kernel must have (parametrised over the registry)."""

from __future__ import annotations

import hydra
import pytest
import torch

from tests.support.presets import compose_config
from vitattn.attention import ATTENTIONS, MultiHeadAttention
from vitattn.errors import ConfigError

NAMES = sorted(ATTENTIONS)


def build(name: str, tmp_path, seq_len: int, heads: int = 2, head_dim: int = 16):
    cfg = compose_config("train", [f"attention={name}"], tmp_path)
    return hydra.utils.instantiate(cfg.attention)(seq_len=seq_len, heads=heads, head_dim=head_dim)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seq_len", [64, 1024])
def test_shape_and_finite_gradients_fp32(name: str, seq_len: int, tmp_path) -> None:
    torch.manual_seed(0)
    kernel = build(name, tmp_path, seq_len)
    q, k, v = (torch.randn(2, 2, seq_len, 16, requires_grad=True) for _ in range(3))
    out = kernel(q, k, v)
    assert out.shape == (2, 2, seq_len, 16)
    assert out.dtype == torch.float32
    out.square().mean().backward()
    # A shared-QK kernel (reformer) takes its keys from q by design and ignores k.
    used = (q, v) if getattr(kernel, "shared_qk", False) else (q, k, v)
    for tensor in used:
        assert tensor.grad is not None and torch.isfinite(tensor.grad).all()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("seq_len", [64, 1024])
def test_finite_in_half_precision_autocast_with_large_norms(
    name: str, dtype: torch.dtype, seq_len: int, tmp_path
) -> None:
    # q and k scaled by 10: softmax logits in the hundreds, the case where exponentials and
    # running sums overflow fp16 unless a kernel subtracts maxima and keeps its sums in fp32.
    torch.manual_seed(0)
    kernel = build(name, tmp_path, seq_len)
    q, k, v = (torch.randn(2, 2, seq_len, 16) for _ in range(3))
    q, k = 10 * q, 10 * k
    q, k, v = (t.to(dtype).requires_grad_() for t in (q, k, v))  # as a half-precision model has
    with torch.autocast("cpu", dtype=dtype):
        out = kernel(q, k, v)
    out.float().square().mean().backward()
    assert out.dtype == dtype and torch.isfinite(out).all()
    used = (q, v) if getattr(kernel, "shared_qk", False) else (q, k, v)
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in used)


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_in_eval(name: str, tmp_path) -> None:
    kernel = build(name, tmp_path, 64).eval()
    q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))
    torch.testing.assert_close(kernel(q, k, v), kernel(q, k, v), rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_multihead_wrapper_passes_sizes(name: str, tmp_path) -> None:
    cfg = compose_config("train", [f"attention={name}"], tmp_path)
    layer = MultiHeadAttention(
        dim=48, heads=3, seq_len=65, attention=hydra.utils.instantiate(cfg.attention)
    )
    assert (layer.kernel.seq_len, layer.kernel.heads, layer.kernel.head_dim) == (65, 3, 16)
    assert layer(torch.randn(2, 65, 48)).shape == (2, 65, 48)


def test_multihead_rejects_indivisible_heads(tmp_path) -> None:
    cfg = compose_config("train", [], tmp_path)
    with pytest.raises(ConfigError, match=r"model.embed_dim=50 is not divisible by model.heads=4"):
        MultiHeadAttention(
            dim=50, heads=4, seq_len=8, attention=hydra.utils.instantiate(cfg.attention)
        )
