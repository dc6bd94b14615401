"""The rank x shift table of a vitattn-finetune sweep (``scripts/lora_table.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vitattn.analysis.lora import find_runs, lora_table, to_markdown, write_table


def fake_multirun(root: Path) -> Path:
    """Jobs as vitattn-finetune -m writes them: <job>/.hydra/ (config.yaml, overrides.yaml) +
    metrics.json."""
    job = 0
    for shift, base in (("quantize", 0.40), ("rotate", 0.30), ("invert", 0.10)):
        for rank in (0, 1, 8):
            path = root / str(job)
            (path / ".hydra").mkdir(parents=True)
            (path / ".hydra" / "config.yaml").write_text(f"lora:\n  rank: {rank}\n")
            (path / ".hydra" / "overrides.yaml").write_text(
                f"- lora.rank={rank}\n- data.shift={shift}\n- ckpt_path=/base.ckpt\n"
            )
            metrics = {
                "test/acc": base + 0.1 + 0.01 * rank,
                "test/acc_base": base,
                "params": 1000,
                "params/trainable": 1000 if rank == 0 else 10 + 20 * rank,
                "lora/rank": rank,
                "data/shift": shift,
                "ckpt_path": "/base.ckpt",
                "status": "completed",
            }
            (path / "metrics.json").write_text(json.dumps(metrics))
            job += 1
    failed = root / str(job)
    (failed / ".hydra").mkdir(parents=True)
    (failed / ".hydra" / "overrides.yaml").write_text("- lora.rank=64\n- data.shift=rotate\n")
    (failed / "metrics.json").write_text(json.dumps({"status": "failed", "error": "boom"}))
    return root


def test_lora_table_from_a_multirun_directory(tmp_path: Path) -> None:
    root = fake_multirun(tmp_path / "multirun")
    runs = find_runs([root])
    assert len(runs) == 10
    rows = lora_table(runs)
    assert [(r["rank"], r["shift"]) for r in rows[:3]] == [
        (0, "quantize"),
        (0, "rotate"),
        (0, "invert"),
    ]
    cell = next(r for r in rows if r["rank"] == 8 and r["shift"] == "rotate")
    assert cell["params_trainable"] == 170 and cell["test_acc"] == pytest.approx(0.48)
    assert cell["test_acc_base"] == pytest.approx(0.30)
    markdown = to_markdown(rows, runs)
    lines = markdown.splitlines()
    assert lines[0] == "| rank                 | trainable params | quantize | rotate | invert |"
    assert lines[2] == "| base, no fine-tuning |                0 |     40.0 |   30.0 |   10.0 |"
    assert lines[3] == "| 0 (full fine-tuning) |            1,000 |     50.0 |   40.0 |   20.0 |"
    assert lines[5] == "| 8                    |              170 |     58.0 |   48.0 |   28.0 |"
    assert "Failed: 9 (rank=64, shift=rotate): boom" in markdown
    assert "Base checkpoint: `/base.ckpt`" in markdown
    text, md_path, csv_path = write_table([root], tmp_path / "out")
    assert md_path.read_text() == text == markdown
    csv_lines = csv_path.read_text().splitlines()
    assert csv_lines[0].split(",")[:4] == ["rank", "shift", "runs", "params"]
    assert len(csv_lines) == 1 + 9


def test_lora_table_averages_seeds(tmp_path: Path) -> None:
    for job, acc in enumerate((0.5, 0.7)):
        path = tmp_path / str(job)
        (path / ".hydra").mkdir(parents=True)  # a completed run has its config
        (path / ".hydra" / "config.yaml").write_text("lora:\n  rank: 2\n")
        metrics = {
            "test/acc": acc,
            "test/acc_base": 0.2,
            "params/trainable": 5,
            "params": 9,
            "lora/rank": 2,
            "data/shift": "rotate",
        }
        (path / "metrics.json").write_text(json.dumps(metrics))
    rows = lora_table(find_runs([tmp_path]))
    assert rows[0]["runs"] == 2 and rows[0]["test_acc"] == pytest.approx(0.6)
    assert "60.0 ± 14.1" in to_markdown(rows)


@pytest.mark.parametrize(
    ("change", "failed"),
    [
        ({"test/acc": [0.1, 0.2]}, '"test/acc" is [0.1, 0.2], not a finite number'),
        ({"params": {"a": 1}}, '"params" is {"a": 1}, not a finite number'),
        ({"lora/rank": float("inf")}, '"lora/rank" is Infinity, not a finite number'),
        # a rank that is no whole number: the run is left out, with a line (it was rank 1)
        ({"lora/rank": 1.7}, "Left out: 4: its lora/rank (1.7) is not a whole number"),
    ],
)
def test_a_value_not_as_written_leaves_its_run_out_not_the_table(
    tmp_path: Path, change: dict, failed: str | None
) -> None:
    """A list or a mapping where one number belongs passed the type check (which took numbers
    in lists anywhere) and ended the whole table in a traceback; so did a rank of Infinity."""
    root = fake_multirun(tmp_path / "multirun")
    path = root / "4" / "metrics.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    runs = find_runs([root])
    markdown = to_markdown(lora_table(runs), runs)
    assert len(lora_table(runs)) == 8 and "| 1 " in markdown  # the other cells stand
    assert failed in markdown
    if "Left out" not in failed:
        assert "Failed: 4 " in markdown


def test_a_whole_rank_written_as_a_float_is_that_rank(tmp_path: Path) -> None:
    """``"lora/rank": 8.0`` is rank 8: its run joins rank 8's cell (two runs there)."""
    root = fake_multirun(tmp_path / "multirun")
    path = root / "4" / "metrics.json"  # rank 1 of rotate, moved to rank 8 as a float
    path.write_text(json.dumps({**json.loads(path.read_text()), "lora/rank": 8.0}))
    rows = lora_table(find_runs([root]))
    assert [r["runs"] for r in rows if r["rank"] == 8 and r["shift"] == "rotate"] == [2]


