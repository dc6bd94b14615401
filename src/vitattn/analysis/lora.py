"""The rank x shift table of a ``vitattn-finetune`` sweep (LoRA, Hu et al. 2022).

Every job of ``vitattn-finetune -m lora.rank=0,1,2,4,... data.shift=quantize,rotate,invert``
writes a ``metrics.json``; :func:`lora_table` reads them and lays them out as the founding
material did: one row per rank (rank 0 = full fine-tuning) with its trainable parameters, one
column per shift with the test accuracy on that shifted test set after fine-tuning, and a first
row with the base model's accuracy on each shifted set before fine-tuning. Several runs of one
cell are averaged only where they differ by seed alone (:func:`run_settings`): runs that differ in
anything else, the attention, the base checkpoint, ``lora.alpha``, ``lora.target_modules``,
``lora.train_head`` or any other setting the command line gave, have rows of their own, with a
column for each setting that differs (until 2026-12-02 they were averaged as if they were
seeds). The CSV keeps one row per (rank, settings, shift) with the spread.

``python scripts/lora_table.py outputs/finetune/multiruns/<stamp>`` prints the Markdown table and
writes ``lora_table.md`` and ``lora_table.csv`` next to the runs (or into ``--out``); where no run
completed, it writes nothing and ends in one line (the failed runs' lines before it), exit
status 1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vitattn.analysis.records import bounded, is_a_setting
from vitattn.data.shifts import SHIFTS
from vitattn.errors import VitattnError
from vitattn.runs.files import (
    UnreadableFileError,
    folder_problem,
    one_line,
    read_yaml,
    write_text,
)
from vitattn.runs.layout import (
    METRICS,
    RunDir,
    RunState,
    read_metrics,
    refuse_links_read,
    run_state,
)
from vitattn.runs.layout import find_runs as layout_find_runs
from vitattn.runs.results import markdown_table, write_csv

CSV_COLUMNS = (
    "rank",
    "shift",
    "runs",
    "params",
    "params_trainable",
    "test_acc",
    "test_acc_std",
    "test_acc_base",
)
"""The CSV's columns; a column for each setting that differs between rows follows them."""

RECORDED_SETTINGS = {
    "attention": "attention",
    "ckpt_path": "ckpt_path",
    "lora/alpha": "lora.alpha",
    "lora/target_modules": "lora.target_modules",
    "lora/train_head": "lora.train_head",
}
"""The settings a fine-tune's ``metrics.json`` records (as they acted), with the override that
sets each: a run's value is its ``metrics.json``'s, else its override's."""
ADAPTER_SETTINGS = ("lora/alpha", "lora/target_modules", "lora/train_head")
"""Settings of the adapters, which do nothing at rank 0 (full fine-tuning: no adapter, every
weight trains): a rank-0 run is not told apart by them, nor by any ``lora.`` override."""
NOT_COMPARED = ("lora.rank", "data.shift", "lora.merge")
"""Overrides that do not tell runs of one cell apart: the cell's own rank and shift, and
``lora.merge``, which writes ``merged.ckpt`` beside the same fine-tune."""


