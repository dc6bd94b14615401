"""The summary printed and written at the end of ``vitattn-train -m``
(``vitattn.analysis.sweep_summary``, registered in ``configs/train.yaml``)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from tests.support.faults import CrashAtStep
from tests.support.in_process import run_in_process
from tests.support.presets import FEW_STEPS, compose_config, plug
from tests.support.runners import run_sweep
from tests.support.tables import read_csv
from vitattn.analysis.sweep_summary import SweepSummary


def sweep_config(sweep_dir: Path) -> DictConfig:
    return OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})


def test_the_callback_writes_and_prints_the_summary(
    three_attentions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    SweepSummary().on_multirun_end(sweep_config(three_attentions))
    printed = capsys.readouterr().out
    assert "| attention=performer | completed |" in printed
    for name in ("summary.csv", "summary.md", "val_acc_vs_step.png", "attention_maps.png"):
        assert (three_attentions / name).is_file(), name
        assert f"wrote {three_attentions / name}" in printed
    assert (three_attentions / "summary.md").read_text().strip() in printed


@pytest.mark.parametrize("case", ["empty", "broken", "missing", "no sweep dir"])
def test_the_callback_never_fails_a_sweep(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    sweep = tmp_path / "sweep"
    if case != "missing":
        sweep.mkdir()
    if case == "broken":
        (sweep / "0" / ".hydra").mkdir(parents=True)
        (sweep / "0" / ".hydra" / "config.yaml").write_text("{not: yaml: at all")
    config = OmegaConf.create({}) if case == "no sweep dir" else sweep_config(sweep)
    with caplog.at_level(logging.WARNING):
        SweepSummary().on_multirun_end(config)
    assert "no " in caplog.text and "summary" in caplog.text
    assert not (sweep / "summary.md").exists()


def test_a_sweep_whose_end_hydra_skips_is_summarized_at_exit(three_attentions: Path) -> None:
    # Hydra raises instead of calling on_multirun_end when a job failed.
    callback = SweepSummary()
    callback.on_multirun_start(sweep_config(three_attentions))
    callback._at_exit()
    assert (three_attentions / "summary.md").is_file()
    (three_attentions / "summary.md").unlink()
    callback._at_exit()  # once only
    assert not (three_attentions / "summary.md").exists()


def test_a_sweep_that_ends_is_not_summarized_again_at_exit(three_attentions: Path) -> None:
    callback = SweepSummary()
    callback.on_multirun_start(sweep_config(three_attentions))
    callback.on_multirun_end(sweep_config(three_attentions))
    (three_attentions / "summary.md").unlink()
    callback._at_exit()
    assert not (three_attentions / "summary.md").exists()


def test_the_train_config_registers_the_callback(tmp_path: Path) -> None:
    cfg = compose_config("train", [], tmp_path)
    target = cfg.hydra.callbacks.sweep_summary._target_
    assert target == "vitattn.analysis.sweep_summary.SweepSummary"


@pytest.mark.slow
def test_a_sweep_ends_with_its_summary_and_a_run_with_none(tmp_path: Path, data_dir: Path) -> None:
    sweep = tmp_path / "sweep"
    result = run_sweep(sweep, *FEW_STEPS, "attention=softmax,linear", data_dir=data_dir)
    assert result.stdout.count("Sweep summary") == 1
    assert (sweep / "summary.md").read_text().strip() in result.stdout
    rows = read_csv(sweep / "summary.csv")
    assert sorted(row["attention"] for row in rows) == ["linear", "softmax"]
    assert (sweep / "val_acc_vs_step.png").is_file()

    run = tmp_path / "run"
    single = run_in_process("vitattn-train", *FEW_STEPS, f"hydra.run.dir={run}", data_dir=data_dir)
    assert "Sweep summary" not in single.stdout and not (run / "summary.md").exists()


@pytest.mark.slow
def test_a_sweep_with_a_failed_job_still_ends_with_its_summary(
    tmp_path: Path, data_dir: Path
) -> None:
    sweep = tmp_path / "sweep"
    crash = plug("crash", CrashAtStep, step="2,100")
    # its own process: the summary of a sweep that Hydra ends with an error is written at exit
    result = run_sweep(sweep, *FEW_STEPS, *crash, data_dir=data_dir, check=False, in_process=False)
    assert result.returncode != 0
    assert result.stdout.count("Sweep summary") == 1
    statuses = sorted(row["status"] for row in read_csv(sweep / "summary.csv"))
    assert statuses == ["completed", "failed"]
    assert "not completed: " in result.stdout
    # the bug's one line names the job's log, which alone holds the traceback (as for one run)
    assert "Traceback" not in result.stderr
    (crashed,) = [p for p in sweep.iterdir() if p.name.endswith("step=2")]
    line = (
        "vitattn-train: error: unexpected RuntimeError: boom at step 2; the traceback is in "
        f"{crashed}/train.log"
    )
    assert result.stderr.count(line) == 2  # the job's line, and Hydra's note of the failed job
    assert "RuntimeError: boom at step 2" in (crashed / "train.log").read_text()
    # the sweep's last word on stderr is the job's line: no offer of a stack trace there is none
    # of (hydra-core 1.3's "Set the environment variable HYDRA_FULL_ERROR=1 ...")
    assert result.stderr.strip().splitlines()[-1] == line
    assert "HYDRA_FULL_ERROR" not in result.stderr
