"""Accuracy curves and sweep summaries (``scripts/plot_curves.py``, ``vitattn.analysis.curves``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import FEW_STEPS, read_csv, run_cli, run_sweep
from vitattn.analysis.curves import Run, label_runs, mean_curve
from vitattn.utils.config import PROJECT_ROOT

PLOT_CURVES = PROJECT_ROOT / "scripts" / "plot_curves.py"


@pytest.mark.slow
def test_attention_sweep_gives_curves_and_summary(tmp_path: Path, data_dir: Path) -> None:
    sweep = tmp_path / "sweep"
    run_sweep(sweep, *FEW_STEPS, "attention=softmax,linear", data_dir=data_dir)
    assert (sweep / "0" / "metrics.json").is_file() and (sweep / "1" / "metrics.json").is_file()
    result = run_cli("python", str(PLOT_CURVES), str(sweep), data_dir=data_dir)
    assert "wrote" in result.stdout
    for name in ("val_acc_vs_step.png", "train_loss_vs_step.png", "summary.md"):
        assert (sweep / name).stat().st_size > 0, name
    rows = read_csv(sweep / "summary.csv")
    assert [row["attention"] for row in rows] == ["softmax", "linear"]
    for row in rows:
        assert row["status"] == "completed"
        assert 0.0 <= float(row["best_val_acc"]) <= 1.0 and float(row["test_acc"]) >= 0.0
        assert float(row["best_val_acc"]) >= float(row["final_val_acc"])
        assert int(row["params"]) > 0 and float(row["images_per_sec"]) > 0
    assert json.loads(rows[1]["knobs"]) == {"eps": 1e-6}


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


@pytest.mark.slow
def test_plot_curves_rejects_a_directory_without_runs(tmp_path: Path, data_dir: Path) -> None:
    result = run_cli("python", str(PLOT_CURVES), str(tmp_path), data_dir=data_dir, check=False)
    assert result.returncode == 1
    assert result.stderr.strip().startswith("plot_curves.py: error: no run directories")
