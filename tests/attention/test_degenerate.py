"""Exact by construction: a mechanism says when its settings leave it nothing to approximate,
the reason is right (its output *is* the full attention there, and where it says nothing it
approximates), the defaults avoid it on the models of ``configs/model``, and a run warns once
and records the reason in ``metrics.json``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
import pytest
import torch

from tests.attention.test_sparse_family import qkv, shared_qk_softmax, softmax
from tests.support.presets import TINY, compose_config, steps
from tests.support.runners import train_with
from vitattn.attention import ATTENTIONS, AttentionKernel, exact_by_construction
from vitattn.bench.kernels import build_kernel

TOL = {"rtol": 1e-4, "atol": 1e-4}

NEVER_EXACT = {"softmax", "linear", "efficient", "taylor", "random_feature", "performer"}
"""Softmax is the reference itself; the others approximate (or replace) softmax at any setting."""


def identity_projections(kernel: AttentionKernel) -> None:
    """Linformer's E = F = I: the setting at which k = n is softmax (the rest of k = n is a
    learned mixing of the tokens, never a compression)."""
    with torch.no_grad():
        kernel.key_projection.copy_(torch.eye(kernel.seq_len))
        kernel.value_projection.copy_(torch.eye(kernel.seq_len))


def shared_qk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Reformer's full attention: keys are the normalised queries, a token skips itself."""
    return shared_qk_softmax(q, v)[0]


@dataclass
class Case:
    """A mechanism at ``knobs`` on ``tokens`` tokens (and ``heads`` heads)."""

    name: str
    tokens: int
    knobs: dict[str, Any]
    says: str = ""  # in the reason, when exact
    heads: int = 2
    reference: Callable[..., torch.Tensor] = softmax
    prepare: Callable[[AttentionKernel], None] = field(default=lambda kernel: None)

    def kernel(self) -> AttentionKernel:
        kernel = build_kernel(
            self.name, seq_len=self.tokens, heads=self.heads, head_dim=16, knobs=self.knobs
        )
        self.prepare(kernel)
        return kernel

    def __str__(self) -> str:
        return f"{self.name}-{self.tokens}-" + ",".join(f"{k}={v}" for k, v in self.knobs.items())


EXACT = [
    Case("nystrom", 32, {"landmarks": 32, "pinv": "exact"}, "landmarks 32 >= 32 tokens"),
    Case("linformer", 40, {"k": 40}, "k 40 >= 40 tokens", prepare=identity_projections),
    Case("local", 50, {"window": 50, "window_shape": "1d"}, "window 50 >= 50 tokens"),
    Case("local", 64, {"window": 8}, "window 8 >= the 8x8 grid's side"),
    Case("local", 65, {"window": 9}, "the 8x8 grid"),  # the class token is global
    Case("local", 20, {"window": 3, "window_shape": "1d", "global_tokens": 19}, "global_tokens"),
    Case("bigbird", 64, {"block": 16}, "block 16 makes 4 blocks"),  # the old default
    Case("bigbird", 50, {"block": 8, "num_random": 10}, "block 8 makes 7 blocks"),
    Case("bigbird", 50, {"block": 8, "global_blocks": 7, "num_random": 0}, "7 global"),
    Case("sparse", 50, {"pattern": "fixed", "stride": 50, "summary": 50}, "stride 50", heads=3),
    Case("sparse", 50, {"stride": 1, "combine": "merged"}, "pattern strided, stride 1"),
    Case("sparse", 50, {"stride": 50, "combine": "merged"}, "stride 50"),
    Case("reformer", 64, {"chunk": 64}, "chunk 64 >= 64 tokens", reference=shared_qk),
    Case("reformer", 50, {"chunk": 32, "buckets": 4}, "makes 2 chunks", reference=shared_qk),
]

APPROXIMATE = [
    Case("nystrom", 64, {}),  # the default: 16 landmarks
    Case("nystrom", 32, {"landmarks": 31, "pinv": "exact"}),
    Case("linformer", 40, {"k": 39}),
    Case("local", 64, {}),  # the default 7x7 window on the 8x8 grid
    Case("local", 50, {"window": 49, "window_shape": "1d"}),
    Case("bigbird", 64, {}),  # the default: blocks of 4
    Case("bigbird", 64, {"block": 8}),  # 8 blocks, a query reaches 7
    Case("sparse", 64, {}),
    Case("sparse", 50, {"pattern": "fixed", "stride": 50, "summary": 49}, heads=3),
    Case("sparse", 50, {"stride": 50}),  # row heads are softmax, column heads see themselves
    Case("reformer", 64, {}, reference=shared_qk),  # the default: 4 chunks of 16
    Case("reformer", 50, {"chunk": 16, "buckets": 1}, reference=shared_qk),
]


