"""TensorBoard as a researcher reads it after a sweep (issues 18 and 28): runs named by what
differs, one run per job, the step count users see everywhere, curated HPARAMS whose trials are
the runs and whose metrics are the results of ``metrics.json``, attention maps and fidelity at
validation, a confusion matrix and the worst mistakes at test. Event files are read with
TensorBoard's own ``EventAccumulator`` and ``EventMultiplexer``, the HPARAMS view through the
hparams plugin's own request handlers."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2

from tests.support.presets import FEW_STEPS
from tests.support.runners import run_sweep
from vitattn.training.callbacks.insight import KEY_HEIGHT, colour_map
from vitattn.training.hparams import KNOB_PREFIX, MAX_COLUMNS
from vitattn.training.logger import RESULTS, merge_equal_learning_rates, summary_tag

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
    "optimizer",
    "optimizer/lr",
    "optimizer/weight_decay",
    "data/batch_size",
    "data/shift",
    "seed",
    "trainer/precision",
}
"""The HPARAMS of a training run besides the attention's own knobs (``~attention/<knob>``)."""


def events(run_dir: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "images": 0})
    accumulator.Reload()
    return accumulator


SHOWN_AT_FIRST = 5

JOBS = [f"attention={a},seed={s}" for a in ("linear", "softmax") for s in (3, 4)]
LINEAR, SOFTMAX = "attention=linear,seed=3", "attention=softmax,seed=3"
SEED_MEANS = ["attention=linear (2 seeds)", "attention=softmax (2 seeds)"]
"""Settings and metrics the HPARAMS view ticks when it opens (its frontend: the first five
settings, those marked ``differs`` first, and the first five metrics)."""


def hparams_view(logdir: Path) -> tuple[list[str], Any, list[Any]]:
    """What TensorBoard serves for ``--logdir logdir``: the run names, and the HPARAMS view's
    experiment and session groups, from the hparams plugin's own request handlers."""
    from tensorboard import context
    from tensorboard.backend.event_processing.data_provider import MultiplexerDataProvider
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import backend_context, get_experiment, list_session_groups

    multiplexer = EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    provider = MultiplexerDataProvider(multiplexer, str(logdir))
    plugin_context = backend_context.Context(
        base_plugin.TBContext(logdir=str(logdir), multiplexer=multiplexer, data_provider=provider)
    )
    request = context.RequestContext()
    experiment = get_experiment.Handler(
        request, plugin_context, "", api_pb2.GetExperimentRequest(hparams_limit=1000)
    ).run()
    groups = list_session_groups.Handler(
        request,
        plugin_context,
        "",
        api_pb2.ListSessionGroupsRequest(
            allowed_statuses=[
                api_pb2.STATUS_UNKNOWN,
                api_pb2.STATUS_SUCCESS,
                api_pb2.STATUS_RUNNING,
            ],
            start_index=0,
            slice_size=100,
        ),
    ).run()
    return sorted(multiplexer.Runs()), experiment, list(groups.session_groups)


