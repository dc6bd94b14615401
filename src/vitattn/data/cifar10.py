"""CIFAR-10 (Krizhevsky 2009) as a LightningDataModule.

The official "python version" batch files are read once into uint8 tensors. Batches are cut by
indexing those tensors (no per-image work, no worker processes needed); augmentation and
normalisation run on whole batches on the training device in ``on_after_batch_transfer``.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
)

from vitattn.data.augment import normalize, random_crop, random_horizontal_flip
from vitattn.utils.errors import ConfigError, DataError

FOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILES = ("test_batch",)
URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
ARCHIVE_MD5 = "c58f30108f718f92721af3b95e74349a"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def read_batch_file(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Read one official batch file into ``(images uint8 (n, 3, 32, 32), labels int64 (n,))``."""
    if not path.is_file():
        raise DataError(f"{path} is missing; the {FOLDER} folder needs {TRAIN_FILES + TEST_FILES}")
    try:
        with path.open("rb") as handle:
            entry = pickle.load(handle, encoding="latin1")
        data = np.asarray(entry["data"], dtype=np.uint8)
        labels = np.asarray(entry.get("labels", entry.get("fine_labels")), dtype=np.int64)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or labels.shape != (data.shape[0],):
            raise ValueError(f"data of shape {data.shape} with {labels.size} labels")
        if labels.size and (labels.min() < 0 or labels.max() >= len(CLASSES)):
            raise ValueError("labels outside 0..9")
    except Exception as error:  # unpickling garbage can raise almost anything
        raise DataError(
            f"{path} is truncated or not a CIFAR-10 batch file ({type(error).__name__}: {error}); "
            f"replace {path.parent} with the official 'CIFAR-10 python version' folder"
        ) from error
    images = torch.from_numpy(data.reshape(-1, 3, 32, 32).copy())
    return images, torch.from_numpy(labels)


