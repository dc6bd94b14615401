"""A run's files are data, round two (issue 43): a file is read within bounds, a run holds no
link (folders included), a marker deletes nothing, a number is a number, and what a file says
reaches the console escaped; through the console scripts a user runs.

Each test copies one real run of ``vitattn-train`` (trained once for the module), plants a real
hostile file (an alias bomb, nesting 50,000 deep, 60 MB, a folder linked to another run, a
3-byte marker, a zip bomb, an event record claiming a terabyte, text where a number belongs,
terminal escapes), runs the command and checks: one last line naming the file, no traceback,
nothing outside the run changed, no completed job lost. Commands that a bomb would make take
gigabytes run as processes of their own under a memory cap
(:data:`tests.support.bombs.MEMORY_CAP`) and a 60 s timeout, so that a regression fails instead
of eating the machine."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import bombs
from tests.support.in_process import refused_in_process
from tests.support.runners import refusal_message, run_cli
from tests.support.tables import read_csv
from tests.support.trees import KEPT, copy_run, sweep_job, tree_digest
from vitattn.runs.files import MAX_READ
from vitattn.utils.config import PROJECT_ROOT

pytestmark = pytest.mark.slow

RESUME = ["resume=true", "trainer.max_steps=12"]
"""Four more steps of the trained run (it completed at step 8)."""
LIMIT = 60
"""Seconds a hostile command may take before the test fails."""
PLOT_CURVES = str(PROJECT_ROOT / "scripts" / "plot_curves.py")
LORA_TABLE = str(PROJECT_ROOT / "scripts" / "lora_table.py")
SIXTY_MB = 60 << 20


@pytest.fixture
def run(tmp_path: Path, tiny_run: Path) -> Path:
    """A copy of the module's tiny run, unlocked."""
    return copy_run(tiny_run, tmp_path / "runs" / "run")


def refused_capped(program: str, *args: str, data_dir: Path) -> str:
    """``program args`` as a process of its own under the memory cap and :data:`LIMIT`: its
    one-line refusal (exit status 1, no traceback)."""
    result = run_cli(
        program, *args, data_dir=data_dir, check=False, timeout=LIMIT, memory=bombs.MEMORY_CAP
    )
    return refusal_message(program, result)


# --- bounded reading ------------------------------------------------------------------------


ALIAS = "holds a YAML anchor or alias (line 1, column "
BOMBS: dict[str, tuple[str, Callable[[], str], str]] = {
    "config alias bomb": (".hydra/config.yaml", bombs.alias_bomb, ALIAS),
    "overrides alias bomb": (".hydra/overrides.yaml", bombs.alias_bomb_list, ALIAS),
    "hydra alias bomb": (".hydra/hydra.yaml", bombs.alias_bomb, ALIAS),
    "overrides 50,000 deep": (
        ".hydra/overrides.yaml",
        lambda: bombs.nested_list(50_000),
        "is not valid YAML at line 1, column 1001: exceeded maximum nesting depth",
    ),
    "overrides 60 MB": (
        ".hydra/overrides.yaml",
        lambda: bombs.oversized(SIXTY_MB, "- seed=1\n"),
        f"is {SIXTY_MB} bytes, more than vitattn writes there",
    ),
    "config 60 MB": (
        ".hydra/config.yaml",
        lambda: bombs.oversized(SIXTY_MB),
        f"is {SIXTY_MB} bytes, more than vitattn writes there",
    ),
}


MORE_BOMBS = {
    "config 100 deep": (
        ".hydra/config.yaml",
        bombs.nested_block_mapping(100),
        "is nested more than 64 deep",
    ),
    "config 150,000 values": (
        ".hydra/config.yaml",
        "seed: " + bombs.flood(150_000),
        "holds more than 100000 values",
    ),
    "an anchor alone": (".hydra/hydra.yaml", "hydra: &a {}\n", "holds a YAML anchor or alias"),
    "metrics 50,000 deep": ("metrics.json", bombs.nested_list(50_000), "is nested more than 64"),
    "metrics 60 MB": (
        "metrics.json",
        '{"status": "completed"' + " " * SIXTY_MB + "}",
        f"is {SIXTY_MB + 23} bytes, more than vitattn writes there",
    ),
    "metrics 200,000 values": (
        "metrics.json",
        '{"x": ' + bombs.flood(200_000) + "}",
        "holds more than 100000 values",
    ),
}