def hparams_of(run_dir: Path) -> tuple[dict[str, Any], str]:
    """The run's HPARAMS session as written in its own folder (names and values) and the status
    it ended with."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = events(run_dir).PluginTagToContent("hparams")
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
    return values, api_pb2.Status.Name(end.status)


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> tuple[Path, str]:
    """A sweep of 2 attentions x 2 seeds: its directory and what it printed."""
    folder = tmp_path_factory.mktemp("tensorboard") / "sweep"
    result = run_sweep(
        folder, *FEW_STEPS, "attention=softmax,linear", "seed=3,4", data_dir=data_dir
    )
    return folder, result.stdout + result.stderr


@pytest.fixture(scope="module")
def sweep(swept: tuple[Path, str]) -> Path:
    return swept[0]


@pytest.mark.slow
def test_runs_are_named_by_the_attention_and_hold_their_own_events(sweep: Path) -> None:
    jobs = sorted(p.name for p in sweep.iterdir() if (p / ".hydra").is_dir())
    assert jobs == JOBS
    for job in jobs:
        assert list((sweep / job).glob("events.out.tfevents.*"))  # no tensorboard/ folder
        assert not (sweep / job / "tensorboard").exists()
        assert not (sweep / job / "hparams").exists()  # the HPARAMS session is the run's own


@pytest.mark.slow
def test_curves_count_steps_done_and_hide_epoch_and_test(sweep: Path) -> None:
    scalars = events(sweep / LINEAR).Tags()["scalars"]
    assert "epoch" not in scalars and not [t for t in scalars if t.startswith("test/")]
    accumulator = events(sweep / LINEAR)
    assert [e.step for e in accumulator.Scalars("train/loss")] == list(range(1, 9))
    assert [e.step for e in accumulator.Scalars("val/acc")] == [4, 8]  # as the checkpoints
    best = [p.name for p in (sweep / LINEAR / "checkpoints").glob("step*.ckpt")]
    assert len(best) == 1 and int(best[0][4:10]) in (4, 8)  # step000004-... or step000008-...


def assert_colour_key(png: bytes, grid_height: int) -> None:
    """The image TensorBoard shows ends in the colour key: below the grid, a bar from the colour
    table's first colour to its last, as the overlays blend them (a key added 2026-12-01: the
    maps had no scale)."""
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(float) / 255
    assert pixels.shape[0] == grid_height + KEY_HEIGHT
    bar = pixels[grid_height + 5]  # a row through the bar
    lut = colour_map().numpy()
    for pixel, colour in ((bar[2], lut[0]), (bar[-3], lut[-1])):
        np.testing.assert_allclose(pixel, 0.45 * 0.5 + 0.55 * colour, atol=2 / 255)
    assert pixels[grid_height + 12 :, :40].max() > 0.9  # its "0", white on black


@pytest.mark.slow
def test_validation_logs_fidelity_entropy_gap_and_attention_maps(sweep: Path) -> None:
    fidelity = {}
    for attention in ("softmax", "linear"):
        accumulator = events(sweep / f"attention={attention},seed=3")
        tags = accumulator.Tags()
        assert {"val/fidelity", "val/entropy_gap"} <= set(tags["scalars"])
        # One layer: its curve is the mean, not drawn twice.
        assert not [t for t in tags["scalars"] if "/layer_" in t]
        assert {"~attention/layer_0", "~attention/rollout"} <= set(tags["images"])
        maps = accumulator.Images("~attention/layer_0")
        assert [m.step for m in maps] == [4, 8]
        grid_height = 4 * 64 + 5 * 2
        assert maps[0].width == 8 * 64 + 9 * 2 and maps[0].height == grid_height + KEY_HEIGHT
        assert_colour_key(maps[-1].encoded_image_string, grid_height)
        fidelity[attention] = [e.value for e in accumulator.Scalars("val/fidelity")]
        gap = accumulator.Scalars("val/entropy_gap")[-1].value
        assert 0 <= gap < 1  # 0: uniform rows, 1: each row on one token
        saved = np.load(sweep / f"attention={attention},seed=3" / "attention" / "maps.npz")
        assert saved["images"].shape == (8, 64, 64, 3) and saved["layers"].shape == (1, 8, 64, 64)
        assert int(saved["step"]) == 8 and str(saved["attention"]) == attention
    assert max(fidelity["softmax"]) < 1e-5  # softmax is its own reference
    assert min(fidelity["linear"]) > 1e-3


@pytest.mark.slow
def test_time_series_groups_open_on_their_curves_without_duplicates(sweep: Path) -> None:
    """TensorBoard's TIME SERIES groups cards by the tag's first part, in name order, twelve to a
    page: ``val/acc`` and ``val/loss`` on the ``val`` group's first page, the images in a group
    after it, one learning-rate curve for parameter groups that share it."""
    tags = events(sweep / LINEAR).Tags()
    cards = sorted(tags["scalars"] + tags["images"])
    val = [tag for tag in cards if tag.split("/")[0] == "val"]
    assert {"val/acc", "val/loss"} <= set(val[:12])
    assert [t for t in tags["images"] if not t.startswith(("~attention/", "~summary/"))] == []
    learning_rates = [tag for tag in tags["scalars"] if tag.startswith("train/lr")]
    assert learning_rates == ["train/lr"]


def test_learning_rates_merge_only_when_equal() -> None:
    same = {"train/lr/decay": 0.1, "train/lr/no_decay": 0.1, "train/loss": 2.0}
    assert merge_equal_learning_rates(same) == {"train/lr": 0.1, "train/loss": 2.0}
    differing = {"train/lr/decay": 0.1, "train/lr/no_decay": 0.2}
    assert merge_equal_learning_rates(differing) == differing


@pytest.mark.slow
def test_hparams_are_curated_and_show_the_results_of_metrics_json(sweep: Path) -> None:
    run = sweep / LINEAR
    hparams, status = hparams_of(run)
    knobs = {key for key in hparams if key.startswith(KNOB_PREFIX)}
    assert set(hparams) - knobs == CURATED  # GFLOP/image is a result, not a setting
    assert knobs == {f"{KNOB_PREFIX}eps", f"{KNOB_PREFIX}impl"}  # linear attention's two knobs
    assert hparams["attention"] == "linear" and hparams["seed"] == 3
    assert not [k for k in hparams if "_target_" in k or "dir" in k or "url" in k]
    assert status == "STATUS_SUCCESS"
    metrics = json.loads((run / "metrics.json").read_text())
    results = events(run)
    for key in RESULTS:
        if metrics.get(key) is None:
            assert summary_tag(key, RESULTS) not in results.Tags()["scalars"], key
            continue
        (logged,) = results.Scalars(summary_tag(key, RESULTS))
        assert logged.value == pytest.approx(metrics[key], rel=1e-6), key
        assert logged.step == 8
    assert metrics["val/acc_best"] == pytest.approx(
        max(e.value for e in results.Scalars("val/acc"))
    )


@pytest.mark.slow
def test_the_hparams_view_has_a_trial_per_run_named_by_it_and_results_as_metrics(
    sweep: Path,
) -> None:
    """What the HPARAMS view shows, from the plugin's own handlers on the sweep's directory."""
    runs, experiment, groups = hparams_view(sweep)
    assert runs == sorted([*JOBS, *SEED_MEANS])  # a run per job (no `/hparams`), and the means
    assert sorted(group.name for group in groups) == JOBS  # the Trial ID is the run's name
    assert [len(group.sessions) for group in groups] == [1] * 4  # the means have no session
    # The metrics are the results alone, in RESULTS' order, with short headers; then a
    # fine-tuning run's, which TensorBoard shows by this layout where one shares the log dir.
    metric_tags = [info.name.tag for info in experiment.metric_infos]
    extra = [summary_tag(key) for key in ("test/acc_base", "test/acc_merged")]
    assert metric_tags == [*(summary_tag(key, RESULTS) for key in RESULTS), *extra]
    assert [info.display_name for info in experiment.metric_infos[:4]] == [
        "test acc",
        "best val acc",
        "images/s",
        "GFLOP/image",
    ]
    assert all(len(word) <= 12 for i in experiment.metric_infos for word in i.display_name.split())
    # The columns: the few every run shows, the knobs of the sweep's attentions (softmax's
    # dropout, linear's eps), none of another attention's; only what the sweep varies differs.
    hparam_names = [info.name for info in experiment.hparam_infos]
    assert "gflop_per_image" not in hparam_names
    assert {f"{KNOB_PREFIX}eps", f"{KNOB_PREFIX}dropout"} <= set(hparam_names)
    assert f"{KNOB_PREFIX}landmarks" not in hparam_names
    assert len(hparam_names) <= MAX_COLUMNS
    assert {info.name for info in experiment.hparam_infos if info.differs} == {"attention", "seed"}
    # The settings it ticks at first (those that differ, then by name), and the metrics, are
    # there for every trial: the parallel-coordinates view draws a line per run when it opens.
    ordered = sorted(experiment.hparam_infos, key=lambda info: (not info.differs, info.name))
    shown = [info.name for info in ordered[:SHOWN_AT_FIRST]]
    shown_metrics = {tag for tag in metric_tags[:SHOWN_AT_FIRST]}
    for group in groups:
        assert set(shown) <= set(group.hparams), group.name
        assert shown_metrics <= {m.name.tag for m in group.metric_values}, group.name
    by_name = {group.name: group for group in groups}
    metrics = json.loads((sweep / SOFTMAX / "metrics.json").read_text())
    test_acc = {m.name.tag: m.value for m in by_name[SOFTMAX].metric_values}
    assert test_acc["~summary/acc_test"] == pytest.approx(metrics["test/acc"], rel=1e-6)


@pytest.mark.slow
def test_the_test_writes_a_confusion_matrix_and_the_worst_mistakes(sweep: Path) -> None:
    from PIL import Image

    run = sweep / SOFTMAX
    metrics = json.loads((run / "metrics.json").read_text())
    matrix = np.array(metrics["test/confusion_matrix"])
    assert matrix.shape == (10, 10) and matrix.sum() == 1017  # the test images of the subset
    assert np.trace(matrix) / matrix.sum() == pytest.approx(metrics["test/acc"], abs=1e-6)
    per_class = metrics["test/acc_per_class"]
    assert list(per_class)[:2] == ["airplane", "automobile"] and len(per_class) == 10
    assert (run / "confusion_matrix.png").is_file()
    assert (run / "most_confident_errors.png").is_file()
    accumulator = events(run)
    assert {"~summary/confusion_matrix", "~summary/most_confident_errors"} <= set(
        accumulator.Tags()["images"]
    )
    # The grid as TensorBoard shows it: the pictures, not black squares on a white page.
    (grid,) = accumulator.Images("~summary/most_confident_errors")
    pixels = np.asarray(Image.open(io.BytesIO(grid.encoded_image_string)).convert("RGB"))
    drawn = pixels[(pixels < 245).any(axis=-1)]  # all but the white background
    assert len(drawn) > 0.2 * pixels.shape[0] * pixels.shape[1]
    assert drawn.mean() > 60  # CIFAR-10's mean intensity is about 120; the black grid read 1
    # Drawn once: the run directory's PNG holds the very pixels TensorBoard shows.
    for name in ("confusion_matrix", "most_confident_errors"):
        (image,) = accumulator.Images(f"~summary/{name}")
        shown = np.asarray(Image.open(io.BytesIO(image.encoded_image_string)).convert("RGB"))
        saved = np.asarray(Image.open(run / f"{name}.png").convert("RGB"))
        assert np.array_equal(shown, saved), name


def test_mistakes_are_shown_as_the_images_before_normalisation(data_dir: Path) -> None:
    from vitattn.data.cifar10 import CIFAR10DataModule
    from vitattn.training.callbacks.confusion import displayable, error_title

    raw = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
    raw[0] = 255  # normalised, a white image reaches 2.1: no pixel range tells the two apart
    datamodule = CIFAR10DataModule(data_dir=data_dir, download=False)
    normalised = datamodule.on_after_batch_transfer(raw, 0)
    assert normalised.max() > 1.5
    assert (displayable(normalised, datamodule).int() - raw.int()).abs().max() <= 1
    plain = CIFAR10DataModule(data_dir=data_dir, download=False, normalize=False)
    dark = torch.ones(1, 3, 2, 2, dtype=torch.uint8)  # raw intensities below 1.5
    assert torch.equal(displayable(plain.on_after_batch_transfer(dark, 0), plain), dark)
    assert error_title("cat", "ship", 0.17) == "cat →\nship 17%"


@pytest.mark.slow
def test_each_run_ends_with_one_line_and_the_sweep_with_its_summary(
    swept: tuple[Path, str],
) -> None:
    sweep, output = swept
    for attention in ("softmax", "linear"):
        metrics = json.loads((sweep / f"attention={attention},seed=3" / "metrics.json").read_text())
        line = (
            f"attention={attention}: best val/acc {metrics['val/acc_best']:.2%}, "
            f"test/acc {metrics['test/acc']:.2%}, {metrics['seconds']:.0f} s; "
            f"{sweep / f'attention={attention},seed=3'}"
        )
        assert line in output
    assert "Test metric" not in output  # no 17-digit test table
    assert (sweep / "summary.md").is_file() and (sweep / "attention_maps.png").is_file()
    table = (sweep / "summary.md").read_text()
    assert "attention=linear" in table and "attention=softmax" in table
    assert f"Sweep summary ({sweep})" in output and table.splitlines()[0] in output


@pytest.mark.slow
def test_the_sweep_answers_with_settings_verdicts_a_frontier_and_seed_means(
    swept: tuple[Path, str],
) -> None:
    """2 attentions x 2 seeds: the settings table with its verdict column, frontier.png, and in
    TensorBoard one run of seed means per setting that the margin charts draw."""
    from PIL import Image
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
    from tensorboard.context import RequestContext

    from tests.support.tables import markdown_tables
    from vitattn.analysis.seed_runs import band_tags

    sweep, output = swept
    settings = markdown_tables((sweep / "summary.md").read_text())[0]
    header, rows = (
        settings[0],
        {row[0]: dict(zip(settings[0], row, strict=True)) for row in settings[1:]},
    )
    assert list(rows) == ["attention=linear", "attention=softmax"]
    assert [rows[s]["n"] for s in rows] == ["2", "2"]
    assert "vs attention=softmax" in header  # softmax is the default baseline
    assert rows["attention=softmax"]["vs attention=softmax"] == "baseline"
    assert rows["attention=linear"]["vs attention=softmax"] in (
        "better",
        "worse",
        "no detectable difference",
    )
    assert rows["attention=linear"]["test/acc"].count("[") == 1  # mean ± std [interval]
    pixels = np.asarray(Image.open(sweep / "frontier.png").convert("L"), dtype=float)
    assert pixels.std() > 10
    for name in SEED_MEANS:
        assert f"wrote {sweep / name}" in output
    multiplexer = EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(sweep))
    multiplexer.Reload()
    for attention, name in zip(("linear", "softmax"), SEED_MEANS, strict=True):
        seeds = [
            {
                e.step: e.value
                for e in events(sweep / f"attention={attention},seed={s}").Scalars("val/acc")
            }
            for s in (3, 4)
        ]
        mean = {e.step: e.value for e in events(sweep / name).Scalars(band_tags("val/acc")[0])}
        assert sorted(mean) == [4, 8]
        for step, value in mean.items():
            assert value == pytest.approx((seeds[0][step] + seeds[1][step]) / 2, rel=1e-6)
    # the margin charts, as the custom-scalars plugin merges the runs' layouts
    from tests.analysis.test_seed_runs import custom_scalars

    layout = json.loads(custom_scalars(multiplexer, sweep).layout_impl(RequestContext(), ""))
    margins = [
        (series["value"], series["lower"], series["upper"])
        for category in layout["category"]
        for chart in category["chart"]
        for series in chart.get("margin", {}).get("series", [])
    ]
    assert band_tags("val/acc") in margins
    assert set(SEED_MEANS) <= set(multiplexer.Runs())
    for name in SEED_MEANS:
        assert set(band_tags("val/acc")) <= set(events(sweep / name).Tags()["scalars"])
    for job in JOBS:
        assert not set(band_tags("val/acc")) & set(events(sweep / job).Tags()["scalars"])


def test_only_real_tensorboard_writers_on_rank_zero_get_images(tmp_path, monkeypatch) -> None:
    """fast_dev_run's DummyLogger and other ranks' dummy experiments answer every call with
    None: writing an image to them failed every fast_dev_run once."""
    from lightning.pytorch.loggers.logger import DummyLogger
    from lightning.pytorch.utilities import rank_zero_only

    from vitattn.training.logger import RunTensorBoard, summary_writers

    real = RunTensorBoard(save_dir=str(tmp_path))
    assert list(summary_writers([DummyLogger(), real])) == [real.experiment]
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    assert list(summary_writers([real])) == []


def test_the_mistakes_grid_shows_grey_and_colour_images_pixel_for_pixel() -> None:
    from vitattn.training.callbacks.confusion import drawn, errors_figure

    grey = torch.full((1, 32, 32), 77, dtype=torch.uint8)  # one channel: experiment=lra_image
    red = torch.zeros(3, 32, 32, dtype=torch.uint8)
    red[0] = 200
    for image, colour in ((grey, (77, 77, 77)), (red, (200, 0, 0))):
        worst = [(0.9, image, 0, 1)] * 9  # two rows: eight, then one
        pixels = drawn(errors_figure(worst, ["cat", "dog"]), dpi=120)
        assert pixels.dtype == np.uint8 and pixels.shape[-1] == 3
        painted = (pixels == np.array(colour, dtype=np.uint8)).all(axis=-1).sum()
        assert painted >= 9 * 32 * 32  # nine images, each at least its own size, unblended


CIFAR10 = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def text_on_a_card(figure: Any) -> list[tuple[str, float, Any]]:
    """Each text of ``figure`` drawn at ``dpi=120`` as TensorBoard's IMAGES tab shows it, its
    image scaled to a card 350 px wide: the text, its height there in pixels and its box."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    figure.set_dpi(120)
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    scale = 350 / canvas.get_width_height()[0]
    renderer = canvas.get_renderer()
    return [
        (t.get_text(), t.get_fontsize() * 120 / 72 * scale, t.get_window_extent(renderer))
        for t in figure.findobj(Text)
        if t.get_visible() and t.get_text().strip()
    ]


