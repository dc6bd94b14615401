"""The settings table a sweep summary opens with: seeds grouped, the verdict against a baseline,
the load warning, exact-by-construction notes, and ``frontier.png``."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.analysis.conftest import write_run, write_seeded_sweep
from tests.support.tables import markdown_tables, read_csv
from vitattn.analysis.frontier import pareto_front, point_names
from vitattn.analysis.summary import (
    main,
    read_runs,
    report,
    summarize,
    summary_of,
    write_summary,
)
from vitattn.analysis.uncertainty import (
    binomial_interval,
    mean_interval,
    paired_difference,
)

TEST_ACC = {"softmax": (0.50, 0.52, 0.54), "linear": (0.40, 0.41, 0.42), "performer": (0.49, 0.55)}
SPEED = {"softmax": 900.0, "linear": 2500.0, "performer": 1500.0}
GFLOP = {"softmax": 0.20, "linear": 0.15, "performer": 0.18}


@pytest.fixture
def seeded_sweep(tmp_path: Path) -> Path:
    """Three attentions with three, three and two seeds: softmax ahead of linear by far,
    performer within softmax's spread."""
    return write_seeded_sweep(
        tmp_path / "sweep",
        TEST_ACC,
        lambda attention, seed: {
            "train/images_per_sec": SPEED[attention] + seed,
            "gflop_per_image": GFLOP[attention],
            "test/confusion_matrix": [[500, 17], [0, 500]],
        },
    )


def settings_table(sweep: Path) -> dict[str, dict[str, str]]:
    table = markdown_tables((sweep / "summary.md").read_text())[0]
    header = table[0]
    return {row[0]: dict(zip(header, row, strict=True)) for row in table[1:]}


def test_seeds_are_grouped_with_mean_std_and_t_interval(seeded_sweep: Path) -> None:
    result = summarize([seeded_sweep])
    table = settings_table(seeded_sweep)
    assert list(table) == ["attention=linear", "attention=performer", "attention=softmax"]
    assert table["attention=softmax"]["n"] == "3" and table["attention=performer"]["n"] == "2"
    estimate = mean_interval(TEST_ACC["softmax"])
    assert estimate is not None and estimate.low is not None and estimate.high is not None
    expected = f"0.520 ± 0.020 [{estimate.low:.3f}, {estimate.high:.3f}]"
    assert table["attention=softmax"]["test/acc"] == expected
    assert table["attention=linear"]["GFLOP/image"] == "0.15"  # no spread: no interval
    records = {row["setting"]: row for row in read_csv(seeded_sweep / "settings.csv")}
    assert float(records["attention=softmax"]["test_acc_mean"]) == pytest.approx(0.52)
    assert float(records["attention=softmax"]["test_acc_low"]) == pytest.approx(estimate.low)
    assert float(records["attention=linear"]["images_per_sec_mean"]) == pytest.approx(2502.0)
    # the per-run table stays below, one row per run
    assert len(markdown_tables((seeded_sweep / "summary.md").read_text())[1]) == 1 + 8
    assert (seeded_sweep / "summary.md").read_text().strip() in report(result)


def test_verdicts_against_softmax_by_default(seeded_sweep: Path) -> None:
    summarize([seeded_sweep])
    table = settings_table(seeded_sweep)
    column = "vs attention=softmax"
    assert {name: row[column] for name, row in table.items()} == {
        "attention=linear": "worse",
        "attention=performer": "no detectable difference",
        "attention=softmax": "baseline",
    }
    assert table["attention=linear"]["Δ test/acc"].startswith("-0.110 [")
    assert table["attention=softmax"]["Δ test/acc"] == ""


def test_a_baseline_named_by_value_or_by_pairs(seeded_sweep: Path) -> None:
    summarize([seeded_sweep], baseline="linear")
    table = settings_table(seeded_sweep)
    assert table["attention=softmax"]["vs attention=linear"] == "better"
    summarize([seeded_sweep], baseline="attention=performer")
    assert settings_table(seeded_sweep)["attention=performer"]["vs attention=performer"] == (
        "baseline"
    )


