"""The data module's settings: one typed structure with the config's keys, checked in one place,
saved flat in checkpoints, and built again from the flat keys an earlier checkpoint stores."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import hydra
import lightning as L
import pytest
import torch
from omegaconf import OmegaConf

from tests.support.presets import compose_config
from vitattn.cli.console import check_composition
from vitattn.data.as_trained import saved_data_settings
from vitattn.data.cifar10 import CIFAR10DataModule
from vitattn.data.settings import DataSettings
from vitattn.errors import ConfigError
from vitattn.train import validate as validate_training
from vitattn.utils.config import CONFIG_DIR

ADDED_SINCE = ("luma_mean", "luma_std")
"""Settings added after those of :data:`SAVED_BEFORE_SETTINGS` (2026-12-02), whose default
(``None``) a checkpoint without them builds with."""

SAVED_BEFORE_SETTINGS = {
    "data_dir": "/work/shared/data",
    "batch_size": 64,
    "eval_batch_size": 512,
    "val_fraction": 0.1,
    "split_seed": 0,
    "crop_padding": 0,
    "hflip": True,
    "randaugment_ops": 1,
    "randaugment_magnitude": 9,
    "randaugment_group": 16,
    "mixup_alpha": 0.0,
    "cutmix_alpha": 0.0,
    "grayscale": False,
    "normalize": True,
    "shift": "none",
    "augment_seed": 3,
    "download": True,
    "url": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    "download_timeout": 60,
    "num_workers": 0,
    "pin_memory": False,
}
"""The data hyperparameters of a checkpoint that ``vitattn-train`` wrote before the settings were
a dataclass (the data module's flat keyword arguments, ``datamodule_hparams_name: kwargs``)."""


def test_the_settings_are_the_config_keys() -> None:
    node = OmegaConf.load(CONFIG_DIR / "data" / "cifar10.yaml")
    keys = {str(key) for key in node if key != "_target_"}
    assert keys == {spec.name for spec in dataclasses.fields(DataSettings)}


def test_the_settings_default_to_the_configs_values() -> None:
    """A data module built in Python (a notebook, a script, the bench) gets what
    ``vitattn-train`` gets by default: ``crop_padding`` defaulted to 4 in Python and to 0 in the
    config until 2026-12-02."""
    node = OmegaConf.load(CONFIG_DIR / "data" / "cifar10.yaml")
    interpolated = {"data_dir"}  # ``${paths.data_dir}``, and DataSettings has no default for it
    configured = {str(key): node[key] for key in node if key not in {"_target_", *interpolated}}
    defaults = {
        spec.name: spec.default
        for spec in dataclasses.fields(DataSettings)
        if spec.name in configured
    }
    assert defaults == configured


def test_hydra_builds_the_module_from_the_config_and_overrides(tmp_path: Path) -> None:
    cfg = compose_config("train", ["data.batch_size=32", "data.shift=invert"], tmp_path)
    datamodule = hydra.utils.instantiate(cfg.data)
    assert isinstance(datamodule, CIFAR10DataModule)
    assert (datamodule.settings.batch_size, datamodule.settings.shift) == (32, "invert")
    assert datamodule.settings.crop_padding == cfg.data.crop_padding  # the yaml's, not the default
    assert dict(datamodule.hparams) == datamodule.settings.as_hparams()


def test_the_settings_are_frozen(tmp_path: Path) -> None:
    datamodule = CIFAR10DataModule(tmp_path, batch_size=32)
    with pytest.raises(dataclasses.FrozenInstanceError):
        datamodule.settings.batch_size = 64  # type: ignore[misc]


def test_hyperparameters_are_every_setting_flat(tmp_path: Path) -> None:
    """A checkpoint stores every setting, defaults included, under the keyword names."""
    datamodule = CIFAR10DataModule(tmp_path, batch_size=32)
    assert list(datamodule.hparams) == [*SAVED_BEFORE_SETTINGS, *ADDED_SINCE]
    assert datamodule.hparams["batch_size"] == 32
    assert datamodule.hparams["crop_padding"] == DataSettings.default("crop_padding") == 0


def test_a_checkpoint_from_before_the_settings_builds_the_same_module(tmp_path: Path) -> None:
    path = tmp_path / "old.ckpt"
    saved = {**SAVED_BEFORE_SETTINGS, "data_dir": str(tmp_path)}
    checkpoint = {
        "state_dict": {},
        "pytorch-lightning_version": L.__version__,
        L.LightningDataModule.CHECKPOINT_HYPER_PARAMS_KEY: saved,
        L.LightningDataModule.CHECKPOINT_HYPER_PARAMS_NAME: "kwargs",
    }
    torch.save(checkpoint, path)
    loaded = CIFAR10DataModule.load_from_checkpoint(path)
    assert loaded.settings == DataSettings(**saved)
    assert saved == saved_data_settings(path)
    assert dict(loaded.hparams) == {**saved, **dict.fromkeys(ADDED_SINCE)}  # their defaults
    assert loaded.settings == CIFAR10DataModule(**saved_data_settings(path)).settings


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"batch_size": "abc"}, "data.batch_size='abc' is not valid; choose an integer"),
        ({"batch_size": 2.5}, "data.batch_size=2.5 is not valid; choose an integer"),
        ({"augment_seed": 0.5}, "data.augment_seed=0.5 is not valid; choose an integer or null"),
        ({"hflip": 1}, "data.hflip=1 is not valid; choose true or false"),
        ({"val_fraction": 1.0}, "data.val_fraction=1.0 is not valid; choose 0 < value < 1"),
        (
            {"val_fraction": float("nan")},
            "data.val_fraction=nan is not valid; choose 0 < value < 1",
        ),
        ({"randaugment_magnitude": 31}, "data.randaugment_magnitude=31 is not valid; choose 0..30"),
        (
            {"randaugment_ops": 10**9},
            "data.randaugment_ops=1000000000 is not valid; choose 0..16 (0 = off)",
        ),
        ({"crop_padding": 33}, "data.crop_padding=33 is not valid; choose 0..32 (0 = off)"),
        (
            {"download_timeout": 1e9},
            "data.download_timeout=1000000000.0 is not valid; choose a positive number of seconds, "
            "at most 3600",
        ),
        (
            {"cutmix_alpha": -1.0},
            "data.cutmix_alpha=-1.0 is not valid; choose a finite number >= 0 (0 = off)",
        ),
        # NaN turned mixing off without a word; inf drew Beta(inf, inf) ~ 1e-38 (red team)
        (
            {"mixup_alpha": float("nan")},
            "data.mixup_alpha=nan is not valid; choose a finite number >= 0 (0 = off)",
        ),
        (
            {"cutmix_alpha": float("inf")},
            "data.cutmix_alpha=inf is not valid; choose a finite number >= 0 (0 = off)",
        ),
        (
            {"mixup_alpha": 0.8, "normalize": False},
            "data.mixup_alpha/data.cutmix_alpha mix float images; they need data.normalize=true",
        ),
        ({"data_dir": 3}, "data.data_dir=3 is not valid; choose a directory"),
        # torch's generator raised "Overflow when unpacking long long" once the run was made
        (
            {"split_seed": 2**64},
            "data.split_seed=18446744073709551616 is not valid; choose an integer -2**63..2**64-1",
        ),
        ({"augment_seed": -(2**63) - 1}, "data.augment_seed=-9223372036854775809 is not valid; "),
        ({"colour": "red"}, "data.colour is not a data setting; choose among: augment_seed, "),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(settings: dict, message: str, tmp_path: Path) -> None:
    arguments = {"data_dir": tmp_path, **settings}
    with pytest.raises(ConfigError) as raised:
        CIFAR10DataModule(**arguments)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.grayscale=null", r"^data\.grayscale=None is not valid; choose true or false$"),
        ("+data.colour=red", r"^data\.colour is not a data setting; choose among: "),
        ("data.download_timeout=soon", r"^data\.download_timeout='soon' is not valid; choose a"),
        ("data.augment_seed=18446744073709551616", r"^data\.augment_seed=18446744073709551616 is"),
    ],
)
def test_the_command_line_gets_the_same_lines(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_composition("train", [override], validate_training)
