"""A sweep's runs grouped into settings (runs that differ only by seed), each with its figures'
means and 95% intervals and its difference from a baseline setting: the table a sweep summary
opens with.

The per-run rows come from :func:`vitattn.analysis.records.summary_row`; a run counts towards its
setting's statistics only if it completed. The baseline is named by ``summary.baseline`` (a
training override) or ``plot_curves.py --baseline``: either ``key=value`` pairs
(``attention=softmax``, or ``'attention=softmax, model.depth=2'`` quoted), which a setting matches
when every run of it has those values, or a bare value (``softmax``) that one of the differing
settings' values equals. Without one, the ``attention=softmax`` setting is the baseline when
there is exactly one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vitattn.analysis.uncertainty import (
    BASELINE,
    NO_DATA,
    Difference,
    Estimate,
    accuracy_estimate,
    mean_interval,
    verdict,
    welch_difference,
)

DEFAULT_BASELINE = "attention=softmax"

FIGURES = {
    "best_val_acc": "best val/acc",
    "test_acc": "test/acc",
    "images_per_sec": "images/s",
    "peak_memory_gb": "peak memory (GB)",
    "gflop_per_image": "GFLOP/image",
    "seconds": "seconds",
}
"""The per-run figures a setting reports as mean, std and 95% interval, with their headers."""

COMPARED = {"test_acc": "test/acc", "best_val_acc": "best val/acc"}
"""The figures compared with the baseline; the verdict is on the first (on the second when a
setting has no test accuracy)."""


@dataclass
class Setting:
    """Runs sharing a label (they differ only by seed) and what they say together."""

    label: str
    rows: list[dict[str, Any]]
    estimates: dict[str, Estimate | None] = field(default_factory=dict)
    differences: dict[str, Difference | None] = field(default_factory=dict)
    verdict: str = ""

    @property
    def completed(self) -> list[dict[str, Any]]:
        return [row for row in self.rows if row["status"] == "completed"]

    def values(self, key: str) -> list[Any]:
        return [row.get(key) for row in self.completed]

    @property
    def notes(self) -> list[str]:
        """What the table's reader must know: runs not completed, an exact-by-construction
        mechanism."""
        notes = []
        unfinished = len(self.rows) - len(self.completed)
        if unfinished:
            notes.append(f"{unfinished} of {len(self.rows)} runs not completed")
        notes += sorted({f"exact: {row['degenerate']}" for row in self.rows if row["degenerate"]})
        return notes


def group_settings(rows: Sequence[dict[str, Any]]) -> list[Setting]:
    """The settings of ``rows`` (per-run summary rows), in the order their first run comes,
    each with the mean and interval of every figure in :data:`FIGURES`."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["label"], []).append(row)
    settings = [Setting(label, members) for label, members in groups.items()]
    for setting in settings:
        for key in FIGURES:
            if key == "test_acc":
                trials = {row.get("test_images") for row in setting.completed}
                count = trials.pop() if len(trials) == 1 else None
                setting.estimates[key] = accuracy_estimate(setting.values(key), count)
            else:
                setting.estimates[key] = mean_interval(setting.values(key))
    return settings


def _parse_spec(spec: str) -> dict[str, str] | None:
    pairs = [part.strip() for part in spec.split(",") if part.strip()]
    if not pairs or not all("=" in pair for pair in pairs):
        return None
    return {key.strip(): value.strip() for key, value in (p.split("=", 1) for p in pairs)}


def choose_baseline(
    settings: Sequence[Setting],
    spec: str | None,
    value_of: Callable[[dict[str, Any], str], str | None],
) -> tuple[Setting | None, str | None]:
    """The baseline setting named by ``spec`` (default :data:`DEFAULT_BASELINE`), and a warning
    line when a ``spec`` given by the user names none or several settings. ``value_of(row,
    key)`` is a run's value of a setting key (its override or its config's value)."""
    given = bool(spec)
    spec = spec or DEFAULT_BASELINE
    pairs = _parse_spec(spec)
    if pairs is not None:
        matches = [
            s
            for s in settings
            if all(value_of(row, k) == v for row in s.rows for k, v in pairs.items())
        ]
    else:
        matches = [s for s in settings if spec in _label_values(s.label)]
    if len(matches) == 1 and (given or len(settings) > 1):
        return matches[0], None
    if not given:
        return None, None
    names = "; ".join(s.label for s in settings)
    found = "no setting" if not matches else f"{len(matches)} settings"
    return None, (
        f"summary.baseline={spec!r} matches {found}: give key=value pairs or a value that "
        f"names one of: {names}"
    )