@dataclass
class FinetuneRun:
    """One job's directory, its ``metrics.json`` and its command-line overrides."""

    path: Path
    metrics: dict[str, Any]
    overrides: list[str]
    config: dict[str, Any] = field(default_factory=dict)
    """Its ``.hydra/config.yaml``, where readable: the value of a setting it left at its
    default, to compare with a run that gave it on the command line."""

    def recorded_setting(self, key: str, override: str) -> Any:
        """``key`` of ``metrics.json``, else the value of the override ``override``, as written."""
        if self.metrics.get(key) is not None:
            return self.metrics[key]
        for item in self.overrides:
            if item.startswith(f"{override}="):
                return item.split("=", 1)[1]
        return None

    @property
    def given(self) -> dict[str, str]:
        """The command line's overrides as ``{key: value}``, those that say what the run
        trained (:func:`vitattn.analysis.records.is_a_setting`: not the seed, not a place)."""
        pairs: dict[str, str] = {}
        for override in self.overrides:
            key, equals, value = override.partition("=")
            key = key.lstrip("+~")
            if equals and is_a_setting(key) and not key.startswith(("hydra.", "hydra/")):
                pairs[bounded(key)] = value  # a column's header: text from a file
        return pairs

    def override_value(self, key: str) -> str | None:
        """``key``'s value in this run: its config's, where that is one value (a run that left
        it at its default compares with one that gave the default, ``optimizer.lr=1e-2`` with
        ``0.01``), else its override's text (a config group's choice, ``trainer=cpu``), else
        ``None``."""
        node: Any = self.config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                node = None
                break
            node = node[part]
        if node is not None and not isinstance(node, dict | list):
            return str(node)
        return self.given.get(key)

    @property
    def rank_as_written(self) -> Any:
        """``lora/rank`` of ``metrics.json``, else the ``lora.rank=`` override, as written."""
        return self.recorded_setting("lora/rank", "lora.rank")

    @property
    def rank(self) -> int | None:
        """The run's LoRA rank, a whole number; ``None`` where it has none, or one that is not
        a whole number (``4.5``, infinity: not a rank vitattn wrote; the run is left out, with
        a line, :func:`left_out_notes`)."""
        value = self.rank_as_written
        if isinstance(value, bool):
            return None
        if isinstance(value, float):
            return int(value) if value.is_integer() else None
        try:
            return int(value) if value is not None else None
        except (TypeError, ValueError, OverflowError):
            return None

    @property
    def shift(self) -> str | None:
        value = self.recorded_setting("data/shift", "data.shift")
        return bounded(str(value)) if value is not None else None  # a column's header

    @property
    def completed(self) -> bool:
        """Completed (:func:`vitattn.runs.layout.run_state`), with a test accuracy."""
        state = run_state(self.metrics, self.path)
        return state is RunState.COMPLETED and self.metrics.get("test/acc") is not None


def find_runs(directories: Iterable[str | Path]) -> list[FinetuneRun]:
    """Every run directory (one holding ``metrics.json``) in or under ``directories``."""
    runs = []
    for run_dir in layout_find_runs(directories, marker=(METRICS,)):
        run = RunDir(run_dir)
        try:
            refuse_links_read(run_dir)
            metrics = read_metrics(run.metrics_file)
        except UnreadableFileError as error:
            metrics = {"status": "failed", "error": str(error)}
        try:
            exists = run.overrides_file.exists()
            overrides = read_yaml(run.overrides_file, list) if exists else []
        except UnreadableFileError as error:
            overrides = []
            metrics = {"status": "failed", "error": str(error)}
        try:
            config = read_yaml(run.config_file, dict) if run.config_file.exists() else {}
        except UnreadableFileError:
            config = {}  # its overrides alone then tell its settings
        runs.append(FinetuneRun(run_dir, metrics, [str(o) for o in overrides], config))
    return runs


def _shift_order(shifts: Iterable[str]) -> list[str]:
    known = [s for s in SHIFTS if s in shifts]
    return known + sorted(set(shifts) - set(known))


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _distinct(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(v for v in values if v is not None))