@pytest.mark.parametrize("case", [*BOMBS, *MORE_BOMBS])
def test_a_bomb_in_a_runs_files_is_one_line_within_memory_and_time(
    run: Path, elsewhere: Path, case: str, data_dir: Path
) -> None:
    """A resume of a run with the bomb planted: the bombs of :data:`BOMBS` (gigabytes or
    minutes unbounded) run as a process of their own under the memory cap and :data:`LIMIT`,
    the others (:data:`MORE_BOMBS`) in this process."""
    name, content, problem = BOMBS.get(case) or MORE_BOMBS[case]
    path = run / name
    path.write_text(content() if callable(content) else content)
    outside, inside = tree_digest(elsewhere), tree_digest(run)
    refuse = refused_capped if case in BOMBS else refused_in_process
    said = refuse("vitattn-train", *RESUME, f"hydra.run.dir={run}", data_dir=data_dir)
    assert said.startswith(f"{path}: {problem}"), said
    assert tree_digest(run) == inside and tree_digest(elsewhere) == outside


def test_the_size_cap_is_far_above_what_vitattn_writes(tiny_run: Path) -> None:
    largest = max(
        path.stat().st_size
        for path in tiny_run.rglob("*")
        if path.suffix in (".json", ".yaml") and path.is_file()
    )
    print(f"largest YAML or JSON file of a run: {largest} bytes; cap {MAX_READ} bytes")
    assert largest * 100 < MAX_READ


def test_the_event_caps_are_far_above_what_vitattn_writes(tiny_run: Path) -> None:
    """The tiny run's event files (421 KB, 51 records, 21 tags) fit in a hundredth of each cap
    (:mod:`vitattn.runs.event_files` sizes them from the largest preset)."""
    from vitattn.runs import event_files as events

    assert events.check_event_files(
        tiny_run,
        max_bytes=events.MAX_EVENT_BYTES // 100,
        max_records=events.MAX_EVENT_RECORDS // 100,
        max_tags=events.MAX_EVENT_TAGS // 100,
    )


# --- no links in a run ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("folder", "logger"),
    [
        ("checkpoints", []),
        ("csv", ["logger=many_loggers"]),
        ("attention", []),
        (".hydra", []),
    ],
)
def test_a_folder_linked_to_another_run_is_refused_before_a_resume(
    run: Path, tmp_path: Path, folder: str, logger: list[str], data_dir: Path
) -> None:
    """``checkpoints -> <another run>/checkpoints`` once made a resume overwrite that run's
    ``last.ckpt`` and delete its best; ``csv -> ...`` overwrote another ``metrics.csv``."""
    other = copy_run(run, tmp_path / "others" / "other")
    (other / "csv").mkdir(exist_ok=True)
    (other / "csv" / "metrics.csv").write_bytes(KEPT)
    shutil.rmtree(run / folder, ignore_errors=True)
    link = run / folder
    link.symlink_to(other / folder, target_is_directory=True)
    theirs, inside = tree_digest(other), tree_digest(run)
    said = refused_in_process(
        "vitattn-train", *RESUME, *logger, f"hydra.run.dir={run}", data_dir=data_dir
    )
    assert said.startswith(f"{link} is a symbolic link (to {other / folder}): "), said
    assert tree_digest(other) == theirs  # the other run's checkpoints and CSV as they were
    assert tree_digest(run) == inside and link.is_symlink()


