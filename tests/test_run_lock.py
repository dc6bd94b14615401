"""One process per run directory: a second process is refused in one line naming the holder,
and a lock left by a killed process blocks nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.faults import PAUSE_SECONDS, PauseAfterStep
from tests.support.in_process import refused_in_process, run_in_process
from tests.support.presets import TINY, plug, steps
from tests.support.runners import BIN
from vitattn.runs.layout import HOLDER
from vitattn.runs.lock import MAX_RECORD
from vitattn.utils.config import PROJECT_ROOT

pytestmark = pytest.mark.slow


def wait_for(path: Path, process: subprocess.Popen, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not path.is_file():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)


def test_a_second_process_is_refused_and_a_killed_holder_blocks_nothing(
    tmp_path: Path, data_dir: Path
) -> None:
    run = tmp_path / "run"
    pause = plug("pause", PauseAfterStep, step=5)
    environment = {
        **os.environ,
        "VITATTN_DATA_DIR": str(data_dir),
        "PYTHONPATH": str(PROJECT_ROOT),
        PAUSE_SECONDS: "1",
    }
    holder = subprocess.Popen(
        [str(BIN / "vitattn-train"), *TINY, *steps(40, 5), *pause, f"hydra.run.dir={run}"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, killed as a whole below
    )
    try:
        wait_for(run / "checkpoints" / "last.ckpt", holder)
        recorded = json.loads((run / HOLDER).read_text())
        assert recorded["pid"] == holder.pid
        for second in (["resume=true", "~callbacks.pause"], [*TINY, *steps(4, 2)]):
            said = refused_in_process(
                "vitattn-train", *second, f"hydra.run.dir={run}", data_dir=data_dir
            )
            assert f"{run} is in use by vitattn-train (PID {holder.pid}, started " in said
        assert holder.poll() is None  # the holder trains on, undisturbed
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.communicate()
    assert holder.returncode == -signal.SIGKILL
    left_by_the_killed = (run / HOLDER).read_bytes()
    resume = ["resume=true", f"hydra.run.dir={run}", "~callbacks.pause"]  # a test's class: dropped
    run_in_process("vitattn-train", *resume, data_dir=data_dir)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "completed" and metrics["steps"] == 40
    assert (run / HOLDER).read_bytes() == left_by_the_killed  # put back as the resume found it


def test_a_holders_record_larger_than_one_is_refused_before_anything_is_written(
    tmp_path: Path, data_dir: Path
) -> None:
    """The record is kept in memory to be put back when the command ends, so what is read of it
    is bounded: a larger file there is one line, and the directory keeps its bytes."""
    run = tmp_path / "run"
    run.mkdir()
    (run / HOLDER).write_bytes(b"x" * (MAX_RECORD + 1))
    said = refused_in_process("vitattn-train", *TINY, f"hydra.run.dir={run}", data_dir=data_dir)
    assert said == (
        f"{run / HOLDER}: is {MAX_RECORD + 1} bytes, more than a holder's record (at most "
        f"{MAX_RECORD}); remove it"
    )
    assert sorted(p.name for p in run.iterdir()) == [HOLDER]
    assert (run / HOLDER).read_bytes() == b"x" * (MAX_RECORD + 1)


def test_a_finished_run_leaves_the_directory_without_a_holders_record(
    tmp_path: Path, data_dir: Path
) -> None:
    """The record names the holder while it holds the directory (see the test above); once the
    run ends there is none, as there was none before it."""
    run = tmp_path / "run"
    run_in_process("vitattn-train", *TINY, *steps(2, 2), f"hydra.run.dir={run}", data_dir=data_dir)
    assert json.loads((run / "metrics.json").read_text())["status"] == "completed"
    assert not (run / HOLDER).exists()


def test_a_refused_run_put_back_keeps_the_file_its_lock_is_held_on(tmp_path: Path) -> None:
    """Putting a refused run's files back rewrote the lock's file while the lock was held on the
    old one: a second process could then take the directory (review)."""
    import sys

    from vitattn.runs import task
    from vitattn.runs.layout import LOCK
    from vitattn.runs.lock import hold_run_directory
    from vitattn.runs.process import this_process

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("a: 1\n")
    (run / "train.log").write_text("before\n")
    probe = (
        "import sys\nfrom pathlib import Path\nfrom vitattn.runs.lock import hold_run_directory\n"
        f"try:\n    hold_run_directory(Path({str(run)!r}), 'second')\nexcept Exception:\n"
        "    sys.exit(3)\n"
    )

    def second_process() -> int:
        environment = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT / "src")}
        return subprocess.run([sys.executable, "-c", probe], env=environment).returncode

    this_process.cache_clear()
    try:
        task.remember_run_directory(run)
        hold_run_directory(run, "vitattn-train")
        inode = (run / LOCK).stat().st_ino
        (run / "train.log").write_text("before\nwhat Hydra logged\n")
        assert second_process() == 3
        task.remove_unstarted_run(run)
        assert (run / LOCK).stat().st_ino == inode
        assert second_process() == 3
        assert (run / "train.log").read_text() == "before\n"
    finally:
        this_process().release_all()
        this_process.cache_clear()


def test_a_refused_run_removes_the_directory_it_made_before_another_command_can_take_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run refused in its app removes the directory it made. It gave the directory's lock
    back first: a second command could take the directory in between and begin writing there,
    and the removal then deleted what it wrote. Now the lock is given back once the directory
    is gone."""
    import sys

    from vitattn.runs import task
    from vitattn.runs.lock import hold_run_directory
    from vitattn.runs.process import this_process

    run = tmp_path / "run"
    second = (
        "from pathlib import Path\nfrom vitattn.runs.lock import hold_run_directory\n"
        f"run = Path({str(run)!r})\nrun.mkdir(exist_ok=True)\n"
        "hold_run_directory(run, 'second')\n(run / 'theirs.txt').write_text('written')\n"
    )
    release = task.release_run_directory

    def release_then_a_second_command_takes_it(path: Path) -> None:
        release(path)
        environment = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT / "src")}
        subprocess.run([sys.executable, "-c", second], env=environment, check=True)

    monkeypatch.setattr(task, "release_run_directory", release_then_a_second_command_takes_it)
    this_process.cache_clear()
    try:
        task.remember_run_directory(run)
        run.mkdir()  # as Hydra makes it
        hold_run_directory(run, "vitattn-train")
        task.remove_unstarted_run(run)
        assert (run / "theirs.txt").read_text() == "written"
    finally:
        this_process().release_all()
        this_process.cache_clear()


def test_a_command_waits_out_a_summarys_look_at_its_lock(tmp_path: Path) -> None:
    """A summary asks whether a run still runs by taking its lock for an instant
    (:func:`vitattn.runs.lock.held_elsewhere`): a command starting in that instant waits for
    it (``PROBE_WAIT``) and is not refused as if the directory were in use."""
    import fcntl
    import sys

    from vitattn.runs.layout import LOCK

    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK).touch()
    command = (
        "from pathlib import Path\nfrom vitattn.runs.lock import hold_run_directory\n"
        f"print('taking', flush=True)\nhold_run_directory(Path({str(run)!r}), 'second')\n"
    )
    environment = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT / "src")}
    with open(run / LOCK) as look:  # the summary's look: a shared flock of the lock file
        fcntl.flock(look, fcntl.LOCK_SH | fcntl.LOCK_NB)
        second = subprocess.Popen(
            [sys.executable, "-c", command],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert second.stdout is not None and second.stdout.readline() == "taking\n"
        time.sleep(0.2)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err[-2000:]