def test_a_base_checkpoint_path_is_shown_escaped_and_short(tmp_path: Path) -> None:
    root = fake_multirun(tmp_path / "multirun")
    hostile = "\x1b[2J\x1b[31mPWNED\n" + "B" * 300_000
    for path in root.glob("*/metrics.json"):
        metrics = json.loads(path.read_text())
        if metrics.get("status") == "completed":
            path.write_text(json.dumps({**metrics, "ckpt_path": hostile}))
    runs = find_runs([root])
    markdown = to_markdown(lora_table(runs), runs)
    (note,) = [line for line in markdown.splitlines() if line.startswith("Base checkpoint")]
    assert "\x1b" not in markdown and "\\x1b[2J" in note and len(note) < 200


def test_a_shift_name_of_a_megabyte_is_cut_in_the_header(tmp_path: Path) -> None:
    """A shift name read from ``metrics.json`` became a column header whole, and every row was
    padded to it: 1.3 MB of runs made a 304 MB table (red team)."""
    root = fake_multirun(tmp_path / "multirun")
    job = root / "huge"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "config.yaml").write_text("lora:\n  rank: 1\n")
    (job / ".hydra" / "overrides.yaml").write_text("- lora.rank=1\n")
    metrics = {"test/acc": 0.5, "lora/rank": 1, "data/shift": "S" * 1_000_000}
    (job / "metrics.json").write_text(json.dumps({**metrics, "status": "completed"}))
    markdown, md_path, _ = write_table([root])
    assert "SSSS" in markdown.splitlines()[0]  # its column is there, its header cut
    assert len(markdown) < 10_000
    assert md_path.stat().st_size < 10_000


def test_a_file_where_the_table_is_written_is_one_line(tmp_path: Path) -> None:
    """A folder at ``lora_table.md``: the script ended in ``UnsafeWriteError``'s traceback."""
    import subprocess
    import sys

    root = fake_multirun(tmp_path / "multirun")
    (root / "lora_table.md").mkdir()
    script = Path(__file__).parents[2] / "scripts" / "lora_table.py"
    result = subprocess.run(
        [sys.executable, str(script), str(root)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"lora_table.py: error: {root / 'lora_table.md'} is ")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("runs", ["none", "failed only"])
def test_no_completed_run_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], runs: str
) -> None:
    """It printed "no completed vitattn-finetune runs found", wrote ``lora_table.md`` and a
    ``lora_table.csv`` of its header alone into the folder, and exited 0."""
    from vitattn.analysis.lora import main

    folder = tmp_path / "runs"
    folder.mkdir()
    if runs == "failed only":
        (folder / "0").mkdir()
        (folder / "0" / "metrics.json").write_text('{"status": "failed", "error": "boom"}')
    before = sorted(folder.rglob("*"))
    with pytest.raises(SystemExit) as ended:
        main([str(folder)])
    assert ended.value.code == 1
    said = capsys.readouterr()
    assert said.out == ""
    *notes, last = said.err.splitlines()
    assert last.startswith(
        f"lora_table.py: error: no completed vitattn-finetune runs (a metrics.json with "
        f"lora/rank, data/shift and test/acc) under {folder}"
    )
    assert notes == (["Failed: 0 (rank=None, shift=None): boom"] if runs == "failed only" else [])
    assert sorted(folder.rglob("*")) == before
    with pytest.raises(ValueError, match="no completed vitattn-finetune runs"):
        to_markdown([], [])


