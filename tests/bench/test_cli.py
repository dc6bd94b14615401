"""``vitattn-bench`` end to end: the files of a run, and refusals in one line with no run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.support.in_process import run_before_the_app
from tests.support.runners import run_cli
from tests.support.written import assert_the_closing_line_names_every_file

# A grid small enough for a test: two attentions, two sizes, one quick repeat.
SMALL = ["attentions=[softmax,linear]", "seq_lens=[32,64]", "head_dims=[16]", "batch_size=2"]
SMALL += ["heads=2", "warmup=0", "repeats=2", "device=cpu"]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_cli_writes_every_file(tmp_path: Path, data_dir: Path) -> None:
    run_dir = tmp_path / "run"
    result = run_cli("vitattn-bench", *SMALL, f"hydra.run.dir={run_dir}", data_dir=data_dir)
    for name in ("results.csv", "results.json", "scaling.csv", "results.md", "bench.log"):
        assert (run_dir / name).is_file(), name
    for name in ("time_vs_seq_len.png", "memory_vs_seq_len.png"):
        assert (run_dir / name).read_bytes()[:4] == b"\x89PNG"
    rows = read_csv(run_dir / "results.csv")
    assert [(r["attention"], r["seq_len"], r["head_dim"]) for r in rows] == [
        ("softmax", "32", "16"),
        ("softmax", "64", "16"),
        ("linear", "32", "16"),
        ("linear", "64", "16"),
    ]
    for row in rows:
        assert row["status"] == "ok"
        assert float(row["fwd_ms"]) > 0 and float(row["fwd_bwd_ms"]) > 0
        assert int(row["memory_bytes"]) > 0 and int(row["saved_bytes"]) > 0
        assert (row["batch_size"], row["heads"], row["dtype"]) == ("2", "2", "float32")
        assert float(row["fwd_floor_ms"]) > 0 and float(row["fwd_bwd_floor_ms"]) > 0
        assert float(row["fwd_bwd_floor_pct"]) > 0 and row["floor_bound"] in ("compute", "memory")
        assert int(row["fwd_dispatches"]) > 0 and int(row["fwd_bwd_dispatches"]) > 0
    scaling = read_csv(run_dir / "scaling.csv")
    assert [s["attention"] for s in scaling] == ["softmax", "linear"]
    assert all(s["fwd_bwd_ms_exponent"] and s["memory_bytes_exponent"] for s in scaling)
    content = json.loads((run_dir / "results.json").read_text())
    assert content["mode"] == "scaling" and len(content["results"]) == 4
    assert content["settings"]["mode"] == "scaling" and content["settings"]["repeats"] == 2
    assert "| softmax" in result.stdout and "Scaling exponents" in result.stdout
    assert content["environment"]["matmul_precision"] == "high"  # as vitattn-train's products
    floor = content["environment"]["floor_device"]
    assert floor["measured"] and floor["peak_tflops"] > 0 and floor["bandwidth_gb_s"] > 0
    assert "% of floor" in result.stdout and "ops fwd+bwd" in result.stdout
    assert_the_closing_line_names_every_file(result.stdout + result.stderr, run_dir)


BENCH = ["vitattn-bench"]
PYTHON_M = ["python", "-m", "vitattn.bench"]  # registers the schema the same way
REFUSALS = [
    (BENCH, ["attentions=[softmax,nope]"], "attentions=[nope] names no registered attention;"),
    (BENCH, ["level=train"], "level=train is now mode=train (its settings stay under train:)"),
    (BENCH, ["repeats=abc"], "repeats=abc: Value 'abc' of type 'str' could not be converted to "),
    (BENCH, ["repeats=0"], "repeats=0 is not valid; choose an integer >= 1"),
    (
        BENCH,
        ["mode=train", "train.implementations=[vitattn,keras]"],
        "train.implementations=['vitattn', 'keras'] is not valid; "
        "choose from vitattn, plain_loop, timm, report_style",
    ),
    (
        PYTHON_M,
        ["level=model"],
        "level=model: Invalid value 'model', expected one of [kernel, block]",
    ),
    (PYTHON_M, ["level=train"], "level=train is now mode=train (its settings stay under train:)"),
    (
        BENCH,
        ["matmul_precision=low"],
        "matmul_precision=low: Invalid value 'low', expected one of [highest, high, medium]",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "arguments", "message"),
    REFUSALS,
    ids=[" ".join([*command, *arguments]) for command, arguments, _ in REFUSALS],
)
def test_bad_input_ends_in_one_line_and_no_run_directory(
    command: list[str], arguments: list[str], message: str, tmp_path: Path, data_dir: Path
) -> None:
    """``vitattn-bench`` in this process up to its app (no torch to import again); ``python -m``
    as a process of its own, which is what it tests."""
    run_dir = tmp_path / "run"
    program, *before = command
    arguments = [*before, *arguments, f"hydra.run.dir={run_dir}"]
    if command == BENCH:
        result = run_before_the_app(program, *arguments, data_dir=data_dir)
    else:
        result = run_cli(program, *arguments, data_dir=data_dir, check=False)
    lines = result.stderr.strip().splitlines()  # one line, no traceback
    assert (result.returncode, len(lines)) == (1, 1), result.stderr
    assert lines[0].startswith(f"vitattn-bench: error: {message}")
    assert not run_dir.exists()


@pytest.mark.slow
def test_help_still_works(data_dir: Path) -> None:
    result = run_cli("vitattn-bench", "--help", data_dir=data_dir)
    assert "mode" in result.stdout and "train" in result.stdout
