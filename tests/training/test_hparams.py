"""What a run records for TensorBoard's HPARAMS view (issue 37): the knobs as the kernel resolved
them, not ``null``; the columns of a sweep, the same for each of its jobs, the few every run shows
plus what the sweep varies, at most 40; ``differs`` on what the sweep varies alone, and the five
columns TensorBoard ticks when it opens held by every run."""

from __future__ import annotations

from pathlib import Path

import hydra
import pytest
from tensorboard.plugins.hparams import metadata

from tests.support.presets import TINY, compose_config
from vitattn.training.hparams import (
    KNOB_PREFIX,
    MAX_COLUMNS,
    TRAINING_COLUMNS,
    Sweep,
    option_knobs,
    sweep_of,
    training_hyperparameters,
    view_columns,
)
from vitattn.training.logger import RESULTS, experiment_summary
from vitattn.utils.config import group_options

COMPUTED = {
    "nystrom": {"landmarks": 16},  # min(64, tokens / 4)
    "bigbird": {"block": 4},  # min(16, tokens / 16)
    "reformer": {"chunk": 16, "buckets": 4},  # min(64, tokens / 4); about tokens / chunk, even
    "linformer": {"k": 8},  # tokens / 8
    "sparse": {"stride": 8, "summary": 1},  # isqrt(tokens); max(1, stride / 8)
    "local": {"global_tokens": 0},  # the class token, if any (pool=mean: none)
}
"""The knobs each mechanism leaves ``null``, at the 64 tokens of ``model=vit``, as its docs say."""

SHOWN_AT_FIRST = 5
"""TensorBoard ticks five settings when the view opens: those marked as differing, then by name."""


def recorded(attention: str, tmp_path: Path, *overrides: str) -> dict:
    """The settings a training run of ``attention`` records, its model built from the config."""
    cfg = compose_config("train", [*TINY, f"attention={attention}", *overrides], tmp_path)
    net = hydra.utils.instantiate(cfg.model)
    params = sum(p.numel() for p in net.parameters())
    choices = {"attention": attention, "model": "vit", "optimizer": "adamw"}
    return training_hyperparameters(cfg, choices, params, net).values


@pytest.mark.parametrize("attention", group_options("attention"))
def test_each_knob_is_recorded_with_the_value_the_run_used(attention: str, tmp_path: Path) -> None:
    values = recorded(attention, tmp_path)
    knobs = {k.removeprefix(KNOB_PREFIX): v for k, v in values.items() if k.startswith(KNOB_PREFIX)}
    defaults = {k.removeprefix(KNOB_PREFIX): v for k, v in option_knobs(attention).items()}
    assert knobs.keys() == defaults.keys()
    computed = {knob for knob, value in defaults.items() if value is None}
    assert computed == set(COMPUTED.get(attention, {}))  # every null knob is known here
    assert {knob: knobs[knob] for knob in computed} == COMPUTED.get(attention, {})
    assert {k: v for k, v in knobs.items() if k not in computed} == {
        k: v for k, v in defaults.items() if k not in computed
    }
    assert values["attention"] == attention and values["model/tokens"] == 64


def test_a_knob_given_on_the_command_line_is_recorded_as_given(tmp_path: Path) -> None:
    values = recorded("nystrom", tmp_path, "attention.landmarks=8", "model.patch_size=8")
    assert values[f"{KNOB_PREFIX}landmarks"] == 8
    values = recorded("bigbird", tmp_path, "model.patch_size=2")  # 256 tokens: blocks of 16
    assert values[f"{KNOB_PREFIX}block"] == 16 and values["model/tokens"] == 256


def test_a_sweep_is_what_its_overrides_vary() -> None:
    command = ["attention=softmax,nystrom", "seed=1,2", "trainer=cpu", "model.embed_dim=32"]
    assert sweep_of(command) == Sweep(("attention", "seed"), ("softmax", "nystrom"))
    every = sweep_of(["attention=glob(*)", "hydra.sweep.dir=/tmp/x", "hydra.job.num=1,2"])
    assert every == Sweep(("attention",), tuple(group_options("attention")))
    optuna = [  # an Optuna search's space (hydra.sweeper.params)
        "optimizer.lr=tag(log, interval(1e-4, 3e-3))",
        "attention.k=choice(4, 8, 16)",
        "optimizer.weight_decay=interval(0.0, 0.1)",
    ]
    assert sweep_of(optuna) == Sweep(("optimizer.lr", "attention.k", "optimizer.weight_decay"))
    assert sweep_of(["attention=nystrom", "seed=3"]) == Sweep()


def knob(name: str) -> str:
    return f"{KNOB_PREFIX}{name}"