def test_a_checkpoints_run_with_a_link_is_refused_for_ckpt_path(
    run: Path, elsewhere: Path, data_dir: Path
) -> None:
    link = run / "attention" / "maps.npz"
    link.unlink()
    link.symlink_to(elsewhere / "kept.txt")
    inside = tree_digest(run)
    said = refused_in_process(
        "vitattn-train", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", data_dir=data_dir
    )
    assert said.startswith(f"{link} is a symbolic link"), said
    assert tree_digest(run) == inside and (elsewhere / "kept.txt").read_bytes() == KEPT


@pytest.mark.parametrize("program", ["vitattn-train", "vitattn-eval"])
def test_a_sweep_jobs_checkpoint_given_quoted_has_its_run_checked(
    run: Path, elsewhere: Path, data_dir: Path, program: str
) -> None:
    """A sweep's job is named by its settings (``attention=softmax,seed=1``), so its checkpoint
    is given quoted, Hydra reading ``=`` and ``,`` as syntax: its run is checked all the same.
    (The quotes were once read as part of the path, of no run: vitattn-eval passed over the
    check and vitattn-train called the checkpoint no file.)"""
    job = run.rename(run.parent / "attention=softmax,seed=1")
    link = job / "attention" / "maps.npz"
    link.unlink()
    link.symlink_to(elsewhere / "kept.txt")
    inside = tree_digest(job)
    checkpoint = job / "checkpoints" / "last.ckpt"
    said = refused_in_process(program, f'ckpt_path="{checkpoint}"', data_dir=data_dir)
    assert said.startswith(f"{link} is a symbolic link"), said
    assert tree_digest(job) == inside and (elsewhere / "kept.txt").read_bytes() == KEPT


@pytest.mark.parametrize(
    ("name", "kind"),
    [("train.log", "hard link"), ("train.log", "FIFO"), ("hparams.yaml", "FIFO")],
)
def test_a_hard_link_or_a_fifo_in_a_run_is_refused_before_a_resume(
    run: Path, elsewhere: Path, name: str, kind: str, data_dir: Path
) -> None:
    """A log hard-linked to a file outside the run was appended to by a resume (the file grew by
    the run's log lines: links were checked for symbolic ones only); a FIFO at the log or at
    ``hparams.yaml`` (which Lightning writes in place) made the resume wait for a reader for
    ever. A process of its own under :data:`LIMIT`, so that a hang fails the test."""
    path, victim = run / name, elsewhere / "kept.txt"
    path.unlink(missing_ok=True)
    if kind == "hard link":
        os.link(victim, path)
        expected = "is a hard link (one of 2 names of one file)"
    else:
        os.mkfifo(path)
        expected = "is not a regular file (a FIFO)"
    inside = tree_digest(run)
    said = refused_capped("vitattn-train", *RESUME, f"hydra.run.dir={run}", data_dir=data_dir)
    assert said.startswith(f"{path} {expected}: "), said
    assert victim.read_bytes() == KEPT and tree_digest(run) == inside


@pytest.mark.parametrize(
    ("status", "plant"),
    [
        ("interrupted", "checkpoints"),
        ("completed", "csv"),
        ("failed", "attention"),
        ("completed", "alias bomb"),
        ("interrupted", "FIFO log"),
    ],
)
def test_a_linked_folder_or_a_bomb_in_a_sweeps_job_is_refused_before_any_job_runs(
    run: Path, elsewhere: Path, status: str, plant: str, data_dir: Path
) -> None:
    job, command = sweep_job(run, status)
    if plant == "alias bomb":
        path = job / ".hydra" / "config.yaml"
        path.write_text(bombs.alias_bomb())
        expected = f"{path}: {ALIAS}"
    elif plant == "FIFO log":  # the job's continuation appends to its log
        (job / "train.log").unlink(missing_ok=True)
        os.mkfifo(job / "train.log")
        expected = f"{job / 'train.log'} is not a regular file (a FIFO): "
    else:
        shutil.rmtree(job / plant, ignore_errors=True)
        (job / plant).symlink_to(elsewhere, target_is_directory=True)
        expected = f"{job / plant} is a symbolic link (to {elsewhere}): "
    outside, sweep = tree_digest(elsewhere), tree_digest(job.parent)
    said = refused_in_process("vitattn-train", *command, data_dir=data_dir)
    assert said.startswith(expected), said
    assert tree_digest(elsewhere) == outside and sorted(elsewhere.iterdir()) == [
        elsewhere / "kept.txt"
    ]
    assert tree_digest(job.parent) == sweep  # nothing moved, nothing ran


