"""The data module's settings (``configs/data/cifar10.yaml``), typed and checked in one place.

Hydra builds :class:`~vitattn.data.cifar10.CIFAR10DataModule` with the ``data`` node's keys as
keyword arguments; the module turns them into a frozen :class:`DataSettings`, whose
``__post_init__`` refuses a wrong type or a value out of range, each in one :class:`ConfigError`
line worded by :mod:`vitattn.utils.checks`, as every other setting's. The module saves the same
flat keys as its hyperparameters, so the data settings stored in any checkpoint, earlier ones
included, build a module again (:mod:`vitattn.data.as_trained` reads them).
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from vitattn.data.shifts import SHIFTS
from vitattn.errors import ConfigError
from vitattn.utils import checks
from vitattn.utils.machine import usable_cpus

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
"""The official archive of CIFAR-10's python version."""

OFF = ">= 0 (0 = off)"
FINITE_OFF = "a finite number >= 0 (0 = off)"

MAX_RANDAUGMENT_OPS = 16
"""The most RandAugment operations per image: torchvision has 14 to draw from, and Cubuk et al.
use 1 to 3. Each costs a pass over every image, and a step of 10^9 never ends (a resume replays
a run's recorded overrides: a count from a file)."""
MAX_CROP_PADDING = 32
"""The widest padding of the random crop: an image's side (a padding of 10^9 asks for a tensor
of 10^18 pixels)."""
MAX_DOWNLOAD_TIMEOUT = 3600.0
"""The longest the download waits for the server (to connect, or for the next data)."""


