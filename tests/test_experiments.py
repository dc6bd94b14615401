"""Presets, sweeps across attention types, curves and summaries, launchers, Optuna, DDP."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import hydra
import pytest
import torch

from tests.helpers import TINY, compose_config, run_cli
from vitattn.analysis.curves import Run, label_runs, mean_curve, summarize
from vitattn.models.vit import VisionTransformer
from vitattn.utils.config import PROJECT_ROOT
from vitattn.utils.errors import ConfigError

PLOT_CURVES = PROJECT_ROOT / "scripts" / "plot_curves.py"
FEW_STEPS = [*TINY, "trainer.max_steps=8", "trainer.val_check_interval=4"]


# --- presets -----------------------------------------------------------------------------------


def test_report_preset_composes_to_the_report_setup(tmp_path: Path) -> None:
    cfg = compose_config("train", ["experiment=report", "attention=linformer"], tmp_path)
    assert cfg.hydra.runtime.choices["model"] == "vit_pixel"
    model = cfg.model
    assert (model.patch_size, model.embed_dim, model.depth, model.heads, model.mlp_dim) == (
        1,
        256,
        4,
        8,
        512,
    )
    assert cfg.data.batch_size == 256
    assert cfg.optimizer._target_ == "torch.optim.Adam" and cfg.optimizer.lr == 5e-4
    assert cfg.scheduler.warmup_fraction == 0.0 and cfg.scheduler.min_lr_ratio == 0.0
    assert (cfg.trainer.max_epochs, cfg.trainer.val_check_interval) == (50, 200)
    assert cfg.trainer.accelerator == "gpu" and cfg.trainer.precision == "bf16-mixed"
    kernel = hydra.utils.instantiate(cfg.attention)(seq_len=1024, heads=8, head_dim=32)
    assert kernel.k == 128  # n / 8
    nystrom = compose_config("train", ["experiment=report", "attention=nystrom"], tmp_path)
    assert nystrom.attention.landmarks == 64


def test_lra_image_preset_composes_to_lra_numbers(tmp_path: Path) -> None:
    cfg = compose_config("train", ["experiment=lra_image"], tmp_path)
    model, data = cfg.model, cfg.data
    assert (model.embed_dim, model.depth, model.heads, model.mlp_dim) == (32, 1, 1, 64)
    assert (model.embedding, model.in_channels, model.patch_size, model.pool) == (
        "intensity",
        1,
        1,
        "cls",
    )
    assert model.dropout == 0.3
    assert (data.grayscale, data.normalize, data.crop_padding, data.hflip) == (
        True,
        False,
        0,
        False,
    )
    assert data.batch_size == 256 and cfg.optimizer.lr == 5e-4
    assert list(cfg.optimizer.betas) == [0.9, 0.98] and cfg.optimizer.weight_decay == 0.0
    assert cfg.scheduler.warmup_steps == 175 and cfg.trainer.max_epochs == 200


@pytest.mark.parametrize(
    ("experiment", "overrides"),
    [
        ("lra_image", ["data.batch_size=16", "data.eval_batch_size=64"]),
        ("vit_best", [*TINY, "model.depth=2"]),
    ],
)
def test_presets_train_on_cpu(
    experiment: str, overrides: list[str], tmp_path: Path, data_dir: Path
) -> None:
    result = run_cli(
        "vitattn-train",
        f"experiment={experiment}",
        "trainer=cpu",
        "trainer.precision=32-true",
        "debug=fdr",
        *overrides,
        f"hydra.run.dir={tmp_path}",
        data_dir=data_dir,
    )
    assert "fast_dev_run" in result.stdout + result.stderr


def test_intensity_embedding_needs_raw_pixels_and_single_pixel_tokens() -> None:
    from vitattn.attention.softmax import SoftmaxAttention

    vit = VisionTransformer(
        attention=SoftmaxAttention,
        in_channels=1,
        patch_size=1,
        embed_dim=8,
        depth=1,
        heads=1,
        embedding="intensity",
    )
    pixels = torch.randint(0, 256, (2, 1, 32, 32), dtype=torch.uint8)
    assert vit(pixels).shape == (2, 10)
    with pytest.raises(ConfigError, match=r"model.embedding=intensity needs the 8-bit"):
        vit(pixels.float() / 255)
    with pytest.raises(ConfigError, match=r"set model.patch_size=1 \(got 4\)"):
        VisionTransformer(attention=SoftmaxAttention, patch_size=4, embedding="intensity")


# --- sweeps, curves, summaries -----------------------------------------------------------------


def read_summary(directory: Path) -> list[dict[str, str]]:
    with (directory / "summary.csv").open() as handle:
        return list(csv.DictReader(handle))


def test_attention_sweep_gives_curves_and_summary(tmp_path: Path, data_dir: Path) -> None:
    sweep = tmp_path / "sweep"
    run_cli(
        "vitattn-train",
        "-m",
        *FEW_STEPS,
        "attention=softmax,linear",
        f"hydra.sweep.dir={sweep}",
        data_dir=data_dir,
    )
    assert (sweep / "0" / "metrics.json").is_file() and (sweep / "1" / "metrics.json").is_file()
    result = run_cli("python", str(PLOT_CURVES), str(sweep), data_dir=data_dir)
    assert "wrote" in result.stdout
    for name in ("val_acc_vs_step.png", "train_loss_vs_step.png", "summary.md"):
        assert (sweep / name).stat().st_size > 0, name
    rows = read_summary(sweep)
    assert [row["attention"] for row in rows] == ["softmax", "linear"]
    for row in rows:
        assert row["status"] == "completed"
        assert 0.0 <= float(row["best_val_acc"]) <= 1.0 and float(row["test_acc"]) >= 0.0
        assert float(row["best_val_acc"]) >= float(row["final_val_acc"])
        assert int(row["params"]) > 0 and float(row["images_per_sec"]) > 0
    assert json.loads(rows[1]["knobs"]) == {"eps": 1e-6}


def test_failed_job_is_recorded_and_the_others_finish(tmp_path: Path, data_dir: Path) -> None:
    sweep = tmp_path / "sweep"
    result = run_cli(
        "vitattn-train",
        "-m",
        *FEW_STEPS,
        "model.heads=2,3",  # 3 does not divide embed_dim 32
        f"hydra.sweep.dir={sweep}",
        data_dir=data_dir,
        check=False,
    )
    assert result.returncode != 0  # the sweep reports that a job failed
    assert "model.embed_dim=32 is not divisible by model.heads=3" in result.stderr
    done = json.loads((sweep / "0" / "metrics.json").read_text())
    assert done["status"] == "completed" and (sweep / "0" / "checkpoints" / "last.ckpt").is_file()
    failed = json.loads((sweep / "1" / "metrics.json").read_text())
    assert failed["status"] == "failed" and "model.heads=3" in failed["error"]
    out = tmp_path / "figures"
    summarize([sweep], out)
    rows = read_summary(out)
    assert [(row["label"], row["status"]) for row in rows] == [
        ("softmax (model.heads=2)", "completed"),
        ("softmax (model.heads=3)", "failed"),
    ]
    assert "not divisible" in rows[1]["error"]


def test_seeds_share_a_line_with_a_band() -> None:
    def run(seed: int, attention: str, curve: list[tuple[int, float]]) -> Run:
        overrides = [f"attention={attention}", f"seed={seed}"]
        return Run(Path(f"/{attention}/{seed}"), overrides, {}, {}, {"val/acc": curve})

    runs = [
        run(1, "linear", [(10, 0.2), (20, 0.4)]),
        run(2, "linear", [(10, 0.4), (20, 0.6), (30, 0.7)]),
        run(1, "softmax", [(10, 0.3)]),
    ]
    label_runs(runs)
    assert [r.label for r in runs] == ["linear", "linear", "softmax"]
    steps, mean, low, high = mean_curve([r.scalars["val/acc"] for r in runs[:2]])
    assert steps == [10, 20]  # only the steps every seed reached
    assert mean == pytest.approx([0.3, 0.5]) and low == [0.2, 0.4] and high == [0.4, 0.6]


def test_plot_curves_rejects_a_directory_without_runs(tmp_path: Path, data_dir: Path) -> None:
    result = run_cli("python", str(PLOT_CURVES), str(tmp_path), data_dir=data_dir, check=False)
    assert result.returncode == 1
    assert result.stderr.strip().startswith("plot_curves.py: error: no run directories")


# --- launchers, search, DDP --------------------------------------------------------------------


def test_submitit_local_launcher_runs_a_two_job_sweep(tmp_path: Path, data_dir: Path) -> None:
    sweep = tmp_path / "sweep"
    run_cli(
        "vitattn-train",
        "-m",
        "hydra/launcher=local",
        *FEW_STEPS,
        "attention=softmax,linear",
        f"hydra.sweep.dir={sweep}",
        data_dir=data_dir,
    )
    for job in ("0", "1"):
        assert json.loads((sweep / job / "metrics.json").read_text())["status"] == "completed"
    assert list((sweep / ".submitit").iterdir())  # the jobs went through submitit


def test_optuna_search_runs_two_trials(tmp_path: Path, data_dir: Path) -> None:
    sweep = tmp_path / "sweep"
    result = run_cli(
        "vitattn-train",
        "hparams_search=optuna",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.sampler.n_startup_trials=2",
        *FEW_STEPS,
        f"hydra.sweep.dir={sweep}",
        data_dir=data_dir,
    )
    trials = [json.loads((sweep / job / "metrics.json").read_text()) for job in ("0", "1")]
    assert all(t["attention"] == "linformer" and t["status"] == "completed" for t in trials)
    best = (sweep / "optimization_results.yaml").read_text()
    assert "best_value" in best and "optimizer.lr" in best
    assert "Best value" in result.stdout + result.stderr


def test_ddp_on_two_cpu_processes(tmp_path: Path, data_dir: Path) -> None:
    run_dir = tmp_path / "run"
    run_cli(
        "vitattn-train",
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        *FEW_STEPS,
        f"hydra.run.dir={run_dir}",
        data_dir=data_dir,
    )
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 8 and metrics["val/acc"] is not None
    # One TensorBoard log (fit + test event files of rank 0), nothing from rank 1.
    assert sorted(p.name for p in run_dir.iterdir() if p.is_dir()) == [
        ".hydra",
        "checkpoints",
        "tensorboard",
    ]
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 2