def test_the_columns_are_the_shown_few_the_sweeps_knobs_and_what_it_varies() -> None:
    values = {name: 1 for name in TRAINING_COLUMNS}
    sweep = Sweep(("attention", "seed"), ("softmax", "nystrom", "bigbird"))
    columns = view_columns(values, TRAINING_COLUMNS, sweep)
    knobs = {
        "dropout",  # softmax's; impl and sdpa_backend choose how, not what
        *("landmarks", "pinv", "pinv_iters", "conv_kernel"),
        *("block", "window_blocks", "num_random", "global_blocks"),  # not impl, tile_memory
    }
    assert set(columns) == {*TRAINING_COLUMNS, *map(knob, knobs)}
    assert len(columns) == 20
    assert columns[knob("landmarks")] == 0  # computed: a number, whichever run TensorBoard reads
    varied = Sweep(("attention.impl", "model.pool", "ckpt_path", "paths.data_dir"), ("bigbird",))
    columns = view_columns({**values, knob("impl"): "flex"}, TRAINING_COLUMNS, varied)
    assert {knob("impl"), "model/pool"} <= set(columns)  # implementation knobs when varied
    assert not [name for name in columns if "path" in name or "dir" in name]
    every = Sweep(("attention", "seed", "optimizer.lr"), tuple(group_options("attention")))
    assert len(view_columns(values, TRAINING_COLUMNS, every)) <= MAX_COLUMNS


@pytest.mark.parametrize(
    "varied",
    [(), ("seed",), ("attention",), ("attention", "seed"), ("attention", "optimizer.lr")],
)
def test_the_columns_tensorboard_ticks_first_are_held_by_every_run(varied: tuple) -> None:
    """TensorBoard orders the columns by ``differs``, then by name, and ticks the first five; a
    run without one of them drops out of the parallel-coordinates view. Knobs (another
    attention's for some runs) sort after the settings every run has."""
    values = {name: 1 for name in TRAINING_COLUMNS}
    sweep = Sweep(varied, ("softmax", "nystrom", "bigbird", "reformer", "linear"))
    columns = view_columns(values, TRAINING_COLUMNS, sweep)
    differing = {name.replace(".", "/") for name in varied}
    ordered = sorted(columns, key=lambda name: (name not in differing, name))
    assert set(ordered[:SHOWN_AT_FIRST]) <= set(TRAINING_COLUMNS) | differing
    assert not [name for name in ordered[:SHOWN_AT_FIRST] if name.startswith(KNOB_PREFIX)]


def test_only_what_the_sweep_varies_is_marked_as_differing() -> None:
    columns = {"attention": "nystrom", "seed": 1, "params": 10, knob("landmarks"): 16}
    summary = experiment_summary(columns, RESULTS, varied={"attention", "seed"})
    experiment = metadata.parse_experiment_plugin_data(
        summary.value[0].metadata.plugin_data.content
    )
    differs = {info.name: info.differs for info in experiment.hparam_infos}
    assert differs == {"attention": True, "seed": True, "params": False, knob("landmarks"): False}
    names = [info.display_name for info in experiment.metric_infos[:SHOWN_AT_FIRST]]
    assert names == ["test acc", "best val acc", "images/s", "GFLOP/image", "seconds"]


def test_either_tasks_layout_holds_every_tasks_results() -> None:
    """TensorBoard reads one run's layout for the whole log directory: where it read a training
    run's, a fine-tuning run beside it showed no base or merged test accuracy (audit). Each
    task's layout holds its own results first (the five ticked), then the other's."""
    from vitattn.training.logger import TASK_RESULTS, view_results

    every = {key: tag for task in TASK_RESULTS for key, tag in task.items()}
    for results in TASK_RESULTS:
        layout = view_results(results)
        assert list(layout)[: len(results)] == list(results)
        assert layout == {key: every[key] for key in layout} and set(layout) == set(every)
    assert "data/shift" in TRAINING_COLUMNS  # a shifted run's test acc is no clean one's


def test_an_evaluation_names_its_checkpoint_without_a_path(tmp_path: Path) -> None:
    """The HPARAMS view shows no paths (DESIGN.md): under the log directory the checkpoint is
    named from there, which starts with its run's TensorBoard name; elsewhere by its run's
    folder and what follows, nothing above."""
    from vitattn.training.hparams import checkpoint_name

    log_dir = tmp_path / "outputs"
    inside = log_dir / "train" / "runs" / "r" / "checkpoints" / "last.ckpt"
    assert checkpoint_name(inside, log_dir) == "train/runs/r/checkpoints/last.ckpt"
    outside = tmp_path / "home" / "me" / "run" / "checkpoints" / "step8.ckpt"
    assert checkpoint_name(outside, log_dir) == "run/checkpoints/step8.ckpt"
    assert checkpoint_name(tmp_path / "loose" / "model.ckpt", log_dir) == "loose/model.ckpt"
