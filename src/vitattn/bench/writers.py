"""Each mode's files in the run directory and the table it prints: tables through
:mod:`vitattn.runs.results` (the project's one results writer), figures through
:mod:`vitattn.bench.plots`. Each writer returns what ``benchmark`` returns.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from vitattn.bench.approx import ApproxRow, ApproxRun
from vitattn.bench.environment import busy_line
from vitattn.bench.floor import floor_line
from vitattn.bench.plots import plot_approx, plot_memory, plot_spectrum, plot_time
from vitattn.bench.scaling import ScalingRun
from vitattn.bench.scaling_table import Row, past_floors
from vitattn.bench.spectrum import HeadSpectrum
from vitattn.bench.train_speed import TrainRun, TrainSpeed
from vitattn.runs.files import write_text
from vitattn.runs.results import markdown_table, mebibytes, number, write_csv, write_json

log = logging.getLogger(__name__)


def results_json(output_dir: Path, mode: str, settings: dict[str, Any], **content: Any) -> None:
    """``results.json``: the mode, the settings as given, and what the mode measured."""
    write_json(output_dir / "results.json", {"mode": mode, "settings": settings, **content})


def show(output_dir: Path, name: str, text: str) -> None:
    """Write ``text`` to ``name`` in the run directory and print it."""
    write_text(output_dir / name, text + "\n")
    print(text, flush=True)


def write_scaling(run: ScalingRun, output_dir: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """``mode=scaling``: results.csv, scaling.csv, results.json, results.md and two figures."""
    output_dir.mkdir(parents=True, exist_ok=True)
    rows = [asdict(r) for r in run.rows]
    write_csv(output_dir / "results.csv", rows)
    write_csv(output_dir / "scaling.csv", run.scaling)
    results_json(
        output_dir,
        "scaling",
        settings,
        environment=run.environment,
        guard=asdict(run.sweep.guard),
        results=rows,
        scaling=run.scaling,
    )
    plot_time(run.rows, output_dir / "time_vs_seq_len.png")
    plot_memory(run.rows, output_dir / "memory_vs_seq_len.png")
    floor = run.environment.get("floor_device")
    busy = busy_line({"start": run.environment.get("load_average")}, run.environment.get("cpus"))
    caution = ([] if busy is None else [busy]) + past_floors(run.rows, floor, measured=True)
    text = scaling_text(run.rows, run.scaling, run.sweep.reference, floor, caution)
    show(output_dir, "results.md", text)
    log.info(
        "wrote results.csv, results.json, results.md, scaling.csv, time_vs_seq_len.png and "
        "memory_vs_seq_len.png to %s",
        output_dir,
    )
    return {"results": rows, "scaling": run.scaling}


def table(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of rows whose keys are the headers."""
    return markdown_table(rows, {key: key for key in rows[0]} if rows else {})


