"""Other packages' implementations measured next to ours (:mod:`vitattn.bench.packages`)."""

from __future__ import annotations

import pytest
import torch

from vitattn.attention.common.probe import relative_error
from vitattn.bench import packages as packages_module
from vitattn.bench.approx import approximation_errors, random_qkv
from vitattn.bench.kernels import build_kernel
from vitattn.bench.packages import PACKAGES, Package
from vitattn.errors import ConfigError


def float64_qkv(tokens: int, scale: float = 1.0) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    return tuple(
        scale * torch.randn(2, 2, tokens, 16, generator=generator, dtype=torch.float64)
        for _ in range(3)
    )


@pytest.mark.parametrize("impl", ["chunked", "autograd"])
def test_authors_stabilizer_computes_performer_pytorchs_favor(impl: str) -> None:
    """With the package's projection in every head, ``stabilizer=authors`` is its FAVOR+ to
    rounding, and the default ``unbiased`` is not (on logits large enough for eps to matter)."""
    pytest.importorskip("performer_pytorch")
    q, k, v = float64_qkv(64, scale=2.0)
    knobs = {"num_features": 32, "impl": impl}
    kernels = {
        stabilizer: build_kernel(
            "performer", seq_len=64, heads=2, head_dim=16, knobs={**knobs, "stabilizer": stabilizer}
        ).eval()
        for stabilizer in ("authors", "unbiased")
    }
    package = PACKAGES["performer"].build(kernels["authors"]).double().eval()
    shared = package.attention.projection_matrix.float().expand(2, -1, -1).clone()
    with torch.no_grad():
        expected = package(q, k, v)
        for kernel in kernels.values():
            kernel.projection = shared
        authors, unbiased = (kernels[s](q, k, v) for s in ("authors", "unbiased"))
    assert relative_error(authors, expected) < 1e-5
    assert relative_error(unbiased, expected) > 1e-3


def test_nystrom_is_nystrom_attentions_with_the_same_landmarks() -> None:
    """Segment-mean landmarks and the converged iterative pseudoinverse: ours and the package's
    agree with each other far more closely than with softmax (m < n, so not exact)."""
    pytest.importorskip("nystrom_attention")
    q, k, v = float64_qkv(64)
    knobs = {"landmarks": 16, "pinv_iters": 30}
    ours = build_kernel("nystrom", seq_len=64, heads=2, head_dim=16, knobs=knobs).double().eval()
    package = PACKAGES["nystrom"].build(ours).double().eval()
    softmax = torch.softmax(q @ k.transpose(-2, -1) / 4, dim=-1) @ v
    with torch.no_grad():
        mine, theirs = ours(q, k, v), package(q, k, v)
    assert relative_error(mine, theirs) < 1e-3
    assert relative_error(mine, softmax) > 0.1


@pytest.mark.parametrize(
    ("tokens", "knobs", "message"),
    [
        (64, {"pinv": "exact"}, "attention.pinv=exact: nystrom-attention has only"),
        (64, {"conv_kernel": 3}, "attention.conv_kernel=3: nystrom-attention's"),
        (70, {}, "attention.landmarks=16: nystrom-attention pads 70 tokens"),
    ],
)
def test_nystrom_settings_without_a_counterpart_are_refused(
    tokens: int, knobs: dict, message: str
) -> None:
    pytest.importorskip("nystrom_attention")
    settings = {"landmarks": 16, **knobs}
    ours = build_kernel("nystrom", seq_len=tokens, heads=2, head_dim=16, knobs=settings)
    with pytest.raises(ConfigError, match=message):
        PACKAGES["nystrom"].build(ours)


def test_approx_rows_put_the_package_next_to_ours_or_say_it_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inputs = {"random": random_qkv(1, 2, 32, 16, seed=3)}
    budgets = {"nystrom": {"knob": "landmarks", "values": [8, 32]}}
    rows = approximation_errors(["nystrom", "linear"], budgets, inputs, packages=True)
    assert [(r.attention, r.implementation, r.budget) for r in rows] == [
        ("nystrom", "vitattn", 8),
        ("nystrom", "nystrom-attention", 8),
        ("nystrom", "vitattn", 32),
        ("nystrom", "nystrom-attention", 32),
        ("linear", "vitattn", None),
    ]
    if PACKAGES["nystrom"].installed:
        assert {r.status for r in rows} == {"ok"}
        at_8 = [r.output_rel_error for r in rows if r.budget == 8]
        assert at_8[0] == pytest.approx(at_8[1], rel=0.05)  # the same formula on the same input
    monkeypatch.setitem(
        packages_module.PACKAGES, "nystrom", Package("nystrom-attention", "no_such_module", object)
    )
    rows = approximation_errors(["nystrom"], budgets, inputs, packages=True)[:2]
    assert [r.status for r in rows] == [
        "ok",
        "missing: pip install nystrom-attention (or vitattn[bench])",
    ]
    assert len(approximation_errors(["nystrom"], budgets, inputs, packages=False)) == 2