def test_a_baseline_named_by_a_searched_value_in_full_or_as_shown(tmp_path: Path) -> None:
    """A search's label shows its decimals to four digits; the value in full (as the study and
    ``optimization_results.yaml`` give it) names the setting too."""
    full = {"fast": "0.0015291934777093281", "slow": "0.00019182157424526137"}
    for name, lr in full.items():
        for seed in (1, 2):
            write_run(
                tmp_path / f"{name}{seed}", [f"optimizer.lr={lr}", f"seed={seed}"], maps=False
            )
    for spec in (full["slow"], "0.0001918", f"optimizer.lr={full['slow']}"):
        summary = summary_of(read_runs([tmp_path]), baseline=spec)
        assert summary.baseline is not None and summary.baseline.label == "optimizer.lr=0.0001918"
        assert not summary.warnings


def test_a_baseline_that_names_no_setting_is_one_warning_line(seeded_sweep: Path) -> None:
    result = summarize([seeded_sweep], baseline="attention=flash")
    assert len(result.warnings) == 1
    warning = result.warnings[0]
    assert "summary.baseline='attention=flash' matches no setting" in warning
    assert "attention=linear" in warning and "\n" not in warning
    header = markdown_tables((seeded_sweep / "summary.md").read_text())[0][0]
    assert not any(name.startswith("vs ") for name in header)


