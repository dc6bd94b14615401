"""An Optuna search's ``optimization_results.yaml`` read by the summary
(:func:`vitattn.analysis.search.read_search`): a file not as the sweeper writes it is one line,
and what it says reaches ``summary.md`` escaped and short."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from vitattn.analysis.search import read_search, search_markdown
from vitattn.runs.files import UnreadableFileError
from vitattn.runs.optuna_sweeper import RESULTS_FILE


def results(**changes: Any) -> dict[str, Any]:
    """A one-objective search's results as the sweeper writes them, with ``changes``."""
    trial = {"trial": 0, "run": "0_lr=0.001", "values": [0.5], "params": {"optimizer.lr": 0.001}}
    written = {
        "name": "optuna",
        "study_name": "vitattn",
        "directions": ["maximize"],
        "metrics": ["val/acc_best"],
        "states": {"COMPLETE": 1},
        "best_trial": 0,
        "trials": [trial],
    }
    return {**written, **changes}


def read(tmp_path: Path, content: dict[str, Any]) -> Any:
    (tmp_path / RESULTS_FILE).write_text(yaml.safe_dump(content))
    return read_search(tmp_path)


def test_the_sweepers_results_are_read(tmp_path: Path) -> None:
    search = read(tmp_path, results())
    assert [trial.number for trial in search.pareto] == [0]
    assert "| 0     | 0_lr=0.001 |" in search_markdown(search)
    # a search's summary says which figure chooses a trial: not test/acc (audit)
    assert "Choose among the trials by val/acc_best, as the search did" in search_markdown(search)


def test_a_best_trial_that_is_not_a_number_names_none(tmp_path: Path) -> None:
    """``best_trial: [1]`` was ``TypeError: unhashable type`` and no summary at all."""
    assert read(tmp_path, results(best_trial=[1])).pareto == ()


def test_a_value_a_float_cannot_hold_is_one_line(tmp_path: Path) -> None:
    """A 400-digit integer among the values was an ``OverflowError`` traceback."""
    trial = {"trial": 0, "run": "", "values": [10**400], "params": {}}
    with pytest.raises(UnreadableFileError, match="trial 0 holds values that are not numbers"):
        read(tmp_path, results(trials=[trial]))


def test_values_no_axis_can_span_are_one_line(tmp_path: Path) -> None:
    """Two trials at -1.7e308 and 1.7e308: each a float, their span not (nor, at 1e308 alone,
    the axis's margins). ``pareto.png`` failed on them in matplotlib's ``arange: cannot compute
    length``, a line that named no file."""

    def trials() -> list[dict[str, Any]]:  # each its own: YAML writes a shared one as an alias
        return [
            {"trial": n, "run": "", "values": [value, 0.5], "params": {}}
            for n, value in enumerate([-1.7e308, 1.7e308])
        ]

    two = {"metrics": ["a", "b"], "directions": ["maximize"] * 2, "solutions": trials()}
    with pytest.raises(UnreadableFileError) as raised:
        read(tmp_path, results(**two, trials=trials()))
    assert str(raised.value) == (
        f"{tmp_path / RESULTS_FILE}: holds values of a from -1.7e+308 to 1.7e+308, past the "
        "1e+300 a figure's axis draws; it is not as vitattn writes it: restore it or remove it"
    )


def test_values_as_large_as_are_read_are_drawn(tmp_path: Path) -> None:
    from vitattn.analysis.search import plot_pareto

    def trials() -> list[dict[str, Any]]:  # each its own: YAML writes a shared one as an alias
        return [
            {"trial": n, "run": "", "values": [value, -value], "params": {}}
            for n, value in enumerate([-1e300, 1e300])
        ]

    two = {"metrics": ["a", "b"], "directions": ["maximize"] * 2}
    search = read(tmp_path, results(**two, trials=trials(), solutions=trials()))
    assert plot_pareto(search, tmp_path / "pareto.png")
    assert (tmp_path / "pareto.png").stat().st_size > 0


@pytest.mark.parametrize("key", ["trials", "solutions"])
def test_trials_that_are_not_a_list_are_one_line(key: str, tmp_path: Path) -> None:
    """``trials: 5`` was ``TypeError: 'int' object is not iterable`` and no summary at all."""
    with pytest.raises(UnreadableFileError, match=f'holds int at "{key}", not a list'):
        pareto = {"metrics": ["a", "b"], "directions": ["maximize"] * 2, "trials": []}
        read(tmp_path, results(**(pareto if key == "solutions" else {}), **{key: 5}))


def test_what_the_file_says_reaches_the_summary_escaped_and_short(tmp_path: Path) -> None:
    hostile = "\x1b[31mRED\n| injected |" + "A" * 300_000
    trial = {"trial": 0, "run": hostile, "values": [0.5], "params": {f"lr{hostile}": hostile}}
    text = search_markdown(read(tmp_path, results(trials=[trial], study_name=hostile)))
    assert "\x1b" not in text and "\n| injected |" not in text
    assert len(text) < 2_000


