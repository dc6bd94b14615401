"""TensorBoard's HPARAMS view of real runs as its hparams plugin serves it (issue 37): a sweep's
columns are the few every run shows plus what the sweep varies, with the knobs the runs used
rather than ``null``; ``differs`` marks what the sweep varies alone; and every trial, a resumed
one too, holds the settings and results the view ticks when it opens, so the
parallel-coordinates view draws a line for each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.support.faults import SigtermAtStep
from tests.support.in_process import run_in_process
from tests.support.presets import FEW_STEPS, TINY, plug, steps
from tests.support.runners import run_cli, run_sweep
from tests.test_tensorboard import hparams_view
from vitattn.training.hparams import KNOB_PREFIX, MAX_COLUMNS, TRAINING_COLUMNS
from vitattn.training.logger import RESULTS, summary_tag

pytestmark = pytest.mark.slow

SHOWN_AT_FIRST = 5
"""Settings and results TensorBoard ticks when the view opens: the first five of each (settings
marked as differing first, then by name)."""

JOBS = ["attention=bigbird", "attention=nystrom", "attention=reformer"]

RESOLVED = {
    "attention=nystrom": {"landmarks": 16},
    "attention=bigbird": {"block": 4},
    "attention=reformer": {"chunk": 16, "buckets": 4},
}
"""The knobs ``configs/attention`` leaves ``null``, as computed for 64 tokens (their docs)."""


def results_on_this_machine() -> set[str]:
    """The result tags every run has (peak memory is measured on a GPU only, compile seconds in
    compiled runs only)."""
    measured = [
        key
        for key in RESULTS
        if (key != "peak_memory_gb" or torch.cuda.is_available()) and key != "train/compile_seconds"
    ]
    return {summary_tag(key, RESULTS) for key in measured}


def assert_every_trial_draws_a_line(experiment: object, groups: list) -> None:
    """Every trial holds each setting and result the view ticks when it opens, and every result
    of this machine."""
    infos = sorted(experiment.hparam_infos, key=lambda info: (not info.differs, info.name))
    ticked = [info.name for info in infos[:SHOWN_AT_FIRST]]
    ticked_results = {info.name.tag for info in experiment.metric_infos[:SHOWN_AT_FIRST]}
    for group in groups:
        assert set(ticked) <= set(group.hparams), group.name
        values = {metric.name.tag: metric.value for metric in group.metric_values}
        assert ticked_results | results_on_this_machine() <= set(values), group.name


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """``vitattn-train -m attention=nystrom,bigbird,reformer``: the three knobs computed from
    the token count."""
    folder = tmp_path_factory.mktemp("hparams") / "sweep"
    run_sweep(folder, *FEW_STEPS, "attention=nystrom,bigbird,reformer", data_dir=data_dir)
    return folder


def test_a_sweep_shows_its_resolved_knobs_in_few_columns(sweep: Path) -> None:
    _, experiment, groups = hparams_view(sweep)
    assert sorted(group.name for group in groups) == JOBS
    columns = [info.name for info in experiment.hparam_infos]
    knobs = {  # nystrom's 4, bigbird's 4 but impl and tile_memory, reformer's 3
        *("landmarks", "pinv", "pinv_iters", "conv_kernel"),
        *("block", "window_blocks", "num_random", "global_blocks"),
        *("buckets", "hashes", "chunk"),
    }
    assert set(columns) == {*TRAINING_COLUMNS, *(f"{KNOB_PREFIX}{knob}" for knob in knobs)}
    assert len(columns) == 22 <= MAX_COLUMNS
    # Only the attention differs: seed, lr, tokens and params are the same in every job.
    assert [info.name for info in experiment.hparam_infos if info.differs] == ["attention"]
    for group in groups:
        values = group.hparams
        for knob, value in RESOLVED[group.name].items():
            assert values[f"{KNOB_PREFIX}{knob}"].number_value == value, (group.name, knob)
        assert not [name for name, value in values.items() if value.string_value == "null"]
    assert_every_trial_draws_a_line(experiment, groups)
    # The results come first among the metrics: test acc is the one the table shows at 1600 px.
    assert [info.display_name for info in experiment.metric_infos[:SHOWN_AT_FIRST]] == [
        "test acc",
        "best val acc",
        "images/s",
        "GFLOP/image",
        "seconds",
    ]


def test_a_resumed_run_carries_every_result(tmp_path: Path, data_dir: Path) -> None:
    """A run stopped by SIGTERM at step 8 of 12 and resumed trains no steady step in its second
    attempt (its first five are warm-up): its images/s come from the first, carried in the
    checkpoint, and the view has every result of it beside an uninterrupted run's."""
    logdir = tmp_path / "runs"
    run = [*TINY, *steps(12, 4)]
    resumed = logdir / "resumed"
    stop = [*run, *plug("fault", SigtermAtStep, step=8), f"hydra.run.dir={resumed}"]
    assert run_cli("vitattn-train", *stop, data_dir=data_dir, check=False).returncode == 143
    resume = ["resume=true", f"hydra.run.dir={resumed}", "~callbacks.fault"]
    run_in_process("vitattn-train", *resume, data_dir=data_dir)
    run_in_process("vitattn-train", *run, f"hydra.run.dir={logdir / 'straight'}", data_dir=data_dir)
    metrics = json.loads((resumed / "metrics.json").read_text())
    assert metrics["attempts"] == 2 and metrics["train/images_per_sec"] > 0

    _, experiment, groups = hparams_view(logdir)
    assert sorted(group.name for group in groups) == ["resumed", "straight"]
    assert not [info.name for info in experiment.hparam_infos if info.differs]  # no sweep
    assert_every_trial_draws_a_line(experiment, groups)
    by_name = {group.name: group for group in groups}
    values = {metric.name.tag: metric.value for metric in by_name["resumed"].metric_values}
    tag = summary_tag("train/images_per_sec", RESULTS)
    assert values[tag] == pytest.approx(metrics["train/images_per_sec"], rel=1e-6)