@pytest.mark.parametrize("case", EXACT, ids=str)
def test_an_exact_setting_says_why_and_is_the_full_attention(case: Case) -> None:
    kernel = case.kernel()
    reason = kernel.exact_because()
    assert reason is not None and case.says in reason, reason
    assert "\n" not in reason
    q, k, v = qkv(case.tokens, heads=case.heads)
    torch.testing.assert_close(kernel(q, k, v), case.reference(q, k, v), **TOL)


@pytest.mark.parametrize("case", APPROXIMATE, ids=str)
def test_a_setting_that_says_nothing_approximates(case: Case) -> None:
    kernel = case.kernel()
    assert kernel.exact_because() is None
    q, k, v = qkv(case.tokens, heads=case.heads)
    out, exact = kernel(q, k, v), case.reference(q, k, v)
    assert ((out - exact).norm() / exact.norm()).item() > 1e-3


def test_every_registered_attention_is_covered() -> None:
    limited = {case.name for case in EXACT}
    assert limited == {case.name for case in APPROXIMATE}
    assert limited | NEVER_EXACT == set(ATTENTIONS) and not limited & NEVER_EXACT


@pytest.mark.parametrize("name", sorted(NEVER_EXACT & set(ATTENTIONS)))
@pytest.mark.parametrize("tokens", [1, 16, 64])
def test_the_others_never_claim_to_be_exact(name: str, tokens: int) -> None:
    assert build_kernel(name, seq_len=tokens, heads=2, head_dim=16).exact_because() is None


MODELS = {
    "vit": [],
    "vit cls": ["model.pool=cls"],
    "vit 256 tokens": ["model.patch_size=2"],
    "vit_pixel": ["model=vit_pixel"],
}


@pytest.mark.parametrize("model", MODELS)
def test_no_default_attention_is_exact_on_the_configured_models(model: str, tmp_path: Path) -> None:
    """The decision: every mechanism's default budget approximates on every model of
    ``configs/model`` (the founding report's budgets from 256 tokens up)."""
    for name in sorted(ATTENTIONS):
        cfg = compose_config("train", [f"attention={name}", *MODELS[model]], tmp_path)
        side = cfg.model.image_size // cfg.model.patch_size
        tokens = side * side + (cfg.model.pool == "cls")
        factory = hydra.utils.instantiate(cfg.attention)
        heads = cfg.model.heads
        kernel = factory(seq_len=tokens, heads=heads, head_dim=cfg.model.embed_dim // heads)
        assert kernel.exact_because() is None, f"{name} on {model}: {kernel.exact_because()}"


def test_the_default_budgets_keep_the_founding_reports_from_256_tokens_up() -> None:
    for tokens in (256, 1024):
        assert build_kernel("nystrom", seq_len=tokens, heads=1, head_dim=8).landmarks == 64
        assert build_kernel("reformer", seq_len=tokens, heads=1, head_dim=8).chunk == 64
        assert build_kernel("bigbird", seq_len=tokens, heads=1, head_dim=8).block == 16
    assert build_kernel("nystrom", seq_len=64, heads=1, head_dim=8).landmarks == 16


def test_a_model_is_exact_only_when_every_layer_is(tmp_path: Path) -> None:
    cfg = compose_config("train", ["attention=nystrom", "attention.landmarks=64"], tmp_path)
    net = hydra.utils.instantiate(cfg.model)
    reason = exact_by_construction(net)
    assert reason is not None and reason.startswith("landmarks 64 >= 64 tokens")
    net.blocks[-1].attn.kernel.landmarks = 8  # one layer that approximates
    assert exact_by_construction(net) is None
    assert exact_by_construction(torch.nn.Linear(2, 2)) is None


def test_a_degenerate_run_warns_once_and_records_why(
    tmp_path: Path, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    overrides = [*TINY, *steps(2, 2), "attention=nystrom", "attention.landmarks=64"]
    with caplog.at_level(logging.WARNING):
        metrics = train_with(tmp_path, data_dir, *overrides)
    warnings = [r.getMessage() for r in caplog.records if "exact by construction" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("attention=nystrom is exact by construction here: landmarks 64")
    recorded = json.loads((tmp_path / "metrics.json").read_text())
    assert recorded["degenerate"] == metrics["degenerate"]
    assert recorded["degenerate"].startswith("landmarks 64 >= 64 tokens")


def test_an_approximating_run_records_no_reason(
    tmp_path: Path, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        train_with(tmp_path, data_dir, *TINY, *steps(2, 2), "attention=nystrom")
    assert not [r for r in caplog.records if "exact by construction" in r.getMessage()]
    assert json.loads((tmp_path / "metrics.json").read_text())["degenerate"] is None
