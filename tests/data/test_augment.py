"""MixUp, CutMix and RandAugment as the data module applies them (:mod:`vitattn.data.augment`)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from vitattn.data.augment import mix_transform, process_seed
from vitattn.data.cifar10 import CIFAR10DataModule


def batch(size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(size, 3, 32, 32, generator=generator)
    return images, torch.arange(size) % 10


def test_mixup_is_one_convex_combination_of_images_and_of_labels() -> None:
    """MixUp (Zhang et al. 2018): every image is lam * x_i + (1 - lam) * x_j with its partner j
    of the shifted batch, and its soft label the same combination of one-hot labels."""
    images, labels = batch()
    torch.manual_seed(1)
    mixed, soft = mix_transform(1.0, 0.0, 10)(images, labels)  # type: ignore[misc]
    partner = images.roll(1, dims=0)
    lam = float(soft[0, labels[0]])
    assert 0.0 < lam < 1.0
    torch.testing.assert_close(mixed, lam * images + (1 - lam) * partner)
    one_hot = F.one_hot(labels, 10).float()
    torch.testing.assert_close(soft, lam * one_hot + (1 - lam) * one_hot.roll(1, dims=0))


def test_cutmix_pastes_one_box_and_weighs_labels_by_its_area() -> None:
    """CutMix (Yun et al. 2019): pixels inside one box come from the partner image, the rest are
    the image's own, and the partner's label weight is the box's share of the image."""
    images, labels = batch()
    torch.manual_seed(3)
    mixed, soft = mix_transform(0.0, 1.0, 10)(images, labels)  # type: ignore[misc]
    partner = images.roll(1, dims=0)
    from_partner = (mixed == partner) & (mixed != images)
    box = from_partner[0, 0]
    assert box.any() and (from_partner == box).all()  # the same box in every image and channel
    rows, cols = box.any(dim=1).nonzero(), box.any(dim=0).nonzero()
    height, width = int(rows.max() - rows.min() + 1), int(cols.max() - cols.min() + 1)
    assert int(box.sum()) == height * width  # a rectangle
    own = mixed[:, :, ~box]
    torch.testing.assert_close(own, images[:, :, ~box])
    share = height * width / (32 * 32)
    assert float(soft[0, labels.roll(1)[0]]) == pytest.approx(share, abs=1e-6)


def random_batch(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``size`` random uint8 images, as the data module holds them, and labels cycling 0..9."""
    images = torch.randint(0, 256, (size, 3, 32, 32), dtype=torch.uint8)
    return images, torch.arange(size) % 10


def transferred(
    datamodule: CIFAR10DataModule,
    batch: tuple[torch.Tensor, torch.Tensor],
    training: bool,
    rank: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` as ``datamodule`` hands it to a training step (``training``) or an evaluation
    step, under a stand-in trainer that says which, in DDP process ``rank``."""
    stand_in = SimpleNamespace(training=training, global_rank=rank, global_step=0)
    datamodule.trainer = stand_in  # type: ignore[assignment]
    return datamodule.on_after_batch_transfer(batch, 0)


def test_training_batches_are_mixed_and_evaluation_batches_are_not(data_dir: Path) -> None:
    datamodule = CIFAR10DataModule(data_dir, batch_size=16, mixup_alpha=1.0, augment_seed=0)
    images, labels = random_batch(16)
    _, soft = transferred(datamodule, (images, labels), training=True)
    assert soft.shape == (16, 10) and torch.allclose(soft.sum(dim=1), torch.ones(16))
    assert not torch.equal(soft, F.one_hot(labels, 10).float())
    _, hard = transferred(datamodule, (images, labels), training=False)
    assert torch.equal(hard, labels)


def test_randaugment_changes_images_reproducibly(data_dir: Path) -> None:
    """RandAugment (Cubuk et al. 2020) after crop and flip changes most images; crop and flip
    draw from the data module's generator, RandAugment from torch's (which seed_everything
    seeds): the same seeds give the same images."""
    images = torch.randint(0, 256, (32, 3, 32, 32), dtype=torch.uint8)

    def augmented(ops: int) -> torch.Tensor:
        torch.manual_seed(0)
        return CIFAR10DataModule(data_dir, augment_seed=5, randaugment_ops=ops).augment(images)

    plain, first, second = augmented(0), augmented(2), augmented(2)
    assert torch.equal(first, second)
    changed = (first != plain).flatten(1).any(dim=1)
    assert changed.float().mean() > 0.5


@pytest.mark.parametrize("shift", ["rotate", "invert", "quantize"])
def test_a_shifted_training_image_is_flipped_before_it_is_shifted(
    shift: str, data_dir: Path
) -> None:
    """Every training image of a shifted variant is the variant of the image or of its mirror
    image: a flip acts on the natural image. A flip after ``rotate`` turned half the training
    images -90° where every test image is turned +90° (data audit, 2026-12-02); ``invert`` and
    ``quantize`` commute with it."""
    from vitattn.data.shifts import apply_shift

    datamodule = CIFAR10DataModule(
        data_dir, shift=shift, crop_padding=0, hflip=True, normalize=False, augment_seed=0
    )
    images, labels = random_batch(64)
    seen, _ = transferred(datamodule, (images, labels), training=True)

    def same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a == b).flatten(1).all(1)

    as_is = same(seen, apply_shift(images, shift))
    mirrored = same(seen, apply_shift(images.flip(-1), shift))
    assert bool((as_is | mirrored).all())
    assert 0 < int(mirrored.sum()) < 64  # some images were flipped


