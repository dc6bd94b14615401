"""CIFAR-10 (Krizhevsky 2009) as a LightningDataModule.

The official "python version" batch files are read once into uint8 tensors. Batches are cut by
indexing those tensors (no per-image work, no worker processes needed); augmentation and
normalisation run on whole batches on the training device in ``on_after_batch_transfer``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
)
from torchvision.transforms import v2

from vitattn.data.augment import (
    mix_transform,
    normalize,
    process_seed,
    random_crop,
    random_horizontal_flip,
)
from vitattn.data.download import (
    FOLDER,
    MAX_MEMBER_BYTES,
    TEST_FILES,
    TRAIN_FILES,
    check_folder_place,
    check_lock_place,
    download_cifar10,
)
from vitattn.data.settings import DataSettings
from vitattn.data.shifts import apply_shift
from vitattn.errors import ConfigError, DataError
from vitattn.runs.files import UnreadableFileError, open_regular

log = logging.getLogger(__name__)

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
WHOLE_TRAINING_IMAGES, WHOLE_TEST_IMAGES = 50_000, 10_000
"""The images of CIFAR-10's training and test batch files (Krizhevsky 2009)."""
LUMA_WEIGHTS = (0.2989, 0.5870, 0.1140)
"""ITU-R 601's luma weights of R, G and B, as ``tf.image.rgb_to_grayscale`` has them."""


def lra_grayscale(images: torch.Tensor) -> torch.Tensor:
    """``(n, 3, h, w)`` uint8 ``images`` as ``(n, 1, h, w)`` uint8 luma, as Long Range Arena's
    Image task makes them (Tay et al. 2021; its input pipeline calls TensorFlow's
    ``rgb_to_grayscale`` on the 8-bit images): the weighted sum of ``x / 255`` in float32, back
    to 8 bits by TensorFlow's ``convert_image_dtype``, times 255.5 and truncated. Until
    2026-12-02 torchvision's conversion truncated the weighted sum of the 8-bit values: 27% of
    the pixels were one level lower and white was 254 (data audit)."""
    weights = torch.tensor(LUMA_WEIGHTS, dtype=torch.float32).reshape(1, 3, 1, 1)
    luma = (images.to(torch.float32) / 255 * weights).sum(dim=1, keepdim=True)
    return (luma * 255.5).to(torch.uint8)


MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
FEW_VALIDATION_IMAGES = 100
"""Fewer validation images than this get a warning: ``val/acc`` moves in steps of a point or
more and picks the best checkpoint (its 95% interval spans about 20 points at 100 images)."""


def check_batch_fits(
    images: int, batch_size: int, setting: str = "data.batch_size", processes: int = 1
) -> None:
    """One line naming ``setting`` where a batch of ``batch_size`` is larger than the share of
    the ``images`` of the training split each of ``processes`` takes: ``data.batch_size``, or
    the batch size of a command that sets the data module's (``train.batch_size`` of
    ``vitattn-bench mode=train``). Training batches drop the last, partial one, so a larger
    batch trains nothing: on several processes until 2026-12-02 it trained 0 steps and the
    run said it completed, with the untrained network's test/acc (data audit)."""
    share = -(-images // processes)
    if share < batch_size:
        whose = f" of each of the {processes} processes" if processes > 1 else ""
        raise ConfigError(
            f"{setting}={batch_size} is larger than the {share} training images{whose}; choose "
            "a smaller batch size"
        )


class EpochBatchSampler(BatchSampler):
    """A BatchSampler whose shuffling depends only on a seed and the epoch number.

    Lightning calls ``set_epoch`` on the DataLoader's sampler (this one) at the start of every
    epoch; it is passed on to a DistributedSampler, or re-seeds a RandomSampler's generator with
    ``seed + epoch``. So a run resumed from a checkpoint sees the same batches as one that never
    stopped, which a sampler drawing from torch's global RNG would not give.
    """

    def __init__(
        self, sampler: Any, batch_size: int, drop_last: bool, seed: int = 0, skip: int = 0
    ) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.seed = seed
        self.skip = skip  # batches of the first epoch already trained (a resumed run)

    def __iter__(self) -> Any:
        skip, self.skip = self.skip, 0
        for index, batch in enumerate(super().__iter__()):
            if index >= skip:
                yield batch

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)
        elif isinstance(self.sampler, RandomSampler) and self.sampler.generator is not None:
            self.sampler.generator.manual_seed(self.seed + epoch)


