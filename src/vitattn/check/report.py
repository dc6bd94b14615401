"""What ``vitattn-check`` writes: ``check.json`` (everything), ``check.md`` (the tables, the
problems first, then the cautions: figures a busy machine may have moved) and
``check_kernels.png`` (kernel time and its share of the floor against n), through the project's
results writer."""

from __future__ import annotations

import datetime
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from vitattn.bench.environment import busy_line, environment, load_average
from vitattn.bench.floor import floor_line
from vitattn.bench.plots import plot_time
from vitattn.bench.scaling_table import past_floors
from vitattn.check.kernels import KernelsRun
from vitattn.check.numerics import NumericsRow
from vitattn.check.settings import CheckSettings
from vitattn.check.training import TrainingRow
from vitattn.runs.files import write_text
from vitattn.runs.results import markdown_table, number, write_json


def driver_version() -> str | None:
    """The NVIDIA driver's version, from ``nvidia-smi`` where it is installed."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        found = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return found.stdout.strip().splitlines()[0] if found.stdout.strip() else None


def machine(settings: CheckSettings) -> dict[str, Any]:
    """Section 5: the device, its software and the precision the training used."""
    import lightning

    device = settings.torch_device
    found = environment(device)
    found.update(
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        lightning=lightning.__version__,
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        driver=driver_version() if device.type == "cuda" else None,
        precision=settings.training.precision,
        load_average=load_average(),
    )
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        found["capability"] = f"{properties.major}.{properties.minor}"
        found["memory_gb"] = round(properties.total_memory / 2**30, 1)
    return found


def problems(
    numerics: Sequence[NumericsRow],
    training: Sequence[TrainingRow],
    kernels: KernelsRun | None,
    reference: Mapping[str, Any] | None = None,
) -> list[str]:
    """One line per thing that is not as it should be (not a reference skipped for want of
    timm): a reference that could not run, or a row of it that did not run as asked."""
    found = [
        f"numerics: {r.attention} in {r.dtype}: {r.status}"
        + ("" if r.error is None else f" (error {r.error:.2e}, tolerance {r.tolerance:.1e})")
        for r in numerics
        if r.status != "ok"
    ]
    for row in training:
        if row.status != "ok":
            found.append(f"training: {row.attention}: {row.status}")
        elif row.loss_falling is False:
            found.append(
                f"training: {row.attention}: the loss did not fall "
                f"({row.loss_first:.3f} -> {row.loss_last:.3f})"
            )
    if kernels is not None:
        found.extend(
            f"kernels: {r.attention} at n={r.seq_len}: {r.status}"
            for r in kernels.rows
            if r.status.startswith("error")
        )
        # against a datasheet's figures, which nothing beats: FLOPs counted too many. Measured
        # figures move with a shared machine's load: a caution (:func:`cautions`)
        past = past_floors(kernels.rows, kernels.floor_device, measured=False)
        found.extend(f"kernels: {line}" for line in past)
    if reference is not None and not reference["status"].startswith(("ok", "skipped")):
        found.append(f"reference: {reference['status']}")
    for row in [] if reference is None else reference["results"]:
        if row.get("status", "ok") != "ok":  # a compiled row that ran eager, as in training
            way = "compiled" if row.get("compile") else "eager"
            found.append(f"reference: {row['implementation']} {way}: {row['status']}")
    return found


STEADY_SPREAD = 0.10
"""The largest spread of a reference row's images/s over its repeats ((max - min) / median) its
ratio is read without a caution: beyond it, the machine's other work moved the timings."""


def cautions(
    env: Mapping[str, Any],
    reference: Mapping[str, Any] | None,
    kernels: KernelsRun | None,
) -> list[str]:
    """One line per figure of the run that the machine's other work may have moved: no problem
    of the machine checked, but a reason to read those figures again on a quiet one. A busy
    machine (a load above its CPUs at the start or the end), a kernel faster than floors taken
    against figures measured in this process (a peak or bandwidth measured in a slow moment),
    and a reference row whose images/s spread beyond :data:`STEADY_SPREAD`."""
    loads = {"start": env.get("load_average"), "end": env.get("load_average_end")}
    busy = busy_line(loads, env.get("cpus"))
    found = [] if busy is None else [busy]
    if kernels is not None:
        past = past_floors(kernels.rows, kernels.floor_device, measured=True)
        found.extend(f"kernels: {line}" for line in past)
    for row in [] if reference is None else reference["results"]:
        spread = row.get("spread")
        if spread is not None and spread > STEADY_SPREAD:
            way = "compiled" if row.get("compile") else "eager"
            found.append(
                f"reference: {row['implementation']} {way}'s images/s spread {spread:.0%} over "
                f"its repeats (steady: up to {STEADY_SPREAD:.0%}): its ratios are not steady"
            )
    return found


NUMERICS_COLUMNS = {
    "attention": "attention",
    "dtype": "dtype",
    "error": "max rel. error",
    "output_error": "output error",
    "finite": "finite",
    "finite_stressed": "finite, q k scaled",
    "status": "status",
}
TRAINING_COLUMNS = {
    "attention": "attention",
    "compiled": "compiled",
    "images_per_sec": "images/s",
    "compile_seconds": "compile s",
    "peak_memory_gb": "peak GiB",
    "gflop_per_image": "GFLOP/image",
    "mfu": "MFU",
    "loss_first": "loss, first 1/4",
    "loss_last": "loss, last 1/4",
    "seconds": "row s",
    "status": "status",
}
KERNEL_COLUMNS = {
    "attention": "attention",
    "crossover_seq_len": "faster than softmax from n",
    "largest_seq_len": "largest n run",
}
FLOOR_COLUMNS = {
    "attention": "attention",
    "seq_len": "n",
    "fwd_bwd_ms": "fwd+bwd ms",
    "fwd_bwd_floor_ms": "floor ms",
    "fwd_bwd_floor_pct": "% of floor",
    "floor_bound": "bound",
    "flops_source": "FLOPs",
    "fwd_bwd_dispatches": "ops",
    "status": "status",
}
"""The kernels' rows in ``check.md``: each forward+backward against its floor."""


