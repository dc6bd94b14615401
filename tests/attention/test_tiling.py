"""Tiles per device: the CPU keeps its cache-sized tiles, a GPU gets ``attention.tile_memory`` of
its free memory, and the tiling never changes what a mechanism computes."""

from __future__ import annotations

import logging

import pytest
import torch

import vitattn.attention.common.blocks as blocks
import vitattn.attention.common.tiling as tiling
from vitattn.bench.kernels import build_kernel
from vitattn.errors import ConfigError

TILED = ["performer", "random_feature", "local", "bigbird"]
GIB = 2**30


def test_a_cpu_keeps_its_cache_sized_tiles_whatever_tile_memory_says() -> None:
    cpu = torch.device("cpu")
    for share in (0.0, 0.02, 0.5):
        assert tiling.memory_budget(cpu, share, 123) == 123
    assert tiling.tile_budget(cpu, 0.5, "performer") == tiling.TILE_ELEMENTS
    assert blocks.group_budget(cpu, 0.5, "local") == blocks.GROUP_BYTES


def test_a_gpu_gets_its_share_of_the_free_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiling, "_free_bytes", lambda index: 80 * GIB)
    gpu = torch.device("cuda", 0)
    assert tiling.memory_budget(gpu, 0.02, 8 << 20) == int(0.02 * 80 * GIB)
    assert tiling.memory_budget(gpu, 0.0, 8 << 20) == 8 << 20  # 0: the CPU's tiles
    assert tiling.memory_budget(gpu, 1e-9, 8 << 20) == 8 << 20  # never smaller than those
    # A report-scale performer layer (256 x 8 heads, n 1024, 256 features) in a few tiles:
    layout = tiling.tiles(256 * 8, 1024, 256, tiling.memory_budget(gpu, 0.02, 0) // 4)
    assert len(layout) <= 2
    cpu_layout = tiling.tiles(256 * 8, 1024, 256, tiling.TILE_ELEMENTS)
    assert len(cpu_layout) == 256


def test_the_choice_is_logged_once_per_mechanism_and_device(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tiling.logged_budgets.cache_clear()  # as in a fresh process
    with caplog.at_level(logging.INFO, logger="vitattn.attention"):
        for _ in range(3):
            tiling.tile_budget(torch.device("cpu"), 0.02, "performer")
        blocks.group_budget(torch.device("cpu"), 0.02, "local")
    assert [r.getMessage() for r in caplog.records] == [
        "performer on cpu: tiles of up to 8 MB (cache-sized)",
        "local on cpu: tiles of up to 8 MB (cache-sized)",
    ]


@pytest.mark.parametrize("name", TILED)
def test_one_huge_tile_computes_what_cache_sized_tiles_compute(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU's path (few large tiles) run on the CPU: same output and gradients."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, 256, 16) for _ in range(3))
    small_tiles = {"performer": 64 * 64, "random_feature": 64 * 64}

    def run(budget_bytes: int) -> list[torch.Tensor]:
        monkeypatch.setattr(blocks, "memory_budget", lambda *a: budget_bytes)
        monkeypatch.setattr(tiling, "memory_budget", lambda *a: budget_bytes)
        torch.manual_seed(1)
        kernel = build_kernel(name, seq_len=256, heads=2, head_dim=16).eval()
        inputs = [x.clone().requires_grad_() for x in (q, k, v)]
        out = kernel(*inputs)
        out.square().sum().backward()
        return [out, *(x.grad for x in inputs if x.grad is not None)]

    tiny = small_tiles.get(name, 4096) * 4  # many tiles or groups
    for a, b in zip(run(tiny), run(GIB), strict=True):
        # Only the order of fp32 sums differs: relative to the largest value (random_feature's
        # ill-conditioned estimates reach thousands, where elementwise tolerances mislead).
        assert (a - b).abs().max() <= 1e-5 * b.abs().max()


@pytest.mark.parametrize("name", TILED)
def test_tile_memory_is_a_share(name: str) -> None:
    with pytest.raises(ConfigError, match=r"attention.tile_memory=1.5 is not valid; choose 0 <="):
        build_kernel(name, seq_len=64, heads=2, head_dim=16, knobs={"tile_memory": 1.5})
