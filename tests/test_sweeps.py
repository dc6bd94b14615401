"""Sweeps: one directory per job, a failing job that stops no other, launchers, Optuna, DDP."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from tests.helpers import FEW_STEPS, TINY, run_cli
from vitattn.analysis.curves import summarize


def read_summary(directory: Path) -> list[dict[str, str]]:
    with (directory / "summary.csv").open() as handle:
        return list(csv.DictReader(handle))


def test_multirun_writes_one_directory_per_job(tmp_path: Path, data_dir: Path) -> None:
    sweep = tmp_path / "sweep"
    run_cli(
        "vitattn-train",
        "-m",
        *TINY,
        "trainer.max_steps=3",
        "seed=1,2",
        "logger=csv",
        f"hydra.sweep.dir={sweep}",
        data_dir=data_dir,
    )
    for job in ("0", "1"):
        metrics = json.loads((sweep / job / "metrics.json").read_text())
        assert metrics["steps"] == 3
        assert (sweep / job / "checkpoints" / "last.ckpt").is_file()
        assert (sweep / job / "csv" / "metrics.csv").is_file()
    assert (sweep / "multirun.yaml").is_file()


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
