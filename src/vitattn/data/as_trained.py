"""Data settings "as trained": what a checkpoint's network was fed, for commands that reuse it.

``vitattn-eval``, ``vitattn-finetune`` and ``vitattn-bench`` (``ckpt_path=``) rebuild a network
from its checkpoint. Some data settings decide what that network can read: a Long Range Arena
model (``experiment=lra_image``) takes one grayscale channel of raw 8-bit intensities, others
take three normalised channels, and a fine-tuned model was trained on a shifted variant; a
fine-tune also keeps its base's split of the training set into training and validation. Their
configs leave these settings ``null``, which means "as the checkpoint was trained": Lightning
saves the data module's hyperparameters in every checkpoint, and :func:`as_trained` puts them
back. A value given on the command line (``data.shift=invert``) is used as given.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vitattn.data.settings import DataSettings
from vitattn.runs.checkpoints import data_settings_of, read_checkpoint
from vitattn.runs.files import one_line
from vitattn.utils.config import cut_apart

log = logging.getLogger(__name__)

INPUT_FORMAT = ("grayscale", "normalize", "luma_mean", "luma_std")
"""Data settings that make the network's input format: channels, normalised or raw pixels, and
the statistics that normalise grayscale images."""
INPUT_SETTINGS = (*INPUT_FORMAT, "shift")
"""Data settings that change what the network sees: its input format and the data variant."""
SPLIT = ("val_fraction", "split_seed")
"""Data settings that split the training set into training and validation images. A command that
trains on from a checkpoint (``vitattn-finetune``) keeps its base run's split: with another, its
validation images, on which it chooses its best checkpoint, hold images the base trained on."""


def saved_data_settings(ckpt_path: str | Path | None) -> dict[str, Any]:
    """:func:`~vitattn.runs.checkpoints.data_settings_of` the checkpoint at ``ckpt_path``;
    ``{}`` without one."""
    if ckpt_path in (None, ""):
        return {}
    return data_settings_of(read_checkpoint(ckpt_path))


def as_trained(
    data_cfg: DictConfig,
    saved: Mapping[str, Any],
    settings: Sequence[str] = INPUT_SETTINGS,
) -> DictConfig:
    """``data_cfg`` with each of ``settings`` that is ``null`` replaced by its value in
    ``saved``, a checkpoint's data settings
    (:func:`~vitattn.runs.checkpoints.data_settings_of`; the data module's default where they
    have none). A command takes them from the bytes it builds the network from
    (:func:`vitattn.loading.load_trained`), so the two agree even if the file changes."""
    unset = [name for name in settings if name in data_cfg and data_cfg[name] is None]
    if not unset:
        return data_cfg
    chosen = {name: saved.get(name, DataSettings.default(name)) for name in unset}
    if saved:  # the checkpoint's words: escaped and short in the log
        shown = (f"data.{name}={cut_apart(one_line(value), 80)}" for name, value in chosen.items())
        log.info("data settings as the checkpoint was trained: %s", ", ".join(shown))
    return OmegaConf.merge(data_cfg, chosen)  # type: ignore[return-value]
