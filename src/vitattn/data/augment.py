"""Batched image augmentation on whatever device the batch lives on (no per-image PIL work)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torchvision.transforms import v2


def process_seed(seed: int, rank: int, step: int | None = None) -> int:
    """The augmentation seed of DDP process ``rank``: ``seed`` itself for process 0 (what a
    single-process run draws with), and for each other process a 64-bit seed that NumPy's
    ``SeedSequence`` spreads from ``seed``, the rank and, for a resumed run, the ``step`` it
    resumes at (only process 0's generator is in a checkpoint: Lightning writes rank 0's).

    Until 2026-12-02 every process drew with ``seed``: each cropped and flipped its own images
    at the same offsets and in the same places of its batch (data audit F7)."""
    if rank == 0 and step is None:
        return seed
    words = [seed % 2**64, rank, *([] if step is None else [step])]
    return int(np.random.SeedSequence(words).generate_state(1, dtype=np.uint64)[0])


def random_crop(images: torch.Tensor, padding: int, generator: torch.Generator) -> torch.Tensor:
    """Zero-pad by ``padding`` pixels, then crop each image back at its own random offset.

    The batched equivalent of ``torchvision.transforms.RandomCrop(size, padding)``.
    """
    if padding <= 0:
        return images
    batch, channels, height, width = images.shape
    padded = F.pad(images, (padding, padding, padding, padding))
    offsets = torch.randint(
        0, 2 * padding + 1, (2, batch), device=images.device, generator=generator
    )
    rows = offsets[0, :, None] + torch.arange(height, device=images.device)  # (batch, height)
    cols = offsets[1, :, None] + torch.arange(width, device=images.device)  # (batch, width)
    batch_index = torch.arange(batch, device=images.device)[:, None, None, None]
    channel_index = torch.arange(channels, device=images.device)[None, :, None, None]
    return padded[batch_index, channel_index, rows[:, None, :, None], cols[:, None, None, :]]


def random_horizontal_flip(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Mirror each image left-right with probability 1/2."""
    flip = torch.rand(images.shape[0], device=images.device, generator=generator) < 0.5
    return torch.where(flip[:, None, None, None], images.flip(-1), images)


def normalize(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 images in [0, 255] to float32, standardised per channel."""
    return (images.float() / 255.0 - mean[:, None, None]) / std[:, None, None]


def mix_transform(
    mixup_alpha: float, cutmix_alpha: float, num_classes: int
) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None:
    """Batch-level MixUp and/or CutMix from torchvision.transforms.v2 (one of the two at random
    per batch when both are on), or ``None`` when both alphas are 0. Labels come out soft."""
    choices = []
    if mixup_alpha > 0:
        # float(): an integer alpha (data.mixup_alpha=1) makes torchvision draw from an int tensor
        choices.append(v2.MixUp(alpha=float(mixup_alpha), num_classes=num_classes))
    if cutmix_alpha > 0:
        choices.append(v2.CutMix(alpha=float(cutmix_alpha), num_classes=num_classes))
    if not choices:
        return None
    return choices[0] if len(choices) == 1 else v2.RandomChoice(choices)