def test_the_summary_images_read_on_a_tensorboard_card() -> None:
    """TensorBoard shows an image card about 350 px wide: the 840 px confusion matrix had its
    counts about 5 px high there, the 1632 px row of mistakes its titles too (audit). Every text
    is at least 9 px high on the card, inside the figure and clear of every other, with the
    widest counts (1000) and the longest titles (``automobile → airplane 100%``)."""
    import matplotlib.pyplot as plt

    from vitattn.training.callbacks.confusion import confusion_figure, errors_figure

    matrix = torch.randint(0, 60, (10, 10))
    matrix.fill_diagonal_(1000)
    image = torch.zeros(3, 32, 32, dtype=torch.uint8)
    worst = [(1.0 - i / 100, image, 1, 0) for i in range(16)]
    for figure, widest in (
        (confusion_figure(matrix, CIFAR10), "1000"),
        (errors_figure(worst, CIFAR10), "automobile →\nairplane 100%"),
    ):
        try:
            texts = text_on_a_card(figure)
            bounds = figure.bbox
            assert widest in {t for t, _, _ in texts}
            for text, height, box in texts:
                assert height >= 9, (text, height)
                assert bounds.x0 <= box.x0 and box.x1 <= bounds.x1, text
                assert bounds.y0 <= box.y0 and box.y1 <= bounds.y1, text
            for i, (text, _, box) in enumerate(texts):
                for other, _, other_box in texts[i + 1 :]:
                    assert not box.overlaps(other_box), (text, other)
        finally:
            plt.close(figure)