# --- the summary ------------------------------------------------------------------------------


def two_seeds(run: Path) -> Path:
    """A sweep of the trained run at two seeds (``seed=1``, ``seed=2``), both completed."""
    sweep = run.parent / "seeds"
    for seed in (1, 2):
        job = copy_run(run, sweep / f"seed={seed}")
        (job / ".hydra" / "overrides.yaml").write_text(f"- seed={seed}\n")
        config = job / ".hydra" / "config.yaml"
        config.write_text(re.sub(r"(?m)^seed: .*$", f"seed: {seed}", config.read_text()))
    return sweep


def test_a_planted_marker_makes_the_summary_delete_no_job(run: Path, data_dir: Path) -> None:
    """A 3-byte ``.vitattn-seed-run.json`` in a completed job's folder once made the summary
    remove that job."""
    from vitattn.analysis.seed_runs import MANIFEST, MARKER

    sweep = two_seeds(run)
    for job in sweep.iterdir():
        (job / MARKER).write_text("{}\n")
    jobs = {job.name: tree_digest(job) for job in sweep.iterdir()}
    result = run_cli("python", PLOT_CURVES, str(sweep), data_dir=data_dir, timeout=LIMIT)
    assert "Traceback" not in result.stderr
    assert {job: tree_digest(sweep / job) for job in jobs} == jobs  # every job kept
    (aggregate,) = [p for p in sweep.iterdir() if p.name not in jobs and p.is_dir()]
    recorded = json.loads((sweep / MANIFEST).read_text())["seed_runs"]
    assert [entry["name"] for entry in recorded] == [aggregate.name]
    run_cli("python", PLOT_CURVES, str(sweep), data_dir=data_dir, timeout=LIMIT)  # again
    assert {job: tree_digest(sweep / job) for job in jobs} == jobs
    assert aggregate.is_dir()  # replaced: it is listed and looks as written


def test_an_aggregates_marker_of_8_gb_is_not_read_whole(run: Path, data_dir: Path) -> None:
    """The summary read an aggregate's marker whole to hash it: a sparse 8 GB marker was a
    ``MemoryError`` (2.3 GB at 2 GB without a cap). A marker past the bound on a run file is
    not one vitattn wrote: the aggregate is kept as it is and named in one line."""
    from vitattn.analysis.seed_runs import MARKER

    sweep = two_seeds(run)
    run_cli("python", PLOT_CURVES, str(sweep), data_dir=data_dir, timeout=LIMIT)
    (aggregate,) = [p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("seed=")]
    marker = aggregate / MARKER
    os.truncate(marker, 8 << 30)  # sparse: no disk used
    result = run_cli(
        "python", PLOT_CURVES, str(sweep), data_dir=data_dir, timeout=LIMIT,
        memory=bombs.MEMORY_CAP,
    )  # fmt: skip
    assert "Traceback" not in result.stderr
    assert marker.stat().st_size == 8 << 30  # kept as it is
    said = f"{aggregate} exists and is not an aggregate of seeds: move it to write one"
    assert any(said in line for line in result.stdout.splitlines())


def test_a_folder_where_the_summary_writes_a_file_is_one_line(run: Path, data_dir: Path) -> None:
    """A folder at ``summary.md`` ended ``plot_curves.py`` in the ``UnsafeWriteError``'s
    traceback (its ``main`` caught only ``FileNotFoundError`` and ``ValueError``)."""
    sweep = two_seeds(run)
    (sweep / "summary.md").mkdir()
    result = run_cli("python", PLOT_CURVES, str(sweep), data_dir=data_dir, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"plot_curves.py: error: {sweep}/summary.md is not a regular file (a folder): vitattn "
        "writes its run files itself, never through a link, and wrote nothing there: remove it "
        "and run again"
    )


