"""A sweep's runs grouped into settings (runs that differ only by seed), each with its figures'
means and 95% intervals, and the baseline setting the others are compared with
(:mod:`vitattn.analysis.comparison`): what the table a sweep summary opens with is made of.

Each run comes with its row (:func:`vitattn.analysis.records.summary_row`) as a :class:`RunRow`;
a run counts towards its setting's statistics only if it completed, and each seed once: a second
completed run of a seed the setting already counts (a job folder copied within the sweep, a
sweep summarized together with its re-run) started from the same weights and saw the same
batches, so it is no new sample; nor is an unseeded run whose ``metrics.json`` repeats a counted
one's (its copy). It keeps its row and is named in the setting's notes. The
baseline is named by
``summary.baseline`` (a training override) or ``plot_curves.py --baseline``: either
``key=value`` pairs (``attention=softmax``, or ``'attention=softmax, model.depth=2'`` quoted),
which a setting matches when every run of it has those values, or a bare value (``softmax``)
that one of the differing settings' values equals. Without one, the ``attention=softmax``
setting is the baseline when there is exactly one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vitattn.analysis.records import NOT_SETTINGS, Run, is_a_setting
from vitattn.analysis.uncertainty import (
    ACCURACY,
    NOT_NEGATIVE,
    Estimate,
    accuracy_estimate,
    mean_interval,
)
from vitattn.runs.files import one_line
from vitattn.runs.layout import RunState
from vitattn.runs.recorded import flattened

DEFAULT_BASELINE = "attention=softmax"

FIGURES = {
    "best_val_acc": "best val/acc",
    "test_acc": "test/acc",
    "images_per_sec": "images/s",
    "peak_memory_gb": "peak memory (GiB)",
    "gflop_per_image": "GFLOP/image",
    "seconds": "seconds",
}
"""The per-run figures a setting reports as mean, std and 95% interval, with their headers."""
RANGES = {
    "best_val_acc": ACCURACY,
    "test_acc": ACCURACY,
    "images_per_sec": NOT_NEGATIVE,
    "peak_memory_gb": NOT_NEGATIVE,
    "gflop_per_image": NOT_NEGATIVE,
    "seconds": NOT_NEGATIVE,
}
"""The range each of :data:`FIGURES` lies in: its interval is cut to it."""


@dataclass(frozen=True)
class RunRow:
    """A run of a summary and its row of ``summary.csv``
    (:func:`vitattn.analysis.records.summary_row`)."""

    run: Run
    row: Mapping[str, Any]

    @property
    def completed(self) -> bool:
        """Whether the run completed, as the one rule says (:attr:`Run.state`)."""
        return self.run.state is RunState.COMPLETED


@dataclass(frozen=True)
class Setting:
    """Runs sharing a label (they differ only by seed) and the estimates of their figures
    (:data:`FIGURES`) over those that completed."""

    label: str
    runs: tuple[RunRow, ...]
    estimates: Mapping[str, Estimate | None]

    @property
    def rows(self) -> list[Mapping[str, Any]]:
        return [member.row for member in self.runs]

    @property
    def completed(self) -> list[RunRow]:
        """The completed runs that count: each seed once, by the first run of it found
        (:func:`counted`)."""
        return counted(self.runs)

    @property
    def repeats(self) -> list[RunRow]:
        """Completed runs of a seed, or with the results, of a run of this setting that counts."""
        kept = {id(member) for member in self.completed}
        return [m for m in self.runs if m.completed and id(m) not in kept]

    def values(self, key: str) -> list[Any]:
        """``key``'s value in each completed run."""
        return [member.row.get(key) for member in self.completed]

    def by_seed(self, key: str) -> dict[Any, Any]:
        """``key``'s value in each completed run that counts, by the run's seed; where one has
        none, keyed by this setting's label and a count instead, so that they are never paired
        with another setting's."""
        seeds = [member.row.get("seed") for member in self.completed]
        if None in seeds:
            return {(self.label, i): value for i, value in enumerate(self.values(key))}
        return dict(zip(seeds, self.values(key), strict=True))

    @property
    def notes(self) -> list[str]:
        """What the table's reader must know: runs pruned, still running or not completed, an
        exact-by-construction mechanism."""
        notes = []
        pruned = sum(member.row["status"] == "pruned" for member in self.runs)
        running = sum(member.row["status"] == "running" for member in self.runs)
        unfinished = sum(not member.completed for member in self.runs) - pruned - running
        if pruned:
            notes.append(f"{pruned} of {len(self.runs)} runs pruned by the search")
        if running:
            notes.append(f"{running} of {len(self.runs)} runs still running")
        if unfinished:
            notes.append(f"{unfinished} of {len(self.runs)} runs not completed")
        repeats = self.repeats
        if repeats:
            names = ", ".join(str(member.row["run"]) for member in repeats[:3])
            more = ", ..." if len(repeats) > 3 else ""
            notes.append(
                f"{len(repeats)} of {len(self.runs)} runs repeat a seed, or the results, of a run "
                f"already counted, left out: {names}{more}"
            )
        apart = trained_apart(self.completed)
        if apart:
            notes.append(f"runs trained apart, not seeds of one setting alone: {apart}")
        notes += sorted({f"exact: {row['degenerate']}" for row in self.rows if row["degenerate"]})
        return notes


MOST_NAMED = 3
"""Settings named in a note of runs trained apart; then how many more."""