class InOrderBatchSampler(EpochBatchSampler, SequentialSampler):
    """An :class:`EpochBatchSampler` over a sampler that does not shuffle (the validation and
    test splits, and the training split of a run that overfits): whole batches in order. It is
    a ``SequentialSampler`` too because that is how Lightning tells a loader that does not
    shuffle: with ``trainer.overfit_batches`` it puts a sampler of single images in place of
    any other, which handed the data module images where it slices batches."""


ARRAY_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
    }
)
"""What a CIFAR-10 batch file may ask the unpickler to build: numpy arrays (under numpy 1's and
numpy 2's module names). Anything else could run code, and is refused."""


class BatchUnpickler(pickle.Unpickler):
    """An unpickler for the official batch files that builds dictionaries, lists, strings,
    numbers and numpy arrays, and refuses every other global."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ARRAY_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it asks to run {module}.{name}, so it may carry code")


MAX_MEMO_INDEX = 1 << 20
"""The largest memo index a batch file's pickle may name: an official one stores a few tens of
thousands of objects, and C's unpickler makes room for twice the index it is given."""


MAX_OPCODES = 1 << 20
"""The most operations a batch file's pickle may hold: an official one has about 40,000, and
each may build an object of a few hundred bytes (40 MiB of empty sets took 10 GB)."""