def test_one_seed_shows_the_binomial_interval_and_no_conclusion(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    sweep = tmp_path / "sweep"
    for attention, accuracy in (("softmax", 0.5), ("linear", 0.52)):
        make_run(
            sweep / f"attention={attention}",
            [f"attention={attention}"],
            maps=False,
            metrics={"test/acc": accuracy, "test/confusion_matrix": [[1000, 17]]},
        )
    summarize([sweep])
    row = settings_table(sweep)["attention=linear"]
    low, high = binomial_interval(0.52, 1017)
    assert row["test/acc"] == f"0.520 [{low:.3f}, {high:.3f}]"
    assert row["vs attention=softmax"] == "one seed: no conclusion"
    assert row["Δ test/acc"] == "+0.020"


def test_no_baseline_without_softmax_and_a_single_setting_has_no_verdict(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    sweep = tmp_path / "sweep"
    for seed in (1, 2):
        make_run(sweep / f"seed={seed}", ["attention=softmax", f"seed={seed}"], maps=False)
    summarize([sweep])
    table = markdown_tables((sweep / "summary.md").read_text())[0]
    assert len(table) == 2 and table[1][1] == "2"
    assert not any(header.startswith("vs ") for header in table[0])


def test_load_above_the_cpu_count_is_one_warning_line(
    seeded_sweep: Path, make_run: Callable[..., Path]
) -> None:
    assert summarize([seeded_sweep]).warnings == ()
    quiet = {"load_avg_start": 2.1, "load_avg_end": 2.2, "cpu_count": 2}  # the run's own threads
    make_run(
        seeded_sweep / "attention=linear,seed=5", ["attention=linear", "seed=5"], metrics=quiet
    )
    assert summarize([seeded_sweep]).warnings == ()
    make_run(
        seeded_sweep / "attention=linear,seed=4",
        ["attention=linear", "seed=4"],
        maps=False,
        metrics={"load_avg_start": 1.0, "load_avg_end": 3.5, "cpu_count": 2},
    )
    warnings = summarize([seeded_sweep]).warnings
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "up to 3.5 on 2 CPUs" in warnings[0] and "attention=linear,seed=4" in warnings[0]


def test_an_exact_by_construction_run_and_unfinished_runs_are_noted(
    seeded_sweep: Path, make_run: Callable[..., Path]
) -> None:
    reason = "landmarks 64 >= 64 tokens"
    make_run(
        seeded_sweep / "attention=softmax,seed=9",
        ["attention=softmax", "seed=9"],
        maps=False,
        metrics={"status": "failed", "degenerate": reason},
    )
    summarize([seeded_sweep])
    row = settings_table(seeded_sweep)["attention=softmax"]
    assert row["n"] == "3"  # a failed run counts in no statistic
    assert row["notes"] == f"1 of 4 runs not completed; exact: {reason}"


def test_a_copy_of_a_job_counts_its_seed_once(seeded_sweep: Path) -> None:
    """A job folder copied within the sweep (a user's backup) is the same seed of the same
    setting: it started from the same weights and saw the same batches. On the code before it
    counted as a third linear seed, and its interval narrowed as if it were one."""
    shutil.copytree(
        seeded_sweep / "attention=linear,seed=1", seeded_sweep / "old" / "attention=linear,seed=1"
    )
    summarize([seeded_sweep])
    row = settings_table(seeded_sweep)["attention=linear"]
    assert row["n"] == "3"
    assert (
        row["notes"]
        == "1 of 4 runs repeat a seed, or the results, of a run already counted, left out: "
        "old/attention=linear,seed=1"
    )
    estimate = mean_interval(TEST_ACC["linear"])
    assert estimate is not None
    assert row["test/acc"].startswith(f"0.410 ± {estimate.std:.3f} [{estimate.low:.3f}, ")
    runs = [row["run"] for row in read_csv(seeded_sweep / "summary.csv")]
    assert "old/attention=linear,seed=1" in runs  # still listed as a run


@pytest.mark.parametrize(
    ("config_seed", "override"),
    [("null", "seed=null"), ("true", "seed=1"), ("[1]", "seed=1"), ("'1 '", "seed=1")],
)
def test_a_copy_counts_once_whatever_its_files_say_of_the_seed(
    config_seed: str, override: str, tmp_path: Path
) -> None:
    """A copy of an unseeded job, or of a job whose config holds something else than a seed
    (its overrides still say ``seed=1``), counted again on the code before: two runs, where
    one ran. The unseeded copy's ``metrics.json`` repeats the first's to the last digit."""
    sweep = write_seeded_sweep(tmp_path / "sweep", {"softmax": (0.5, 0.52)})
    job = sweep / "attention=softmax,seed=1"
    config, overrides = job / ".hydra" / "config.yaml", job / ".hydra" / "overrides.yaml"
    config.write_text(config.read_text().replace("seed: 1\n", f"seed: {config_seed}\n"))
    overrides.write_text(overrides.read_text().replace("seed=1", override))
    shutil.copytree(job, sweep / "copy")
    summarize([sweep])
    (row,) = settings_table(sweep).values()  # one setting: the runs differ only by seed
    assert row["n"] == "2"
    assert row["notes"].endswith("left out: copy")


def test_a_cell_a_spreadsheet_would_run_is_written_as_text(tmp_path: Path) -> None:
    """A job folder named as a formula is a run's first cell of ``summary.csv``: written behind
    a ``'`` (OWASP's advice on CSV injection), so a spreadsheet shows it and runs nothing; a
    negative number stays a number."""
    sweep = tmp_path / "sweep"
    name = '=HYPERLINK("example.invalid","open")'
    write_run(sweep / name, ["attention=softmax", "seed=1"], maps=False)
    write_run(
        sweep / "seed=2", ["attention=softmax", "seed=2"], maps=False, metrics={"seconds": -1.5}
    )
    summarize([sweep])
    rows = {row["seed"]: row for row in read_csv(sweep / "summary.csv")}
    assert rows["1"]["run"] == "'" + name
    assert rows["2"]["seconds"] == "-1.5"


def test_frontier_png_is_drawn_and_not_blank(seeded_sweep: Path) -> None:
    result = summarize([seeded_sweep])
    path = seeded_sweep / "frontier.png"
    assert path in result.files
    pixels = np.asarray(Image.open(path).convert("L"), dtype=float)
    assert pixels.shape[1] > 1000 and pixels.std() > 10  # two panels with something drawn


def test_pareto_front() -> None:
    points = [(900.0, 0.52), (1500.0, 0.52), (2500.0, 0.41), (1000.0, 0.40)]
    assert pareto_front(points, more_is_better=True) == [1, 2]
    costs = [(0.20, 0.52), (0.18, 0.52), (0.15, 0.41), (0.19, 0.40)]
    assert pareto_front(costs, more_is_better=False) == [2, 1]


def test_points_are_named_by_what_differs() -> None:
    names, key = point_names(["attention=linear", "attention=softmax"])
    assert names == {"attention=linear": "linear", "attention=softmax": "softmax"}
    assert key == "attention"
    names, key = point_names(
        ["attention=linear, model.depth=2", "attention=softmax, model.depth=4"]
    )
    assert key == "attention, model.depth"
    assert names["attention=linear, model.depth=2"] == "linear, 2"
    names, key = point_names(["attention=linear", "attention=softmax, model.depth=4"])
    assert key == "" and names["attention=linear"] == "attention=linear"


def test_plot_curves_takes_a_baseline(
    seeded_sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(seeded_sweep), "--baseline", "performer"]) == 0
    printed = capsys.readouterr().out
    assert "vs attention=performer" in printed and "wrote " in printed


def test_plot_curves_refuses_a_baseline_that_names_no_setting_before_writing(
    seeded_sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It printed a warning among the tables, naming ``summary.baseline``, which the user never
    typed, and exited 0 without its comparisons (user audit, 2026-12-02)."""
    with pytest.raises(SystemExit) as ended:
        main([str(seeded_sweep), "--baseline", "flash"])
    assert ended.value.code == 1
    said = capsys.readouterr()
    assert said.err == (
        "plot_curves.py: error: --baseline 'flash' matches no setting: give key=value pairs or "
        "a value that names one of: attention=linear; attention=performer; attention=softmax\n"
    )
    assert not said.out and not (seeded_sweep / "summary.md").exists()


def test_each_setting_holds_its_runs_and_each_comparison_its_setting(seeded_sweep: Path) -> None:
    summary = summarize([seeded_sweep])
    labels = ["attention=linear", "attention=performer", "attention=softmax"]
    assert [setting.label for setting in summary.settings] == labels
    held = [member for setting in summary.settings for member in setting.runs]
    assert sorted(map(id, held)) == sorted(map(id, summary.runs))  # the runs themselves
    for setting in summary.settings:
        assert {(m.run.label, m.row["label"]) for m in setting.runs} == {(setting.label,) * 2}
    pairs = zip(summary.comparisons, summary.settings, strict=True)
    assert all(comparison.setting is setting for comparison, setting in pairs)
    assert summary.baseline is summary.settings[2]
    verdicts = ["worse", "no detectable difference", "baseline"]
    assert [comparison.verdict for comparison in summary.comparisons] == verdicts
    linear = summary.comparisons[0].differences["test_acc"]  # seeds 1-3 both: paired
    pairs = list(zip(TEST_ACC["linear"], TEST_ACC["softmax"], strict=True))
    assert linear == paired_difference(pairs)
    performer = summary.comparisons[1].differences["test_acc"]  # seeds 1-2 against 1-3
    shared = list(zip(TEST_ACC["performer"], TEST_ACC["softmax"][:2], strict=True))
    assert performer == replace(paired_difference(shared), unpaired=1)
    assert summary.comparisons[2].differences == {}


def test_the_summary_is_made_before_anything_is_written_and_printed_from_itself(
    seeded_sweep: Path, tmp_path: Path
) -> None:
    before = sorted(path.name for path in seeded_sweep.iterdir())
    summary = summary_of(read_runs([seeded_sweep]))
    assert sorted(path.name for path in seeded_sweep.iterdir()) == before
    assert summary.files == () and summary.seed_runs == ()
    out = tmp_path / "out"
    out.mkdir()
    written = write_summary(summary, out)
    assert (out / "summary.md").read_text() == written.text == summary.text
    assert written.files[:3] == (out / "summary.csv", out / "summary.md", out / "settings.csv")
    assert written.runs is summary.runs and written.seed_runs == ()
    for path in written.files:
        path.unlink()
    printed = report(written)  # from the value: the files it names are gone
    assert printed.startswith(summary.text.rstrip("\n"))
    assert f"wrote {out / 'summary.md'}" in printed


def test_a_sweep_summarized_in_place_gains_its_seed_runs_or_one_warning(
    seeded_sweep: Path, tmp_path: Path
) -> None:
    summary = summarize([seeded_sweep])
    names = [path.name for path in summary.seed_runs]
    seeds = {"attention=linear": 3, "attention=performer": 2, "attention=softmax": 3}
    assert names == [f"{label} ({n} seeds)" for label, n in seeds.items()]
    assert summarize([seeded_sweep], tmp_path / "out").seed_runs == ()  # not in place
    for path in summary.seed_runs:
        shutil.rmtree(path)
    (seeded_sweep / names[0]).mkdir()  # not an aggregate of seeds: never replaced
    blocked = summarize([seeded_sweep])
    assert blocked.seed_runs == () and len(blocked.warnings) == 1
    assert blocked.warnings[0].startswith("no TensorBoard runs of seed means: ")
    assert blocked.warnings[0] in report(blocked).splitlines()


@pytest.mark.parametrize("quote", ["", '"'])
def test_a_resumed_run_is_the_same_setting_as_one_trained_straight_through(
    tmp_path: Path, make_run: Callable[..., Path], quote: str
) -> None:
    """A resume records ``resume=true`` and ``ckpt_path=...`` in the run's overrides: they say
    how it was continued, not what it trained, so its seeds are one setting (they were two, one
    labelled ``resume=true, ckpt_path=...``, the other ``resume=(unset), ckpt_path=(unset)``).
    Until 2026-12-02 the others' ``ckpt_path: null`` read as the text ``None``, and a sweep
    job's quoted path (``ckpt_path="<job>/..."``) as another folder: two settings again."""
    sweep = tmp_path / "sweep"
    for seed in (1, 2):
        make_run(sweep / f"seed={seed}", ["attention=softmax", f"seed={seed}"], maps=False)
    checkpoint = sweep / "seed=3" / "checkpoints" / "last.ckpt"
    given = f"ckpt_path={quote}{checkpoint}{quote}"
    resumed = ["attention=softmax", "seed=3", "resume=true", given]
    make_run(sweep / "seed=3", resumed, maps=False)
    summary = summarize([sweep])
    assert [(s.label, len(s.completed)) for s in summary.settings] == [("sweep", 3)]
    assert "resume" not in (sweep / "summary.md").read_text()


def test_where_a_run_was_written_or_read_is_no_setting(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    """Seeds of one setting written to two places (``paths.log_dir``) or reading the data from
    two folders are one setting: until 2026-12-02 they were two, each of one seed and never
    compared (user audit)."""
    for seed, place in ((1, "a"), (2, "b"), (3, "b")):
        overrides = [
            "attention=softmax",
            f"seed={seed}",
            f"paths.log_dir={tmp_path}/{place}",
            f"data.data_dir={tmp_path}/data_{place}",
        ]
        make_run(tmp_path / "runs" / f"{place}{seed}", overrides, maps=False)
    summary = summarize([tmp_path / "runs"])
    assert [len(s.completed) for s in summary.settings] == [3]
    assert "log_dir" not in (tmp_path / "runs" / "summary.md").read_text()


def test_checkpoints_a_run_started_from_elsewhere_are_its_settings(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    """A ``ckpt_path`` outside the run (what a fine-tune started from) is what it trained: two
    bases are two settings, not two seeds of one."""
    sweep = tmp_path / "sweep"
    for base in ("a", "b"):
        overrides = ["attention=softmax", f"ckpt_path={tmp_path}/{base}/checkpoints/last.ckpt"]
        make_run(sweep / base, overrides, maps=False)
    summary = summarize([sweep])
    labels = sorted(s.label for s in summary.settings)
    assert len(labels) == 2 and all(label.startswith("ckpt_path=") for label in labels), labels


def test_a_cost_unknown_for_a_run_is_left_out_with_its_own_n(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    """A run resumed from a checkpoint without its earlier seconds (``seconds: null``) counts in
    its setting's accuracy but not in its seconds, whose cell says its n; the runs table shows
    that it took two attempts."""
    sweep = tmp_path / "sweep"
    for seed, seconds, attempts in ((1, 2.0, 1), (2, 3.0, 1), (3, None, 2)):
        make_run(
            sweep / f"seed={seed}",
            ["attention=softmax", f"seed={seed}"],
            maps=False,
            metrics={"test/acc": 0.5, "seconds": seconds, "attempts": attempts},
        )
    summarize([sweep])
    tables = markdown_tables((sweep / "summary.md").read_text())
    settings, runs = tables[0], tables[1]
    header = settings[0]
    row = dict(zip(header, settings[1], strict=True))
    assert row["n"] == "3" and row["seconds"].endswith("(n=2)")
    assert row["seconds"].startswith("2.5 ± 0.707")
    runs_header = runs[0]
    attempts = [dict(zip(runs_header, r, strict=True))["attempts"] for r in runs[1:]]
    assert attempts == ["1", "1", "2"]
    assert read_csv(sweep / "summary.csv")[2]["attempts"] == "2"
