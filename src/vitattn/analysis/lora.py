"""The rank x shift table of a ``vitattn-finetune`` sweep (LoRA, Hu et al. 2022).

Every job of ``vitattn-finetune -m lora.rank=0,1,2,4,... data.shift=quantize,rotate,invert``
writes a ``metrics.json``; :func:`lora_table` reads them and lays them out as the founding
material did: one row per rank (rank 0 = full fine-tuning) with its trainable parameters, one
column per shift with the test accuracy on that shifted test set after fine-tuning, and a first
row with the base model's accuracy on each shifted set before fine-tuning. Several runs of one
cell (seeds) are averaged; the CSV keeps one row per (rank, shift) with the spread.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitattn.analysis.records import bounded
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


@dataclass
class FinetuneRun:
    """One job's directory, its ``metrics.json`` and its command-line overrides."""

    path: Path
    metrics: dict[str, Any]
    overrides: list[str]

    def _setting(self, key: str, override: str) -> Any:
        if self.metrics.get(key) is not None:
            return self.metrics[key]
        for item in self.overrides:
            if item.startswith(f"{override}="):
                return item.split("=", 1)[1]
        return None

    @property
    def rank_as_written(self) -> Any:
        """``lora/rank`` of ``metrics.json``, else the ``lora.rank=`` override, as written."""
        return self._setting("lora/rank", "lora.rank")

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
        value = self._setting("data/shift", "data.shift")
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
        runs.append(FinetuneRun(run_dir, metrics, [str(o) for o in overrides]))
    return runs


def _shift_order(shifts: Iterable[str]) -> list[str]:
    known = [s for s in SHIFTS if s in shifts]
    return known + sorted(set(shifts) - set(known))


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _distinct(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(v for v in values if v is not None))


def lora_table(runs: Sequence[FinetuneRun]) -> list[dict[str, Any]]:
    """One row per (rank, shift) of the completed fine-tune runs, ranks ascending (0 first)."""
    cells: dict[tuple[int, str], list[FinetuneRun]] = defaultdict(list)
    for run in runs:
        if run.completed and run.rank is not None and run.shift is not None:
            cells[(run.rank, run.shift)].append(run)
    rows = []
    shift_order = _shift_order({shift for _, shift in cells})
    for rank, shift in sorted(cells, key=lambda c: (c[0], shift_order.index(c[1]))):
        group = cells[(rank, shift)]
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


def to_markdown(rows: Sequence[dict[str, Any]], runs: Sequence[FinetuneRun] = ()) -> str:
    """The table: ranks down, shifts across, test accuracy in percent; base row first. Without
    rows there is no table: :class:`ValueError`."""
    if not rows:
        raise ValueError("no completed vitattn-finetune runs: no table to make")
    shifts = _shift_order({row["shift"] for row in rows})
    by_cell = {(row["rank"], row["shift"]): row for row in rows}
    ranks = sorted({row["rank"] for row in rows})
    base_row: dict[str, Any] = {"rank": "base, no fine-tuning", "trainable": 0}
    for shift in shifts:
        values = [
            r["test_acc_base"]
            for r in rows
            if r["shift"] == shift and r["test_acc_base"] is not None
        ]
        base_row[shift] = _percent(_mean(values))
    table_rows = [base_row]
    for rank in ranks:
        cells = [by_cell.get((rank, shift)) for shift in shifts]
        trainable = _distinct(c["params_trainable"] for c in cells if c)
        table_rows.append(
            {
                "rank": "0 (full fine-tuning)" if rank == 0 else str(rank),
                "trainable": " / ".join(_count(t) for t in trainable),
                **{
                    shift: _percent(c["test_acc"], c["test_acc_std"]) if c else "–"
                    for shift, c in zip(shifts, cells, strict=True)
                },
            }
        )
    columns = {"rank": "rank", "trainable": "trainable params", **{s: s for s in shifts}}
    lines = [markdown_table(table_rows, columns, align_right=["trainable", *shifts])]
    notes = ["", "Test accuracy (%) on each shifted CIFAR-10 test set."]
    counts = {row["runs"] for row in rows}
    if counts != {1}:
        notes.append("Cells with several runs show mean ± standard deviation.")
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
    write_csv(csv_path, rows, CSV_COLUMNS)
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
