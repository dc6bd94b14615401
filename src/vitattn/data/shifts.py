"""Shifted variants of CIFAR-10 for fine-tuning experiments (``data.shift``).

The LoRA paper's authors (Hu et al., ICLR 2022) adapted a classifier to quantized, rotated and
inverted versions of its data set; these are the same three shifts, applied to whole batches on
whatever device they live on, after augmentation (the crop and flip act on the natural image)
and before normalisation:

- ``quantize``: each channel keeps :data:`QUANTIZE_LEVELS` evenly spaced intensity levels.
- ``rotate``: every image turned by :data:`ROTATE_DEGREES` (counter-clockwise, ``torch.rot90``).
- ``invert``: the photographic negative, ``255 - x``.
- ``none``: the images as they are.

Batches are uint8 in ``[0, 255]`` (what the data module holds) or floating point in ``[0, 1]``
(torchvision's convention); the output has the input's dtype, shape and device.
"""

from __future__ import annotations

import torch

SHIFTS = ("none", "quantize", "rotate", "invert")
QUANTIZE_LEVELS = 4
"""Intensity levels per channel kept by ``quantize`` (2 bits: 0, 85, 170, 255)."""
ROTATE_DEGREES = 90
"""Angle of ``rotate``; a multiple of 90 keeps every pixel (no interpolation, no corners)."""


def _full_scale(images: torch.Tensor) -> float:
    return 1.0 if images.is_floating_point() else 255.0


def quantize(images: torch.Tensor, levels: int = QUANTIZE_LEVELS) -> torch.Tensor:
    """Round every value to the nearest of ``levels`` evenly spaced levels from 0 to full scale."""
    if levels < 2:
        raise ValueError(f"quantize needs at least 2 levels, got {levels}")
    scale = _full_scale(images)
    steps = levels - 1
    # Values are in [0, scale], so rounding lands on 0..steps; the result is exact for uint8.
    quantized = torch.round(images.float() * (steps / scale)) * (scale / steps)
    if images.is_floating_point():
        return quantized.to(images.dtype)
    return quantized.round().to(images.dtype)


def rotate(images: torch.Tensor, degrees: int = ROTATE_DEGREES) -> torch.Tensor:
    """Turn ``(..., height, width)`` images counter-clockwise by a multiple of 90 degrees."""
    if degrees % 90:
        raise ValueError(f"rotate takes multiples of 90 degrees, got {degrees}")
    return torch.rot90(images, k=(degrees // 90) % 4, dims=(-2, -1)).contiguous()


def invert(images: torch.Tensor) -> torch.Tensor:
    """The negative: ``255 - x`` for uint8, ``1 - x`` for floats in ``[0, 1]``."""
    if images.is_floating_point():
        return 1.0 - images
    return 255 - images


def apply_shift(images: torch.Tensor, shift: str) -> torch.Tensor:
    """Apply the shift named ``shift`` (one of :data:`SHIFTS`) to a batch of images."""
    if shift == "none":
        return images
    if shift == "quantize":
        return quantize(images)
    if shift == "rotate":
        return rotate(images)
    if shift == "invert":
        return invert(images)
    raise ValueError(f"unknown shift {shift!r}; choose one of {SHIFTS}")
