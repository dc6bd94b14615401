"""``vitattn-check``: prove a machine for vitattn in one command.

Examples::

    vitattn-check                                  # one GPU, the report's sizes, ~10 minutes
    vitattn-check device=cpu                       # the dry run: tiny sizes (CI runs it)
    vitattn-check attentions=[softmax,performer] sections=[numerics,kernels]

The Hydra entry point only: the settings (:mod:`~vitattn.check.settings`) are checked before
Hydra creates the run directory; each section's module measures, :mod:`~vitattn.check.report`
writes.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from vitattn.check.settings import NOT_OURS, CheckSettings, Section, load_settings
from vitattn.cli.console import console_main
from vitattn.runs.task import run_task
from vitattn.utils.config import CONFIG_DIR, sweep_job

PROGRAM = "vitattn-check"
log = logging.getLogger(__name__)


def check(cfg: DictConfig) -> dict[str, Any]:
    """Run the chosen sections and write check.md, check.json and check_kernels.png."""
    # The sections (torch and the attentions) are imported here, not with the app: its --help,
    # its refusals and Hydra's composition need none of them.
    import torch

    from vitattn.bench.environment import load_average
    from vitattn.check.kernels import run_kernels
    from vitattn.check.numerics import run_numerics
    from vitattn.check.report import machine, write_check
    from vitattn.check.training import run_reference, run_training

    settings = load_settings(cfg)
    torch.set_float32_matmul_precision(settings.matmul_precision.value)
    env = machine(settings)
    log.info("checking %s (%s) for %s", env["device_name"], env["device"], settings.attentions)
    chosen = set(settings.sections)
    seconds: dict[str, float] = {}

    def timed(section: Section, run: Callable[[CheckSettings], Any], otherwise: Any) -> Any:
        if section not in chosen:
            return otherwise
        started = time.perf_counter()
        result = run(settings)
        seconds[section.value] = round(time.perf_counter() - started, 1)
        return result

    numerics = timed(Section.numerics, run_numerics, [])
    training = timed(Section.training, run_training, [])
    reference = timed(Section.reference, run_reference, None)
    kernels = timed(Section.kernels, run_kernels, None)
    env["load_average_end"] = load_average()
    given = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)
    assert isinstance(given, dict)
    recorded = {str(k): v for k, v in given.items() if k not in NOT_OURS}
    output_dir = Path(cfg.paths.output_dir)
    return write_check(
        output_dir, settings, recorded, env, numerics, training, reference, kernels, seconds
    )


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="check")
def _hydra_main(cfg: DictConfig) -> None:
    found = run_task(PROGRAM, check, cfg)["problems"]
    if found and not sweep_job():
        # as a test runner does: a script or a job that runs the check can stop on its status
        # (a sweep's job does not: its sweep records it, the other jobs run)
        where = Path(cfg.paths.output_dir) / "check.md"
        count = f"{len(found)} problem{'s' if len(found) > 1 else ''}"
        print(f"{PROGRAM}: {count}, listed first in {where}", file=sys.stderr)
        sys.exit(1)


def check_command(cfg: DictConfig) -> None:
    """What the console checks before the run: the settings, and the ``vitattn-train``
    overrides the training and reference sections train with, refused where they fail with
    every attention they train (softmax for the reference)."""
    settings = load_settings(cfg)
    trained = list(settings.attentions or []) if Section.training in settings.sections else []
    if Section.reference in settings.sections and "softmax" not in trained:
        trained.append("softmax")  # ours beside timm's
    if trained:
        from vitattn.bench.train_speed import check_precision, check_train_overrides

        training = settings.training
        check_precision("training.precision", training.precision)
        check_train_overrides("training.overrides", training.overrides, training.model, trained)


def main() -> None:
    """Console script ``vitattn-check``."""
    console_main(PROGRAM, _hydra_main, config_name="check", validate=check_command)


if __name__ == "__main__":
    main()