def test_a_dangling_link_at_an_aggregates_name_is_not_followed(
    run: Path, elsewhere: Path, data_dir: Path
) -> None:
    """A link at the aggregate's name to a folder that does not exist was ``FileExistsError``
    in a traceback (``exists()`` follows the link); it is a folder that is not an aggregate."""
    sweep = two_seeds(run)
    planted = sweep / "seeds (2 seeds)"
    planted.symlink_to(elsewhere / "made")
    result = run_cli("python", PLOT_CURVES, str(sweep), data_dir=data_dir, timeout=LIMIT)
    assert "Traceback" not in result.stderr
    said = f"{planted} exists and is not an aggregate of seeds: move it to write one"
    assert any(said in line for line in result.stdout.splitlines())
    assert not (elsewhere / "made").exists() and planted.is_symlink()


def test_folders_nested_1500_deep_leave_the_summary_whole(run: Path, data_dir: Path) -> None:
    """Runs were found with ``Path.rglob``, which recursed once per folder: 1,500 nested folders
    in a sweep were a ``RecursionError`` and no summary. The walk goes 32 folders deep and says
    so in one line; the sweep's jobs are summarized."""
    sweep = two_seeds(run)
    folders = [os.open(sweep, os.O_RDONLY)]
    try:
        for _ in range(1500):  # past PATH_MAX: each made inside the last, by descriptor
            os.mkdir("a", dir_fd=folders[-1])
            folders.append(os.open("a", os.O_RDONLY, dir_fd=folders[-1]))
        result = run_cli("python", PLOT_CURVES, str(sweep), data_dir=data_dir, timeout=LIMIT)
    finally:  # removed here, made or half made: pytest's clean-up (shutil.rmtree) recurses too
        while folders:  # the deepest first: its "a", if one was made and not opened, then it
            with contextlib.suppress(FileNotFoundError):
                os.rmdir("a", dir_fd=folders[-1])
            os.close(folders.pop())
    assert "Traceback" not in result.stderr
    assert f"{sweep} holds folders more than 32 deep" in result.stderr
    assert [row["run"] for row in read_csv(sweep / "summary.csv")] == ["seed=1", "seed=2"]


def test_a_setting_of_a_million_characters_keeps_the_summary_small(
    run: Path, data_dir: Path
) -> None:
    """A job's override of a million characters (one value of a 1 MB file, within the reader's
    bounds) was its label whole: the summary failed (``Image size of 9000951x528 pixels is too
    large``, a figure's labels), and its Markdown tables padded every row to it (a summary of
    157 settings wrote 272 MB). A label is cut to
    :data:`~vitattn.utils.config.MAX_LABEL` characters, ending with a hash, and a table's column
    is padded to at most :data:`~vitattn.runs.results.MAX_PADDED`."""
    from vitattn.utils.config import MAX_LABEL

    sweep = two_seeds(run)
    for seed, note in ((1, "a" * 1_000_000), (2, "a" * 999_999 + "b")):  # alike for 999,999
        overrides = sweep / f"seed={seed}" / ".hydra" / "overrides.yaml"
        overrides.write_text(f"{overrides.read_text()}- +model.note={note}\n")
    result = run_cli(
        "python",
        PLOT_CURVES,
        str(sweep),
        data_dir=data_dir,
        timeout=LIMIT,
        memory=bombs.MEMORY_CAP,
    )
    assert "Traceback" not in result.stderr
    labels = {row["label"] for row in read_csv(sweep / "summary.csv")}
    assert len(labels) == 2, labels  # told apart
    assert all(len(label) <= MAX_LABEL for label in labels)
    assert all(label.startswith("model.note=aaaa") for label in labels)
    assert (sweep / "summary.md").stat().st_size < 32 << 10
    assert len(result.stdout) < 32 << 10