def finetune_job(root: Path, name: str, acc: float, **recorded: object) -> Path:
    """A completed fine-tune at rank 8 on the rotated set, as its ``metrics.json`` records it
    (``recorded`` changes or adds values), with its config and overrides."""
    path = root / name
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "config.yaml").write_text("lora:\n  rank: 8\n")
    overrides = recorded.pop("overrides", ["lora.rank=8", "data.shift=rotate"])
    (path / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    metrics = {
        "test/acc": acc,
        "test/acc_base": 0.2,
        "params": 1000,
        "params/trainable": 170,
        "lora/rank": 8,
        "lora/alpha": 16,
        "lora/target_modules": "['attn.qkv', 'attn.proj', 'mlp.fc1', 'mlp.fc2']",
        "lora/train_head": True,
        "data/shift": "rotate",
        "attention": "softmax",
        "ckpt_path": "/base.ckpt",
        "status": "completed",
        **recorded,
    }
    (path / "metrics.json").write_text(json.dumps(metrics))
    return path


@pytest.mark.parametrize(
    ("other", "column", "values"),
    [
        ({"lora/alpha": 32}, "lora/alpha", ["16", "32"]),
        ({"attention": "linear", "ckpt_path": "/linear.ckpt"}, "attention", ["linear", "softmax"]),
        ({"lora/train_head": False}, "lora/train_head", ["false", "true"]),
        (
            {"overrides": ["lora.rank=8", "data.shift=rotate", "optimizer.lr=0.01"]},
            "optimizer.lr",
            ["0.001", "0.01"],
        ),
    ],
)
def test_runs_that_differ_in_more_than_the_seed_are_not_averaged(
    tmp_path: Path, other: dict, column: str, values: list[str]
) -> None:
    """Two runs at rank 8 on the rotated set that differ in ``lora.alpha`` (or the attention,
    the head, the learning rate) are two rows, each of one run, with a column naming what
    differs; until 2026-12-02 they were one cell of two runs, "mean ± std" as if seeds."""
    finetune_job(tmp_path, "a", 0.5)
    finetune_job(tmp_path, "b", 0.7, **other)
    (tmp_path / "a" / ".hydra" / "config.yaml").write_text("optimizer:\n  lr: 0.001\n")
    if column == "optimizer.lr":  # given as 1e-2, composed as 0.01: its config's value counts
        (tmp_path / "b" / ".hydra" / "config.yaml").write_text("optimizer:\n  lr: 0.01\n")
        (tmp_path / "b" / ".hydra" / "overrides.yaml").write_text("- optimizer.lr=1e-2\n")
    runs = find_runs([tmp_path])
    rows = lora_table(runs)
    assert [row["runs"] for row in rows] == [1, 1]
    assert sorted(row["settings"][column] for row in rows) == values
    assert sorted(row["test_acc"] for row in rows) == [0.5, 0.7]
    markdown = to_markdown(rows, runs)
    assert "±" not in markdown and f"| {column}" in markdown.splitlines()[0]
    _, _, csv_path = write_table([tmp_path])
    assert column in csv_path.read_text().splitlines()[0].split(",")


def test_seeds_of_one_setting_are_averaged_beside_another_setting(tmp_path: Path) -> None:
    """Seeds are averaged within each setting: two seeds at alpha 16, one at alpha 32; a seed
    given on the command line does not tell runs apart, nor a rank-0 run's unused alpha."""
    finetune_job(tmp_path, "a", 0.5, overrides=["lora.rank=8", "seed=1"])
    finetune_job(tmp_path, "b", 0.7, overrides=["lora.rank=8", "seed=2"])
    finetune_job(tmp_path, "c", 0.9, **{"lora/alpha": 32})
    for name, alpha in (("full-a", 16), ("full-b", 32)):  # written before 2026-12-02
        finetune_job(tmp_path, name, 0.8, **{"lora/rank": 0, "lora/alpha": alpha})
    runs = find_runs([tmp_path])
    rows = lora_table(runs)
    cells = [(row["rank"], row["settings"].get("lora/alpha"), row["runs"]) for row in rows]
    assert cells == [(0, None, 2), (8, "16", 2), (8, "32", 1)]
    lines = to_markdown(rows, runs).splitlines()
    assert lines[0].split("|")[1:4] == [
        " rank                 ",
        " lora/alpha ",
        " trainable params ",
    ]
    assert "| 0 (full fine-tuning) | –" in lines[3]
    assert lines[4].endswith("60.0 ± 14.1 |") and lines[5].endswith("90.0 |")