def read_batch_file(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Read one official batch file into ``(images uint8 (n, 3, 32, 32), labels int64 (n,))``:
    a regular file of at most :data:`MAX_MEMBER_BYTES`, whose pickle names no memo index past
    :data:`MAX_MEMO_INDEX`, read by :class:`BatchUnpickler` (a file that asks for more than
    arrays is refused unread) and holding a ``uint8`` array of 3,072 columns and at least one
    row (an image), of no more bytes than the file (no view of strides 0), with one integer
    label in 0..9 for each row (a float is not cast); anything else is one line
    (:class:`DataError`)."""
    if not path.exists():  # a FIFO or a folder there is named by read_bounded
        needed = ", ".join(TRAIN_FILES + TEST_FILES)
        raise DataError(f"{path} is missing; the {FOLDER} folder needs {needed}")
    try:
        raw = read_bounded(path)
        check_memo_indices(raw)
        entry = BatchUnpickler(io.BytesIO(raw), encoding="latin1").load()
        data = entry["data"]
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8:
            raise ValueError(f"data is {type(data).__name__}, not an array of uint8")
        if data.nbytes > len(raw):  # a view of a few bytes with strides of 0
            raise ValueError(f"its data claims {data.nbytes:,} bytes, more than the file holds")
        labels = entry.get("labels", entry.get("fine_labels"))
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(labels) != data.shape[0]:
            raise ValueError(f"data of shape {data.shape} with {len(labels)} labels")
        if not data.shape[0]:
            raise ValueError("it holds no images")
        labels = np.asarray(labels)
        if labels.shape != (data.shape[0],):
            raise ValueError(f"labels of shape {labels.shape}")
        if labels.size and labels.dtype.kind not in "iu":
            raise ValueError(f"labels of {labels.dtype}, not integers")
        if labels.size and (labels.min() < 0 or labels.max() >= len(CLASSES)):
            raise ValueError("labels outside 0..9")
        labels = labels.astype(np.int64)
        images = torch.from_numpy(data.reshape(-1, 3, 32, 32).copy())
    except MemoryError:
        # Every allocation here is bounded by the file's size (a read of at most
        # MAX_MEMBER_BYTES, memo indices and operations checked): this process's memory is short
        raise DataError(
            f"reading {path} ran out of memory ({short_of_memory()}) before anything was found "
            "wrong with it: run where more memory is free, or raise the limit"
        ) from None
    except Exception as error:  # unpickling garbage can raise almost anything
        raise DataError(
            f"{path} is truncated or not a CIFAR-10 batch file ({type(error).__name__}: {error}); "
            f"replace {path.parent} with the official 'CIFAR-10 python version' folder"
        ) from error
    return images, torch.from_numpy(labels)


def short_of_memory() -> str:
    """This process's address-space limit (``ulimit -v``), in words, where it has one: what a
    :class:`MemoryError` on a bounded read most often meets (a cluster's login node, where
    torch and Lightning alone reserve much of it: docs/runs.md)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return "no address-space limit is set: the machine's memory is short"
    return f"this process may use {soft / 2**30:.1f} GiB of address space, ulimit -v"


def read_bounded(path: Path) -> bytes:
    """The bytes of the regular file at ``path`` (a link is followed: data sets are often
    linked in), at most :data:`MAX_MEMBER_BYTES` of them, opened by
    :func:`vitattn.runs.files.open_regular`; anything else is a :class:`ValueError` saying
    what is there."""
    too_big = f"more than the {MAX_MEMBER_BYTES} a batch file may hold"
    try:
        opened = open_regular(path, follow_links=True, max_bytes=MAX_MEMBER_BYTES, too_big=too_big)
    except UnreadableFileError as error:
        raise ValueError(f"it {error.problem}") from None
    with opened as handle:
        return handle.read(MAX_MEMBER_BYTES + 1)[:MAX_MEMBER_BYTES]


def check_memo_indices(raw: bytes) -> None:
    """Refuse a pickle that names a memo index past :data:`MAX_MEMO_INDEX` (nine bytes would
    have C's unpickler set aside gigabytes) or holds more than :data:`MAX_OPCODES` operations,
    read by :func:`pickletools.genops` before it is unpickled."""
    import pickletools

    for count, (opcode, argument, _) in enumerate(pickletools.genops(raw), start=1):
        if opcode.name.endswith("PUT") and argument > MAX_MEMO_INDEX:
            raise ValueError(f"its pickle names memo index {argument:,}")
        if count > MAX_OPCODES:
            raise ValueError(f"its pickle has more than {MAX_OPCODES:,} operations")


def read_split(folder: Path, files: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate several batch files."""
    parts = [read_batch_file(folder / name) for name in files]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def _drawn_shuffle_seed() -> int:
    """A seed of the epoch order, drawn from torch's global generator."""
    return int(torch.randint(0, 2**31 - 1, (1,)).item())


def _drawn_augment_seed() -> int:
    """A seed of the augmentation (unless ``data.augment_seed`` names one), drawn from torch's
    global generator."""
    return int(torch.randint(0, 2**62, (1,)).item())


def few_validation_images(val_fraction: float, held_out: int, images: int) -> str:
    """The warning for a validation set of ``held_out`` of ``images`` training images, with the
    smallest ``data.val_fraction`` (to a thousandth) that holds out
    :data:`FEW_VALIDATION_IMAGES`."""
    enough = math.ceil(1000 * (FEW_VALIDATION_IMAGES - 0.5) / images) / 1000
    remedy = (
        f"data.val_fraction={enough:g} holds out {FEW_VALIDATION_IMAGES}"
        if enough < 0.5
        else f"the data set is too small to hold out {FEW_VALIDATION_IMAGES}"
    )
    return (
        f"data.val_fraction={val_fraction} holds out {held_out} of the {images} training images "
        f"for validation: val/acc moves in steps of {100 / held_out:.3g} points and picks the "
        f"best checkpoint; {remedy}"
    )


class CIFAR10DataModule(L.LightningDataModule):
    """CIFAR-10 with a seeded validation split carved from the training set.

    Takes the keyword arguments of :class:`~vitattn.data.settings.DataSettings` (the keys of
    ``configs/data/cifar10.yaml``), checks them there, and keeps them as ``settings``; its
    hyperparameters, saved in every checkpoint, are the same flat keys.
    """

    def __init__(self, data_dir: str | Path, **settings: Any) -> None:
        super().__init__()
        self.settings = DataSettings.of(data_dir=data_dir, **settings)
        self.save_hyperparameters(self.settings.as_hparams(), logger=False)
        self.data_dir = Path(data_dir).expanduser()
        self.mean = torch.tensor(MEAN)
        self.std = torch.tensor(STD)
        ops, magnitude = self.settings.randaugment_ops, self.settings.randaugment_magnitude
        self.randaugment = v2.RandAugment(num_ops=ops, magnitude=magnitude) if ops else None
        self.mix = mix_transform(
            self.settings.mixup_alpha, self.settings.cutmix_alpha, len(CLASSES)
        )
        self.train_set: TensorDataset | None = None
        self.val_set: TensorDataset | None = None
        self.test_set: TensorDataset | None = None
        self._generator: torch.Generator | None = None
        self._generator_state: torch.Tensor | None = None
        self._host_generator: torch.Generator | None = None
        self._resume_batches = 0
        # Seeds of the epoch order and of the augmentation, from the global seed
        # (``seed_everything`` ran before this), drawn before the network is built: the
        # augmentation's was drawn at the first batch until 2026-12-02, after the network, whose
        # attention's draws then changed every flip at one seed (training audit).
        self.shuffle_seed = _drawn_shuffle_seed()
        self.augment_seed = _drawn_augment_seed()

    @property
    def folder(self) -> Path:
        return self.data_dir / FOLDER

    @property
    def num_classes(self) -> int:
        return len(CLASSES)

    @property
    def classes(self) -> tuple[str, ...]:
        return CLASSES

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(channels, height, width)`` of the images the model receives."""
        return (1 if self.settings.grayscale else 3, 32, 32)

    def check_place(self) -> None:
        """Refuse in one line (:class:`DataError`) what :meth:`prepare_data` would refuse
        without downloading or reading anything (the folder's place, ``data.download=false``
        with no folder, a lock that is no lock file): the commands' ``validate`` calls it
        through :func:`~vitattn.training.trial_build.check_buildable`, before a run directory
        exists."""
        check_folder_place(self.data_dir)
        if self.folder.is_dir():
            return
        if not self.settings.download:
            raise DataError(
                f"data.data_dir={self.data_dir} holds no {FOLDER}/ and data.download=false; "
                f"put the official 'CIFAR-10 python version' folder {FOLDER}/ there"
            )
        check_lock_place(self.data_dir)

    def prepare_data(self) -> None:
        self.check_place()
        if not self.folder.is_dir():
            download_cifar10(self.data_dir, self.settings.url, self.settings.download_timeout)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        check_folder_place(self.data_dir)
        if not self.folder.is_dir():
            raise DataError(f"data.data_dir={self.data_dir} holds no {FOLDER}/ (run prepare_data)")
        images, labels = read_split(self.folder, TRAIN_FILES)
        test_images, test_labels = read_split(self.folder, TEST_FILES)
        if self.settings.grayscale:
            images, test_images = lra_grayscale(images), lra_grayscale(test_images)
        num_val = max(1, round(self.settings.val_fraction * len(labels)))
        if num_val >= len(labels):
            raise ConfigError(
                f"data.val_fraction={self.settings.val_fraction} leaves no training images "
                f"out of {len(labels)}"
            )
        order = torch.randperm(
            len(labels), generator=torch.Generator().manual_seed(self.settings.split_seed)
        )
        val_idx, train_idx = order[:num_val], order[num_val:]
        if self.settings.grayscale:
            self.mean, self.std = self.luma_statistics(images[train_idx])
        self.train_set = TensorDataset(images[train_idx], labels[train_idx])
        self.val_set = TensorDataset(images[val_idx], labels[val_idx])
        self.test_set = TensorDataset(test_images, test_labels)

    def luma_statistics(self, training: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean and std that normalise grayscale images: ``data.luma_mean`` and
        ``data.luma_std`` where given (a checkpoint's, :mod:`vitattn.data.as_trained`), else
        fitted on the ``training`` images (the training split alone: the validation images
        were in them until 2026-12-02; data audit) and kept in the hyperparameters, which a
        checkpoint stores."""
        mean, std = self.settings.luma_mean, self.settings.luma_std
        if mean is None or std is None:
            luma = training.float().div(255)
            mean, std = float(luma.mean()), float(luma.std())
            self.hparams["luma_mean"], self.hparams["luma_std"] = mean, std
        return torch.tensor([mean]), torch.tensor([std])

    def images_read(self) -> tuple[int, str]:
        """After :meth:`setup`: the logging level and the line that say how many images were
        read and where, and, a warning, where they are not CIFAR-10's 50,000 and 10,000 (a
        subset, a mirror's or a folder of one's own): until 2026-12-02 nothing said so, and a
        run on a partial set trained without a word (data audit F5)."""
        parts, whole = [], True
        if self.train_set is not None and self.val_set is not None:
            trained, held_out = len(self.train_set), len(self.val_set)
            parts.append(
                f"{trained + held_out:,} training images ({trained:,} to train on, "
                f"{held_out:,} to validate on)"
            )
            whole = trained + held_out == WHOLE_TRAINING_IMAGES
        if self.test_set is not None:
            parts.append(f"{len(self.test_set):,} test images")
            whole = whole and len(self.test_set) == WHOLE_TEST_IMAGES
        line = f"CIFAR-10 at {self.folder}: {' and '.join(parts)}"
        if whole:
            return logging.INFO, line
        return logging.WARNING, (
            f"{line}, not the whole of CIFAR-10 ({WHOLE_TRAINING_IMAGES:,} training and "
            f"{WHOLE_TEST_IMAGES:,} test images): its figures do not compare with CIFAR-10's"
        )

    def validation_warning(self) -> str | None:
        """After :meth:`setup`: the warning for a validation set of fewer than
        :data:`FEW_VALIDATION_IMAGES` images (:func:`few_validation_images`), or ``None``."""
        if self.train_set is None or self.val_set is None:
            return None
        held_out, images = len(self.val_set), len(self.train_set) + len(self.val_set)
        if held_out >= FEW_VALIDATION_IMAGES:
            return None
        return few_validation_images(self.settings.val_fraction, held_out, images)

    def _loader(self, dataset: TensorDataset | None, batch_size: int, train: bool) -> DataLoader:
        if dataset is None:
            raise RuntimeError("call setup() before asking for a dataloader")
        world_size = self.trainer.world_size if self.trainer is not None else 1
        # trainer.overfit_batches: the same first batches every epoch, as Lightning overfits
        shuffled = train and not (self.trainer is not None and self.trainer.overfit_batches > 0)
        skip = 0
        if train and self._resume_batches:
            # A checkpoint of an earlier vitattn written at the end of a whole epoch said so
            # with the epoch's length: it resumes at the start of the next one.
            skip, self._resume_batches = self._resume_batches % (len(dataset) // batch_size), 0
        if world_size > 1:
            # Each process takes its own shard (the trainer's use_distributed_sampler is off:
            # Lightning would put a per-image sampler in place of the batch sampler). Evaluated,
            # shards may differ by one image: torch's sampler pads them even by repeating
            # images, and a test of 1,017 on two processes counted one twice (red team).
            shard = DistributedSampler if train else UnrepeatedDistributedSampler
            sampler = shard(
                dataset,
                num_replicas=world_size,
                rank=self.trainer.global_rank,
                shuffle=shuffled,
                seed=self.shuffle_seed,
            )
        elif shuffled:
            generator = torch.Generator().manual_seed(self.shuffle_seed)
            sampler = RandomSampler(dataset, generator=generator)
        else:
            sampler = SequentialSampler(dataset)
        batches = EpochBatchSampler if shuffled else InOrderBatchSampler
        # Whole batches are sampled and sliced from the tensors at once (batch_size=None turns
        # off per-sample collation).
        return DataLoader(
            dataset,
            sampler=batches(
                sampler, batch_size, drop_last=train, seed=self.shuffle_seed, skip=skip
            ),
            batch_size=None,
            # Its own generator: a DataLoader without one draws its workers' base seed from
            # torch's global generator at every new iterator, which a resumed run would then
            # draw at other times than an uninterrupted one (random features draw from it too).
            generator=torch.Generator().manual_seed(self.shuffle_seed),
            num_workers=self.settings.num_workers,
            pin_memory=self.settings.pin_memory,
            persistent_workers=self.settings.num_workers > 0,
        )

    def check_batch_fits(self, processes: int = 1) -> None:
        """After :meth:`setup`: refuse in one line a ``data.batch_size`` larger than the
        training images each of ``processes`` takes (:func:`check_batch_fits`)."""
        if self.train_set is not None:
            check_batch_fits(len(self.train_set), self.settings.batch_size, processes=processes)

    def train_dataloader(self) -> DataLoader:
        self.check_batch_fits(self.trainer.world_size if self.trainer is not None else 1)
        return self._loader(self.train_set, self.settings.batch_size, train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, self.settings.eval_batch_size, train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, self.settings.eval_batch_size, train=False)

    def reseed(self, device: torch.device) -> None:
        """The epoch order and the augmentation RNG on ``device`` drawn anew, now, from torch's
        global generator (or ``augment_seed``), as a fresh data module's would be: what a
        caller that trains several networks one after another on this data module calls after
        seeding, so that each network trains on the same batches, augmented alike, whatever the
        ones before it drew (``vitattn-check``'s training rows)."""
        self.shuffle_seed = _drawn_shuffle_seed()
        self.augment_seed = _drawn_augment_seed()
        self._generator, self._generator_state, self._host_generator = None, None, None
        self.generator(device)

    @property
    def process_rank(self) -> int:
        """This process's rank among a DDP run's (0 alone, or without a trainer)."""
        return int(self.trainer.global_rank) if self.trainer is not None else 0

    def generator(self, device: torch.device) -> torch.Generator:
        """The augmentation RNG on ``device``, created on first use and checkpointed: each DDP
        process's own (:func:`~vitattn.data.augment.process_seed`). A resumed run's process 0
        goes on with the checkpoint's; any other, whose generator no checkpoint holds, starts
        one from the seed, its rank and the step it resumes at."""
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device=device)
            rank, resumed = self.process_rank, self._generator_state is not None
            if resumed and rank == 0:  # no seed drawn (see load_state_dict)
                self._generator.set_state(self._generator_state)
            else:
                seed = self.settings.augment_seed
                seed = self.augment_seed if seed is None else seed
                step = int(self.trainer.global_step) if resumed and self.trainer else None
                self._generator.manual_seed(process_seed(seed, rank, step))
                if resumed:
                    log.info(
                        "process %d draws its augmentation anew from the seed, its rank and "
                        "step %s (a checkpoint holds process 0's generator alone)",
                        rank,
                        step,
                    )
            self._generator_state = None
        return self._generator

    @contextlib.contextmanager
    def own_global_draws(self, device: torch.device) -> Iterator[None]:
        """Within: torch's global CPU generator, which RandAugment, MixUp and CutMix draw from,
        forked and seeded from this process's own generator, on every DDP process but 0 (which
        draws as a single process does). ``seed_everything`` seeds every process alike, so
        until 2026-12-02 each chose the same operations, mixing weights and boxes at the same
        places of its batch (data audit F7)."""
        if self.process_rank == 0:
            yield
            return
        if self._host_generator is None:
            drawn = torch.randint(0, 2**62, (1,), generator=self.generator(device), device=device)
            self._host_generator = torch.Generator().manual_seed(int(drawn.item()))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=self._host_generator)))
            yield

    def augment(self, images: torch.Tensor) -> torch.Tensor:
        """Random crop with padding and horizontal flip of a uint8 batch."""
        generator = self.generator(images.device)
        images = random_crop(images, self.settings.crop_padding, generator)
        if self.settings.hflip:
            images = random_horizontal_flip(images, generator)
        if self.randaugment is not None:
            group = self.settings.randaugment_group
            with self.own_global_draws(images.device):
                images = torch.cat([self.randaugment(part) for part in images.split(group)])
        return images

    def shifted(self, images: torch.Tensor) -> torch.Tensor:
        """``images`` (uint8) as the network sees them before normalising: the data set's
        variant (``data.shift``), what a figure of what it attends to draws under its maps."""
        return apply_shift(images, self.settings.shift)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Augment (when training), shift, normalise and mix a batch on its device. Images
        alone (a model's ``example_input_array``, which Lightning's model summary passes here
        at the start of a fit) are prepared as for evaluation: no augmentation, so no random
        numbers drawn that a resumed run would not draw.

        Crops and flips act on the natural image, before the shift: a flip after ``rotate``
        mirrors the image turned +90° into one turned -90°, so until 2026-12-02 half of the
        training images of the rotated variant were turned the other way from every
        validation and test image (data audit)."""
        if isinstance(batch, torch.Tensor):
            images = self.shifted(batch)
            if self.settings.normalize:
                images = normalize(images, self.mean.to(images.device), self.std.to(images.device))
            return images
        images, labels = batch
        training = self.trainer is not None and self.trainer.training
        if training:
            images = self.augment(images)
        images = self.shifted(images)  # the data set's variant, for all stages
        if self.settings.normalize:
            images = normalize(images, self.mean.to(images.device), self.std.to(images.device))
        if training and self.mix is not None:
            with self.own_global_draws(images.device):
                images, labels = self.mix(images, labels)
        return images, labels

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        if self._generator is not None:
            state["augment_generator"] = self._generator.get_state()
        if self.trainer is not None and self.trainer.state.fn == "fit":
            # Where in its epoch the run is, so that a resumed run skips the batches already
            # trained (Lightning resumes mid-epoch but restarts the data from the epoch's start).
            # Also for a checkpoint written during a validation inside the fit (last.ckpt and
            # the best are), when the trainer is not `training`.
            # Modulo the epoch as Lightning counts it (trainer.limit_train_batches): one written
            # at an epoch's end resumes at the next one's start, however short the epochs.
            # Lightning's own count of the epoch's batches (those processed: at a step's end the
            # batch is not yet "completed"): the optimizer steps times the accumulation
            # overcounted by a batch an epoch where the accumulation does not divide the epoch
            # (its last step is shorter), and the resumed run skipped batches it never trained,
            # until 2026-12-02 (data audit).
            trainer = self.trainer
            done = int(trainer.fit_loop.epoch_loop.batch_progress.current.processed)
            epoch = int(trainer.num_training_batches)
            state["batches_done_in_epoch"] = done % epoch if epoch > 0 else done
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._generator_state = state_dict.get("augment_generator")
        self._generator, self._host_generator = None, None
        self._resume_batches = max(0, int(state_dict.get("batches_done_in_epoch", 0)))