@pytest.mark.parametrize(
    ("plant", "said"),
    [
        ("an alias bomb", "holds a YAML anchor or alias"),
        ("60 MB", "more than vitattn writes there"),
        ("a knob of a million characters", None),
    ],
)
def test_a_hostile_hparams_file_keeps_the_run_and_the_summary_small(
    run: Path, data_dir: Path, plant: str, said: str | None
) -> None:
    """The summary reads the knobs' values a run used from its ``hparams.yaml`` (2026-12-01): a
    bomb there is one warning line, the run stays in the summary with its config's knobs; a
    knob of a million characters is cut to :data:`~vitattn.utils.config.MAX_LABEL`."""
    from vitattn.utils.config import MAX_LABEL

    sweep = two_seeds(run)
    hparams = sweep / "seed=1" / "hparams.yaml"
    if plant == "an alias bomb":
        hparams.write_text(bombs.alias_bomb())
    elif plant == "60 MB":
        hparams.write_text(bombs.oversized(SIXTY_MB, "attention: softmax\n"))
    else:  # a knob the config leaves null, as Nystrom's landmarks
        config = sweep / "seed=1" / ".hydra" / "config.yaml"
        config.write_text(config.read_text().replace("  impl: auto\n", "  impl: null\n", 1))
        hparams.write_text(f"~attention/impl: {'a' * 1_000_000}\n")
    out = sweep.parent / "summary"  # not in place: no TensorBoard runs of seeds (torch) to write
    result = run_cli(
        "python",
        PLOT_CURVES,
        str(sweep),
        "--out",
        str(out),
        data_dir=data_dir,
        timeout=LIMIT,
        memory=bombs.MEMORY_CAP,
    )
    assert "Traceback" not in result.stderr and result.returncode == 0, result.stderr[-2000:]
    rows = {row["run"]: row for row in read_csv(out / "summary.csv")}
    assert set(rows) == {"seed=1", "seed=2"}  # the run kept
    knobs = json.loads(rows["seed=1"]["knobs"])
    if said is None:
        assert len(knobs["impl"]) <= MAX_LABEL and knobs["impl"].startswith("aaaa")
    else:
        warned = [line for line in result.stderr.splitlines() if str(hparams) in line]
        assert len(warned) == 1 and said in warned[0], result.stderr[-2000:]
        assert knobs == json.loads(rows["seed=2"]["knobs"])  # as the config gives them
    assert (out / "summary.md").stat().st_size < 32 << 10


