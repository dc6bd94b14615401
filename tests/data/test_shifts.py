"""The shifted CIFAR-10 variants and ``data.shift`` of the data module."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vitattn.data.cifar10 import CIFAR10DataModule
from vitattn.data.shifts import (
    QUANTIZE_LEVELS,
    SHIFTS,
    apply_shift,
    invert,
    quantize,
    rotate,
)
from vitattn.errors import ConfigError


@pytest.fixture
def images() -> torch.Tensor:
    return torch.randint(
        0, 256, (4, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )


def test_quantize_keeps_few_levels(images: torch.Tensor) -> None:
    out = quantize(images)
    assert out.dtype == torch.uint8 and out.shape == images.shape
    assert sorted(out.unique().tolist()) == [0, 85, 170, 255]
    assert len(out.unique()) == QUANTIZE_LEVELS
    # each value goes to the nearest level
    assert (out.int() - images.int()).abs().max() <= 255 / (QUANTIZE_LEVELS - 1) / 2 + 0.5
    values = torch.tensor([0, 42, 43, 127, 128, 255], dtype=torch.uint8)
    assert quantize(values).tolist() == [0, 0, 85, 85, 170, 255]
    assert torch.equal(quantize(out), out)  # idempotent
    two = quantize(images, levels=2)
    assert set(two.unique().tolist()) == {0, 255}


def test_quantize_floats_in_unit_range(images: torch.Tensor) -> None:
    floats = images.float() / 255
    out = quantize(floats)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, quantize(images).float() / 255)


def test_rotate_is_rot90(images: torch.Tensor) -> None:
    out = rotate(images)
    assert torch.equal(out, torch.rot90(images, 1, dims=(-2, -1)))
    assert out.is_contiguous()
    # counter-clockwise: the top-right corner goes to the top-left
    assert torch.equal(out[..., 0, 0], images[..., 0, -1])
    assert torch.equal(rotate(rotate(rotate(rotate(images)))), images)
    assert torch.equal(rotate(images, 180), images.flip(-1).flip(-2))


def test_invert_is_255_minus_x(images: torch.Tensor) -> None:
    out = invert(images)
    assert out.dtype == torch.uint8
    assert torch.equal(out.int(), 255 - images.int())
    torch.testing.assert_close(invert(images.float() / 255), 1 - images.float() / 255)


def test_apply_shift_by_name(images: torch.Tensor) -> None:
    assert set(SHIFTS) == {"none", "quantize", "rotate", "invert"}
    assert apply_shift(images, "none") is images
    assert torch.equal(apply_shift(images, "invert"), invert(images))
    assert torch.equal(apply_shift(images, "rotate"), rotate(images))
    assert torch.equal(apply_shift(images, "quantize"), quantize(images))
    with pytest.raises(ValueError, match="unknown shift"):
        apply_shift(images, "blur")


def test_datamodule_shifts_every_stage(data_dir: Path) -> None:
    dm = CIFAR10DataModule(data_dir, shift="invert", normalize=False, hflip=False, crop_padding=0)
    dm.setup("fit")
    raw = dm.test_set.tensors[0][:8]
    shifted, _ = dm.on_after_batch_transfer((raw, torch.zeros(8, dtype=torch.long)), 0)
    assert torch.equal(shifted, invert(raw))
    plain = CIFAR10DataModule(data_dir, normalize=False)
    plain.setup("fit")
    same, _ = plain.on_after_batch_transfer((raw, torch.zeros(8, dtype=torch.long)), 0)
    assert torch.equal(same, raw)


def test_unknown_shift_is_one_line_error(data_dir: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"data\.shift='blur' is not valid; choose one of .*rotate"
    ):
        CIFAR10DataModule(data_dir, shift="blur")
