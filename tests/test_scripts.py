"""The scripts of ``scripts/`` that the README and docs name, run at test size."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.support.runners import BIN, run_cli
from tests.support.tables import read_csv
from vitattn.utils.config import PROJECT_ROOT

SCRIPTS = PROJECT_ROOT / "scripts"


@pytest.mark.slow
def test_reproduce_report_sweeps_the_report_preset_and_draws_its_figure(
    tmp_path: Path, data_dir: Path
) -> None:
    """``scripts/reproduce_report.sh``: ``experiment=report`` per attention (here two, tiny, on a
    CPU), then the figure and table of ``plot_curves.py`` in the sweep's folder."""
    sweep = tmp_path / "report"
    tiny = [
        "trainer.accelerator=cpu",  # the preset's trainer is trainer=gpu
        "trainer.precision=32-true",
        "model.embed_dim=32",
        "model.depth=1",
        "model.heads=2",
        "data.batch_size=16",
        "data.eval_batch_size=32",
        "trainer.max_epochs=null",
        "trainer.max_steps=2",
        "trainer.val_check_interval=2",
        "+trainer.limit_val_batches=1",
        "test=false",
        "callbacks.progress_bar.refresh_rate=0",
    ]
    env = {
        "ATTENTIONS": "softmax,linear",
        "SWEEP_DIR": str(sweep),
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
    }
    run_cli(str(SCRIPTS / "reproduce_report.sh"), *tiny, data_dir=data_dir, env=env)
    rows = read_csv(sweep / "summary.csv")
    assert sorted(row["attention"] for row in rows) == ["linear", "softmax"]
    assert {row["status"] for row in rows} == {"completed"}
    assert all(row["model"] == "vit_pixel" for row in rows)  # the report's 1024-token model
    for figure in ("val_acc_vs_step.png", "train_loss_vs_step.png"):
        assert (sweep / figure).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_bench_sparse_family_prints_a_row_per_kernel_and_length(data_dir: Path) -> None:
    args = ["--seq-lens", "64", "128", "--attentions", "softmax", "local", "--repeats", "1"]
    result = run_cli("python", str(SCRIPTS / "bench_sparse_family.py"), *args, data_dir=data_dir)
    rows = [
        line.split()
        for line in result.stdout.splitlines()
        if line.split()[:1] in (["softmax"], ["local"])
    ]
    assert sorted((row[0], row[1]) for row in rows) == [
        ("local", "128"),
        ("local", "64"),
        ("softmax", "128"),
        ("softmax", "64"),
    ]


@pytest.mark.slow
def test_plant_defects_reports_the_test_that_catches_a_defect(data_dir: Path) -> None:
    script = str(SCRIPTS / "plant_defects.py")
    linear = PROJECT_ROOT / "src" / "vitattn" / "attention" / "linear.py"
    before = linear.read_bytes()
    # One test each: the script's pytest runs what it is given; which tests is not the point.
    tests = [
        "--tests",
        "tests/attention/test_linear_family.py::test_linear_equals_explicit_formula",
    ]
    caught = run_cli("python", script, "--only", "key mean", *tests, data_dir=data_dir)
    [row] = [line for line in caught.stdout.splitlines() if line.startswith("| linear")]
    assert "test_linear_family.py::test_linear_equals_explicit_formula" in row
    # A defect the chosen tests cannot see is reported as missed, with exit status 1.
    blind = "tests/attention/test_registry.py::test_multihead_rejects_indivisible_heads"
    missed = run_cli(
        "python", script, "--only", "efficient", "--tests", blind, data_dir=data_dir, check=False
    )  # fmt: skip
    assert missed.returncode == 1 and "| MISSED |" in missed.stdout
    assert linear.read_bytes() == before  # planted in a copy, never in the working tree


def gpu_check_plan(tmp_path: Path, budget: int, **env: str) -> list[list[str]]:
    """``scripts/gpu_check.sh`` with ``PLAN=1``: each part's name, cap and overrides."""
    script = PROJECT_ROOT / "scripts" / "gpu_check.sh"
    result = subprocess.run(
        ["bash", str(script), str(tmp_path / "out"), str(budget)],
        capture_output=True,
        text=True,
        env={**os.environ, "PLAN": "1", "PYTHON": sys.executable, **env},
        check=True,
        timeout=60,
    )
    return [line.split("\t") for line in result.stdout.splitlines()]


