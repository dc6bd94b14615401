"""Sweeps: one directory per job, a failing job that stops no other, launchers, Optuna, DDP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.faults import NanLossAtStep
from tests.support.in_process import refused_in_process, run_in_process
from tests.support.presets import FEW_STEPS, TINY, plug
from tests.support.probes import CountTestImages, RecordAugmentSeed
from tests.support.runners import run_cli, run_sweep
from tests.support.tables import read_csv
from vitattn.analysis.summary import summarize


@pytest.mark.slow
def test_multirun_writes_one_directory_per_job(tmp_path: Path, data_dir: Path) -> None:
    sweep = tmp_path / "sweep"
    run_sweep(sweep, *TINY, "trainer.max_steps=3", "seed=1,2", "logger=csv", data_dir=data_dir)
    # Each job is named by what differs between the jobs, not by every override.
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["seed=1", "seed=2"]
    for job in ("seed=1", "seed=2"):
        metrics = json.loads((sweep / job / "metrics.json").read_text())
        assert metrics["steps"] == 3
        assert (sweep / job / "checkpoints" / "last.ckpt").is_file()
        assert (sweep / job / "csv" / "metrics.csv").is_file()
    assert (sweep / "multirun.yaml").is_file()


@pytest.mark.slow
def test_failed_jobs_are_recorded_and_the_others_finish(tmp_path: Path, data_dir: Path) -> None:
    sweep = tmp_path / "sweep"
    result = run_sweep(
        sweep,
        *FEW_STEPS,
        *plug("nan", NanLossAtStep, step="2,1000,2,1000"),  # diverges at step 2 in jobs 1 and 3
        data_dir=data_dir,
        check=False,
    )
    assert result.returncode != 0  # the sweep reports that a job failed
    assert "train/loss became NaN or infinite by step" in result.stderr
    # the sweep ends on the failed job's one line, without a traceback
    assert "Traceback" not in result.stderr
    failed = [line for line in result.stderr.splitlines() if line.startswith("vitattn-train:")]
    assert failed and all("became NaN or infinite" in line for line in failed)
    # The sweep repeats values: its jobs are numbered so that no two share a directory.
    jobs = [f"{n}_+callbacks.nan.step={step}" for n, step in enumerate([2, 1000, 2, 1000])]
    assert sorted(p.name for p in sweep.iterdir() if (p / ".hydra").is_dir()) == jobs
    statuses = [json.loads((sweep / job / "metrics.json").read_text())["status"] for job in jobs]
    assert statuses == ["failed", "completed", "failed", "completed"]
    for job in jobs[1::2]:
        assert (sweep / job / "checkpoints" / "last.ckpt").is_file()
    out = tmp_path / "figures"
    summarize([sweep], out)
    rows = read_csv(out / "summary.csv")
    assert [row["status"] for row in rows] == statuses
    assert "NaN" in rows[0]["error"] and "NaN" in rows[2]["error"]


@pytest.mark.slow
def test_a_sweep_with_an_invalid_job_is_refused_before_any_job_runs(
    tmp_path: Path, data_dir: Path
) -> None:
    sweep = tmp_path / "sweep"
    jobs = ["-m", *FEW_STEPS, "model.heads=2,3", f"hydra.sweep.dir={sweep}"]  # 3 does not divide 32
    assert refused_in_process("vitattn-train", *jobs, data_dir=data_dir, creates=sweep) == (
        "model.embed_dim=32 is not divisible by model.heads=3; choose model.heads among the "
        "divisors of 32: [1, 2, 4, 8, 16, 32]"
    )


@pytest.mark.slow
def test_submitit_local_launcher_runs_a_two_job_sweep(tmp_path: Path, data_dir: Path) -> None:
    sweep = tmp_path / "sweep"
    launcher = "hydra/launcher=local"
    jobs = ["attention=softmax,linear"]  # submitit starts a process per job: so does the command
    run_sweep(sweep, launcher, *FEW_STEPS, *jobs, data_dir=data_dir, in_process=False)
    for job in ("attention=softmax", "attention=linear"):
        assert json.loads((sweep / job / "metrics.json").read_text())["status"] == "completed"
    assert list((sweep / ".submitit").iterdir())  # the jobs went through submitit


@pytest.mark.slow
def test_ddp_on_two_cpu_processes(tmp_path: Path, data_dir: Path) -> None:
    run_dir = tmp_path / "run"
    counts, seeds = tmp_path / "test_images", tmp_path / "augment_seed"
    run_cli(
        "vitattn-train",
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        *FEW_STEPS,
        *plug("count", CountTestImages, path=counts),
        *plug("augment", RecordAugmentSeed, path=seeds),
        f"hydra.run.dir={run_dir}",
        data_dir=data_dir,
    )
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 8 and metrics["val/acc"] is not None
    # Each process augments with a generator of its own (they drew alike until 2026-12-02).
    drawn = [int(seeds.with_name(f"augment_seed.rank{rank}").read_text()) for rank in (0, 1)]
    assert drawn[0] != drawn[1]
    # Each process tested its own half of the 1017 test images, none twice (torch's sampler
    # repeated one to make the halves even, red team), and the accuracy logged is over all of
    # them: one process evaluating the same checkpoint finds the same.
    per_rank = [int(counts.with_name(f"test_images.rank{rank}").read_text()) for rank in (0, 1)]
    assert per_rank == [509, 508]
    run_in_process(
        "vitattn-eval",
        f"ckpt_path={metrics['ckpt_path']}",
        "trainer=cpu",
        f"hydra.run.dir={tmp_path / 'eval'}",
        data_dir=data_dir,
    )
    single = json.loads((tmp_path / "eval" / "metrics.json").read_text())["test/acc"]
    assert single == pytest.approx(metrics["test/acc"], abs=1e-6)  # one image is 1e-3
    # One TensorBoard log, written by rank 0 only (its process id in the file names).
    assert sorted(p.name for p in run_dir.iterdir() if p.is_dir()) == [
        ".hydra",
        "attention",
        "checkpoints",
    ]
    events = list(run_dir.glob("events.out.tfevents.*"))
    assert events and len({name.name.split(".")[-2] for name in events}) == 1