def trained_apart(members: Sequence[RunRow]) -> str:
    """The settings in which runs of one label differ (``trainer.max_steps 300, 5000``): what
    no override named, such as a config's default changed between two sweeps read together, or
    a test set of another size (a data folder, a place, is not a setting); empty where none."""
    values: dict[str, set[str | None]] = {}
    for member in members:
        for key in flattened(member.run.config):
            if is_a_setting(key) and key not in NOT_SETTINGS:
                values.setdefault(key, set()).add(member.run.setting_of_what_it_trained(key))
    tested = {member.row.get("test_images") for member in members} - {None}
    values["test images"] = {str(count) for count in tested}
    apart = [(key, found) for key, found in values.items() if len(found) > 1]
    named = [
        f"{key} {', '.join(sorted(one_line(str(v))[:40] for v in found))}"
        for key, found in apart[:MOST_NAMED]
    ]
    more = f" and {len(apart) - MOST_NAMED} more" if len(apart) > MOST_NAMED else ""
    return "; ".join(named) + more


def group_settings(runs: Sequence[RunRow]) -> tuple[Setting, ...]:
    """The settings of ``runs``, in the order their first run comes, each with the mean and
    interval of every figure in :data:`FIGURES`."""
    groups: dict[str, list[RunRow]] = {}
    for member in runs:
        groups.setdefault(member.row["label"], []).append(member)
    return tuple(
        Setting(label, tuple(members), estimates(counted(members)))
        for label, members in groups.items()
    )


def counted(members: Sequence[RunRow]) -> list[RunRow]:
    """The completed runs of ``members`` that count towards their setting's statistics: the
    first of each seed in the order found; of runs without a seed, the first of each
    ``metrics.json`` (a copy of an unseeded run repeats its results to the last digit of its
    seconds, which no second run does)."""
    seen: set[int | str] = set()
    kept = []
    for member in members:
        seed = member.row.get("seed")
        key = seed if seed is not None else json.dumps(member.run.metrics, sort_keys=True)
        if not member.completed or key in seen:
            continue
        seen.add(key)
        kept.append(member)
    return kept


def estimates(completed: Sequence[RunRow]) -> dict[str, Estimate | None]:
    """The mean and interval of each figure in :data:`FIGURES` over ``completed`` runs; a
    single run's test/acc has the binomial interval of its test set
    (:func:`vitattn.analysis.uncertainty.accuracy_estimate`)."""
    found: dict[str, Estimate | None] = {}
    for key in FIGURES:
        values = [member.row.get(key) for member in completed]
        if key == "test_acc":
            trials = {member.row.get("test_images") for member in completed}
            count = trials.pop() if len(trials) == 1 else None
            found[key] = accuracy_estimate(values, count)
        else:
            found[key] = mean_interval(values, bounds=RANGES[key])
    return found


def _parse_spec(spec: str) -> dict[str, str] | None:
    pairs = [part.strip() for part in spec.split(",") if part.strip()]
    if not pairs or not all("=" in pair for pair in pairs):
        return None
    return {key.strip(): value.strip() for key, value in (p.split("=", 1) for p in pairs)}


def choose_baseline(
    settings: Sequence[Setting], spec: str | None, given_as: str = "summary.baseline="
) -> tuple[Setting | None, str | None]:
    """The baseline setting named by ``spec`` (default :data:`DEFAULT_BASELINE`), and a warning
    line when a ``spec`` given by the user names none or several settings, naming it as it was
    given (``given_as``: the sweep's setting, or ``--baseline`` of ``plot_curves.py``). A
    ``key=value`` pair holds for a run when its override or its config's value of ``key`` is
    ``value`` (:meth:`vitattn.analysis.records.Run.setting`)."""
    given = bool(spec)
    spec = spec or DEFAULT_BASELINE
    pairs = _parse_spec(spec)
    if pairs is not None:
        matches = [
            s
            for s in settings
            if all(m.run.setting(k) == v for m in s.runs for k, v in pairs.items())
        ]
    else:
        matches = [s for s in settings if spec in _label_values(s)]
    if len(matches) == 1 and (given or len(settings) > 1):
        return matches[0], None
    if not given:
        return None, None
    names = "; ".join(s.label for s in settings)
    found = "no setting" if not matches else f"{len(matches)} settings"
    return None, (
        f"{given_as}{spec!r} matches {found}: give key=value pairs or a value that "
        f"names one of: {names}"
    )


def _label_values(setting: Setting) -> set[str]:
    """The values the setting's label shows, and those values in full (a label shows a decimal
    a program wrote to four digits: :mod:`vitattn.utils.decimals`)."""
    pairs = [part.partition("=") for part in setting.label.split(", ") if "=" in part]
    shown = {value.strip() for _, _, value in pairs}
    full = {member.run.setting(key.strip()) for member in setting.runs for key, _, _ in pairs}
    return shown | {value for value in full if value is not None}


LOAD_MARGIN = 0.5
"""How far the load average may exceed the CPU count before a run's speed counts as disturbed: a
training process keeps about one runnable thread per core, so a quiet machine running it reads
about its CPU count (2.0 to 2.2 on 2 cores), and another busy process adds one or more."""


def load_warning(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """One line when a run's load average (at its start or end) exceeded its machine's CPU
    count (by more than :data:`LOAD_MARGIN`): speeds measured then are not comparable."""
    busy = []
    for row in rows:
        cpus = row.get("cpu_count")
        loads = [v for v in (row.get("load_avg_start"), row.get("load_avg_end")) if v is not None]
        if cpus and loads and max(loads) > cpus + LOAD_MARGIN:
            busy.append((max(loads), cpus, row["run"]))
    if not busy:
        return None
    peak, cpus, _ = max(busy)
    names = ", ".join(run for _, _, run in busy[:3]) + (", ..." if len(busy) > 3 else "")
    return (
        f"warning: the load average exceeded the CPU count during {len(busy)} of {len(rows)} "
        f"runs (up to {peak:.1f} on {cpus} CPUs: {names}); their images/s are not comparable"
    )
