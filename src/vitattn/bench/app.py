"""``vitattn-bench``: attention time, memory, approximation error and spectrum, in one Hydra app.

Examples::

    vitattn-bench                                              # every attention, n = 256..4096
    vitattn-bench attentions=[softmax,linear] seq_lens=[64,128] repeats=2
    vitattn-bench level=block dtype=bfloat16 device=cuda
    vitattn-bench mode=approx ckpt_path=outputs/train/runs/<stamp>/checkpoints/last.ckpt
    vitattn-bench mode=spectrum ckpt_path=outputs/train/runs/<stamp>/checkpoints/last.ckpt

Every mechanism is reached through :data:`vitattn.attention.ATTENTIONS` and its
``configs/attention/<name>.yaml``; the only per-mechanism data is the budget-knob table
``approx.budgets`` in ``configs/bench.yaml``.
"""

from __future__ import annotations

import logging
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, ListConfig, OmegaConf

from vitattn.attention import ATTENTIONS
from vitattn.bench import report
from vitattn.bench.kernels import (
    attention_config_path,
    knob_names,
    registered,
    resolve_attentions,
    split_variant,
)
from vitattn.bench.scaling import LEVELS, Guard, Row, Runner, Sweep, scaling_table
from vitattn.utils.cli import console_main
from vitattn.utils.config import CONFIG_DIR
from vitattn.utils.errors import ConfigError
from vitattn.utils.task import run_task

log = logging.getLogger(__name__)

PROGRAM = "vitattn-bench"
MODES = ("scaling", "approx", "spectrum")
DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


# ---------------------------------------------------------------------------------------------
# Checking the settings: everything is checked before the run directory receives a file.


def choose(setting: str, value: Any, valid: Sequence[str]) -> str:
    if value not in valid:
        raise ConfigError(f"{setting}={value} is not valid; choose one of: {', '.join(valid)}")
    return str(value)


def parse_dtype(value: Any) -> torch.dtype:
    return DTYPES[choose("dtype", value, list(DTYPES))]


def parse_device(value: Any) -> torch.device:
    """``auto`` -> cuda if available else cpu; a CUDA device must exist."""
    text = str(value)
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(text)
    except RuntimeError as error:
        raise ConfigError(
            f"device={text} is not valid; choose auto, cpu, cuda or cuda:<index>"
        ) from error
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"device={text} is not valid; choose auto, cpu, cuda or cuda:<index>")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"device={text}: no CUDA device is available; use device=cpu")
        if device.index is not None and device.index >= count:
            raise ConfigError(f"device={text}: only {count} CUDA device(s); choose cuda:0..")
    return device


def positive_int(setting: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{setting}={value} is not valid; choose an integer >= {minimum}")
    return value


def positive_ints(setting: str, values: Any) -> list[int]:
    if isinstance(values, int) and not isinstance(values, bool):
        values = [values]
    if not isinstance(values, list | ListConfig) or not values:
        raise ConfigError(f"{setting}={values} is not valid; give a list such as [256,1024]")
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int) or v < 1]
    if bad:
        raise ConfigError(
            f"{setting} has {bad[0]!r}, which is not valid; choose integers >= 1, e.g. [256,1024]"
        )
    return sorted(dict.fromkeys(int(v) for v in values))