def _shown(value: Any) -> str | None:
    """A setting's value as the table and the CSV show it: ``true``/``false`` for a flag, text
    from a file escaped and cut (:func:`~vitattn.analysis.records.bounded`)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return bounded(str(value))


def run_settings(run: FinetuneRun, override_keys: Iterable[str]) -> dict[str, str | None]:
    """What the run was, besides its rank, shift and seed: the settings its ``metrics.json``
    records (:data:`RECORDED_SETTINGS`) and the value of each of ``override_keys`` (the
    overrides any run gave) in it. At rank 0 the adapters' settings are left out
    (:data:`ADAPTER_SETTINGS`): full fine-tuning trains every weight whatever they say."""
    full = run.rank == 0
    settings = {
        key: _shown(run.recorded_setting(key, override))
        for key, override in RECORDED_SETTINGS.items()
        if not (full and key in ADAPTER_SETTINGS)
    }
    for key in override_keys:
        if not (full and key.startswith("lora.")):
            settings[key] = _shown(run.override_value(key))
    return settings


def differing_settings(runs: Sequence[FinetuneRun]) -> list[dict[str, str | None]]:
    """For each run (in order), the settings (:func:`run_settings`) whose values differ between
    ``runs``, each where it applies to the run (not an adapter's at rank 0): runs of one rank
    and shift with the same of these differ by seed alone, and only those are averaged."""
    recorded = {override for override in RECORDED_SETTINGS.values()}
    override_keys = list(
        dict.fromkeys(
            key
            for run in runs
            for key in run.given
            if key not in recorded and key not in NOT_COMPARED
        )
    )
    every = [run_settings(run, override_keys) for run in runs]
    keys = list(dict.fromkeys(key for settings in every for key in settings))
    differing = [
        key for key in keys if len({settings[key] for settings in every if key in settings}) > 1
    ]
    return [{key: settings[key] for key in differing if key in settings} for settings in every]


def _sortable(values: Iterable[str | None]) -> tuple[str, ...]:
    """Settings' values as a sort key: one that does not apply (``None``) first."""
    return tuple("" if value is None else value for value in values)


def lora_table(runs: Sequence[FinetuneRun]) -> list[dict[str, Any]]:
    """One row per (rank, settings, shift) of the completed fine-tune runs, ranks ascending (0
    first): runs are averaged only where they differ by seed alone. ``settings`` (each row's,
    a mapping) holds the value of each setting that differs between the runs
    (:func:`differing_settings`), ``None`` where it does not apply (an adapter's at rank 0);
    empty where the runs differ only in rank, shift and seed."""
    tabled = [
        run for run in runs if run.completed and run.rank is not None and run.shift is not None
    ]
    differing = differing_settings(tabled)
    keys = list(dict.fromkeys(key for settings in differing for key in settings))
    cells: dict[tuple[int, tuple[tuple[str, str | None], ...], str], list[FinetuneRun]]
    cells = defaultdict(list)
    for run, its_settings in zip(tabled, differing, strict=True):
        assert run.rank is not None and run.shift is not None
        settings = tuple((key, its_settings.get(key)) for key in keys)
        cells[(run.rank, settings, run.shift)].append(run)
    rows = []
    shift_order = _shift_order({shift for _, _, shift in cells})
    for rank, settings, shift in sorted(
        cells, key=lambda c: (c[0], _sortable(v for _, v in c[1]), shift_order.index(c[2]))
    ):
        group = cells[(rank, settings, shift)]
        accs = [float(r.metrics["test/acc"]) for r in group]
        bases = [
            float(r.metrics["test/acc_base"])
            for r in group
            if r.metrics.get("test/acc_base") is not None
        ]
        trainable = _distinct(r.metrics.get("params/trainable") for r in group)
        params = _distinct(r.metrics.get("params") for r in group)
        rows.append(
            {
                "rank": rank,
                "shift": shift,
                "runs": len(group),
                "params": params[0] if len(params) == 1 else "/".join(map(str, params)),
                "params_trainable": (
                    trainable[0] if len(trainable) == 1 else "/".join(map(str, trainable))
                ),
                "test_acc": _mean(accs),
                "test_acc_std": statistics.stdev(accs) if len(accs) > 1 else None,
                "test_acc_base": _mean(bases),
                "settings": dict(settings),
            }
        )
    return rows


def _percent(value: float | None, std: float | None = None) -> str:
    if value is None:
        return "–"
    text = f"{100 * value:.1f}"
    return f"{text} ± {100 * std:.1f}" if std is not None else text


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


class NoFinetuneRunsError(VitattnError):
    """No completed ``vitattn-finetune`` run to make a table of: nothing is written. ``failed``:
    the lines of the runs that failed among those found (:func:`failure_notes`)."""

    def __init__(self, directories: Sequence[str | Path], failed: Sequence[str] = ()) -> None:
        shown = one_line(", ".join(str(d) for d in directories))
        why = f"; {len(failed)} failed" if failed else ""
        super().__init__(
            f"no completed vitattn-finetune runs (a metrics.json with lora/rank, data/shift and "
            f"test/acc) under {shown}{why}"
        )
        self.failed = list(failed)


BASE_SETTINGS = ("attention", "ckpt_path")
"""The settings that tell base models apart: where one differs, the table has a base row for
each (the base's accuracy is its checkpoint's)."""


def setting_columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The settings that differ between ``rows`` (their ``settings``), in order: a column each."""
    return list(dict.fromkeys(key for row in rows for key in row.get("settings", {})))


def to_markdown(rows: Sequence[dict[str, Any]], runs: Sequence[FinetuneRun] = ()) -> str:
    """The table: ranks down, shifts across, test accuracy in percent; base rows first. Where
    runs differ in more than rank, shift and seed, a column for each setting that differs, and
    a row for each of its values. Without rows there is no table: :class:`ValueError`."""
    if not rows:
        raise ValueError("no completed vitattn-finetune runs: no table to make")
    shifts = _shift_order({row["shift"] for row in rows})
    varying = setting_columns(rows)

    def settings_of(row: dict[str, Any]) -> tuple[str | None, ...]:
        return tuple(row["settings"].get(key) for key in varying)

    def shown(values: Iterable[str | None]) -> dict[str, str]:
        return {key: "–" if v is None else v for key, v in zip(varying, values, strict=True)}

    by_cell = {(row["rank"], settings_of(row), row["shift"]): row for row in rows}
    bases = [key for key in varying if key in BASE_SETTINGS]
    base_groups = list(dict.fromkeys(tuple(row["settings"].get(k) for k in bases) for row in rows))
    table_rows = []
    for group in sorted(base_groups, key=_sortable):
        base_row: dict[str, Any] = {"rank": "base, no fine-tuning", "trainable": 0}
        named = shown(dict(zip(bases, group, strict=True)).get(k) for k in varying)
        base_row.update({key: named[key] if key in bases else "" for key in varying})
        for shift in shifts:
            values = [
                r["test_acc_base"]
                for r in rows
                if r["shift"] == shift
                and r["test_acc_base"] is not None
                and tuple(r["settings"].get(k) for k in bases) == group
            ]
            base_row[shift] = _percent(_mean(values))
        table_rows.append(base_row)
    settings_rows = sorted(
        {(row["rank"], settings_of(row)) for row in rows},
        key=lambda r: (r[0], _sortable(r[1])),
    )
    for rank, settings in settings_rows:
        cells = [by_cell.get((rank, settings, shift)) for shift in shifts]
        trainable = _distinct(c["params_trainable"] for c in cells if c)
        table_rows.append(
            {
                "rank": "0 (full fine-tuning)" if rank == 0 else str(rank),
                **shown(settings),
                "trainable": " / ".join(_count(t) for t in trainable),
                **{
                    shift: _percent(c["test_acc"], c["test_acc_std"]) if c else "–"
                    for shift, c in zip(shifts, cells, strict=True)
                },
            }
        )
    columns = {
        "rank": "rank",
        **{key: key for key in varying},
        "trainable": "trainable params",
        **{s: s for s in shifts},
    }
    lines = [markdown_table(table_rows, columns, align_right=["trainable", *shifts])]
    notes = ["", "Test accuracy (%) on each shifted CIFAR-10 test set."]
    counts = {row["runs"] for row in rows}
    if counts != {1}:
        notes.append(
            "Cells with several runs show mean ± standard deviation over runs that differ by "
            "seed alone."
        )
    if varying:
        notes.append(
            f"Runs that differ in {', '.join(varying)} are not averaged together: a row for each "
            "(– where a setting does not apply: the adapters' at rank 0, full fine-tuning)."
        )
    params = _distinct(row["params"] for row in rows)
    if params:
        notes.append(f"Model parameters: {' / '.join(_count(p) for p in params)}.")
    base_ckpts = _distinct(r.metrics.get("ckpt_path") for r in runs if r.completed)
    if len(base_ckpts) == 1:
        notes.append(f"Base checkpoint: `{bounded(str(base_ckpts[0]))}`.")  # text from a file
    elif len(base_ckpts) > 1:
        notes.append(f"Note: the runs fine-tuned {len(base_ckpts)} different base checkpoints.")
    return "\n".join(lines + notes + failure_notes(runs) + left_out_notes(runs)) + "\n"


def failure_notes(runs: Sequence[FinetuneRun]) -> list[str]:
    """A line per failed run (one whose ``metrics.json`` cannot be read among them): its error."""
    failed = [r for r in runs if run_state(r.metrics, r.path) is RunState.FAILED]
    return [
        f"Failed: {one_line(run.path.name)} (rank={run.rank}, shift={run.shift}): "
        f"{one_line(run.metrics.get('error', 'no error recorded'))}"
        for run in failed
    ]


def left_out_notes(runs: Sequence[FinetuneRun]) -> list[str]:
    """A line per completed run left out of the table for a rank that is not a whole number."""
    return [
        f"Left out: {one_line(run.path.name)}: its lora/rank "
        f"({bounded(one_line(run.rank_as_written))}) is not a whole number"
        for run in runs
        if run.completed and run.rank is None and run.rank_as_written is not None
    ]


def write_table(
    directories: Sequence[str | Path], out: str | Path | None = None
) -> tuple[str, Path, Path]:
    """Read the runs, write ``lora_table.md`` and ``lora_table.csv``; return the Markdown and
    both paths. ``out`` defaults to the first directory. Where no run completed, nothing is
    written: :class:`NoFinetuneRunsError`."""
    runs = find_runs(directories)
    rows = lora_table(runs)
    if not rows:
        raise NoFinetuneRunsError(directories, failure_notes(runs))
    markdown = to_markdown(rows, runs)
    out_dir = Path(out) if out is not None else Path(directories[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    md_path, csv_path = out_dir / "lora_table.md", out_dir / "lora_table.csv"
    write_text(md_path, markdown)
    varying = [key for key in setting_columns(rows) if key not in CSV_COLUMNS]
    flat = [
        {**row["settings"], **{k: v for k, v in row.items() if k != "settings"}} for row in rows
    ]
    write_csv(csv_path, flat, [*CSV_COLUMNS, *varying])
    return markdown, md_path, csv_path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Rank x shift table (trainable parameters, test accuracy) of vitattn-finetune "
        "runs: prints Markdown, writes lora_table.md and lora_table.csv."
    )
    parser.add_argument("directories", nargs="+", help="multirun (or run) directories")
    parser.add_argument("--out", help="where to write the files (default: the first directory)")
    args = parser.parse_args(argv)
    problem = None if args.out is None else folder_problem(Path(args.out))
    if problem is not None:  # before the runs are read
        parser.exit(
            1,
            f"lora_table.py: error: --out {one_line(args.out)}: {problem}; choose a folder to "
            "write the table in (it is made if missing)\n",
        )
    try:
        markdown, md_path, csv_path = write_table(args.directories, args.out)
    except NoFinetuneRunsError as error:  # the failed runs' lines, then the one that ends it
        for line in error.failed:
            print(line, file=sys.stderr)
        parser.exit(1, f"lora_table.py: error: {error}\n")
    except FileNotFoundError as error:
        parser.error(str(error))
    except (OSError, ValueError, VitattnError) as error:  # a folder where a file is written...
        parser.exit(1, f"lora_table.py: error: {one_line(error)}\n")
    print(markdown, end="")
    print(f"\nwrote {md_path} and {csv_path}")
    return 0
