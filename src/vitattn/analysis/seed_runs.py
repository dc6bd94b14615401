"""Seeds as one curve in TensorBoard: for each setting of a sweep run with two or more seeds, an
aggregate run beside the per-seed runs, named for the setting (``attention=linear (3 seeds)``),
holding the per-step mean of its seeds and the 95% interval of that mean, and a custom-scalars
margin chart per metric that draws every setting's mean with its band.

What TensorBoard shows, and why the tags are what they are:

* The mean and its band are in a group of their own, :data:`BAND_GROUP`
  (``~seeds/val/acc/mean``, ``.../lower``, ``.../upper``), which sorts after ``train`` and
  ``val``: in SCALARS and TIME SERIES, ``~seeds/val/acc/mean`` holds one curve per setting, and
  the seeds' own ``val/acc`` cards are left as they are.
* Each mean is stored once, as the margin chart's value. It is not written as ``val/acc`` too
  (which would overlay the seeds' curves): TensorBoard draws a margin series for every run that
  has its three tags, leaves out in silence a run that has none of them, and flags in red a run
  that has some but not all ("Missing Tags: run ... lacks data for tags"), which every per-seed
  run would be if the series' value were ``val/acc`` (tensorboard 2.21's margin chart card).
* The layout (category :data:`CATEGORY`) has one margin chart per metric with one series. A
  margin series names tags, not runs, so it is drawn once per aggregate run: one curve with its
  band per setting. Every aggregate run carries the same layout; TensorBoard merges the layouts
  of all runs by category title and drops identical charts, so the training runs' own layout
  stays and this one is shown once.
* No HPARAMS session: an aggregate run holds scalars and the layout only, so the HPARAMS view
  still lists one row per job.

The band is the 95% Student's t interval of the mean at each step, ``mean ± t(0.975, n - 1) ·
s / sqrt(n)`` with ``s`` the standard deviation over seeds (``ddof=1``), as in the settings table
(:mod:`vitattn.analysis.uncertainty`), and the band ``val_acc_vs_step.png`` shades
(:mod:`vitattn.analysis.curves` computes it with :func:`reduce_tag`). Two seeds give a wide
band (t = 12.7): they say little.

Each aggregate folder holds a marker file, :data:`MARKER`, saying what it reduces. A marker is a
claim, not a command: the sweep's own record, :data:`MANIFEST` (written in the sweep directory
before the folders it lists), names each aggregate folder written here with the SHA-256 of its
marker, and rewriting a sweep's aggregates removes only a folder that is listed there and still
looks as it was written (:func:`written_here`). A marker planted in a job's folder removes
nothing. tensorboard-reducer would read and average the
runs too, but it writes one run per reduction (``-mean``, ``-std``), has no t interval and needs
pandas; the runs are read here by the project's reader (TensorBoard's ``EventAccumulator``) and
written by torch's ``SummaryWriter`` through the descriptor each event file was made with
(:class:`vitattn.runs.pinned_events.PinnedSummaryWriter`), as a run's own are.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vitattn.analysis.events import read_curves
from vitattn.analysis.uncertainty import ACCURACY, CONFIDENCE, NOT_NEGATIVE, UNBOUNDED
from vitattn.runs.files import (
    MAX_READ,
    UnreadableFileError,
    check_confined,
    one_line,
    read_json,
    write_text,
)

TAGS = ("val/acc", "val/loss", "train/loss")
"""The curves reduced by default."""
TAG_RANGES = {
    "val/acc": ACCURACY,
    "train/acc": ACCURACY,
    "val/loss": NOT_NEGATIVE,
    "train/loss": NOT_NEGATIVE,
}
"""The range a curve's mean lies in, which its band is cut to (as a setting's interval is:
:func:`vitattn.analysis.uncertainty.mean_interval`); other tags' bands are not cut."""

BAND_GROUP = "~seeds"
"""Tag group of the margin charts' mean and bounds; ``~`` sorts it after ``train`` and ``val``."""

CATEGORY = "seeds: mean with its 95% interval"
"""Title of the custom-scalars category of the margin charts."""

MARKER = ".vitattn-seed-run.json"
"""The file that marks a folder as an aggregate run written here (it says what it reduces)."""

MAX_NAME_BYTES = 255
"""The longest folder name most file systems take."""

Events = Mapping[str, Sequence[tuple[int, float, float]]]
"""A run's curves as :func:`vitattn.analysis.events.read_curves` reads them."""


@dataclass(frozen=True)
class Band:
    """One tag over seeds at the steps they share: mean, the bounds of its interval, and the mean
    wall time (so TensorBoard's relative-time axis reads the seeds' mean elapsed time)."""

    steps: np.ndarray
    wall_times: np.ndarray
    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


def band_tags(tag: str) -> tuple[str, str, str]:
    """The margin chart's value, lower and upper tags for ``tag``."""
    return tuple(f"{BAND_GROUP}/{tag}/{part}" for part in ("mean", "lower", "upper"))