def scaling_text(
    rows: Sequence[Row],
    scaling: Sequence[dict[str, Any]],
    reference: str | None,
    floor_device: dict[str, Any] | None = None,
    caution: Sequence[str] = (),
) -> str:
    """The results table (with the :func:`floor_line`) and the exponents table, in Markdown;
    then the ``caution`` lines, figures a busy machine may have moved."""
    speedup = f"x vs {reference}" if reference else "speedup"
    results = [
        {
            "attention": r.attention,
            "n": r.seq_len,
            "d": r.head_dim,
            "fwd ms": number(r.fwd_ms),
            "fwd+bwd ms": number(r.fwd_bwd_ms),
            "fwd+bwd IQR": "-"
            if r.fwd_bwd_q25_ms is None
            else f"{r.fwd_bwd_q25_ms:.3g}-{r.fwd_bwd_q75_ms:.3g}",
            "warm-up": "-" if r.fwd_warmup is None else f"{r.fwd_warmup}, {r.fwd_bwd_warmup}",
            "fwd+bwd GFLOP": number(r.gflop),
            "memory MiB": mebibytes(r.memory_bytes),
            "saved MiB": mebibytes(r.saved_bytes),
            speedup: number(r.speedup_vs_reference, 2),
            "fwd+bwd floor ms": number(r.fwd_bwd_floor_ms),
            "% of floor": number(r.fwd_bwd_floor_pct, 2),
            "bound": r.floor_bound or "-",
            "ops fwd+bwd": "-" if r.fwd_bwd_dispatches is None else r.fwd_bwd_dispatches,
            "status": r.status,
        }
        for r in rows
    ]
    crossover = f"beats {reference} from n" if reference else "crossover"
    exponents = [
        {
            "attention": e["attention"],
            "d": e["head_dim"],
            "n fitted": e["seq_lens"],
            "time^ fwd": number(e["fwd_ms_exponent"]),
            "time^ fwd+bwd": number(e["fwd_bwd_ms_exponent"]),
            "memory^": number(e["memory_bytes_exponent"]),
            "saved^": number(e["saved_bytes_exponent"]),
            crossover: e["crossover_seq_len"] or "-",
        }
        for e in scaling
    ]
    return (
        f"{floor_line(floor_device)}{table(results)}\n\nScaling exponents (slope of log value "
        f"vs log n; 1 = linear, 2 = quadratic)\n\n{table(exponents)}"
        + "".join(f"\n\nCaution: {line}" for line in caution)
    )


def budget_label(row: ApproxRow) -> str:
    return f"{row.knob}={row.budget}" if row.knob else "default"


def with_std(mean: float | None, std: float | None) -> str:
    return number(mean) if not std else f"{number(mean)} +- {number(std)}"


def side_by_side(rows: Sequence[ApproxRow]) -> list[dict[str, str]]:
    """A line per measurement that has another package's next to ours: both output errors."""
    ours = {
        (r.attention, budget_label(r), r.source): r for r in rows if r.implementation == "vitattn"
    }
    lines = []
    for other in rows:
        mine = ours.get((other.attention, budget_label(other), other.source))
        if other.implementation == "vitattn" or mine is None:
            continue
        lines.append(
            {
                "attention": other.attention,
                "budget": budget_label(other),
                "inputs": f"{other.source} (n={other.seq_len})",
                "vitattn error": with_std(mine.output_rel_error, mine.output_rel_error_std),
                "package": other.implementation,
                "package error": with_std(other.output_rel_error, other.output_rel_error_std)
                if other.status == "ok"
                else other.status,
            }
        )
    return lines


