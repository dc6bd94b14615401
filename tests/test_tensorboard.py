"""TensorBoard as a researcher reads it after a sweep (issue 18): runs named by what differs,
the step count users see everywhere, curated HPARAMS with the results of ``metrics.json``,
attention maps and fidelity at validation, a confusion matrix at test. Event files are read
with TensorBoard's own ``EventAccumulator``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

from tests.helpers import FEW_STEPS, run_sweep
from vitattn.logger import RESULTS, summary_tag

CURATED = {
    "attention",
    "model",
    "model/embed_dim",
    "model/depth",
    "model/heads",
    "model/patch_size",
    "model/pool",
    "model/tokens",
    "model/mlp_dim",
    "params",
    "gflop_per_image",
    "optimizer",
    "optimizer/lr",
    "optimizer/weight_decay",
    "data/batch_size",
    "seed",
    "trainer/precision",
}
"""The HPARAMS of a training run besides the attention's own knobs (``attention/<knob>``)."""


def events(run_dir: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "images": 0})
    accumulator.Reload()
    return accumulator


def hparams_of(run_dir: Path) -> tuple[dict[str, Any], list[str], str]:
    """The run's HPARAMS session (names and values), the metrics TensorBoard finds for it (the
    scalars of its run, ``<run>/hparams``), and the status it ended with."""
    accumulator = events(run_dir / "hparams")
    content = accumulator.PluginTagToContent("hparams")
    assert "_hparams_/experiment" not in content  # TensorBoard builds the table from sessions
    session = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_start_info"]
    ).session_start_info
    end = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_end_info"]
    ).session_end_info
    values = {
        key: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
        for key, value in session.hparams.items()
    }
    status = api_pb2.Status.Name(end.status)
    return values, sorted(accumulator.Tags()["scalars"]), status


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> tuple[Path, str]:
    """A 2-job sweep: its directory and what it printed."""
    folder = tmp_path_factory.mktemp("tensorboard") / "sweep"
    result = run_sweep(folder, *FEW_STEPS, "attention=softmax,linear", "seed=3", data_dir=data_dir)
    return folder, result.stdout + result.stderr


@pytest.fixture(scope="module")
def sweep(swept: tuple[Path, str]) -> Path:
    return swept[0]


@pytest.mark.slow
def test_runs_are_named_by_the_attention_and_hold_their_own_events(sweep: Path) -> None:
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert jobs == ["attention=linear", "attention=softmax"]  # seed=3 is the same for both
    for job in jobs:
        assert list((sweep / job).glob("events.out.tfevents.*"))  # no tensorboard/ folder
        assert not (sweep / job / "tensorboard").exists()


@pytest.mark.slow
def test_curves_count_steps_done_and_hide_epoch_and_test(sweep: Path) -> None:
    scalars = events(sweep / "attention=linear").Tags()["scalars"]
    assert "epoch" not in scalars and not [t for t in scalars if t.startswith("test/")]
    accumulator = events(sweep / "attention=linear")
    assert [e.step for e in accumulator.Scalars("train/loss")] == list(range(1, 9))
    assert [e.step for e in accumulator.Scalars("val/acc")] == [4, 8]  # as the checkpoints
    best = [p.name for p in (sweep / "attention=linear/checkpoints").glob("step*.ckpt")]
    assert len(best) == 1 and int(best[0][4:10]) in (4, 8)  # step000004-... or step000008-...


@pytest.mark.slow
def test_validation_logs_fidelity_entropy_and_attention_maps(sweep: Path) -> None:
    fidelity = {}
    for attention in ("softmax", "linear"):
        accumulator = events(sweep / f"attention={attention}")
        tags = accumulator.Tags()
        assert {"val/fidelity", "val/fidelity/layer_0", "val/entropy/layer_0"} <= set(
            tags["scalars"]
        )
        assert {"val/attention/layer_0", "val/attention/rollout"} <= set(tags["images"])
        maps = accumulator.Images("val/attention/layer_0")
        assert [m.step for m in maps] == [4, 8]
        assert maps[0].width == 8 * 64 + 9 * 2 and maps[0].height == 4 * 64 + 5 * 2
        fidelity[attention] = [e.value for e in accumulator.Scalars("val/fidelity")]
        entropy = accumulator.Scalars("val/entropy/layer_0")[-1].value
        assert 0 < entropy <= np.log(64) + 1e-4  # 64 tokens: log(64) for uniform attention
        saved = np.load(sweep / f"attention={attention}" / "attention" / "maps.npz")
        assert saved["images"].shape == (8, 64, 64, 3) and saved["layers"].shape == (1, 8, 64, 64)
        assert int(saved["step"]) == 8 and str(saved["attention"]) == attention
    assert max(fidelity["softmax"]) < 1e-5  # softmax is its own reference
    assert min(fidelity["linear"]) > 1e-3