def chart_title(tag: str) -> str:
    """The margin chart's title for ``tag``: what the line and the band are."""
    return f"{tag}: mean of seeds, 95% t interval"


def layout(tags: Sequence[str] = TAGS) -> dict[str, dict[str, list]]:
    """The custom-scalars layout of the aggregate runs (``SummaryWriter.add_custom_scalars``'s
    form): one margin chart per tag."""
    return {CATEGORY: {chart_title(tag): ["Margin", list(band_tags(tag))] for tag in tags}}


def run_name(label: str, seeds: int) -> str:
    """The aggregate run's folder: ``<label> (<seeds> seeds)``, path separators in the label
    replaced by ``_``; a label too long for a folder name is cut and told apart by a hash."""
    safe = label.replace("/", "_").replace("\\", "_").replace("\0", "_")
    suffix = f" ({seeds} seeds)"
    if len((safe + suffix).encode()) <= MAX_NAME_BYTES:
        return safe + suffix
    digest = hashlib.sha1(label.encode()).hexdigest()[:8]
    tail = f"… {digest}{suffix}"
    room = MAX_NAME_BYTES - len(tail.encode())
    return safe.encode()[:room].decode(errors="ignore") + tail


def reduce_tag(runs: Sequence[Events], tag: str, confidence: float = CONFIDENCE) -> Band | None:
    """``tag``'s mean over ``runs`` (two or more) with its Student's t interval (cut to the
    tag's range, :data:`TAG_RANGES`), at the steps every run logged; ``None`` if they share
    none. A step logged twice counts with its last value; a NaN in any seed makes that step's
    mean and bounds NaN."""
    from scipy import stats

    if len(runs) < 2:
        return None
    points = [{step: (wall, value) for step, wall, value in run.get(tag, ())} for run in runs]
    steps = sorted(set.intersection(*(set(p) for p in points)))
    if not steps:
        return None
    walls = np.array([[p[step][0] for step in steps] for p in points])
    values = np.array([[p[step][1] for step in steps] for p in points])
    mean = values.mean(axis=0)
    half = stats.t.ppf(0.5 + confidence / 2, len(runs) - 1) * values.std(axis=0, ddof=1)
    half /= np.sqrt(len(runs))
    least, most = TAG_RANGES.get(tag, UNBOUNDED)
    lower, upper = np.clip(mean - half, least, most), np.clip(mean + half, least, most)
    return Band(np.array(steps), walls.mean(axis=0), mean, lower, upper)


MANIFEST = ".vitattn-seed-runs.json"
"""The sweep's record of the aggregate runs written into it: ``{"seed_runs": [{"name": <folder>,
"marker": <SHA-256 of its marker>}]}``."""


def recorded_seed_runs(sweep_dir: Path) -> dict[str, str]:
    """The aggregate folders :data:`MANIFEST` records in ``sweep_dir`` (name to its marker's
    SHA-256); none where there is no record. A record that is not as written here is one line
    (:class:`vitattn.runs.files.UnreadableFileError`)."""
    path = sweep_dir / MANIFEST
    if not path.exists() and not path.is_symlink():
        return {}
    entries = read_json(path, dict, follow_links=False).get("seed_runs")
    recorded: dict[str, str] = {}
    for entry in entries if isinstance(entries, list) else [None]:
        name = entry.get("name") if isinstance(entry, dict) else None
        digest = entry.get("marker") if isinstance(entry, dict) else None
        if not (isinstance(name, str) and _plain_name(name) and isinstance(digest, str)):
            raise UnreadableFileError(
                path, f"records {one_line(entry)[:80]}, not a folder of this sweep"
            )
        recorded[name] = digest
    return recorded


def _plain_name(name: str) -> bool:
    return name not in ("", ".", "..") and Path(name).name == name and "\0" not in name


def written_here(folder: Path, digest: str) -> bool:
    """Whether ``folder`` still looks as :func:`write_seed_run` wrote it: a folder (not a link)
    holding its marker, whose SHA-256 is ``digest``, and TensorBoard event files, nothing else."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    for entry in folder.iterdir():
        if entry.is_symlink() or not entry.is_file():
            return False
        if entry.name == MARKER:
            if entry.stat().st_size > MAX_READ:  # not one vitattn wrote: never read whole
                return False
            if _sha256(entry) != digest:
                return False
        elif not entry.name.startswith("events.out.tfevents."):
            return False
    return (folder / MARKER).is_file()


def _sha256(path: Path) -> str:
    """The SHA-256 of the file at ``path``, read a megabyte at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def is_seed_run(path: Path) -> bool:
    """Whether ``path`` is an aggregate run written by :func:`write_seed_runs`: recorded in its
    sweep's :data:`MANIFEST` and looking as it was written."""
    digest = recorded_seed_runs(path.parent).get(path.name)
    return digest is not None and written_here(path, digest)


