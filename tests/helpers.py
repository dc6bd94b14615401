"""What the tests share: tiny settings, configs composed as the CLI composes them, a runner for
the console scripts, and callbacks that tests plug into real runs (``+callbacks.x._target_``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

from vitattn.utils.config import CONFIG_DIR, PROJECT_ROOT

BIN = Path(sys.executable).parent
"""Where the console scripts of this environment are."""

SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"

TINY = [
    "trainer=cpu",
    "model.embed_dim=32",
    "model.depth=1",
    "model.heads=2",
    "data.batch_size=64",
    "data.eval_batch_size=512",
    "callbacks.progress_bar.refresh_rate=0",
]
"""Settings small enough for a CPU test, used by every training test."""

FEW_STEPS = [*TINY, "trainer.max_steps=8", "trainer.val_check_interval=4"]
"""A few steps of the tiny model, validating twice."""


def compose_config(name: str, overrides: list[str], output_dir: Path) -> DictConfig:
    """Compose ``configs/<name>.yaml`` as the CLI would, with the run directory set."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name=name, overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)
        cfg.hydra.runtime.output_dir = str(output_dir)
    return cfg


def run_cli(
    program: str,
    *args: str,
    data_dir: Path,
    check: bool = True,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run console script ``program`` (``vitattn-train``, ...) with ``args`` on the data in
    ``data_dir``; with ``check``, a non-zero exit fails the test with the output's tail."""
    environment = {
        **os.environ,
        "VITATTN_DATA_DIR": str(data_dir),
        "HYDRA_FULL_ERROR": "0",
        **(env or {}),
    }
    result = subprocess.run(
        [str(BIN / program), *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        pytest.fail(
            f"{program} {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


def last_line(result: subprocess.CompletedProcess) -> str:
    """The last line a command printed on stderr (where a refusal's one line goes)."""
    lines = result.stderr.strip().splitlines()
    return lines[-1] if lines else ""


class SigtermAtStep(L.Callback):
    """Send this process SIGTERM when the global step reaches ``step`` (a pre-empted job)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


class NanLossAtStep(L.Callback):
    """Make the parameters NaN after ``step`` steps, so the next loss is NaN (a diverged run)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any):
        if trainer.global_step == self.step:
            with torch.no_grad():
                for parameter in pl_module.parameters():
                    parameter.fill_(float("nan"))