def test_an_empty_directory_argument_summarizes_nothing(
    run: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``plot_curves.py "$RUNS"`` with ``RUNS`` unset: an empty argument was the working
    directory, whose runs, however many, were read and summarized, the files written there."""
    monkeypatch.chdir(run)
    before = tree_digest(run)
    result = run_cli("python", PLOT_CURVES, "", data_dir=data_dir, timeout=LIMIT, check=False)
    assert refusal_message("plot_curves.py", result) == (
        "'' is not a directory; name run or sweep directories"
    )
    assert tree_digest(run) == before


def test_a_job_folder_linked_outside_is_named_by_the_summary(
    run: Path, elsewhere: Path, data_dir: Path
) -> None:
    """A sweep's job folder that is a link to a run outside: the summary leaves it out with a
    line naming it (it was left out without a word) and reads nothing through it."""
    sweep = two_seeds(run)
    linked = sweep / "seed=3"
    outside = copy_run(run, elsewhere / "run")
    linked.symlink_to(outside, target_is_directory=True)
    theirs = tree_digest(elsewhere)
    result = run_cli("python", PLOT_CURVES, str(sweep), data_dir=data_dir, timeout=LIMIT)
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if str(linked) in line]
    assert line.startswith(f"skipping {linked}: {linked}: is a symbolic link (to {outside})"), line
    assert [row["run"] for row in read_csv(sweep / "summary.csv")] == ["seed=1", "seed=2"]
    assert tree_digest(elsewhere) == theirs


def summary_line_naming(planted: Path, run: Path, data_dir: Path) -> str:
    """``scripts/plot_curves.py`` on ``run`` as a process of its own under the memory cap and
    :data:`LIMIT`: no traceback, and the one line it printed naming ``planted``."""
    result = run_cli(
        "python", PLOT_CURVES, str(run), data_dir=data_dir, timeout=LIMIT, memory=bombs.MEMORY_CAP
    )
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if str(planted) in line]
    return line


def test_a_zip_bomb_of_attention_maps_is_one_line_within_memory_and_time(
    run: Path, data_dir: Path
) -> None:
    """``attention/maps.npz`` of 3.4 MB that inflates to 3.5 GB: the summary leaves the maps
    out in one line, its headers read before anything is inflated."""
    maps = bombs.zip_bomb(run / "attention" / "maps.npz")
    assert maps.stat().st_size < 4 << 20
    line = summary_line_naming(maps, run, data_dir)
    assert f"skipping {maps}: declares 3489660928 bytes of arrays" in line
    assert (run / "summary.md").is_file()  # the rest of the summary is written


def test_an_event_record_claiming_a_terabyte_is_one_line_within_memory_and_time(
    run: Path, data_dir: Path
) -> None:
    """An event file whose last record claims 2^40 bytes (a 200-byte record): TensorBoard's
    reader asked Python for them, a ``MemoryError`` that left the run out of the summary. The
    record headers are read first: the run keeps its row from ``metrics.json``, its curves are
    left out in one line naming the file."""
    from vitattn.runs.event_files import event_files

    planted = bombs.length_bomb(event_files(run)[0])
    line = summary_line_naming(planted, run, data_dir)
    assert f"skipping {planted}: has a record at byte " in line
    assert f"declaring {1 << 40} bytes" in line
    (row,) = read_csv(run / "summary.csv")
    metrics = json.loads((run / "metrics.json").read_text())
    assert float(row["test_acc"]) == pytest.approx(metrics["test/acc"])
    assert row["best_val_acc"] == ""  # no curves


@pytest.mark.parametrize("script", ["plot_curves", "lora_table"])
def test_text_where_a_number_belongs_is_one_line(run: Path, script: str, data_dir: Path) -> None:
    sweep = two_seeds(run)
    path = sweep / "seed=1" / "metrics.json"
    metrics = json.loads(path.read_text())
    path.write_text(json.dumps({**metrics, "test/acc": "0.99\x1b[2J", "lora/rank": 4}))
    command = PLOT_CURVES if script == "plot_curves" else LORA_TABLE
    result = run_cli("python", command, str(sweep), data_dir=data_dir, timeout=LIMIT, check=False)
    shown = result.stdout + result.stderr
    assert "Traceback" not in shown and "\x1b" not in shown
    problem = f'{path}: "test/acc" is "0.99\\u001b[2J", not a finite number'
    (line,) = [line for line in shown.splitlines() if problem in line]
    assert line.startswith("Failed: seed=1" if script == "lora_table" else "skipping ")


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("test/acc", float("inf"), '"test/acc" is Infinity, not a finite number'),
        (
            "test/confusion_matrix",
            [[float("nan")]],
            '"test/confusion_matrix" is [[NaN]], not finite',
        ),
        # finite, but the summary's figures overflowed on them (red team)
        (
            "train/images_per_sec",
            1e308,
            '"train/images_per_sec" is 1e+308, not a finite number between -10^40 and 10^40',
        ),
        (
            "peak_memory_gb",
            -1e300,
            '"peak_memory_gb" is -1e+300, not a finite number between -10^40',
        ),
        ("steps", 10**41, '"steps" is 1000000000000000000000000000000000000...'),
    ],
)
def test_a_number_that_is_not_finite_is_one_line(
    run: Path, key: str, value: object, shown: str, data_dir: Path
) -> None:
    """vitattn writes NaN and infinity as null; a ``metrics.json`` holding ``Infinity`` in
    ``test/acc`` ended ``plot_curves.py`` in ``OverflowError: cannot convert float infinity to
    integer``. The run is left out in one line naming the file and the key."""
    sweep = two_seeds(run)
    path = sweep / "seed=1" / "metrics.json"
    metrics = json.loads(path.read_text())
    path.write_text(json.dumps({**metrics, key: value}))
    result = run_cli("python", PLOT_CURVES, str(sweep), data_dir=data_dir, timeout=LIMIT)
    shown_lines = result.stdout.splitlines() + result.stderr.splitlines()
    assert "Traceback" not in result.stderr
    (line,) = [line for line in shown_lines if f"{path}: {shown}" in line]
    assert line.startswith("skipping ")
    assert [row["run"] for row in read_csv(sweep / "summary.csv")] == ["seed=2"]


def test_text_where_a_number_belongs_is_one_line_before_a_resume(run: Path, data_dir: Path) -> None:
    """A resume read ``metrics.json`` untyped: a ``status`` that is a list and ``steps`` as text
    were a run it went on with (exit 0) where the summaries refused the file."""
    path = run / "metrics.json"
    metrics = json.loads(path.read_text())
    path.write_text(json.dumps({**metrics, "status": ["completed"], "steps": "3"}))
    inside = tree_digest(run)
    said = refused_in_process("vitattn-train", *RESUME, f"hydra.run.dir={run}", data_dir=data_dir)
    assert said.startswith(f"{path}: "), said
    assert re.search(r'"(status|steps)" is .*, not (text|a finite number)', said), said
    assert tree_digest(run) == inside


def test_what_a_jobs_files_say_reaches_the_console_escaped(run: Path, data_dir: Path) -> None:
    """Terminal escapes and line breaks in a job's overrides, its attention's name and its
    folder's name are printed escaped: no escape reaches the terminal, no line is forged."""
    sweep = two_seeds(run)
    hostile = sweep / "seed=2\x1b]0;title\x07"
    (sweep / "seed=2").rename(hostile)
    (hostile / ".hydra" / "overrides.yaml").write_text(
        '- seed=2\n- "model.depth=2\\e[31m\\nFORGED: all runs completed"\n'
    )
    metrics = json.loads((hostile / "metrics.json").read_text())
    (hostile / "metrics.json").write_text(
        json.dumps({**metrics, "status": "failed", "attention": "soft\x1b[2Jmax"})
    )
    result = run_cli("python", PLOT_CURVES, str(sweep), data_dir=data_dir, timeout=LIMIT)
    shown = result.stdout + result.stderr
    assert "Traceback" not in shown
    assert "\x1b" not in shown and "\x07" not in shown
    assert not any(line.startswith("FORGED") for line in shown.splitlines())
    assert "model.depth=2\\x1b[31m\\nFORGED" in result.stdout  # the label, escaped
    assert "not completed: seed=2\\x1b]0;title\\x07" in result.stdout


@pytest.mark.parametrize(
    ("planted", "shown"),
    [
        ("2\nvitattn-train: all jobs completed \x1b[2J", r"seed=2\nvitattn-train: all jobs"),
        ("A" * 15_000_000, "seed=AAAA"),
    ],
    ids=["a forged line", "15 MB"],
)
def test_a_stored_setting_in_a_continuation_refusal_is_escaped_and_cut(
    run: Path, planted: str, shown: str, data_dir: Path
) -> None:
    """A continued sweep's refusal named the job's stored setting as the file held it: a line
    break forged a second line (with a terminal escape), and a setting of 15 MB made one line of
    15 MB. Each value is escaped and cut to 80 characters."""
    import yaml

    job, command = sweep_job(run, "completed")
    path = job / ".hydra" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**config, "seed": planted}, width=10**9))
    inside = tree_digest(job)
    said = refused_in_process("vitattn-train", *command, data_dir=data_dir)
    assert "\n" not in said and "\x1b" not in said and len(said) < 600, said[:600]
    assert f"run with other settings: {shown}" in said
    assert tree_digest(job) == inside
