"""The pieces of :mod:`vitattn.training.callbacks.insight` against their definitions; the callback
itself runs in every training test and is read back in ``tests/test_tensorboard.py``."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import torch

from vitattn.training.callbacks.insight import (
    colour_map,
    entropy_gap,
    layer_scalars,
    overlay,
    query_rows,
    rollout,
    row_entropy,
    to_grid,
)


def test_rollout_is_the_product_of_the_residual_mixed_layers() -> None:
    torch.manual_seed(0)
    first, second = (torch.rand(5, 5).softmax(dim=-1) for _ in range(2))
    eye = torch.eye(5)
    expected = (0.5 * second + 0.5 * eye) @ (0.5 * first + 0.5 * eye)  # rows already sum to 1
    assert torch.allclose(rollout([first, second]), expected, atol=1e-6)
    assert torch.allclose(rollout([eye, eye]), eye)  # attending to oneself flows nowhere


def test_row_entropy_is_log_n_for_uniform_rows_and_zero_for_one_hot_rows() -> None:
    assert math.isclose(row_entropy(torch.full((2, 3, 8, 8), 1 / 8)), math.log(8), rel_tol=1e-9)
    assert row_entropy(torch.eye(8)) == 0.0


def test_query_rows_pick_the_centre_the_corner_and_the_pooled_token() -> None:
    matrix = torch.arange(17 * 17, dtype=torch.float).reshape(17, 17)  # class token + 4 x 4
    centre, corner, pooled = query_rows(matrix, offset=1, pool="cls")
    assert torch.equal(centre, matrix[1 + 2 * 4 + 2]) and torch.equal(corner, matrix[1])
    assert torch.equal(pooled, matrix[0])
    mean_pooled = query_rows(matrix[1:, 1:], offset=0, pool="mean")[2]
    assert torch.equal(mean_pooled, matrix[1:, 1:].mean(dim=0))


def test_maps_are_scaled_to_their_peak_and_nan_draws_as_no_attention() -> None:
    rows = torch.tensor([[0.0, 1.0, 2.0, 4.0]])  # a 2 x 2 grid of tokens
    grid = to_grid(rows, offset=0, size=4)
    assert grid.shape == (1, 4, 4) and grid.max() == 1.0 and grid[0, 0, 0] == 0.0
    images = torch.zeros(1, 3, 4, 4, dtype=torch.uint8)
    lut = colour_map()
    blank = overlay(images, torch.zeros(1, 4, 4), lut)
    assert torch.equal(overlay(images, torch.full((1, 4, 4), float("nan")), lut), blank)


def test_entropy_gap_is_zero_for_uniform_rows_and_one_for_one_hot_rows() -> None:
    assert abs(entropy_gap(torch.full((2, 8, 8), 1 / 8))) < 1e-12
    assert entropy_gap(torch.eye(8)) == 1.0
    # Near-uniform rows: an entropy a hair below log(64), a gap well above zero.
    rows = torch.full((64, 64), 1.0) + 0.05 * torch.eye(64)
    assert 1e-6 < entropy_gap(rows) < 1e-3


def test_per_layer_curves_only_with_more_than_one_layer() -> None:
    assert layer_scalars("fidelity", [0.25]) == {"val/fidelity": 0.25}
    assert layer_scalars("fidelity", [0.25, 0.75]) == {
        "val/fidelity": 0.5,
        "val/fidelity/layer_0": 0.25,
        "val/fidelity/layer_1": 0.75,
    }
    assert layer_scalars("entropy_gap", []) == {}


def test_the_maps_are_drawn_over_the_images_the_network_saw(data_dir: Path) -> None:
    """A run of ``data.shift=rotate`` attended to rotated images, and its maps were drawn over
    the upright ones (audit): the corner query's map sat in the wrong corner. The images the
    callback draws under its maps are the shifted ones."""
    from vitattn.bench.kernels import attention_factory
    from vitattn.data.cifar10 import CIFAR10DataModule
    from vitattn.data.shifts import rotate
    from vitattn.models.vit import VisionTransformer
    from vitattn.training.callbacks.insight import AttentionInsight

    torch.manual_seed(0)
    softmax = attention_factory("softmax", None)
    net = VisionTransformer(
        image_size=32, patch_size=8, embed_dim=32, depth=1, heads=2, attention=softmax
    )
    for shift, drawn in (("rotate", rotate), ("none", lambda images: images)):
        datamodule = CIFAR10DataModule(data_dir, shift=shift, download=False)
        datamodule.setup("fit")
        trainer = SimpleNamespace(datamodule=datamodule)
        module = SimpleNamespace(net=net, device=torch.device("cpu"))
        callback = AttentionInsight(images=3)
        figures = callback.inspect(trainer, module)  # type: ignore[arg-type]
        fixed = callback.fixed_images(trainer)  # type: ignore[arg-type]
        assert torch.equal(figures["raw"], drawn(fixed)), shift
        assert len(figures["matrices"]) == 1
