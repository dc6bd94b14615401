"""Accuracy curves and sweep summaries (``scripts/plot_curves.py``, ``vitattn.analysis.curves``).

Most tests read fake run directories (``conftest.py``) laid out as ``vitattn-train`` writes them;
those marked ``slow`` train for real.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from scipy import stats

from tests.support.presets import FEW_STEPS
from tests.support.runners import run_cli, run_sweep
from tests.support.tables import markdown_tables, read_csv
from vitattn.analysis import figures
from vitattn.analysis.curves import band_note, mean_curve, metric_figure
from vitattn.analysis.records import Run, describe, label_runs, load_run
from vitattn.analysis.seed_runs import band_tags
from vitattn.analysis.summary import summarize
from vitattn.runs.files import UnreadableFileError
from vitattn.runs.layout import find_runs
from vitattn.utils.config import PROJECT_ROOT

PLOT_CURVES = PROJECT_ROOT / "scripts" / "plot_curves.py"


@pytest.mark.slow
def test_attention_sweep_gives_curves_and_summary(tmp_path: Path, data_dir: Path) -> None:
    sweep = tmp_path / "sweep"
    run_sweep(sweep, *FEW_STEPS, "attention=softmax,linear", data_dir=data_dir)
    assert len(list(sweep.rglob("metrics.json"))) == 2
    result = run_cli("python", str(PLOT_CURVES), str(sweep), data_dir=data_dir)
    assert "wrote" in result.stdout
    for name in ("val_acc_vs_step.png", "train_loss_vs_step.png", "summary.md"):
        assert (sweep / name).stat().st_size > 0, name
    rows = {row["attention"]: row for row in read_csv(sweep / "summary.csv")}
    assert sorted(rows) == ["linear", "softmax"]
    for row in rows.values():
        assert row["status"] == "completed"
        assert 0.0 <= float(row["best_val_acc"]) <= 1.0 and float(row["test_acc"]) >= 0.0
        assert float(row["best_val_acc"]) >= float(row["final_val_acc"])
        run = json.loads((sweep / row["run"] / "metrics.json").read_text())  # relative to the sweep
        assert int(row["params"]) == run["params"] > 0
        assert float(row["images_per_sec"]) == pytest.approx(run["train/images_per_sec"], rel=1e-3)
        assert row["label"] == f"attention={row['attention']}"
    assert json.loads(rows["linear"]["knobs"]) == {"eps": 1e-6, "impl": "auto"}


def test_seeds_share_a_line_with_a_band() -> None:
    def run(seed: int, attention: str, curve: list[tuple[int, float]]) -> Run:
        overrides = [f"attention={attention}", f"seed={seed}"]
        events = {"val/acc": [(step, 0.0, value) for step, value in curve]}
        return Run(Path(f"/{attention}/{seed}"), overrides, {}, {}, events)

    runs = [
        run(1, "linear", [(10, 0.2), (20, 0.4)]),
        run(2, "linear", [(10, 0.4), (20, 0.6), (30, 0.7)]),
        run(1, "softmax", [(10, 0.3)]),
    ]
    label_runs(runs)
    assert [r.label for r in runs] == ["attention=linear", "attention=linear", "attention=softmax"]
    steps, mean, low, high = mean_curve([r.scalars["val/acc"] for r in runs[:2]])
    assert steps == [10, 20]  # only the steps every seed reached
    assert mean == pytest.approx([0.3, 0.5])
    # the band is the 95% Student's t interval of the mean: t(0.975, 1) * 0.1414 / sqrt(2)
    half = stats.t.ppf(0.975, 1) * 0.1
    assert low == pytest.approx([0.3 - half, 0.5 - half], rel=1e-9)
    assert high == pytest.approx([0.3 + half, 0.5 + half], rel=1e-9)
    assert mean_curve([runs[2].scalars["val/acc"]]) == ([10], [0.3], [0.3], [0.3])  # one seed


@pytest.mark.slow
def test_plot_curves_rejects_a_directory_without_runs(tmp_path: Path, data_dir: Path) -> None:
    result = run_cli("python", str(PLOT_CURVES), str(tmp_path), data_dir=data_dir, check=False)
    assert result.returncode == 1
    assert result.stderr.strip().startswith("plot_curves.py: error: no run directories")


@pytest.mark.parametrize("script", ["plot_curves", "lora_table"])
@pytest.mark.parametrize("kind", ["a file", "under a file", "a link to nothing"])
def test_an_out_that_can_be_no_folder_is_named_before_reading_runs(
    tmp_path: Path, make_run: Callable[..., Path], monkeypatch, capsys, script: str, kind: str
) -> None:
    """Each said ``[Errno 17] File exists`` (or ``[Errno 20] Not a directory``) without naming
    ``--out``, after reading the runs (red team, review)."""
    from vitattn.analysis import lora, summary

    make_run(tmp_path / "runs" / "one", ["attention=softmax"])
    taken = tmp_path / "taken"
    taken.write_text("the user's own file")
    out, problem = {
        "a file": (taken, f"{taken} is not a folder"),
        "under a file": (taken / "sub", f"{taken} is not a folder"),
        "a link to nothing": (
            tmp_path / "dangling",
            f"{tmp_path / 'dangling'} is a symbolic link ",
        ),
    }[kind]
    if kind == "a link to nothing":
        out.symlink_to(tmp_path / "nowhere")
    module, reader = (summary, "summarize") if script == "plot_curves" else (lora, "write_table")
    read: list[object] = []
    monkeypatch.setattr(module, reader, lambda *args: read.append(args))
    with pytest.raises(SystemExit) as ended:
        module.main([str(tmp_path / "runs"), "--out", str(out)])
    assert ended.value.code == 1 and not read
    said = capsys.readouterr().err
    assert said.startswith(f"{script}.py: error: --out {out}: {problem}"), said
    assert said.endswith("(it is made if missing)\n") and said.count("\n") == 1
    assert taken.read_text() == "the user's own file"


def runs_of(*paths: Path) -> list[Run]:
    runs = [load_run(path) for path in find_runs(paths)]
    label_runs(runs)
    return runs


def test_labels_carry_only_the_overrides_that_differ(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    shared = ["trainer=cpu", "data.batch_size=64"]
    for attention in ("softmax", "linear"):
        for depth in (1, 2):
            overrides = [*shared, f"attention={attention}", f"model.depth={depth}", "seed=1"]
            make_run(tmp_path / f"attention={attention},model.depth={depth}", overrides)
    labels = [run.label for run in runs_of(tmp_path)]
    assert labels == [
        "attention=linear, model.depth=1",
        "attention=linear, model.depth=2",
        "attention=softmax, model.depth=1",
        "attention=softmax, model.depth=2",
    ]


def test_a_searchs_decimals_are_shown_to_four_digits_unless_two_settings_would_look_alike(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    """Optuna's floats come in full; labels show them to four digits, typed values as typed,
    and in full where four digits would merge two settings into one line."""
    for number, lr in enumerate(("0.00019182157424526137", "0.0015291934777093281")):
        make_run(tmp_path / "search" / str(number), [f"optimizer.lr={lr}"])
    make_run(tmp_path / "search" / "2", ["optimizer.lr=0.0015"])  # typed
    assert [run.label for run in runs_of(tmp_path / "search")] == [
        "optimizer.lr=0.0001918",
        "optimizer.lr=0.001529",
        "optimizer.lr=0.0015",
    ]
    for number, lr in enumerate(("0.00019182157424526137", "0.00019182157424526138")):
        make_run(tmp_path / "near" / str(number), [f"optimizer.lr={lr}"])
    assert [run.label for run in runs_of(tmp_path / "near")] == [
        "optimizer.lr=0.00019182157424526137",
        "optimizer.lr=0.00019182157424526138",
    ]


def test_a_default_is_told_apart_from_an_override(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    make_run(tmp_path / "a", ["trainer=cpu"])  # attention left at its default, softmax
    make_run(tmp_path / "b", ["trainer=cpu", "attention=linear"])
    assert [run.label for run in runs_of(tmp_path)] == ["attention=softmax", "attention=linear"]


def test_runs_differing_only_by_seed_share_one_line(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    sweep = tmp_path / "2026-01-01_12-00-00_000000"
    for seed in (1, 2, 10):
        make_run(sweep / f"seed={seed}", ["attention=linear", f"seed={seed}"])
    runs = runs_of(sweep)
    assert [run.path.name for run in runs] == ["seed=1", "seed=2", "seed=10"]  # natural order
    assert {run.label for run in runs} == {sweep.name}
    figure = metric_figure(runs, "val/acc", "validation accuracy", markers=True)
    assert figure is not None
    assert len(figure.axes[0].get_lines()) == 1 and len(figure.axes[0].collections) == 1  # band
    legend = figure.legends[0].get_texts()[0].get_text()
    assert legend.split() == [sweep.name, "(mean", "of", "3)"]
    note = figure.legends[0].get_title().get_text()
    assert " ".join(note.split()) == "shaded: 95% interval (t) over 3 seeds"
    plt.close(figure)


SEED_CURVES = {
    "linear": [[(99, 0.30), (199, 0.41), (299, 0.47)], [(99, 0.34), (199, 0.40), (299, 0.52)]],
    "softmax": [
        [(99, 0.28), (199, 0.44), (299, 0.50)],
        [(99, 0.35), (199, 0.43), (299, 0.55)],
        [(99, 0.31), (199, 0.47), (299, 0.51)],
    ],
}
"""Validation curves by attention and seed: two seeds of linear, three of softmax."""


def test_the_band_is_the_t_interval_tensorboard_shows_and_the_legend_says_so(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    """``val_acc_vs_step.png`` shades each setting with the 95% t interval of its mean at each
    step, the very numbers of its TensorBoard seed run (``~seeds/val/acc/lower``, ``upper``)."""
    from tests.analysis.test_seed_runs import load, scalars

    sweep = tmp_path / "sweep"
    for attention, curves in SEED_CURVES.items():
        for seed, curve in enumerate(curves, start=1):
            overrides = [f"attention={attention}", f"seed={seed}"]
            make_run(sweep / f"attention={attention},seed={seed}", overrides, val_acc=curve)
    summary = summarize([sweep])  # in place: the figures and the seed runs
    figure = metric_figure([m.run for m in summary.runs], "val/acc", "validation accuracy")
    assert figure is not None
    bands = figure.axes[0].collections
    assert len(bands) == 2
    multiplexer = load(sweep)
    _, lower_tag, upper_tag = band_tags("val/acc")
    for band, (attention, curves) in zip(bands, SEED_CURVES.items(), strict=True):
        read = [m.run.scalars["val/acc"] for m in summary.runs if m.run.label.endswith(attention)]
        values = np.array([[value for _, value in curve] for curve in read])  # as float32 stored
        np.testing.assert_allclose(values, [[v for _, v in curve] for curve in curves], rtol=1e-6)
        low, high = stats.t.interval(
            0.95, len(curves) - 1, loc=values.mean(axis=0), scale=stats.sem(values, axis=0)
        )
        run = f"attention={attention} ({len(curves)} seeds)"
        shown = {tag: scalars(multiplexer, run, tag)[1] for tag in (lower_tag, upper_tag)}
        vertices = band.get_paths()[0].vertices
        for i, step in enumerate((99, 199, 299)):
            drawn = vertices[vertices[:, 0] == step, 1]
            assert drawn.min() == pytest.approx(low[i], rel=1e-9)
            assert drawn.max() == pytest.approx(high[i], rel=1e-9)
            assert drawn.min() == pytest.approx(shown[lower_tag][i], rel=1e-6)  # float32
            assert drawn.max() == pytest.approx(shown[upper_tag][i], rel=1e-6)
    note = figure.legends[0].get_title().get_text()
    assert " ".join(note.split()) == "shaded: 95% interval (t) over 2 or 3 seeds"
    plt.close(figure)


def test_the_legend_names_the_band_only_where_there_is_one() -> None:
    assert band_note([1, 1]) == ""
    assert " ".join(band_note([3, 1, 3]).split()) == "shaded: 95% interval (t) over 3 seeds"
    assert band_note([2, 5, 3]).endswith("over 2, 3 or 5 seeds")


def test_a_single_run_is_named_by_its_directory(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    run = make_run(tmp_path / "runs" / "2026-01-01_12-00-00_000000_linear", ["attention=linear"])
    result = summarize([run])
    assert result.rows[0]["run"] == run.name and result.rows[0]["label"] == run.name


def test_the_legend_is_inside_the_figure_and_off_the_curves(three_attentions: Path) -> None:
    runs = runs_of(three_attentions)
    for run in runs:
        run.label += ", a long setting=that makes a label wrap onto two lines"
    figure = metric_figure(runs, "val/acc", "validation accuracy", "a title", markers=True)
    assert figure is not None
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    legend = figure.legends[0].get_window_extent(renderer)
    page = figure.bbox
    assert page.x0 <= legend.x0 and legend.x1 <= page.x1, (legend, page)
    assert page.y0 <= legend.y0 and legend.y1 <= page.y1, (legend, page)
    assert figure.axes[0].get_window_extent(renderer).x1 <= legend.x0
    plt.close(figure)


def test_identical_curves_stay_visible(three_attentions: Path) -> None:
    runs = runs_of(three_attentions)
    figure = metric_figure(runs, "val/acc", "validation accuracy", markers=True)
    assert figure is not None
    lines = figure.axes[0].get_lines()
    assert len(lines) == 3
    # softmax and linear have the same curve: each line differs in colour, style and marker
    for attribute in ("get_color", "get_linestyle", "get_marker"):
        assert len({getattr(line, attribute)() for line in lines}) == 3, attribute
    assert all(line.get_marker() not in ("None", "", None) for line in lines)
    plt.close(figure)


def test_a_single_validation_point_has_a_marker(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    single = {"val_acc": [(7, 0.2)], "train_loss": [(7, 2.0)], "events_in": "tensorboard"}
    make_run(tmp_path / "one", ["attention=linear"], **single)  # an older run's layout
    make_run(tmp_path / "two", ["attention=softmax"])
    runs = runs_of(tmp_path)
    for tag, markers in (("val/acc", True), ("train/loss", False)):
        figure = metric_figure(runs, tag, tag, markers=markers)
        assert figure is not None
        single = next(line for line in figure.axes[0].get_lines() if len(line.get_xdata()) == 1)
        assert single.get_marker() not in ("None", "", None) and single.get_markersize() > 0
        plt.close(figure)


def test_titles_name_the_model_and_the_steps(three_attentions: Path) -> None:
    runs = runs_of(three_attentions)
    assert describe(runs) == "model vit, 300 steps"
    assert describe(runs[:1]) == "model vit, attention linear, 300 steps"


def test_summary_has_a_seed_column_and_runs_relative_to_one_folder(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    multiruns = tmp_path / "outputs" / "train" / "multiruns"
    for seed in (1, 2):
        make_run(multiruns / "a" / str(seed - 1), ["attention=linear", f"seed={seed}"])
    make_run(multiruns / "b" / "attention=softmax,seed=3", ["attention=softmax", "seed=3"])
    result = summarize([multiruns / "a", multiruns / "b"], out_dir=tmp_path / "out")
    runs = [row["run"] for row in result.rows]
    assert runs == ["a/0", "a/1", "b/attention=softmax,seed=3"]
    assert [row["seed"] for row in read_csv(tmp_path / "out" / "summary.csv")] == ["1", "2", "3"]
    settings, table = markdown_tables((tmp_path / "out" / "summary.md").read_text())
    expected = [["setting", "n"], ["attention=linear", "2"], ["attention=softmax", "1"]]
    assert [row[:2] for row in settings] == expected
    header, cells = table[0], table[1:]
    assert header[:4] == ["run", "status", "label", "seed"]
    assert [row[0] for row in cells] == runs and [row[3] for row in cells] == ["1", "2", "3"]
    assert cells[0][4:7] == ["12554", "0.5000", "0.5000"]  # numbers rounded as before


def test_summarize_writes_every_figure_and_skips_a_broken_run(
    three_attentions: Path, make_run: Callable[..., Path]
) -> None:
    broken = three_attentions / "attention=broken"
    (broken / ".hydra").mkdir(parents=True)
    (broken / ".hydra" / "config.yaml").write_text("- a list, not a config\n")
    result = summarize([three_attentions])
    names = [path.name for path in result.files]
    assert names == [
        "summary.csv",
        "summary.md",
        "settings.csv",
        "val_acc_vs_step.png",
        "train_loss_vs_step.png",
        "frontier.png",
        "attention_maps.png",
    ]
    assert len(result.rows) == 3


PLANTED_CONFIGS = {
    "a key that is no name": ("attention:\n  1: 2\n", "holds the key 1 under attention"),
    "an attention that is a list": (
        "attention: [1, 2]\n",
        "attention holds a list where a mapping of settings belongs",
    ),
    "a trainer that is a text": (
        "trainer: abc\n",
        "trainer holds a string where a mapping of settings belongs",
    ),
    "a number as a top key": ("7: x\n", "holds the key 7, which is no name"),
    "a knob of binary data": ("attention:\n  blob: !!binary aGVsbG8=\n", "holds binary data"),
    "a knob that is a date": ("attention:\n  when: 2026-01-01\n", "holds a date"),
}


@pytest.mark.parametrize("planted", sorted(PLANTED_CONFIGS))
def test_a_job_config_of_another_shape_is_one_line(
    three_attentions: Path, make_run: Callable[..., Path], planted: str
) -> None:
    """A ``.hydra/config.yaml`` Hydra could not have written (a key that is no name, a node that
    is no mapping) ended the whole summary, the sweep's own too, in an ``AttributeError``
    (red team, 2026-12-02): now its run is refused in one line naming the file."""
    text, problem = PLANTED_CONFIGS[planted]
    odd = make_run(three_attentions / "zzz", ["attention=linear"], maps=False)
    (odd / ".hydra" / "config.yaml").write_text(text)
    with pytest.raises(UnreadableFileError, match=re.escape(problem)):
        load_run(odd)
    assert len(summarize([three_attentions]).rows) == 3


@pytest.mark.slow
def test_plot_curves_leaves_out_a_job_of_another_shape_and_summarizes_the_others(
    three_attentions: Path, make_run: Callable[..., Path], data_dir: Path
) -> None:
    text, problem = PLANTED_CONFIGS["a key that is no name"]
    odd = make_run(three_attentions / "zzz", ["attention=linear"], maps=False)
    (odd / ".hydra" / "config.yaml").write_text(text)
    result = run_cli("python", str(PLOT_CURVES), str(three_attentions), data_dir=data_dir)
    skipped = [line for line in result.stderr.splitlines() if "skipping" in line]
    assert len(skipped) == 1, result.stderr
    assert skipped[0].startswith(f"skipping {odd}: {odd}/.hydra/config.yaml: {problem}")
    assert len(read_csv(three_attentions / "summary.csv")) == 3


@pytest.mark.parametrize("value", ["$\\frac{$", "$" + "{" * 70 + "x" + "}" * 70 + "$"])
def test_a_label_that_matplotlib_would_read_as_mathematics_is_drawn_as_written(
    value: str, tmp_path: Path
) -> None:
    """A job's setting holding ``$...$`` (from its recorded overrides, or its folder's name)
    failed the summary's every figure, in pyparsing's ``ParseSyntaxException`` or, nested 70
    deep, a ``RecursionError`` (red team); it is drawn as written."""
    from tests.analysis.conftest import write_run
    from vitattn.analysis.summary import summarize

    sweep = tmp_path / "sweep"
    write_run(sweep / "plain", ["attention=softmax", "seed=1", "+x=a"])
    write_run(sweep / "dollars", ["attention=softmax", "seed=2", f"+x={value}"])
    summary = summarize([sweep])
    names = {path.name for path in summary.files}
    assert {"val_acc_vs_step.png", "attention_maps.png", "frontier.png"} <= names


def test_the_curves_average_the_runs_the_table_counts(
    tmp_path: Path, make_run: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``val_acc_vs_step.png`` draws each setting over the runs its row of the settings table
    counts: a failed seed (its curve cut at step 99) and a job folder copied within the sweep (a
    seed already counted) are left out of the mean and its band, as they are of the table and
    of TensorBoard's seed run, rather than cutting the line short and narrowing the band."""
    sweep = tmp_path / "sweep"
    for seed, curve in enumerate(SEED_CURVES["softmax"][:2], start=1):
        make_run(sweep / f"seed={seed}", ["attention=softmax", f"seed={seed}"], val_acc=curve)
    make_run(
        sweep / "seed=3",
        ["attention=softmax", "seed=3"],
        val_acc=[(99, 0.2)],
        metrics={"status": "failed", "test/acc": None},
    )
    shutil.copytree(sweep / "seed=1", sweep / "seed=1_copy")
    drawn: dict[str, list[Run]] = {}

    def plot_metric(runs: list[Run], tag: str, *args: object, **kwargs: object) -> bool:
        drawn[tag] = list(runs)
        return False

    monkeypatch.setattr(figures, "plot_metric", plot_metric)
    summary = summarize([sweep], tmp_path / "out")
    (setting,) = summary.settings
    assert len(setting.completed) == 2  # the table's n: the failed run and the copy left out
    figure = metric_figure(drawn["val/acc"], "val/acc", "validation accuracy")
    assert figure is not None
    (line,) = figure.axes[0].get_lines()
    assert list(line.get_xdata()) == [99, 199, 299]  # not cut at the failed run's last step
    expected = np.mean([[v for _, v in curve] for curve in SEED_CURVES["softmax"][:2]], axis=0)
    np.testing.assert_allclose(line.get_ydata(), expected, rtol=1e-6)
    legend = figure.legends[0].get_texts()[0].get_text()
    assert legend.endswith("(mean of 2)"), legend
    plt.close(figure)


def test_a_knob_left_null_is_summarized_with_the_value_the_run_used(
    tmp_path: Path, data_dir: Path
) -> None:
    """Nyström's ``landmarks: null`` is computed from the token count (16 for 64 tokens); the
    summary's ``knobs`` column said ``null`` where TensorBoard's HPARAMS said 16. It now reads
    the value the run used from its ``hparams.yaml``; a value there that is no number, word or
    truth value is left out."""
    from tests.support.in_process import run_in_process
    from tests.support.presets import TINY, steps

    run = tmp_path / "run"
    overrides = [*TINY, *steps(2, 2), "attention=nystrom", f"hydra.run.dir={run}"]
    run_in_process("vitattn-train", *overrides, data_dir=data_dir)
    summarize([run], tmp_path / "summary")
    (row,) = read_csv(tmp_path / "summary" / "summary.csv")
    knobs = json.loads(row["knobs"])
    assert knobs["landmarks"] == 16 and knobs["pinv"] == "iterative"
    hparams = run / "hparams.yaml"
    hparams.write_text(
        hparams.read_text().replace("~attention/landmarks: 16", "~attention/landmarks: [1, 2]")
    )
    (again,) = runs_of(run)
    assert again.knobs()["landmarks"] is None