def test_gpu_check_gives_each_section_and_training_group_a_share_of_the_budget(
    tmp_path: Path,
) -> None:
    """The one prepared call for a lent GPU: numerics, the training section in groups of
    attentions, the reference and the kernels, each under its own cap, the caps within the
    budget, every attention trained once."""
    checked = "softmax linear performer nystrom bigbird"
    plan = gpu_check_plan(tmp_path, 600, ATTENTIONS=checked, TRAINING_PARTS="2")
    assert [name for name, _, _ in plan] == [
        "numerics", "training-1", "training-2", "reference",
        "kernels-linear", "kernels-features", "kernels-rest",
    ]  # fmt: skip
    assert sum(int(cap) for _, cap, _ in plan) <= 600
    overrides = {name: arguments for name, _, arguments in plan}
    # the attentions dealt round: the slow ones fall in different parts
    assert overrides["training-1"] == "sections=[training] attentions=[softmax,performer,bigbird]"
    assert overrides["training-2"] == "sections=[training] attentions=[linear,nystrom]"
    # the kernels by family (each part times the variants and compiled rows of its own)
    assert overrides["kernels-linear"] == "sections=[kernels] attentions=[linear]"
    assert overrides["kernels-features"] == "sections=[kernels] attentions=[performer,nystrom]"
    assert overrides["kernels-rest"] == "sections=[kernels] attentions=[softmax,bigbird]"
    assert not (tmp_path / "out" / "parts.tsv").exists()  # a plan runs and records nothing
    # PARTS: a device call runs some parts, a second call the others, each with the same cap
    second = gpu_check_plan(
        tmp_path, 600, ATTENTIONS=checked, TRAINING_PARTS="2", PARTS="reference kernels-rest"
    )
    assert second == [p for p in plan if p[0] in ("reference", "kernels-rest")]
    # FUSED: the fused paths' script first, with its own cap outside the budget
    fused = gpu_check_plan(tmp_path, 600, ATTENTIONS=checked, TRAINING_PARTS="2", FUSED="linear")
    assert fused == [["fused-paths", "200", "scripts/fused_paths_gpu.py linear"], *plan]
    # TRAIN_STEPS: a user's first `vitattn-train trainer=gpu` (compiled by default, with the
    # model summary), its own cap outside the budget, after the fused paths
    trained = gpu_check_plan(
        tmp_path, 600, ATTENTIONS=checked, TRAINING_PARTS="2", FUSED="linear", TRAIN_STEPS="300"
    )
    run_dir = tmp_path / "out" / "train-run"
    assert trained[1] == [
        "train-run",
        "150",
        "vitattn-train trainer=gpu trainer.max_steps=300 trainer.val_check_interval=300 "
        f"hydra.run.dir={run_dir}",
    ]
    assert trained == [fused[0], trained[1], *plan]
    one_each = gpu_check_plan(tmp_path, 600, ATTENTIONS="a b", TRAINING_PARTS="9")
    assert [name for name, _, _ in one_each if name.startswith("training")] == [
        "training-1", "training-2"
    ]  # fmt: skip


STAND_IN_CHECK = """#!/usr/bin/env bash
# python3 for gpu_check.sh: `-m vitattn.check ...` writes the check.md of the run directory it
# is given, with no problems; scripts/fused_paths_gpu.py prints what it was asked for
if [[ "$1" == */fused_paths_gpu.py ]]; then
    shift
    echo "fused paths of $*"
    exit 0
fi
for argument in "$@"; do
    [[ "$argument" == hydra.run.dir=* ]] && run="${argument#hydra.run.dir=}"
done
mkdir -p "$run"
printf '# check\\n\\n## Problems\\n\\nnone\\n' > "$run/check.md"
echo "$*" > "$run/arguments"
"""


def test_gpu_check_packs_each_part_as_it_ends(tmp_path: Path) -> None:
    """On a lent GPU that hands back a few files, ``PACK`` holds every part that has ended, so a
    command cut by the device's own limit still brings back what ran."""
    stand_in = tmp_path / "python3"
    stand_in.write_text(STAND_IN_CHECK)
    stand_in.chmod(0o755)
    out, pack = tmp_path / "out", tmp_path / "back" / "check.tgz"
    pack.parent.mkdir()
    result = subprocess.run(
        ["bash", str(PROJECT_ROOT / "scripts" / "gpu_check.sh"), str(out), "600"],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PYTHON": str(stand_in),
            "ATTENTIONS": "softmax linear",
            "TRAINING_PARTS": "1",
            "PACK": str(pack),
            "FUSED": "performer random_feature",
        },
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    parts = ["numerics", "training-1", "reference", "kernels-linear", "kernels-rest"]
    with tarfile.open(pack) as archive:
        names = {name.removeprefix("./") for name in archive.getnames()}
        tsv = archive.extractfile("./parts.tsv").read().decode()  # type: ignore[union-attr]
        fused = archive.extractfile("./fused-paths.log").read().decode()  # type: ignore[union-attr]
    assert {f"{part}/check.md" for part in parts} <= names
    assert [line.split("\t")[:2] for line in tsv.splitlines()[1:]] == [
        [p, "0"] for p in ["fused-paths", *parts]
    ]
    assert fused == "fused paths of performer random_feature\n"
    assert not pack.with_name("check.tgz.partial").exists()
    assert "none" in result.stdout  # each part's problems line in the closing list


@pytest.mark.slow
def test_kernel_registers_compiles_each_tuned_configuration_without_a_gpu() -> None:
    """``scripts/kernel_registers.py``: performer's keys' kernel, compiled for sm_90 on this CPU
    at each of the eight configurations its tuner tries, one table row each with the PTX
    instructions, registers (at most a thread's 255), spilled bytes and shared memory; the half
    step takes fewer registers than the whole at the same warps (docs/check.md's table)."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "kernel_registers.py"),
            "performer",
            "--kernels",
            "_key_state",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    rows = [
        [cell.strip() for cell in line.split("|")[1:-1]]
        for line in result.stdout.splitlines()
        if line.startswith("| performer")
    ]
    configs = [f"{w}w{s}s,HALVES={h}" for h in (1, 2) for w, s in ((4, 3), (8, 3), (4, 2), (8, 2))]
    assert [row[2] for row in rows] == configs
    registers = {row[2]: int(row[4]) for row in rows}
    for _, kernel, _, instructions, used, spilled, shared in rows:
        assert kernel == "`_key_state`"
        assert int(instructions.replace(",", "")) > 100 and 0 < int(used) <= 255
        assert int(spilled) >= 0 and int(shared) > 0
    for warps in ("4w3s", "8w3s"):
        assert registers[f"{warps},HALVES=2"] < registers[f"{warps},HALVES=1"]