@pytest.mark.slow
def test_hparams_are_curated_and_show_the_results_of_metrics_json(sweep: Path) -> None:
    run = sweep / "attention=linear"
    hparams, metric_tags, status = hparams_of(run)
    knobs = {key for key in hparams if key.startswith("attention/")}
    assert set(hparams) - knobs == CURATED
    assert knobs == {"attention/eps"}  # linear attention's one knob
    assert hparams["attention"] == "linear" and hparams["seed"] == 3
    assert not [k for k in hparams if "_target_" in k or "dir" in k or "url" in k]
    # The session's metrics are the results alone, not the curves of the run.
    metrics = json.loads((run / "metrics.json").read_text())
    shown = [key for key in RESULTS if metrics.get(key) is not None]
    assert metric_tags == sorted(summary_tag(key) for key in shown)
    # TensorBoard shows the first five metrics by tag: the accuracies, then speed and time.
    assert metric_tags[:5] == [
        "~summary/acc_best_val",
        "~summary/acc_final_val",
        "~summary/acc_test",
        "~summary/images_per_sec",
        "~summary/seconds",
    ]
    assert status == "STATUS_SUCCESS"
    results = events(run / "hparams")
    for key in shown:
        (logged,) = results.Scalars(summary_tag(key))
        assert logged.value == pytest.approx(metrics[key], rel=1e-6), key
        assert logged.step == 8
    curves = events(run)
    assert metrics["val/acc_best"] == pytest.approx(max(e.value for e in curves.Scalars("val/acc")))
    assert "~summary/acc_best_val" not in curves.Tags()["scalars"]


@pytest.mark.slow
def test_the_test_writes_a_confusion_matrix_and_the_worst_mistakes(sweep: Path) -> None:
    run = sweep / "attention=softmax"
    metrics = json.loads((run / "metrics.json").read_text())
    matrix = np.array(metrics["test/confusion_matrix"])
    assert matrix.shape == (10, 10) and matrix.sum() == 1017  # the test images of the subset
    assert np.trace(matrix) / matrix.sum() == pytest.approx(metrics["test/acc"], abs=1e-6)
    per_class = metrics["test/acc_per_class"]
    assert list(per_class)[:2] == ["airplane", "automobile"] and len(per_class) == 10
    assert (run / "confusion_matrix.png").is_file()
    assert (run / "most_confident_errors.png").is_file()
    images = events(run).Tags()["images"]
    assert {"~summary/confusion_matrix", "~summary/most_confident_errors"} <= set(images)


@pytest.mark.slow
def test_each_run_ends_with_one_line_and_the_sweep_with_its_summary(
    swept: tuple[Path, str],
) -> None:
    sweep, output = swept
    for attention in ("softmax", "linear"):
        metrics = json.loads((sweep / f"attention={attention}" / "metrics.json").read_text())
        line = (
            f"attention={attention}: best val/acc {metrics['val/acc_best']:.2%}, "
            f"test/acc {metrics['test/acc']:.2%}, {metrics['seconds']:.0f} s; "
            f"{sweep / f'attention={attention}'}"
        )
        assert line in output
    assert "Test metric" not in output  # no 17-digit test table
    assert (sweep / "summary.md").is_file() and (sweep / "attention_maps.png").is_file()
    table = (sweep / "summary.md").read_text()
    assert "attention=linear" in table and "attention=softmax" in table
    assert f"Sweep summary ({sweep})" in output and table.splitlines()[0] in output


def test_only_real_tensorboard_writers_on_rank_zero_get_images(tmp_path, monkeypatch) -> None:
    """fast_dev_run's DummyLogger and other ranks' dummy experiments answer every call with
    None: writing an image to them failed every fast_dev_run once."""
    from lightning.pytorch.loggers.logger import DummyLogger
    from lightning.pytorch.utilities import rank_zero_only

    from vitattn.logger import RunTensorBoard, summary_writers

    real = RunTensorBoard(save_dir=str(tmp_path))
    assert list(summary_writers([DummyLogger(), real])) == [real.experiment]
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    assert list(summary_writers([real])) == []