def optional_positive(setting: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{setting}={value} is not valid; choose a positive number or null")
    return float(value)


def memory_limit(value: Any, device: torch.device) -> float | None:
    """``guard.max_memory_bytes``: ``auto`` is half the physical RAM on CPU, no limit on GPU."""
    if value == "auto":
        if device.type != "cpu":
            return None
        try:
            return 0.5 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return None
    return optional_positive("guard.max_memory_bytes", value)


def _check_settings(setting: str, attention: str, settings: Any) -> None:
    if not isinstance(settings, dict):
        raise ConfigError(
            f"{setting}={settings} is not valid; give settings, e.g. {setting}.<knob>=..."
        )
    valid = knob_names(attention)
    for key in settings:
        if key not in valid:
            raise ConfigError(
                f"{setting}.{key} is not a setting of configs/attention/{attention}.yaml; "
                f"choose one of: {', '.join(valid) or '(none)'}"
            )


def check_variants(variants: Any) -> dict[str, dict[str, Any]]:
    """``variants`` as ``{name: {attention: <registered>, <knob>: value, ...}}``, all real."""
    plain = OmegaConf.to_container(variants, resolve=True) if variants is not None else {}
    if not isinstance(plain, dict):
        raise ConfigError("variants must map new names to {attention: <name>, <knob>: <value>}")
    for name, entry in plain.items():
        setting = f"variants.{name}"
        if name in ATTENTIONS:
            raise ConfigError(f"{setting}: {name} is a registered attention; choose another name")
        if not isinstance(entry, dict) or "attention" not in entry:
            raise ConfigError(f"{setting} must be {{attention: <registered name>, <knob>: ...}}")
        attention = resolve_attentions([entry["attention"]], f"{setting}.attention")[0]
        _check_settings(setting, attention, {k: v for k, v in entry.items() if k != "attention"})
    return plain


def check_knobs(
    knobs: Any, variants: dict[str, dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """``knobs`` as ``{attention or variant: {knob: value}}``, each name and knob real."""
    plain = OmegaConf.to_container(knobs, resolve=True) if knobs is not None else {}
    if not isinstance(plain, dict):
        raise ConfigError("knobs must map attention names to settings, e.g. +knobs.linformer.k=64")
    for name, settings in plain.items():
        resolve_attentions([name], f"knobs.{name}", variants)
        _check_settings(f"knobs.{name}", split_variant(name, variants)[0], settings)
    return plain


def check_budgets(
    budgets: Any, attentions: Sequence[str], variants: dict[str, dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """``approx.budgets`` entries of the selected attentions: a real knob and a list of values.

    Entries of mechanisms that are not selected (or not built yet) are ignored.
    """
    plain = OmegaConf.to_container(budgets, resolve=True) if budgets is not None else {}
    if not isinstance(plain, dict):
        raise ConfigError("approx.budgets must map attention names to {knob: ..., values: [...]}")
    checked: dict[str, dict[str, Any]] = {}
    for name in attentions:
        entry = plain.get(name)
        if not entry:
            continue
        setting = f"approx.budgets.{name}"
        attention = split_variant(name, variants)[0]
        if not attention_config_path(attention).is_file():
            checked[name] = entry  # building it will fail and say so in its row
            continue
        if not isinstance(entry, dict) or "knob" not in entry or "values" not in entry:
            raise ConfigError(f"{setting} must be {{knob: <setting>, values: [...]}}")
        valid = knob_names(attention)
        if entry["knob"] not in valid:
            raise ConfigError(
                f"{setting}.knob={entry['knob']} is not a setting of "
                f"configs/attention/{attention}.yaml; choose one of: {', '.join(valid) or '(none)'}"
            )
        values = entry["values"]
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{setting}.values={values} is not valid; give a list of values")
        checked[name] = {"knob": entry["knob"], "values": values}
    return checked


def require_checkpoint(cfg: DictConfig, mode: str) -> str:
    path = cfg.get("ckpt_path")
    if path in (None, "", "???"):
        raise ConfigError(
            f"ckpt_path is required for mode={mode}: "
            f"vitattn-bench mode={mode} ckpt_path=<run>/checkpoints/last.ckpt"
        )
    if not Path(str(path)).expanduser().is_file():
        raise ConfigError(f"ckpt_path={path} is not a file; pass a .ckpt saved by vitattn-train")
    return str(path)


def sweep_of(cfg: DictConfig) -> Sweep:
    """The scaling sweep described by ``cfg`` (all settings checked)."""
    device = parse_device(cfg.device)
    level = choose("level", cfg.level, LEVELS)
    variants = check_variants(cfg.get("variants"))
    mlp_ratio = optional_positive("mlp_ratio", cfg.get("mlp_ratio", 2.0)) or 2.0
    guard_cfg = cfg.get("guard") or {}
    reference = cfg.get("reference")
    if reference is not None:
        resolve_attentions([reference], "reference", variants)
    return Sweep(
        attentions=resolve_attentions(cfg.attentions, variants=variants),
        seq_lens=positive_ints("seq_lens", cfg.seq_lens),
        head_dims=positive_ints("head_dims", cfg.head_dims),
        batch_size=positive_int("batch_size", cfg.batch_size),
        heads=positive_int("heads", cfg.heads),
        dtype=parse_dtype(cfg.dtype),
        device=device,
        warmup=positive_int("warmup", cfg.warmup, minimum=0),
        repeats=positive_int("repeats", cfg.repeats),
        level=level,
        mlp_ratio=mlp_ratio,
        knobs=check_knobs(cfg.get("knobs"), variants),
        variants=variants,
        reference=reference,
        seed=int(cfg.get("seed") or 0),
        guard=Guard(
            max_memory_bytes=memory_limit(guard_cfg.get("max_memory_bytes", "auto"), device),
            max_call_seconds=optional_positive(
                "guard.max_call_seconds", guard_cfg.get("max_call_seconds")
            ),
            free_below=positive_int("guard.free_below", guard_cfg.get("free_below", 1024), 0),
            max_measure_seconds=optional_positive(
                "guard.max_measure_seconds", guard_cfg.get("max_measure_seconds")
            ),
        ),
    )


def cpu_name() -> str:
    """The processor's model name (from ``/proc/cpuinfo`` on Linux), else the machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: torch.device) -> dict[str, Any]:
    """What the numbers were measured on."""
    return {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def settings_of(cfg: DictConfig) -> dict[str, Any]:
    """The bench's own settings (not Hydra's, the paths or the data), as plain values."""
    settings = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(settings, dict)
    return {str(k): v for k, v in settings.items() if k not in ("hydra", "paths", "data")}


# ---------------------------------------------------------------------------------------------
# The three modes.


def run_scaling(cfg: DictConfig, output_dir: Path) -> dict[str, Any]:
    """Time and memory against n: results.csv/json, scaling.csv, two figures, a table."""
    from vitattn.bench.plots import plot_memory, plot_time

    sweep = sweep_of(cfg)
    output_dir.mkdir(parents=True, exist_ok=True)
    env = environment(sweep.device)
    log.info(
        "%s level, %s on %s (%s, %d threads): %s x n=%s x d=%s",
        sweep.level, env["device"], env["device_name"], str(sweep.dtype).removeprefix("torch."),
        env["threads"], ",".join(sweep.attentions), sweep.seq_lens, sweep.head_dims,
    )  # fmt: skip

    def progress(row: Row) -> None:
        if row.ok:
            log.info(
                "%-14s n=%-6d d=%-4d fwd %9.3f ms  fwd+bwd %9.3f ms  memory %8.1f MiB",
                row.attention, row.seq_len, row.head_dim, row.fwd_ms, row.fwd_bwd_ms,
                (row.memory_bytes or 0) / 2**20,
            )  # fmt: skip
        else:
            log.info("%-14s n=%-6d d=%-4d %s", row.attention, row.seq_len, row.head_dim, row.status)

    rows = Runner(sweep, on_row=progress).run()
    scaling = scaling_table(rows, sweep.reference)
    row_dicts = [asdict(r) for r in rows]
    report.write_csv(output_dir / "results.csv", row_dicts)
    report.write_csv(output_dir / "scaling.csv", scaling)
    report.write_json(
        output_dir / "results.json",
        {
            "mode": "scaling",
            "settings": settings_of(cfg),
            "environment": env,
            "guard": asdict(sweep.guard),
            "results": row_dicts,
            "scaling": scaling,
        },
    )
    plot_time(rows, output_dir / "time_vs_seq_len.png")
    plot_memory(rows, output_dir / "memory_vs_seq_len.png")
    text = scaling_text(rows, scaling, sweep.reference)
    (output_dir / "results.md").write_text(text + "\n")
    print(text, flush=True)
    log.info("wrote results.csv, results.json, scaling.csv and figures to %s", output_dir)
    return {"results": row_dicts, "scaling": scaling}


def scaling_text(rows: Sequence[Row], scaling: Sequence[dict[str, Any]], reference: Any) -> str:
    """The results table and the exponents table, in Markdown."""
    shown = [
        {
            "attention": r.attention,
            "n": r.seq_len,
            "d": r.head_dim,
            "fwd": report.number(r.fwd_ms),
            "fwd_bwd": report.number(r.fwd_bwd_ms),
            "iqr": "-"
            if r.fwd_bwd_q25_ms is None
            else f"{r.fwd_bwd_q25_ms:.3g}-{r.fwd_bwd_q75_ms:.3g}",
            "memory": report.mebibytes(r.memory_bytes),
            "saved": report.mebibytes(r.saved_bytes),
            "speedup": report.number(r.speedup_vs_reference, 2),
            "status": r.status,
        }
        for r in rows
    ]
    results = report.format_table(
        shown,
        {
            "attention": "attention",
            "n": "n",
            "d": "d",
            "fwd": "fwd ms",
            "fwd_bwd": "fwd+bwd ms",
            "iqr": "fwd+bwd IQR",
            "memory": "memory MiB",
            "saved": "saved MiB",
            "speedup": f"x vs {reference}" if reference else "speedup",
            "status": "status",
        },
    )
    exponents = report.format_table(
        [
            {
                **entry,
                **{key: report.number(entry[key], 3) for key in entry if key.endswith("_exponent")},
                "crossover_seq_len": entry["crossover_seq_len"] or "-",
            }
            for entry in scaling
        ],
        {
            "attention": "attention",
            "head_dim": "d",
            "seq_lens": "n fitted",
            "fwd_ms_exponent": "time^ fwd",
            "fwd_bwd_ms_exponent": "time^ fwd+bwd",
            "memory_bytes_exponent": "memory^",
            "saved_bytes_exponent": "saved^",
            "crossover_seq_len": f"beats {reference} from n" if reference else "crossover",
        },
    )
    return (
        f"{results}\n\nScaling exponents (slope of log value vs log n; 1 = linear, 2 = quadratic)"
        f"\n\n{exponents}"
    )


def run_approx(cfg: DictConfig, output_dir: Path) -> dict[str, Any]:
    """Errors against softmax per budget: approx.csv, results.json, one figure per attention."""
    from vitattn.bench.approx import approximation_errors, random_qkv
    from vitattn.bench.plots import plot_approx

    approx_cfg = cfg.approx
    device, dtype = parse_device(cfg.device), parse_dtype(cfg.dtype)
    variants = check_variants(cfg.get("variants"))
    if cfg.attentions is None:
        attentions = [n for n in registered() if n != cfg.get("reference")]
    else:
        attentions = resolve_attentions(cfg.attentions, variants=variants)
    budgets = check_budgets(approx_cfg.get("budgets"), attentions, variants)
    knobs = check_knobs(cfg.get("knobs"), variants)
    trials = positive_int("approx.trials", approx_cfg.trials)
    seq_len = positive_int("approx.seq_len", approx_cfg.seq_len)
    head_dim = positive_int("approx.head_dim", approx_cfg.head_dim)
    batch, heads = positive_int("batch_size", cfg.batch_size), positive_int("heads", cfg.heads)
    std = optional_positive("approx.qk_std", approx_cfg.qk_std) or 1.0
    seed = int(cfg.get("seed") or 0)
    inputs = {
        "random": random_qkv(
            batch, heads, seq_len, head_dim, std=std, seed=seed, dtype=dtype, device=device
        )
    }
    if cfg.get("ckpt_path") not in (None, ""):
        from vitattn.bench.capture import checkpoint_qkv

        path = require_checkpoint(cfg, "approx")
        layers = checkpoint_qkv(path, cfg.data, positive_int("approx.images", approx_cfg.images))
        # All layers' q, k, v as one batch: the error over the whole model's attention.
        inputs["checkpoint"] = tuple(  # type: ignore[assignment]
            torch.cat([layer[i] for layer in layers]).to(device=device, dtype=dtype)
            for i in range(3)
        )
    output_dir.mkdir(parents=True, exist_ok=True)
    rows = approximation_errors(
        attentions, budgets, inputs, trials=trials, seed=seed, knobs=knobs, variants=variants
    )
    row_dicts = [asdict(r) for r in rows]
    report.write_csv(output_dir / "approx.csv", row_dicts)
    report.write_json(
        output_dir / "results.json",
        {
            "mode": "approx",
            "settings": settings_of(cfg),
            "environment": environment(device),
            "results": row_dicts,
        },
    )
    for name in attentions:  # a figure for every attention with at least one measured point
        if any(r.attention == name and r.status == "ok" for r in rows):
            plot_approx(rows, name, output_dir / f"approx_{name}.png")
    text = report.format_table(
        [
            {
                "attention": r.attention,
                "budget": f"{r.knob}={r.budget}" if r.knob else "default",
                "source": f"{r.source} (n={r.seq_len})",
                "output": report.number(r.output_rel_error),
                "matrix": report.number(r.matrix_rel_error),
                "method": r.matrix_method,
                "status": r.status,
            }
            for r in rows
        ],
        {
            "attention": "attention",
            "budget": "budget",
            "source": "inputs",
            "output": "output rel. error",
            "matrix": "matrix rel. error",
            "method": "matrix from",
            "status": "status",
        },
    )
    (output_dir / "approx.md").write_text(text + "\n")
    print(text, flush=True)
    log.info("wrote approx.csv, results.json and approx_<attention>.png to %s", output_dir)
    return {"results": row_dicts}


def run_spectrum(cfg: DictConfig, output_dir: Path) -> dict[str, Any]:
    """Singular values of each layer's and head's softmax matrix: spectrum.csv/png."""
    from vitattn.bench.capture import checkpoint_qkv
    from vitattn.bench.plots import plot_spectrum
    from vitattn.bench.spectrum import head_spectra

    path = require_checkpoint(cfg, "spectrum")
    spectrum_cfg = cfg.spectrum
    energy = spectrum_cfg.energy
    if isinstance(energy, bool) or not isinstance(energy, int | float) or not 0 < energy <= 1:
        raise ConfigError(f"spectrum.energy={energy} is not valid; choose 0 < energy <= 1")
    images = positive_int("spectrum.images", spectrum_cfg.images)
    layers = checkpoint_qkv(path, cfg.data, images)
    spectra = head_spectra([(q, k) for q, k, _ in layers], float(energy))
    output_dir.mkdir(parents=True, exist_ok=True)
    long_rows = [
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
    report.write_csv(output_dir / "spectrum.csv", long_rows)
    report.write_csv(output_dir / "spectrum_summary.csv", summary)
    report.write_json(
        output_dir / "results.json",
        {
            "mode": "spectrum",
            "settings": settings_of(cfg),
            "ckpt_path": str(Path(path).expanduser().resolve()),
            "results": summary,
            "spectra": [asdict(s) for s in spectra],
        },
    )
    plot_spectrum(spectra, float(energy), output_dir / "spectrum.png")
    text = report.format_table(
        [
            {
                "layer": s["layer"],
                "head": s["head"],
                "n": s["seq_len"],
                "rank": s["rank"],
                "mean": f"{s['rank_mean']:.1f}",
                "range": f"{s['rank_min']}-{s['rank_max']}",
                "fraction": f"{s['rank_fraction']:.1%}",
                "singular": s["rank_singular"],
            }
            for s in summary
        ],
        {
            "layer": "layer",
            "head": "head",
            "n": "n",
            "rank": f"rank at {energy:.0%} (mean spectrum)",
            "mean": "mean over images",
            "range": "min-max",
            "fraction": "rank / n",
            "singular": f"rank at {energy:.0%} of sum sigma",
        },
    )
    (output_dir / "spectrum.md").write_text(text + "\n")
    print(text, flush=True)
    log.info("wrote spectrum.csv, spectrum_summary.csv and spectrum.png to %s", output_dir)
    return {"results": summary}


def benchmark(cfg: DictConfig) -> dict[str, Any]:
    """Run the mode ``cfg.mode`` and write its files to the run directory."""
    mode = choose("mode", cfg.mode, MODES)
    if cfg.get("threads") is not None:
        torch.set_num_threads(positive_int("threads", cfg.threads))
    output_dir = Path(cfg.paths.output_dir)
    if mode == "scaling" and choose("level", cfg.level, (*LEVELS, "train")) == "train":
        from vitattn.bench.train_speed import run_train

        return run_train(cfg, output_dir)
    runners = {"scaling": run_scaling, "approx": run_approx, "spectrum": run_spectrum}
    return runners[mode](cfg, output_dir)


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="bench")
def _hydra_main(cfg: DictConfig) -> None:
    run_task(PROGRAM, benchmark, cfg)


def main() -> None:
    """Console script ``vitattn-bench``."""
    console_main(PROGRAM, _hydra_main, config_name="bench")


if __name__ == "__main__":
    main()