def _label_values(label: str) -> set[str]:
    return {part.partition("=")[2].strip() for part in label.split(", ") if "=" in part}


def compare_with(settings: Sequence[Setting], baseline: Setting | None) -> None:
    """Each setting's difference from ``baseline`` in :data:`COMPARED` and its verdict."""
    if baseline is None:
        return
    for setting in settings:
        if setting is baseline:
            setting.verdict = BASELINE
            continue
        for key in COMPARED:
            setting.differences[key] = welch_difference(setting.values(key), baseline.values(key))
        judged = setting.differences["test_acc"]
        if judged is None:
            judged = setting.differences["best_val_acc"]
        setting.verdict = verdict(judged) if judged is not None else NO_DATA


def setting_record(setting: Setting) -> dict[str, Any]:
    """One row of ``settings.csv``: every number of the setting, unformatted."""
    record: dict[str, Any] = {"setting": setting.label, "n": len(setting.completed)}
    record["runs"] = len(setting.rows)
    for key in FIGURES:
        estimate = setting.estimates.get(key)
        for part in ("mean", "std", "low", "high"):
            record[f"{key}_{part}"] = None if estimate is None else getattr(estimate, part)
        if key == "test_acc":
            record["test_acc_interval"] = None if estimate is None else estimate.interval
    for key in COMPARED:
        difference = setting.differences.get(key)
        for part in ("delta", "low", "high", "df"):
            record[f"{key}_diff_{part}"] = None if difference is None else getattr(difference, part)
    record["verdict"] = setting.verdict
    record["notes"] = "; ".join(setting.notes)
    return record


def _number(value: float, key: str) -> str:
    if key.endswith("acc"):
        return f"{value:.3f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def format_estimate(estimate: Estimate | None, key: str) -> str:
    """``0.512 ± 0.013 [0.480, 0.544]`` (n > 1), ``0.512 [0.481, 0.543]`` (one run's binomial
    interval), ``0.512`` (one value, no interval), or empty."""
    if estimate is None:
        return ""
    text = _number(estimate.mean, key)
    if estimate.std == 0:  # every run the same (a FLOP count): the interval says nothing
        return text
    if estimate.std is not None and estimate.n > 1:
        text += f" ± {_number(estimate.std, key)}"
    if estimate.low is not None and estimate.high is not None:
        text += f" [{_number(estimate.low, key)}, {_number(estimate.high, key)}]"
    return text


def format_difference(difference: Difference | None) -> str:
    """``+0.021 [-0.004, 0.046]`` in accuracy points, or the bare difference with one seed."""
    if difference is None:
        return ""
    text = f"{difference.delta:+.3f}"
    if difference.low is not None and difference.high is not None:
        text += f" [{difference.low:+.3f}, {difference.high:+.3f}]"
    return text


def settings_table_rows(
    settings: Sequence[Setting], baseline: Setting | None
) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The settings table for Markdown: rows of text and the headers, with a difference and
    verdict column only when there is a baseline, and only the figures some run has."""
    present = [key for key in FIGURES if any(s.estimates.get(key) for s in settings)]
    headers = {"setting": "setting", "n": "n"}
    headers.update({key: FIGURES[key] for key in present})
    if baseline is not None:
        headers.update({f"diff_{key}": f"Δ {name}" for key, name in COMPARED.items()})
        headers["verdict"] = f"vs {baseline.label}"
    headers["notes"] = "notes"
    rows = []
    for setting in settings:
        row = {"setting": setting.label, "n": str(len(setting.completed))}
        row.update({key: format_estimate(setting.estimates.get(key), key) for key in present})
        if baseline is not None:
            for key in COMPARED:
                row[f"diff_{key}"] = format_difference(setting.differences.get(key))
            row["verdict"] = setting.verdict
        row["notes"] = "; ".join(setting.notes)
        rows.append(row)
    if not any(row["notes"] for row in rows):
        headers.pop("notes")
    return rows, headers


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
