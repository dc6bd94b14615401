"""Seeds as one curve in TensorBoard: the aggregate runs of a sweep, read back as TensorBoard
reads them (one accumulator per run folder, the custom-scalars plugin's merged layout and its
scalars route, the hparams plugin's data)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from unittest.mock import ANY

import numpy as np
import pytest
from scipy import stats
from tensorboard.plugins.custom_scalar.metadata import CONFIG_SUMMARY_TAG

from tests.support.trees import tree_digest
from vitattn.analysis.seed_runs import (
    CATEGORY,
    MANIFEST,
    MARKER,
    TAGS,
    band_tags,
    run_name,
    write_seed_runs,
)
from vitattn.runs.files import UnreadableFileError
from vitattn.training.logger import LAYOUT

Curves = Mapping[str, Sequence[tuple[int, float]]]


def write_seed(path: Path, curves: Curves, seed: int, events_in: str = "") -> Path:
    """A per-seed run as training writes one: ``curves``, the training layout and an HPARAMS
    session of its own (so that the aggregate runs' lack of one is a real difference)."""
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams

    path.mkdir(parents=True)
    writer = SummaryWriter(log_dir=str(path / events_in))
    writer.add_custom_scalars(LAYOUT)
    for summary in hparams({"seed": seed}, {"~summary/acc_best_val": 0.5}):
        writer.file_writer.add_summary(summary)
    for tag, points in curves.items():
        for step, value in points:
            writer.add_scalar(tag, value, step)
    writer.close()
    return path


def curves_of(seed: int, offset: float, skip: Sequence[int] = ()) -> dict[str, list]:
    """Curves that differ by seed and setting; ``skip`` leaves val/acc's steps out."""
    rng = np.random.default_rng(seed * 7 + int(offset * 100))
    return {
        "val/acc": [
            (step, float(offset + 0.001 * step + rng.normal(0, 0.02)))
            for step in (10, 20, 30, 40)
            if step not in skip
        ],
        "val/loss": [(step, float(2.0 - 0.01 * step + rng.normal(0, 0.05))) for step in (10, 20)],
        "train/loss": [(step, float(2.3 - 0.01 * step + rng.normal(0, 0.1))) for step in (5, 15)],
    }


SETTINGS = {
    "attention=linear": {1: curves_of(1, 0.3), 2: curves_of(2, 0.3), 3: curves_of(3, 0.3, [20])},
    "attention=softmax, model.depth=2": {1: curves_of(1, 0.5), 2: curves_of(2, 0.5)},
    "data=cifar10/small": {1: curves_of(1, 0.1), 2: curves_of(2, 0.1)},
    "attention=performer": {1: curves_of(1, 0.2)},
}
"""Label to seed to curves: 3 seeds (one missing a step), 2 seeds with ``,`` and a space in the
label, 2 seeds with a ``/``, and a single seed (no aggregate)."""


@pytest.fixture
def sweep(tmp_path: Path) -> tuple[Path, dict[str, list[Path]]]:
    """Per-seed runs of :data:`SETTINGS` in a sweep directory; one run keeps its events in
    ``tensorboard/`` as older runs do. Returns the sweep and its groups."""
    root = tmp_path / "multiruns" / "stamp"
    groups: dict[str, list[Path]] = {}
    for label, seeds in SETTINGS.items():
        for seed, curves in seeds.items():
            job = f"{label.replace(', ', ',').replace('/', '-')},seed={seed}"
            older = "tensorboard" if label.startswith("attention=softmax") and seed == 2 else ""
            groups.setdefault(label, []).append(write_seed(root / job, curves, seed, older))
    return root, groups


def load(sweep_dir: Path):
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

    multiplexer = EventMultiplexer(size_guidance={"scalars": 0, "tensors": 0})
    multiplexer.AddRunsFromDirectory(str(sweep_dir))
    multiplexer.Reload()
    return multiplexer


def scalars(multiplexer, run: str, tag: str) -> tuple[list[int], np.ndarray]:
    """A run's curve as TensorBoard holds it (scalars become tensors when read)."""
    from tensorboard.util import tensor_util

    events = multiplexer.Tensors(run, tag)
    return [e.step for e in events], np.array(
        [tensor_util.make_ndarray(e.tensor_proto).item() for e in events]
    )


def expected(label: str, tag: str) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """Shared steps, mean, and the 95% t interval's bounds cut to the tag's range, computed here
    from the inputs."""
    seeds = [dict(curves[tag]) for curves in SETTINGS[label].values()]
    steps = sorted(set.intersection(*(set(s) for s in seeds)))
    values = np.array([[s[step] for step in steps] for s in seeds])
    n = len(seeds)
    mean = values.mean(axis=0)
    low, high = stats.t.interval(0.95, n - 1, loc=mean, scale=stats.sem(values, axis=0))
    least, most = (0.0, 1.0) if tag.endswith("/acc") else (0.0, np.inf)  # an accuracy, a loss
    return steps, mean, np.clip(low, least, most), np.clip(high, least, most)


AGGREGATES = {
    "attention=linear": "attention=linear (3 seeds)",
    "attention=softmax, model.depth=2": "attention=softmax, model.depth=2 (2 seeds)",
    "data=cifar10/small": "data=cifar10_small (2 seeds)",
}


def test_one_aggregate_run_per_setting_with_the_mean_and_its_interval(sweep):
    root, groups = sweep
    seed_runs = set(load(root).Runs())
    written = write_seed_runs(root, groups)

    assert [path.name for path in written] == list(AGGREGATES.values())
    assert all(path.parent == root for path in written)
    multiplexer = load(root)
    assert set(multiplexer.Runs()) - seed_runs == set(AGGREGATES.values())
    for label, run in AGGREGATES.items():
        # each mean is stored once, as its margin chart's value: not as ``val/acc`` too
        stored = set(multiplexer.GetAccumulator(run).Tags()["tensors"]) - {CONFIG_SUMMARY_TAG}
        assert stored == {band_tag for tag in TAGS for band_tag in band_tags(tag)}, run
        for tag in TAGS:
            steps, mean, low, high = expected(label, tag)
            mean_tag, lower_tag, upper_tag = band_tags(tag)
            got_steps, got = scalars(multiplexer, run, mean_tag)
            assert got_steps == steps
            np.testing.assert_allclose(got, mean, rtol=1e-6)
            for band_tag, want in ((lower_tag, low), (upper_tag, high)):
                got_steps, got = scalars(multiplexer, run, band_tag)
                assert got_steps == steps
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    _, linear = scalars(multiplexer, AGGREGATES["attention=linear"], band_tags("val/acc")[0])
    assert len(linear) == 3  # step 20 is missing in one seed, so not averaged
    assert not any(math.isnan(v) for v in linear)


def test_aggregate_runs_have_no_hparams_session(sweep):
    root, groups = sweep
    write_seed_runs(root, groups)
    sessions = load(root).PluginRunToTagToContent("hparams")
    assert len(sessions) == sum(len(runs) for runs in groups.values())  # one per job
    assert not set(sessions) & set(AGGREGATES.values())


def custom_scalars(multiplexer, logdir: Path):
    """The custom-scalars plugin over ``multiplexer``, as TensorBoard serves it."""
    from tensorboard.backend.event_processing.data_provider import MultiplexerDataProvider
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.custom_scalar.custom_scalars_plugin import CustomScalarsPlugin
    from tensorboard.plugins.scalar.scalars_plugin import ScalarsPlugin

    plugins: dict = {}
    context = base_plugin.TBContext(
        logdir=str(logdir),
        multiplexer=multiplexer,
        data_provider=MultiplexerDataProvider(multiplexer, str(logdir)),
        plugin_name_to_instance=plugins,
    )
    plugins["scalars"] = ScalarsPlugin(context)
    return CustomScalarsPlugin(context)


def test_layout_has_a_margin_chart_per_metric_drawn_for_the_aggregate_runs_only(sweep):
    from tensorboard import context

    root, groups = sweep
    write_seed_runs(root, groups)
    multiplexer = load(root)
    plugin = custom_scalars(multiplexer, root)
    request = context.RequestContext()
    layout = json.loads(plugin.layout_impl(request, ""))
    categories = {c["title"]: c["chart"] for c in layout["category"]}
    assert set(LAYOUT) <= set(categories)  # the training runs' layout is kept, merged
    charts = categories[CATEGORY]
    assert len(charts) == len(TAGS)  # written into every aggregate run, shown once
    series = [chart["margin"]["series"] for chart in charts]
    assert [[(s["value"], s["lower"], s["upper"]) for s in one] for one in series] == [
        [band_tags(tag)] for tag in TAGS
    ]
    for chart in charts:
        (margin,) = chart["margin"]["series"]
        # the frontend asks each run for its tags with this regex and draws or flags what it gets
        regex = "|".join(
            f"({re.escape(t)})" for t in (margin["value"], margin["lower"], margin["upper"])
        )
        for run in multiplexer.Runs():
            found = plugin.scalars_impl(request, run, regex, "")
            tags = set(found["tag_to_events"]) & set(margin.values())
            if run in AGGREGATES.values():
                assert tags == set(margin.values()), run  # one curve with its band per setting
            else:
                assert not tags, run  # a per-seed run is left out, not flagged as lacking tags


def test_rewriting_replaces_the_aggregates_and_touches_nothing_else(sweep):
    root, groups = sweep
    first = write_seed_runs(root, groups)
    seeds_before = {run: tree_digest(run) for runs in groups.values() for run in runs}
    mean_tag = band_tags("val/acc")[0]
    values = {run.name: scalars(load(root), run.name, mean_tag) for run in first}

    again = write_seed_runs(root, groups)
    assert again == first
    for run in again:
        assert len(list(run.glob("events.out.tfevents.*"))) == 1  # the old file went
        steps, got = scalars(load(root), run.name, mean_tag)
        assert steps == values[run.name][0]
        np.testing.assert_array_equal(got, values[run.name][1])

    fewer = {**groups, "attention=linear": groups["attention=linear"][:1]}
    fewer.pop("data=cifar10/small")
    write_seed_runs(root, fewer)
    assert not (root / AGGREGATES["attention=linear"]).exists()
    assert not (root / AGGREGATES["data=cifar10/small"]).exists()
    assert (root / AGGREGATES["attention=softmax, model.depth=2"] / MARKER).is_file()
    assert {run: tree_digest(run) for run in seeds_before} == seeds_before


def test_a_folder_that_is_not_an_aggregate_is_never_replaced(sweep):
    root, groups = sweep
    write_seed_runs(root, groups)
    squatter = root / AGGREGATES["attention=linear"]
    (squatter / MARKER).unlink()
    (squatter / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not an aggregate of seeds"):
        write_seed_runs(root, groups)
    assert (squatter / "notes.txt").read_text() == "mine"
    assert (root / AGGREGATES["data=cifar10/small"] / MARKER).is_file()  # nothing removed


def test_a_planted_marker_deletes_nothing(sweep):
    """A marker is a claim: in a job's folder, or in an aggregate's folder that no longer looks
    as it was written, or with the sweep's record naming a job, nothing is removed."""
    root, groups = sweep
    write_seed_runs(root, groups)
    job = groups["attention=performer"][0]  # a seed's run, its events and files
    (job / MARKER).write_text("{}\n")  # the 3-byte marker of issue 43
    changed = root / AGGREGATES["attention=linear"]
    (changed / "notes.txt").write_text("mine")  # an aggregate someone wrote into
    manifest = json.loads((root / MANIFEST).read_text())
    manifest["seed_runs"].append({"name": job.name, "marker": "0" * 64})
    (root / MANIFEST).write_text(json.dumps(manifest))
    before = tree_digest(job)
    with pytest.raises(ValueError, match="is not an aggregate of seeds"):
        write_seed_runs(root, groups)  # the changed aggregate is kept, and said
    assert (changed / "notes.txt").read_text() == "mine"
    groups.pop("attention=linear")
    write_seed_runs(root, groups)
    assert tree_digest(job) == before and (job / MARKER).is_file()
    assert (changed / "notes.txt").read_text() == "mine"
    assert json.loads((root / MANIFEST).read_text())["seed_runs"] == [
        {"name": AGGREGATES[label], "marker": ANY} for label in groups if label in AGGREGATES
    ]


@pytest.mark.parametrize(
    "entry", [{"name": "../elsewhere", "marker": "0"}, {"name": "."}, "text", None]
)
def test_a_record_naming_no_folder_of_the_sweep_is_one_line(sweep, elsewhere, entry):
    root, groups = sweep
    root.joinpath(MANIFEST).write_text(json.dumps({"seed_runs": [entry]}))
    with pytest.raises(UnreadableFileError) as raised:
        write_seed_runs(root, groups)
    assert str(raised.value).startswith(f"{root / MANIFEST}: records ")
    assert "\n" not in str(raised.value)
    assert sorted(elsewhere.iterdir()) == [elsewhere / "kept.txt"]


def test_runs_without_the_curves_do_not_count_as_seeds(sweep, tmp_path):
    root, groups = sweep
    empty = tmp_path / "never-started"
    empty.mkdir()
    written = write_seed_runs(
        root, {"attention=performer": [*groups["attention=performer"], empty]}
    )
    assert written == []


def test_awkward_labels_make_distinct_folder_names():
    assert run_name("a=1/2, b=x\\y", 3) == "a=1_2, b=x_y (3 seeds)"
    long_a, long_b = "x=" + "a" * 300, "x=" + "a" * 299 + "b"
    names = {run_name(long_a, 2), run_name(long_b, 2)}
    assert len(names) == 2
    assert all(len(name.encode()) <= 255 and name.endswith(" (2 seeds)") for name in names)
    assert len(run_name("é" * 200, 2).encode()) <= 255


def test_a_missing_sweep_directory_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="no sweep directory"):
        write_seed_runs(tmp_path / "nowhere", {})


@pytest.mark.slow
def test_real_runs_of_two_seeds(tmp_path, data_dir):
    """Two real tiny trainings: their aggregate averages what they logged, the HPARAMS view
    still has one session per job, and the training layout and the margin charts are merged."""
    from tensorboard import context

    from tests.support.presets import FEW_STEPS
    from tests.support.runners import train_with

    root = tmp_path / "sweep"
    runs = [root / f"seed={seed}" for seed in (1, 2)]
    for seed, run in zip((1, 2), runs, strict=True):
        train_with(run, data_dir, *FEW_STEPS, f"seed={seed}")
    (written,) = write_seed_runs(root, {"attention=softmax": runs})

    multiplexer = load(root)
    assert written.name == "attention=softmax (2 seeds)"
    assert set(multiplexer.Runs()) == {"seed=1", "seed=2", written.name}
    for tag in TAGS:
        seeds = [dict(zip(*scalars(multiplexer, run.name, tag), strict=True)) for run in runs]
        steps, mean = scalars(multiplexer, written.name, band_tags(tag)[0])
        assert steps and steps == sorted(set(seeds[0]) & set(seeds[1]))
        want = [(seeds[0][step] + seeds[1][step]) / 2 for step in steps]
        np.testing.assert_allclose(mean, want, rtol=1e-6)
    assert set(multiplexer.PluginRunToTagToContent("hparams")) == {"seed=1", "seed=2"}
    layout = json.loads(custom_scalars(multiplexer, root).layout_impl(context.RequestContext(), ""))
    assert {c["title"] for c in layout["category"]} == {*LAYOUT, CATEGORY}


def test_a_link_planted_at_an_aggregates_event_file_gets_none_of_its_records(
    sweep, elsewhere, monkeypatch
):
    """The seed means are written through the descriptor the event file was made with: a link
    planted at its name while they are written takes nothing. On the code before, TensorBoard's
    writer appended by name and wrote the later records through the link, into ``elsewhere``."""
    import vitattn.analysis.seed_runs as seed_runs

    root, groups = sweep
    kept = elsewhere / "kept.txt"
    before = kept.read_bytes()
    reduce_tag, planted = seed_runs.reduce_tag, []

    def planting(events, tag):
        if tag == TAGS[1] and not planted:  # after the first curve: swap the event file
            (folder,) = (p for p in root.iterdir() if p.name == AGGREGATES["attention=linear"])
            (event_file,) = folder.glob("events.out.tfevents.*")
            event_file.unlink()
            event_file.symlink_to(kept)
            planted.append(event_file)
        return reduce_tag(events, tag)

    monkeypatch.setattr(seed_runs, "reduce_tag", planting)
    seed_runs.remove_seed_runs(root)
    write_seed_runs(root, {"attention=linear": groups["attention=linear"]})
    assert planted and planted[0].is_symlink()
    assert kept.read_bytes() == before


def test_a_two_seed_band_stays_within_its_curves_range():
    """Two seeds of 0.25 and 0.35: the t band of their mean reached -0.33, below any accuracy;
    it is cut to 0..1 for an accuracy and to 0 and above for a loss, not for another tag."""
    from vitattn.analysis.seed_runs import reduce_tag

    def runs(tag: str) -> list:
        return [{tag: [(1, 0.0, 0.25)]}, {tag: [(1, 0.0, 0.35)]}]

    half = stats.t.ppf(0.975, 1) * np.std([0.25, 0.35], ddof=1) / np.sqrt(2)
    for tag, lower in (("val/acc", 0.0), ("train/loss", 0.0), ("val/fidelity", 0.30 - half)):
        band = reduce_tag(runs(tag), tag)
        assert band is not None
        np.testing.assert_allclose([band.lower[0], band.upper[0]], [lower, 0.30 + half])
    assert 0.30 - half < -0.3
