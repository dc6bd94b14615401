"""``vitattn-bench``: attention time, memory, approximation error, spectrum and training speed.

Examples::

    vitattn-bench                                              # every attention, n = 256..4096
    vitattn-bench attentions=[softmax,linear] seq_lens=[64,128] repeats=2
    vitattn-bench level=block dtype=bfloat16 device=cuda
    vitattn-bench mode=approx ckpt_path=outputs/train/runs/<run>/checkpoints/last.ckpt
    vitattn-bench mode=spectrum ckpt_path=outputs/train/runs/<run>/checkpoints/last.ckpt
    vitattn-bench mode=train train.batch_size=64 'train.overrides=[model.depth=2]'

The Hydra entry point only: the settings (:mod:`~vitattn.bench.settings`) are checked before
Hydra creates the run directory, then the mode's runner computes its rows and its writer
(:mod:`~vitattn.bench.writers`) writes the files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from vitattn.bench.settings import Mode, load_settings, recorded, refuse_moved_settings
from vitattn.cli.console import console_main
from vitattn.runs.task import run_task
from vitattn.utils.config import CONFIG_DIR

PROGRAM = "vitattn-bench"


def benchmark(cfg: DictConfig) -> dict[str, Any]:
    """Run the mode ``cfg.mode`` and write its files to the run directory."""
    # The runners (torch and the attentions) are imported here, not with the app: its --help,
    # its refusals and Hydra's composition need none of them.
    import torch

    from vitattn.bench.approx import run_approx
    from vitattn.bench.scaling import run_scaling
    from vitattn.bench.spectrum import run_spectrum
    from vitattn.bench.train_speed import run_train
    from vitattn.bench.writers import write_approx, write_scaling, write_spectrum, write_train

    settings = load_settings(cfg)
    if settings.threads is not None:
        torch.set_num_threads(settings.threads)
    torch.set_float32_matmul_precision(settings.matmul_precision.value)
    output_dir = Path(cfg.paths.output_dir)
    given = recorded(cfg)
    if settings.mode is Mode.scaling:
        return write_scaling(run_scaling(settings), output_dir, given)
    if settings.mode is Mode.approx:
        return write_approx(run_approx(settings, cfg.data), output_dir, given)
    if settings.mode is Mode.spectrum:
        assert settings.ckpt_path is not None
        spectra = run_spectrum(settings, cfg.data)
        energy, path = settings.spectrum.energy, settings.ckpt_path
        return write_spectrum(spectra, output_dir, given, energy=energy, ckpt_path=path)
    return write_train(run_train(settings), output_dir)


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="bench")
def _hydra_main(cfg: DictConfig) -> None:
    run_task(PROGRAM, benchmark, cfg)


def check_command(cfg: DictConfig) -> None:
    """What the console checks before the run: the settings, and in ``mode=train`` the
    ``vitattn-train`` overrides it trains ours with."""
    settings = load_settings(cfg)
    if settings.mode == Mode.train:
        from vitattn.bench.train_speed import check_precision, check_train_overrides

        train = settings.train
        check_precision("train.precision", train.precision)
        check_train_overrides("train.overrides", train.overrides, train.model, [train.attention])
    if settings.mode == Mode.approx:
        from vitattn.bench.approx import check_approx_size

        check_approx_size(settings)


def main() -> None:
    """Console script ``vitattn-bench``."""
    console_main(
        PROGRAM,
        _hydra_main,
        config_name="bench",
        prepare=refuse_moved_settings,
        validate=check_command,
    )


if __name__ == "__main__":
    main()
