"""Attention maps of the runs of a sweep side by side (``vitattn.analysis.maps``)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from tests.analysis.conftest import write_run
from vitattn.analysis.maps import MAPS_FILE, AttentionMaps, load_maps, maps_figure
from vitattn.analysis.records import label_runs, load_run, map_labels
from vitattn.analysis.summary import summarize
from vitattn.runs.layout import find_runs


def image_axes(figure: plt.Figure) -> list[plt.Axes]:
    return [axes for axes in figure.axes if axes.images]


def test_one_row_per_run_with_maps(three_attentions: Path) -> None:
    shutil.rmtree(three_attentions / "attention=performer" / "attention")
    result = summarize([three_attentions])
    assert (three_attentions / "attention_maps.png") in result.files
    rows = [
        (row["label"], maps)
        for row in result.rows
        if (maps := load_maps(three_attentions / row["run"])) is not None
    ]
    assert [label for label, _ in rows] == ["attention=linear", "attention=softmax"]
    figure = maps_figure(rows, "title", max_images=3)
    grid = image_axes(figure)
    assert len(grid) == 2 * 3
    assert [axes.get_ylabel() for axes in grid[::3]] == ["attention=linear", "attention=softmax"]
    assert all(len(axes.images) == 2 for axes in grid)  # the image, and the rollout over it
    assert grid[0].images[1].get_cmap().name == "inferno"
    assert figure.get_suptitle() == "title, step 300"
    plt.close(figure)


def test_no_maps_no_figure(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    make_run(tmp_path / "a", ["attention=linear"], maps=False)
    make_run(tmp_path / "b", ["attention=softmax"], maps=False)
    result = summarize([tmp_path])
    assert not (tmp_path / "attention_maps.png").exists()
    assert all(path.suffix in (".csv", ".md", ".png") for path in result.files)


def test_seeds_get_a_row_each(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    for seed in (1, 2):
        make_run(tmp_path / f"attention=linear,seed={seed}", ["attention=linear", f"seed={seed}"])
    make_run(tmp_path / "attention=softmax,seed=1", ["attention=softmax", "seed=1"])
    runs = [load_run(path) for path in find_runs([tmp_path])]
    label_runs(runs)
    assert map_labels(runs, tmp_path) == [
        "attention=linear, seed=1",
        "attention=linear, seed=2",
        "attention=softmax",
    ]


def test_grayscale_images_and_a_coarse_rollout(tmp_path: Path) -> None:
    images = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 1), dtype=np.uint8)
    rollout = np.random.default_rng(1).random((3, 8, 8), dtype=np.float32)
    (tmp_path / "attention").mkdir()
    np.savez(tmp_path / MAPS_FILE, images=images, rollout=rollout, step=5, attention="linear")
    maps = load_maps(tmp_path)
    assert maps is not None and maps.count == 3 and maps.step == 5 and maps.attention == "linear"
    figure = maps_figure([("linear", maps), ("other", AttentionMaps(images[:2], rollout[:2], 9))])
    grid = image_axes(figure)
    assert len(grid) == 2 * 2  # as many columns as every run has images
    assert grid[0].images[0].get_cmap().name == "gray"
    assert grid[2].get_ylabel() == "other (step 9)"  # steps differ: each row names its own
    plt.close(figure)


def test_a_broken_maps_file_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "attention").mkdir()
    (tmp_path / MAPS_FILE).write_bytes(b"not a zip")
    assert load_maps(tmp_path) is None
    np.savez(tmp_path / MAPS_FILE, images=np.zeros((2, 4), np.uint8), rollout=np.zeros((2, 4)))
    assert load_maps(tmp_path) is None
    images, rollout = np.zeros((2, 4, 4, 3), np.uint8), np.zeros((2, 4, 4))
    np.savez(tmp_path / MAPS_FILE, images=images, rollout=rollout, step=np.float64("inf"))
    assert load_maps(tmp_path) is None  # OverflowError was a traceback
    np.savez(tmp_path / MAPS_FILE, images=np.full((2, 4, 4, 3), "a"), rollout=rollout)
    assert load_maps(tmp_path) is None  # text images failed in matplotlib


def test_a_run_whose_maps_are_not_finite_is_drawn_and_says_so(tmp_path: Path) -> None:
    """A run whose weights went NaN before a validation writes maps of NaN: the sweep's summary
    ended in ``no summary of <sweep>: ValueError: alpha must be between 0 and 1``; the images
    are drawn without the rollout, each cell saying it is not finite."""
    images = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    diverged = np.full((2, 8, 8), np.nan, dtype=np.float32)
    partly = np.random.default_rng(1).random((2, 8, 8), dtype=np.float32)
    partly[0, 0, 0] = np.inf
    rows = [
        ("diverged", AttentionMaps(images, diverged, 4)),
        ("fine", AttentionMaps(images, partly, 4)),
    ]
    figure = maps_figure(rows, "title")
    figure.savefig(tmp_path / "maps.png")
    grid = image_axes(figure)
    said = [[text.get_text() for text in axes.texts] for axes in grid]
    assert said == [["rollout not finite"]] * 3 + [[]]
    plt.close(figure)


def test_a_sweep_of_more_runs_than_rows_draws_the_first_ones_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A row per run of thousands made a picture of 80,000 pixels and gigabytes of memory (red
    team): the first :data:`MAX_ROWS` are drawn, and a warning counts the others."""
    from tests.analysis.conftest import write_maps
    from vitattn.analysis.maps import MAX_ROWS, plot_attention_maps

    runs = []
    for index in range(MAX_ROWS + 3):
        run = tmp_path / f"seed={index}"
        write_maps(run, "softmax", 2, 10)
        runs.append((f"seed={index}", run))
    with caplog.at_level(logging.WARNING):
        assert plot_attention_maps(runs, tmp_path / "maps.png")
    assert f"attention maps of the first {MAX_ROWS} runs; 3 more are not drawn" in caplog.text
    height = plt.imread(tmp_path / "maps.png").shape[0]
    assert height < 120 * 1.45 * (MAX_ROWS + 2)  # dpi 120, a row of 1.45 inches


