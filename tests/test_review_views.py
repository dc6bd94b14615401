"""A researcher's review of what the views show (TensorBoard, the sweep's figures, the console
and the README): each test is one defect found by running a 3 attentions x 2 seeds sweep,
``scripts/plot_curves.py``, ``vitattn-eval`` and ``vitattn-finetune`` and reading the result
against the files."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
import torch

from tests.analysis.conftest import write_run
from vitattn.analysis.frontier import frontier_figure
from vitattn.analysis.maps import load_maps, maps_figure
from vitattn.analysis.summary import read_runs, summary_of
from vitattn.utils.config import PROJECT_ROOT


def test_the_attention_maps_colour_bar_says_each_map_is_scaled_to_its_maximum(
    tmp_path: Path,
) -> None:
    """``attention_maps.png`` has one colour bar, 0 to 1, labelled "attention rollout", but what
    it colours is not the rollout: the callback divides each image's map by its own maximum
    (``insight.to_grid``), so attention spread evenly over the 64 tokens (rollout 1/64 = 0.016
    everywhere) is drawn as 1.0 everywhere, the brightest the bar has. In a 30-step sweep every
    cell of every run was 0.89 to 1.0 in ``maps.npz``: the figure reads as "attends strongly
    everywhere" when the model attends uniformly. The bar should say that each map is scaled to
    its own maximum (relative, per image), or the maps should keep their values."""
    from vitattn.training.callbacks.insight import to_grid

    uniform = torch.full((1, 64), 1 / 64)  # the rollout of a model that looks everywhere alike
    scaled = to_grid(uniform, offset=0, size=32)
    assert float(scaled.min()) == pytest.approx(1.0)  # drawn as the top of the colour bar
    run = write_run(tmp_path / "attention=linear", ["attention=linear"])
    maps = load_maps(run)
    assert maps is not None
    figure = maps_figure([("attention=linear", maps)], "Attention rollout")
    (bar,) = [axes for axes in figure.axes if not axes.images and axes.get_ylabel()]
    label = bar.get_ylabel()
    plt.close(figure)
    assert re.search(r"max|relative|normali[sz]ed|scaled|peak", label, re.IGNORECASE), (
        f"colour bar {label!r} reads as the rollout's value, but each map is divided by its "
        "own maximum"
    )


def test_the_pareto_line_of_the_frontier_is_drawn_over_the_cost_bars(tmp_path: Path) -> None:
    """``frontier.png`` says "dashed line, names in bold: Pareto frontier", but the dashed line
    is drawn at zorder 1 and each cost's interval bar (``axes.hlines``) at the default zorder 2,
    in colour, over it. Settings on the frontier with close accuracies (linear 0.1750 and softmax
    0.1741 in the sweep reviewed) have their dashed line lying along their own bars, and it is
    not to be seen: the figure promised a line that it hides. The line should be drawn over the
    bars (or the bars under it)."""
    by_seed = {  # attention: (test/acc, images/s) of seeds 1 and 2
        "softmax": ((0.1544, 0.1937), (3239.8, 2954.5)),
        "linear": ((0.1544, 0.1957), (2755.4, 2722.6)),
        "performer": ((0.1544, 0.1937), (2502.7, 2468.4)),  # nystrom in the sweep
    }
    sweep = tmp_path / "sweep"
    for attention, (accuracies, speeds) in by_seed.items():
        for seed, (accuracy, speed) in enumerate(zip(accuracies, speeds, strict=True), start=1):
            write_run(
                sweep / f"attention={attention},seed={seed}",
                [f"attention={attention}", f"seed={seed}"],
                maps=False,
                metrics={"test/acc": accuracy, "train/images_per_sec": speed},
            )
    figure = frontier_figure(summary_of(read_runs([sweep])).settings)
    assert figure is not None
    (axes,) = figure.axes
    (line,) = [line for line in axes.get_lines() if line.get_linestyle() == "--"]
    assert len(line.get_xdata()) == 2  # linear and softmax: the frontier the caption names
    bars = [
        collection
        for collection in axes.collections
        if type(collection).__name__ == "LineCollection"
        and any(segment[0][1] == segment[1][1] for segment in collection.get_segments())
    ]
    assert bars
    plt.close(figure)
    hiding = [bar.get_zorder() for bar in bars if bar.get_zorder() >= line.get_zorder()]
    assert not hiding, (
        f"the Pareto line (zorder {line.get_zorder()}) is drawn under {len(hiding)} cost bars "
        f"(zorder {hiding[0]})"
    )


def test_the_readme_caption_of_the_hparams_screenshot_names_the_sweep_it_shows() -> None:
    """The README's caption of ``docs/figures/tensorboard_hparams.png`` says "after a
    two-attention, two-seed sweep", but the screenshot (and docs/runs.md, which describes it)
    is of ``attention=softmax,nystrom,bigbird seed=1,2``: three attentions."""
    readme = (PROJECT_ROOT / "README.md").read_text()
    runs = (PROJECT_ROOT / "docs" / "runs.md").read_text()
    (caption,) = re.findall(r"!\[([^\]]*)\]\(docs/figures/tensorboard_hparams\.png\)", readme)
    shown = re.search(r"as it opens after `vitattn-train -m attention=([\w,]+)\s", runs)
    assert shown is not None
    attentions = shown.group(1).split(",")
    assert len(attentions) == 3  # softmax, nystrom, bigbird
    words = {1: "one", 2: "two", 3: "three", 4: "four"}
    stated = re.search(r"(\w+)-attention", caption)
    assert stated is not None, caption
    assert stated.group(1) == words[len(attentions)], (
        f"README says {stated.group(0)!r}; the screenshot shows {', '.join(attentions)}"
    )


def test_the_finetune_start_line_counts_trainable_parameters_of_the_model_it_trains(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``vitattn-finetune`` starts with "6474 of 21098 parameters trainable (6144 in adapters)"
    while Lightning's summary of the same model, a few lines below, says 27.2 K total, 6.5 K
    trainable: the 21098 is the base model's count, without the adapters that are most of what
    trains, so the line reads as 31% of the model trainable (it is 24%). With a higher rank the
    count trained exceeds the total named (rank 64 on the 21098-parameter model: 49482 "of"
    21098). The total should be that of the model trained (base + adapters), or the line
    should say the 21098 is the base's."""
    from vitattn.finetune import log_start

    base, adapters, head = 21098, 6144, 330  # embed 32, depth 2, rank 8, as reviewed
    figures = {
        "lora/rank": 8,
        "data/shift": "rotate",
        "params": base,
        "params/trainable": adapters + head,
        "params/lora": adapters,
    }
    with caplog.at_level(logging.INFO, logger="vitattn.finetune"):
        log_start(figures, Path("/tmp/run"))
    (line,) = [r.getMessage() for r in caplog.records if "trainable" in r.getMessage()]
    claimed = re.search(r"(\d+) of (\d+) parameters trainable", line)
    if claimed is not None:
        assert int(claimed.group(2)) == base + adapters, (
            f"{line!r}: the model trained has {base + adapters} parameters"
        )