def remove_seed_runs(sweep_dir: Path) -> None:
    """Remove the aggregate runs that ``sweep_dir``'s :data:`MANIFEST` records and that still
    look as they were written; nothing else, whatever marker it holds."""
    for name, digest in recorded_seed_runs(sweep_dir).items():
        if written_here(sweep_dir / name, digest):
            shutil.rmtree(sweep_dir / name)


def marker_text(label: str, runs: Sequence[Path], folder: Path, tags: Sequence[str]) -> str:
    """What :data:`MARKER` says of the aggregate run at ``folder``."""
    record = {
        "label": label,
        "runs": [_relative(run, folder.parent) for run in runs],
        "tags": list(tags),
        "band": f"Student's t {CONFIDENCE:.0%} interval of the mean",
    }
    return json.dumps(record, indent=2) + "\n"


def write_seed_run(
    folder: Path, label: str, runs: Sequence[Path], events: Sequence[Events], tags: Sequence[str]
) -> Path:
    """One aggregate run at ``folder``: the marker first (a folder left half written is still
    recognised and replaced next time), then each tag's mean and band, then the layout."""
    from vitattn.runs.pinned_events import PinnedSummaryWriter

    check_confined(folder)
    folder.mkdir()
    write_text(folder / MARKER, marker_text(label, runs, folder, tags))
    writer = PinnedSummaryWriter(log_dir=str(folder))  # a link planted at its name gets nothing
    try:
        for tag in tags:
            band = reduce_tag(events, tag)
            if band is None:
                continue
            mean_tag, lower_tag, upper_tag = band_tags(tag)
            for i, step in enumerate(band.steps.tolist()):
                wall = float(band.wall_times[i])
                writer.add_scalar(mean_tag, float(band.mean[i]), step, walltime=wall)
                writer.add_scalar(lower_tag, float(band.lower[i]), step, walltime=wall)
                writer.add_scalar(upper_tag, float(band.upper[i]), step, walltime=wall)
        writer.add_custom_scalars(layout(tags))
    finally:
        writer.close()
    return folder


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def write_seed_runs(
    sweep_dir: Path,
    groups: Mapping[str, Sequence[Path]],
    tags: Sequence[str] = TAGS,
    read: Mapping[Path, Events] | None = None,
) -> list[Path]:
    """Write one aggregate run into ``sweep_dir`` per setting of ``groups`` (a setting's label,
    as the sweep summary labels it, to its runs' directories, one per seed) that has two or more
    runs with any of ``tags`` (a run whose event files are refused has none); see the module's
    docstring for what it holds. A run's curves are those ``read`` holds for it (the summary
    has read them), else read here (:func:`vitattn.analysis.events.read_curves`). The aggregate
    runs of an earlier call are replaced: a setting left with fewer than two seeds loses its
    folder. Returns the folders written, in the order of ``groups``.

    Raises:
        ValueError: ``sweep_dir`` is not a directory, two settings would share a folder, or a
            folder that is not an aggregate run has an aggregate's name.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ValueError(f"no sweep directory at {sweep_dir}")
    planned: dict[str, tuple[str, list[Path], list[Events]]] = {}
    for label, runs in groups.items():
        if len(runs) < 2:
            continue
        found = [(Path(run), _events(Path(run), tags, read)) for run in runs]
        kept = [(run, events) for run, events in found if any(tag in events for tag in tags)]
        if len(kept) < 2:
            continue
        name = run_name(label, len(kept))
        if name in planned:
            raise ValueError(
                f"settings {planned[name][0]!r} and {label!r} would share the run {name!r}"
            )
        planned[name] = (label, [run for run, _ in kept], [events for _, events in kept])
    for name in planned:
        if os.path.lexists(sweep_dir / name) and not is_seed_run(sweep_dir / name):
            raise ValueError(
                f"{sweep_dir / name} exists and is not an aggregate of seeds: move it to write one"
            )
    remove_seed_runs(sweep_dir)
    record = [
        {"name": name, "marker": _digest(marker_text(label, runs, sweep_dir / name, tags))}
        for name, (label, runs, _) in planned.items()
    ]  # recorded before the folders exist: one left half written is still known as ours
    write_text(sweep_dir / MANIFEST, json.dumps({"seed_runs": record}, indent=2) + "\n")
    return [
        write_seed_run(sweep_dir / name, label, runs, events, tags)
        for name, (label, runs, events) in planned.items()
    ]


def _events(run: Path, tags: Sequence[str], read: Mapping[Path, Events] | None) -> Events:
    """The run's curves of ``tags``, as ``read`` holds them or read now; none where its event
    files are refused (the summary that read the run has said so in one line), so the mean
    leaves it out as it leaves out a run without curves."""
    if read is not None and run in read:
        return {tag: read[run][tag] for tag in tags if tag in read[run]}
    try:
        return read_curves(run, tags)
    except UnreadableFileError:
        return {}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