def read_split(folder: Path, files: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate several batch files."""
    parts = [read_batch_file(folder / name) for name in files]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def download_cifar10(data_dir: Path, url: str = URL) -> None:
    """Download and unpack the official archive into ``data_dir`` (torchvision's utility)."""
    from torchvision.datasets.utils import download_and_extract_archive

    try:
        download_and_extract_archive(url, str(data_dir), md5=ARCHIVE_MD5 if url == URL else None)
    except Exception as error:
        raise DataError(
            f"data.data_dir={data_dir} holds no {FOLDER}/ and downloading {url} failed "
            f"({type(error).__name__}: {error}); put the official 'CIFAR-10 python version' "
            f"folder {FOLDER}/ in {data_dir}, or set VITATTN_DATA_DIR to a directory that has it"
        ) from error
    if not (data_dir / FOLDER).is_dir():
        raise DataError(f"the archive from {url} did not contain {FOLDER}/; check data.url")


class CIFAR10DataModule(L.LightningDataModule):
    """CIFAR-10 with a seeded validation split carved from the training set.

    Args:
        data_dir: directory that holds (or will receive) ``cifar-10-batches-py/``.
        batch_size: training batch size.
        eval_batch_size: batch size of validation and test.
        val_fraction: share of the training images held out for validation.
        split_seed: seed of the train/validation split (fixed, so runs compare on equal data).
        crop_padding: padding of the random crop (0 turns it off).
        hflip: random horizontal flips.
        augment_seed: seed of the augmentation generator; ``None`` draws it from torch's global
            RNG, which ``seed_everything`` has seeded.
        download: download the archive if ``cifar-10-batches-py/`` is missing.
        url: where to download from (a mirror may be given).
        num_workers: DataLoader workers; 0 is right here, batches are slices of a tensor.
        pin_memory: pin host memory for faster copies to a GPU.
    """

    def __init__(
        self,
        data_dir: str | Path,
        batch_size: int = 128,
        eval_batch_size: int = 500,
        val_fraction: float = 0.1,
        split_seed: int = 0,
        crop_padding: int = 4,
        hflip: bool = True,
        augment_seed: int | None = None,
        download: bool = True,
        url: str = URL,
        num_workers: int = 0,
        pin_memory: bool = False,
    ) -> None:
        super().__init__()
        if batch_size < 1 or eval_batch_size < 1:
            raise ConfigError(
                f"data.batch_size={batch_size} and data.eval_batch_size={eval_batch_size} "
                "must be positive integers"
            )
        if not 0.0 < val_fraction < 1.0:
            raise ConfigError(
                f"data.val_fraction={val_fraction} is not valid; choose 0 < value < 1"
            )
        if crop_padding < 0:
            raise ConfigError(f"data.crop_padding={crop_padding} is not valid; choose >= 0")
        self.save_hyperparameters(logger=False)
        self.data_dir = Path(data_dir).expanduser()
        self.mean = torch.tensor(MEAN)
        self.std = torch.tensor(STD)
        self.train_set: TensorDataset | None = None
        self.val_set: TensorDataset | None = None
        self.test_set: TensorDataset | None = None
        self._generator: torch.Generator | None = None
        self._generator_state: torch.Tensor | None = None

    @property
    def folder(self) -> Path:
        return self.data_dir / FOLDER

    @property
    def num_classes(self) -> int:
        return len(CLASSES)

    def prepare_data(self) -> None:
        if self.folder.is_dir():
            return
        if not self.hparams.download:
            raise DataError(
                f"data.data_dir={self.data_dir} holds no {FOLDER}/ and data.download=false; "
                f"put the official 'CIFAR-10 python version' folder {FOLDER}/ there"
            )
        download_cifar10(self.data_dir, self.hparams.url)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        if not self.folder.is_dir():
            raise DataError(f"data.data_dir={self.data_dir} holds no {FOLDER}/ (run prepare_data)")
        images, labels = read_split(self.folder, TRAIN_FILES)
        test_images, test_labels = read_split(self.folder, TEST_FILES)
        num_val = max(1, round(self.hparams.val_fraction * len(labels)))
        if num_val >= len(labels):
            raise ConfigError(
                f"data.val_fraction={self.hparams.val_fraction} leaves no training images "
                f"out of {len(labels)}"
            )
        order = torch.randperm(
            len(labels), generator=torch.Generator().manual_seed(self.hparams.split_seed)
        )
        val_idx, train_idx = order[:num_val], order[num_val:]
        self.train_set = TensorDataset(images[train_idx], labels[train_idx])
        self.val_set = TensorDataset(images[val_idx], labels[val_idx])
        self.test_set = TensorDataset(test_images, test_labels)

    def _loader(self, dataset: TensorDataset | None, batch_size: int, train: bool) -> DataLoader:
        if dataset is None:
            raise RuntimeError("call setup() before asking for a dataloader")
        sampler = RandomSampler(dataset) if train else SequentialSampler(dataset)
        # Whole batches are sampled and sliced from the tensors at once (batch_size=None turns
        # off per-sample collation).
        return DataLoader(
            dataset,
            sampler=BatchSampler(sampler, batch_size, drop_last=train),
            batch_size=None,
            num_workers=self.hparams.num_workers,
            pin_memory=self.hparams.pin_memory,
            persistent_workers=self.hparams.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        if self.train_set is not None and len(self.train_set) < self.hparams.batch_size:
            raise ConfigError(
                f"data.batch_size={self.hparams.batch_size} is larger than the "
                f"{len(self.train_set)} training images; choose a smaller batch size"
            )
        return self._loader(self.train_set, self.hparams.batch_size, train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, self.hparams.eval_batch_size, train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, self.hparams.eval_batch_size, train=False)

    def generator(self, device: torch.device) -> torch.Generator:
        """The augmentation RNG on ``device``, created on first use and checkpointed."""
        if self._generator is None or self._generator.device != device:
            seed = self.hparams.augment_seed
            if seed is None:
                seed = int(torch.randint(0, 2**62, (1,)).item())
            self._generator = torch.Generator(device=device).manual_seed(seed)
            if self._generator_state is not None:
                self._generator.set_state(self._generator_state)
                self._generator_state = None
        return self._generator

    def augment(self, images: torch.Tensor) -> torch.Tensor:
        """Random crop with padding and horizontal flip of a uint8 batch."""
        generator = self.generator(images.device)
        images = random_crop(images, self.hparams.crop_padding, generator)
        if self.hparams.hflip:
            images = random_horizontal_flip(images, generator)
        return images

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        images, labels = batch
        if self.trainer is not None and self.trainer.training:
            images = self.augment(images)
        mean, std = self.mean.to(images.device), self.std.to(images.device)
        return normalize(images, mean, std), labels

    def state_dict(self) -> dict[str, Any]:
        if self._generator is None:
            return {}
        return {"augment_generator": self._generator.get_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._generator_state = state_dict.get("augment_generator")
        self._generator = None