def write_approx(run: ApproxRun, output_dir: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """``mode=approx``: approx.csv, results.json, approx.md and approx_<attention>.png for each
    attention with a measured point."""
    output_dir.mkdir(parents=True, exist_ok=True)
    rows = [asdict(r) for r in run.rows]
    write_csv(output_dir / "approx.csv", rows)
    results_json(output_dir, "approx", settings, environment=run.environment, results=rows)
    for name in run.attentions:
        if any(r.attention == name and r.status == "ok" for r in run.rows):
            plot_approx(run.rows, name, output_dir / f"approx_{name}.png")
    shown = [
        {
            "attention": r.attention,
            "implementation": r.implementation,
            "budget": budget_label(r),
            "inputs": f"{r.source} (n={r.seq_len})",
            "output rel. error": with_std(r.output_rel_error, r.output_rel_error_std),
            "matrix rel. error": with_std(r.matrix_rel_error, r.matrix_rel_error_std),
            "matrix from": r.matrix_method,
            "status": r.status,
        }
        for r in run.rows
    ]
    text = table(shown)
    packages = side_by_side(run.rows)
    if packages:
        text += (
            f"\n\nOutput error next to the published packages' (mean +- std)\n\n{table(packages)}"
        )
    show(output_dir, "approx.md", text)
    log.info(
        "wrote approx.csv, results.json, approx.md and approx_<attention>.png to %s", output_dir
    )
    return {"results": rows}


def write_spectrum(
    spectra: Sequence[HeadSpectrum],
    output_dir: Path,
    settings: dict[str, Any],
    *,
    energy: float,
    ckpt_path: str,
) -> dict[str, Any]:
    """``mode=spectrum``: spectrum.csv (every singular value), spectrum_summary.csv (a line per
    head), results.json, spectrum.md and spectrum.png."""
    output_dir.mkdir(parents=True, exist_ok=True)
    values = [
        {
            "layer": s.layer,
            "head": s.head,
            "index": i + 1,
            "singular_value": value,
            "cumulative_energy": s.cumulative_energy[i],
            "cumulative_singular": s.cumulative_singular[i],
        }
        for s in spectra
        for i, value in enumerate(s.singular_values)
    ]
    summary = [
        {k: v for k, v in asdict(s).items() if not isinstance(v, list)}
        | {"energy": energy, "rank_fraction": s.rank / s.seq_len}
        for s in spectra
    ]
    write_csv(output_dir / "spectrum.csv", values)
    write_csv(output_dir / "spectrum_summary.csv", summary)
    results_json(
        output_dir,
        "spectrum",
        settings,
        ckpt_path=str(Path(ckpt_path).expanduser().resolve()),
        results=summary,
        spectra=[asdict(s) for s in spectra],
    )
    plot_spectrum(spectra, energy, output_dir / "spectrum.png")
    shown = [
        {
            "layer": s["layer"],
            "head": s["head"],
            "n": s["seq_len"],
            f"rank at {energy:.0%} (mean spectrum)": s["rank"],
            "mean over images": f"{s['rank_mean']:.1f}",
            "min-max": f"{s['rank_min']}-{s['rank_max']}",
            "rank / n": f"{s['rank_fraction']:.1%}",
            f"rank at {energy:.0%} of sum sigma": s["rank_singular"],
        }
        for s in summary
    ]
    show(output_dir, "spectrum.md", table(shown))
    log.info(
        "wrote spectrum.csv, spectrum_summary.csv, results.json, spectrum.md and spectrum.png "
        "to %s",
        output_dir,
    )
    return {"results": summary}


def write_train(run: TrainRun, output_dir: Path) -> dict[str, Any]:
    """``mode=train``: train_speed.csv, train_speed.json and train_speed.md (with the ratios)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    rows = [asdict(r) for r in run.results]
    write_csv(output_dir / "train_speed.csv", rows)
    write_json(
        output_dir / "train_speed.json",
        {"environment": run.environment, "results": rows, "ratios": run.ratios},
    )
    lines = [train_line(r) for r in run.results]
    lines += [f"{name}: {value:.2f}x" for name, value in run.ratios.items()]
    show(output_dir, "train_speed.md", "\n".join(lines))
    log.info("wrote train_speed.csv, train_speed.json and train_speed.md to %s", output_dir)
    return {"results": rows, "ratios": run.ratios}


def train_line(r: TrainSpeed) -> str:
    """One implementation's line of ``train_speed.md``: a figure not measured is a dash, and a
    status other than ``ok`` (no measurement, compiled that ran eager) ends the line."""

    def measured(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    return (
        f"{r.implementation:>13}  {'compiled' if r.compile else 'eager':<8}  {r.attention:<22} "
        f"{r.params:>9} params  "
        f"{measured(r.images_per_sec, '8.1f'):>8} img/s  (spread {measured(r.spread, '.0%')})  "
        f"{measured(r.step_ms, '8.1f'):>8} ms/step  {number(r.gflop_per_image)} GFLOP/image"
        + ("" if r.mfu is None else f"  MFU {r.mfu:.1%}")
        + ("" if r.compile_seconds is None else f"  compile {r.compile_seconds:.1f} s")
        + ("" if r.status == "ok" else f"  ({r.status})")
    )