def test_a_rollout_larger_than_a_map_is_left_out_before_it_is_converted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A boolean rollout of 8 x 4096 x 8190 (256 MB inflated, within the file cap) became 1 GB
    of float32 per run before it was checked; now its shape is checked first."""
    import zipfile

    from vitattn.analysis.maps import load_maps

    run = tmp_path / "run"
    (run / "attention").mkdir(parents=True)
    with zipfile.ZipFile(run / "attention" / "maps.npz", "w", zipfile.ZIP_DEFLATED) as archive:
        for name, array in (
            ("images", np.zeros((8, 32, 32, 3), np.uint8)),
            ("rollout", np.zeros((8, 4096, 8190), bool)),
        ):
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, array)
    with caplog.at_level(logging.WARNING):
        assert load_maps(run) is None
    assert "is larger than 256 a side" in caplog.text


def test_the_colour_bar_says_each_map_is_scaled_to_its_own_maximum(tmp_path: Path) -> None:
    """Each map is divided by its maximum as it is kept, so attention spread evenly over the 64
    patches (rollout 1/64 each) is drawn at the bar's top everywhere: the bar says so, instead
    of reading as the rollout's value (review of the views)."""
    from vitattn.training.callbacks.insight import to_grid

    uniform = torch.full((1, 64), 1 / 64)
    assert float(to_grid(uniform, offset=0, size=32).min()) == pytest.approx(1.0)
    maps = load_maps(write_run(tmp_path / "attention=linear", ["attention=linear"]))
    assert maps is not None
    figure = maps_figure([("attention=linear", maps)], "Attention rollout")
    (bar,) = [axes for axes in figure.axes if not axes.images and axes.get_ylabel()]
    label = bar.get_ylabel()
    plt.close(figure)
    assert label == "rollout / map's max"