@dataclass(frozen=True, kw_only=True)
class DataSettings:
    """What the CIFAR-10 data module reads, how it splits and augments it, and where from.

    Attributes:
        data_dir: directory that holds (or will receive) ``cifar-10-batches-py/``.
        batch_size: training batch size.
        eval_batch_size: batch size of validation and test.
        val_fraction: share of the training images held out for validation.
        split_seed: seed of the train/validation split (fixed, so runs compare on equal data).
        crop_padding: padding of the random crop (0 turns it off).
        hflip: random horizontal flips.
        randaugment_ops: RandAugment (Cubuk et al. 2020, torchvision.transforms.v2) with this many
            operations per image; 0 turns it off.
        randaugment_magnitude: RandAugment's magnitude (0..30).
        randaugment_group: images that share one draw of RandAugment's operations. torchvision
            applies one draw to a whole batch tensor; drawing per group of this many images keeps
            the augmentation varied without a Python loop over single images.
        mixup_alpha: MixUp (Zhang et al. 2018) Beta parameter; 0 turns it off.
        cutmix_alpha: CutMix (Yun et al. 2019) Beta parameter; 0 turns it off. With both on, each
            batch gets one of the two at random. Either makes the training labels soft,
            ``(batch, classes)`` probabilities.
        grayscale: convert the images to one luma channel (ITU-R 601), as Long Range Arena's
            Image task does (TensorFlow's conversion: ``vitattn.data.cifar10.lra_grayscale``);
            normalised by the mean and std of the training split's luma.
        normalize: scale to zero mean and unit variance per channel; ``False`` passes the raw
            uint8 pixels on (for ``model.embedding=intensity``).
        luma_mean, luma_std: the mean and standard deviation that normalise grayscale images;
            ``None`` fits them on the training split as the data is set up, and the data
            module's hyperparameters, which a checkpoint stores, then hold them: a command
            that reuses the checkpoint normalises its images as the network was trained, on
            any data folder (until 2026-12-02 each command fitted them again on the folder at
            hand, and the same test images scored otherwise beside other training files; data
            audit).
        shift: a shifted variant of the data set (:mod:`vitattn.data.shifts`): ``quantize``,
            ``rotate``, ``invert`` or ``none``; applied to training, validation and test batches
            alike, on the device, after augmentation (crops and flips act on the natural image:
            a flip of a rotated image turns it the other way) and before normalisation.
        augment_seed: seed of the augmentation generator; ``None`` draws it from torch's global
            RNG, which ``seed_everything`` has seeded.
        download: download the archive if ``cifar-10-batches-py/`` is missing.
        url: where to download from (a mirror may be given).
        download_timeout: seconds the download may wait for the server (to connect, or for the
            next data) before it fails.
        num_workers: DataLoader workers; 0 is right here, batches are slices of a tensor.
        pin_memory: pin host memory for faster copies to a GPU.
    """

    data_dir: str | Path
    batch_size: int = 128
    eval_batch_size: int = 500
    val_fraction: float = 0.1
    split_seed: int = 0
    crop_padding: int = 0
    hflip: bool = True
    randaugment_ops: int = 0
    randaugment_magnitude: int = 9
    randaugment_group: int = 16
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0
    grayscale: bool = False
    normalize: bool = True
    shift: str = "none"
    augment_seed: int | None = None
    download: bool = True
    url: str = URL
    download_timeout: float = 60.0
    num_workers: int = 0
    pin_memory: bool = False
    # Last: a checkpoint of before 2026-12-02 stores the settings above, in their order.
    luma_mean: float | None = None
    luma_std: float | None = None

    @classmethod
    def of(cls, **settings: Any) -> DataSettings:
        """The settings from the ``data`` node's keys; one line for a key that is not one, or
        one that must be given and is not (a command line's ``~data.data_dir``)."""
        names = sorted(spec.name for spec in fields(cls))
        unknown = sorted(set(settings) - set(names))
        if unknown:
            raise ConfigError(
                f"data.{unknown[0]} is not a data setting; choose among: {', '.join(names)}"
            )
        if "data_dir" not in settings:
            raise ConfigError(
                "data.data_dir is not set; give the directory that holds (or will receive) "
                "cifar-10-batches-py/: data.data_dir=<directory>"
            )
        return cls(**settings)

    @classmethod
    def default(cls, name: str) -> Any:
        """The value of setting ``name`` when the config does not give one."""
        return cls.__dataclass_fields__[name].default

    def __post_init__(self) -> None:
        for name, hint in HINTS.items():
            value = getattr(self, name)
            if name != "data_dir":
                checks.of_type(f"data.{name}", value, hint)
            elif not isinstance(value, str | Path):  # a config gives text, Python callers a Path
                raise checks.invalid("data.data_dir", value, "a directory")
        for name, refused, valid in self.ranges():
            if refused:
                raise checks.invalid(f"data.{name}", getattr(self, name), valid)
        if (self.mixup_alpha or self.cutmix_alpha) and not self.normalize:
            raise ConfigError(
                "data.mixup_alpha/data.cutmix_alpha mix float images; they need data.normalize=true"
            )

    def ranges(self) -> list[tuple[str, bool, str]]:
        """``(setting, refused, what is valid)`` for each setting with a range, in the order they
        are checked (a NaN fails every comparison: ``not 0 < x`` refuses it, ``x < 0`` does not)."""
        cpus = usable_cpus()  # each worker is a copy of this process, kept alive
        return [
            ("batch_size", self.batch_size < 1, "an integer >= 1"),
            ("eval_batch_size", self.eval_batch_size < 1, "an integer >= 1"),
            ("val_fraction", not 0.0 < self.val_fraction < 1.0, "0 < value < 1"),
            (
                "crop_padding",
                not 0 <= self.crop_padding <= MAX_CROP_PADDING,
                f"0..{MAX_CROP_PADDING} (0 = off)",
            ),
            (
                "randaugment_ops",
                not 0 <= self.randaugment_ops <= MAX_RANDAUGMENT_OPS,
                f"0..{MAX_RANDAUGMENT_OPS} (0 = off)",
            ),
            # NaN turned mixing off without a word, and inf drew Beta(inf, inf) ~ 1e-38
            ("mixup_alpha", not 0 <= self.mixup_alpha < math.inf, FINITE_OFF),
            ("cutmix_alpha", not 0 <= self.cutmix_alpha < math.inf, FINITE_OFF),
            ("randaugment_magnitude", not 0 <= self.randaugment_magnitude <= 30, "0..30"),
            ("randaugment_group", self.randaugment_group < 1, ">= 1"),
            (
                "download_timeout",
                not 0 < self.download_timeout <= MAX_DOWNLOAD_TIMEOUT,
                f"a positive number of seconds, at most {MAX_DOWNLOAD_TIMEOUT:g}",
            ),
            ("shift", self.shift not in SHIFTS, f"one of {' | '.join(SHIFTS)}"),
            (
                "luma_mean",
                self.luma_mean is not None and not 0 <= self.luma_mean <= 1,
                "a number 0..1, or null (fitted on the training split)",
            ),
            (
                "luma_std",
                self.luma_std is not None and not 0 < self.luma_std <= 1,
                "a number 0 < std <= 1, or null (fitted on the training split)",
            ),
            # past them torch's generator raised "Overflow when unpacking long long" once the
            # run was made, until 2026-12-02 (data audit)
            ("split_seed", not MIN_SEED <= self.split_seed <= MAX_SEED, SEEDS),
            (
                "augment_seed",
                self.augment_seed is not None and not MIN_SEED <= self.augment_seed <= MAX_SEED,
                f"{SEEDS}, or null (drawn from the run's seed)",
            ),
            (
                "num_workers",
                not 0 <= self.num_workers <= cpus,
                f"0..{cpus} (the CPUs this process may use; 0 is fastest here: batches are "
                "slices of a tensor)",
            ),
        ]

    def as_hparams(self) -> dict[str, Any]:
        """The settings as the flat keyword arguments a checkpoint stores (the data module's
        hyperparameters), from which a module is built again."""
        return {spec.name: getattr(self, spec.name) for spec in fields(self)}


MIN_SEED, MAX_SEED = -(2**63), 2**64 - 1
"""The seeds a torch generator takes (``torch.Generator.manual_seed``)."""
SEEDS = "an integer -2**63..2**64-1 (what a torch generator takes)"

HINTS: dict[str, Any] = typing.get_type_hints(DataSettings)
"""Each setting's type, from its annotation."""