FORMATS = {
    "error": "{:.1e}",
    "output_error": "{:.1e}",
    "images_per_sec": "{:,.0f}",
    "peak_memory_gb": "{:.2f}",
    "gflop_per_image": "{:.3g}",
    "mfu": "{:.1%}",
    "loss_first": "{:.3f}",
    "loss_last": "{:.3f}",
    "seconds": "{:.1f}",
    "spread": "{:.0%}",
}
"""How a float column is shown in ``check.md`` (others: three significant digits)."""


def _shown(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            k: (FORMATS[k].format(v) if k in FORMATS else number(v)) if isinstance(v, float) else v
            for k, v in row.items()
        }
        for row in rows
    ]


def check_text(
    settings: CheckSettings,
    env: Mapping[str, Any],
    numerics: Sequence[NumericsRow],
    training: Sequence[TrainingRow],
    reference: Mapping[str, Any] | None,
    kernels: KernelsRun | None,
    found: Sequence[str],
    seconds: Mapping[str, float] | None = None,
    caution: Sequence[str] = (),
) -> str:
    """``check.md``; ``found`` are the :func:`problems`, ``caution`` the :func:`cautions`,
    ``seconds`` each section's."""
    lines = [
        f"# vitattn-check on {env['device_name']} ({env['device']}), {env['date']}",
        "",
        f"torch {env['torch']}, CUDA {env.get('cuda') or '-'}, driver {env.get('driver') or '-'}, "
        f"Lightning {env['lightning']}, precision {env['precision']}, "
        f"float32 matmuls {env['matmul_precision']}",
        "",
        *([took_line(seconds), ""] if seconds else []),
        "## Problems",
        "",
        *([f"- {line}" for line in found] or ["none"]),
        *(["", "## Cautions", "", *(f"- {line}" for line in caution)] if caution else []),
    ]
    if numerics:
        n = settings.numerics
        lines += [
            "",
            f"## Numerics: against fp32 on the CPU (batch {n.batch_size}, {n.heads} heads, "
            f"n {n.seq_len}, d {n.head_dim}; stressed: q, k x {n.stress_scale:g})",
            "",
            markdown_table(_shown([asdict(r) for r in numerics]), NUMERICS_COLUMNS),
        ]
    if training:
        t = settings.training
        lines += [
            "",
            f"## Training: {t.steps} steps of {t.model}, batch {t.batch_size}, {t.precision}",
            "",
            markdown_table(_shown([asdict(r) for r in training]), TRAINING_COLUMNS),
        ]
    if reference is not None:
        lines += ["", "## Against timm's ViT of the same size (softmax)", ""]
        if reference["results"]:
            columns = {
                "implementation": "implementation",
                "compile": "compiled",
                "images_per_sec": "images/s",
                "spread": "spread",
                "compile_seconds": "compile s",
            }
            lines.append(markdown_table(_shown(reference["results"]), columns))
            lines += [""] + [f"{k}: {v:.2f}x" for k, v in reference["ratios"].items()]
        else:
            lines.append(reference["status"])
    if kernels is not None:
        k = settings.kernels
        lines += [
            "",
            f"## Kernels: forward+backward against n ({k.dtype.value}, batch {k.batch_size}, "
            f"{k.heads} heads, d {k.head_dim}; figure: check_kernels.png)",
            "",
            markdown_table(kernels.summary, KERNEL_COLUMNS),
            "",
            f"{floor_line(kernels.floor_device)}"
            f"{markdown_table(_shown([asdict(r) for r in kernels.rows]), FLOOR_COLUMNS)}",
        ]
    return "\n".join(lines)


def duration(seconds: float) -> str:
    """``seconds`` as a person reads them: ``42 s``, ``3 min 9 s``."""
    whole = round(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60} s"


def took_line(seconds: Mapping[str, float]) -> str:
    """What each section took, and all of them (not the start-up: imports, the device)."""
    parts = ", ".join(f"{name} {duration(value)}" for name, value in seconds.items())
    return f"Took: {parts}; {duration(sum(seconds.values()))} in all."


def write_check(
    output_dir: Path,
    settings: CheckSettings,
    given: Mapping[str, Any],
    env: Mapping[str, Any],
    numerics: Sequence[NumericsRow],
    training: Sequence[TrainingRow],
    reference: Mapping[str, Any] | None,
    kernels: KernelsRun | None,
    seconds: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Write the three files, print ``check.md``; what ``check.json`` holds (``seconds``: what
    each section took)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    found = problems(numerics, training, kernels, reference)
    caution = cautions(env, reference, kernels)
    content = {
        "settings": dict(given),
        "environment": dict(env),
        "seconds": dict(seconds or {}),
        "problems": found,
        "cautions": caution,
        "numerics": [asdict(r) for r in numerics],
        "training": [asdict(r) for r in training],
        "reference": reference,
        "kernels": None
        if kernels is None
        else {
            "results": [asdict(r) for r in kernels.rows],
            "summary": kernels.summary,
            "floor_device": kernels.floor_device,
        },
    }
    write_json(output_dir / "check.json", content)
    if kernels is not None:
        plot_time(kernels.rows, output_dir / "check_kernels.png")
    text = check_text(
        settings, env, numerics, training, reference, kernels, found, seconds, caution
    )
    write_text(output_dir / "check.md", text + "\n")
    print(text, flush=True)
    return content
