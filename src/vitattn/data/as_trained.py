"""Data settings "as trained": what a checkpoint's network was fed, for commands that reuse it.

``vitattn-eval``, ``vitattn-finetune`` and ``vitattn-bench`` (``ckpt_path=``) rebuild a network
from its checkpoint. Some data settings decide what that network can read: a Long Range Arena
model (``experiment=lra_image``) takes one grayscale channel of raw 8-bit intensities, others
take three normalised channels, and a fine-tuned model was trained on a shifted variant. Their
configs leave these settings ``null``, which means "as the checkpoint was trained": Lightning
saves the data module's hyperparameters in every checkpoint, and :func:`as_trained` reads them
back. A value given on the command line (``data.shift=invert``) is used as given.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vitattn.data.settings import DataSettings
from vitattn.runs.checkpoints import read_checkpoint
from vitattn.runs.files import one_line
from vitattn.utils.config import cut_apart

log = logging.getLogger(__name__)

INPUT_SETTINGS = ("grayscale", "normalize", "shift")
"""Data settings that change what the network sees: its input format and the data variant."""


def saved_data_settings(ckpt_path: str | Path | None) -> dict[str, Any]:
    """The data module's hyperparameters stored in a checkpoint; ``{}`` if it has none (a
    checkpoint written by something other than a Lightning Trainer with our data module)."""
    if ckpt_path in (None, ""):
        return {}
    checkpoint = read_checkpoint(ckpt_path)
    # after the read: a checkpoint it refuses is refused before Lightning is imported, which
    # takes most of the time of such a refusal
    from lightning import LightningDataModule

    return dict(checkpoint.get(LightningDataModule.CHECKPOINT_HYPER_PARAMS_KEY) or {})


def as_trained(
    data_cfg: DictConfig,
    ckpt_path: str | Path | None,
    settings: Sequence[str] = INPUT_SETTINGS,
) -> DictConfig:
    """``data_cfg`` with each of ``settings`` that is ``null`` replaced by the checkpoint's value
    (the data module's default where the checkpoint has none, or there is no checkpoint)."""
    unset = [name for name in settings if name in data_cfg and data_cfg[name] is None]
    if not unset:
        return data_cfg
    saved = saved_data_settings(ckpt_path)
    chosen = {name: saved.get(name, DataSettings.default(name)) for name in unset}
    if saved:  # the checkpoint's words: escaped and short in the log
        shown = (f"data.{name}={cut_apart(one_line(value), 80)}" for name, value in chosen.items())
        log.info("data settings as the checkpoint was trained: %s", ", ".join(shown))
    return OmegaConf.merge(data_cfg, chosen)  # type: ignore[return-value]