@pytest.mark.parametrize(
    "settings",
    [
        {"crop_padding": 4, "hflip": True},
        {"crop_padding": 0, "hflip": False, "randaugment_ops": 2},
        {"crop_padding": 0, "hflip": False, "mixup_alpha": 1.0},
        {"crop_padding": 0, "hflip": False, "cutmix_alpha": 1.0},
    ],
    ids=["crop-and-flip", "randaugment", "mixup", "cutmix"],
)
def test_each_ddp_process_draws_its_own_augmentation(settings: dict, data_dir: Path) -> None:
    """Every DDP process starts from the same seeds (``seed_everything`` and ``augment_seed``
    alike), yet each augments its batches with draws of its own, seeded again alike; process 0
    draws as a single process does. Until 2026-12-02 every process cropped, flipped,
    RandAugmented and mixed its images alike (data audit F7)."""
    images, labels = random_batch(32)

    def seen(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(0)  # seed_everything: alike in every process
        datamodule = CIFAR10DataModule(data_dir, augment_seed=7, **settings)
        return transferred(datamodule, (images, labels), training=True, rank=rank)

    first, second, second_again, third = seen(0), seen(1), seen(1), seen(2)
    assert all(torch.equal(a, b) for a, b in zip(second, second_again, strict=True))
    assert not torch.equal(first[0], second[0])
    assert not torch.equal(second[0], third[0])


def test_process_zero_draws_with_the_seed_itself() -> None:
    """A single process, and DDP's process 0, seed the augmentation with the seed as they did
    before the ranks were folded in; other processes and resumed ones get 64-bit seeds of their
    own."""
    assert process_seed(7, 0) == 7 and process_seed(-(2**63), 0) == -(2**63)
    drawn = {process_seed(7, 1), process_seed(7, 2), process_seed(8, 1), process_seed(7, 1, 10)}
    assert len(drawn) == 4 and all(0 <= seed < 2**64 for seed in drawn)
    assert process_seed(7, 1) == process_seed(7, 1)


def test_a_resumed_process_goes_on_from_the_checkpoint_or_from_its_rank_and_step(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint holds process 0's generator alone (Lightning writes rank 0's state): a
    resumed process 0 goes on with it exactly, any other starts one from the seed, its rank and
    the step, and says so, rather than drawing as process 0 does."""
    saved = CIFAR10DataModule(data_dir, augment_seed=7)
    stand_in = SimpleNamespace(global_rank=0, state=SimpleNamespace(fn="validate"))
    saved.trainer = stand_in  # type: ignore[assignment]
    torch.rand(5, generator=saved.generator(torch.device("cpu")))  # draws before the checkpoint
    state = saved.state_dict()
    expected = saved.generator(torch.device("cpu")).get_state()

    def resumed(rank: int) -> torch.Generator:
        datamodule = CIFAR10DataModule(data_dir, augment_seed=7)
        stand_in = SimpleNamespace(training=True, global_rank=rank, global_step=12)
        datamodule.trainer = stand_in  # type: ignore[assignment]
        datamodule.load_state_dict(state)
        return datamodule.generator(torch.device("cpu"))

    assert torch.equal(resumed(0).get_state(), expected)
    with caplog.at_level(logging.INFO, logger="vitattn.data.cifar10"):
        other = resumed(1)
    assert other.initial_seed() == process_seed(7, 1, 12)
    said = "process 1 draws its augmentation anew from the seed, its rank and step 12"
    assert said in caplog.text