def test_the_states_reach_the_summary_escaped_and_counted_within_the_bound(
    tmp_path: Path,
) -> None:
    """A state's name from the file reached ``summary.md`` and the console raw (a terminal
    escape, a line break), and a count of 4,000 digits was printed whole."""
    states = {"\x1b[2J\x1b[31mPWNED\nFAKE: line": 1, "COMPLETE": 10**4000, "PRUNED": 2}
    text = search_markdown(read(tmp_path, results(states=states)))
    first = text.splitlines()[0]
    assert "\x1b" not in text and "FAKE: line" not in text.splitlines()[1]
    assert "10000000" not in first and "2 pruned" in first


def test_a_pareto_figure_names_at_most_thirty_trials_in_short_labels(tmp_path: Path) -> None:
    """A search of 1,000 trials with 40 parameters of 160 characters each labelled every
    trial with all of them: laying the figure out took minutes. A large search names its
    Pareto trials only, each label cut to 80 characters."""
    import matplotlib.pyplot as plt

    from vitattn.analysis.search import pareto_figure

    def trial(n: int) -> dict[str, Any]:  # each its own: YAML writes a shared one as an alias
        params = {f"p{i}": "v" * 160 for i in range(40)}
        return {"trial": n, "run": "", "values": [n / 1000, 1 - n / 1000], "params": params}

    two = {"metrics": ["a", "b"], "directions": ["maximize"] * 2}
    trials, solutions = [trial(n) for n in range(1000)], [trial(n) for n in range(50)]
    search = read(tmp_path, results(**two, trials=trials, solutions=solutions))
    figure = pareto_figure(search)
    (axes,) = figure.axes
    labels = [text.get_text() for text in axes.texts]
    assert len(labels) == 30 and all(len(label) <= 80 for label in labels)
    assert labels[0].startswith("0, vvv")
    plt.close(figure)


def test_a_trial_of_another_sweep_directory_is_shown_there(tmp_path: Path) -> None:
    """A trial another search ran on a shared storage: ``optimization_results.yaml`` names its
    sweep directory beside its ``run``, and the summary shows the run there, not as a folder
    of this sweep."""
    trial = {
        "trial": 1,
        "run": "1_lr=0.002",
        "values": [0.7],
        "params": {"optimizer.lr": 0.002},
        "sweep_dir": "/elsewhere/B",
    }
    search = read(tmp_path, results(best_trial=1, trials=[trial]))
    assert [trial.run for trial in search.pareto] == ["/elsewhere/B/1_lr=0.002"]
    assert "/elsewhere/B/1_lr=0.002" in search_markdown(search)


def test_the_labels_of_two_close_trials_do_not_cover_each_other(tmp_path: Path) -> None:
    """Every label sat up and to the right of its point, so two trials close together had their
    labels one over the other: each label goes where it covers least."""
    import matplotlib.pyplot as plt

    from vitattn.analysis.search import pareto_figure

    points = [(0.30, 900.0), (0.40, 1100.0), (0.401, 1102.0), (0.45, 1300.0)]

    def trial(n: int) -> dict[str, Any]:  # each its own: YAML writes a shared one as an alias
        return {"trial": n, "run": "", "values": list(points[n]), "params": {"lr": 0.001}}

    two = {"metrics": ["a", "b"], "directions": ["maximize"] * 2}
    search = read(
        tmp_path, results(**two, trials=[trial(n) for n in range(4)], solutions=[trial(3)])
    )
    figure = pareto_figure(search)
    figure.draw_without_rendering()
    renderer = figure.canvas.get_renderer()
    (axes,) = figure.axes
    boxes = {text.get_text(): text.get_window_extent(renderer) for text in axes.texts}
    assert len(boxes) == 4
    for label, box in boxes.items():
        assert not box.count_overlaps([b for other, b in boxes.items() if other != label]), label
    plt.close(figure)


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_results_file_that_is_no_regular_file_is_one_line_unread(
    kind: str, tmp_path: Path
) -> None:
    """A link to a file outside the sweep was followed (its study name reached
    ``summary.md``), and a FIFO left the search's section out without a word (audit)."""
    import os

    outside = tmp_path / "outside.yaml"
    outside.write_text(yaml.safe_dump(results(study_name="SECRET")))
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    if kind == "link":
        (sweep / RESULTS_FILE).symlink_to(outside)
    else:
        os.mkfifo(sweep / RESULTS_FILE)
    with pytest.raises(UnreadableFileError) as refused:
        read_search(sweep)
    said = str(refused.value)
    assert said.startswith(f"{sweep / RESULTS_FILE}: ") and "\n" not in said
    assert "SECRET" not in said


def test_summary_md_lists_at_most_a_hundred_pareto_trials(tmp_path: Path) -> None:
    """6,000 planted Pareto trials were 6,000 rows of ``summary.md`` (audit)."""

    def trial(n: int) -> dict[str, Any]:
        return {"trial": n, "run": "", "values": [n / 1000, 1 - n / 1000], "params": {}}

    two = {"metrics": ["a", "b"], "directions": ["maximize"] * 2}
    trials, solutions = ([trial(n) for n in range(150)] for _ in range(2))  # no YAML alias
    text = search_markdown(read(tmp_path, results(**two, trials=trials, solutions=solutions)))
    rows = [line for line in text.splitlines() if line.startswith("| ") and "trial" not in line]
    assert len(rows) == 100
    assert f"and 50 more, in {RESULTS_FILE}" in text
