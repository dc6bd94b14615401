"""What survives an interruption: SIGTERM, Ctrl-C (once, twice), a kill or a full disk during a
checkpoint write; and what a refused resume may touch (nothing)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support.in_process import refused_in_process, run_in_process
from tests.support.mounts import tmpfs
from tests.support.presets import RUN_40, TINY, steps
from tests.support.runners import last_line, refused, run_cli, train_with
from tests.support.trees import tree_digest
from vitattn.analysis.events import read_scalars
from vitattn.utils.hydra_grammar import as_override

pytestmark = pytest.mark.slow

ATOMIC = "trainer.plugins=[{_target_: vitattn.runs.checkpoint_io.AtomicCheckpointIO}]"

WITHOUT_FAULT = "~callbacks.fault"
"""Resuming a run stopped by a test's callback: a run's recorded overrides build only what vitattn
builds (docs/runs.md, "What vitattn trusts"), so the resume drops the fault on its command line,
as a user drops or gives again a class of their own."""


def at_step(callback: str, step: int, **settings: int) -> list[str]:
    """Overrides adding the callback ``tests.support.faults.<callback>`` firing at ``step``."""
    extra = [f"+callbacks.fault.{key}={value}" for key, value in settings.items()]
    return [
        f"+callbacks.fault._target_=tests.support.faults.{callback}",
        f"+callbacks.fault.step={step}",
        *extra,
    ]


def failing_writes(how: str) -> str:
    """The trainer's checkpoint plugin replaced by one whose 2nd ``last.ckpt`` write fails."""
    plugin = f"{{_target_: tests.support.faults.FailingCheckpointIO, failing_save: 2, how: {how}}}"
    return f"trainer.plugins=[{plugin}]"


def start(run_dir: Path, *faults: str, data_dir: Path, env: dict[str, str] | None = None) -> Any:
    """40 steps of the tiny model in ``run_dir`` with ``faults`` injected, however it ends."""
    run = [*RUN_40, *faults, as_override("hydra.run.dir", str(run_dir))]
    return run_cli("vitattn-train", *run, data_dir=data_dir, check=False, env=env)


def checkpoint_step(run_dir: Path) -> int:
    path = run_dir / "checkpoints" / "last.ckpt"
    return int(torch.load(path, weights_only=False, map_location="cpu")["global_step"])


def metrics_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """40 steps without interruption: what every interrupted and resumed run must equal."""
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    run_cli("vitattn-train", *RUN_40, f"hydra.run.dir={run_dir}", data_dir=data_dir)
    return run_dir


def assert_same_as_straight(run_dir: Path, straight: Path, steps: int = 40) -> None:
    """The resumed run ended with the straight run's weights, and logged every step once, with
    the straight run's losses."""
    expected = torch.load(straight / "checkpoints" / "last.ckpt", weights_only=False)
    resumed = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert expected["state_dict"].keys() == resumed["state_dict"].keys()
    for name, value in expected["state_dict"].items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, resumed["state_dict"][name]), name
        else:  # a module's extra state (performer's count of steps since it redrew)
            assert value == resumed["state_dict"][name], name
    losses = read_scalars(run_dir)["train/loss"]
    assert [step for step, _ in losses] == list(range(1, steps + 1))  # every step once
    assert losses == read_scalars(straight)["train/loss"]
    assert metrics_of(run_dir)["status"] == "completed" and metrics_of(run_dir)["steps"] == steps


@pytest.mark.parametrize(
    ("callback", "signal_name", "status", "step", "directory"),
    [
        ("SigtermAtStep", "SIGTERM", 143, 25, "run"),
        # a sweep's job, named by its settings: the command to copy quotes the '=' and ','
        ("SigintAtStep", "Ctrl-C", 130, 25, "attention=softmax,seed=1"),
    ],
)
def test_an_interrupted_run_saves_its_step_and_resumes_exactly(
    callback: str,
    signal_name: str,
    status: int,
    step: int,
    directory: str,
    straight: Path,
    tmp_path: Path,
    data_dir: Path,
) -> None:
    run_dir = tmp_path / directory
    stopped = start(
        run_dir,
        *at_step(callback, 25),  # mid-epoch: an epoch is 71 batches of 64
        data_dir=data_dir,
    )
    assert stopped.returncode == status, stopped.stderr[-2000:]
    given = f"hydra.run.dir={run_dir}" if directory == "run" else f"""'hydra.run.dir="{run_dir}"'"""
    said = last_line(stopped)
    assert said == (
        f"vitattn-train: interrupted by {signal_name} after step {step}; continue with: "
        f"vitattn-train resume=true {given}"
    )
    assert checkpoint_step(run_dir) == step
    # Lightning's "`weights_only` was not set, defaulting to `False`." came just before the line
    # saying the checkpoint was saved: the callback now says what it saves
    log = (run_dir / "train.log").read_text()
    assert f"{signal_name}: stopping after step {step}; saved " in log
    assert "weights_only" not in log and "weights_only" not in stopped.stderr
    metrics = metrics_of(run_dir)
    assert metrics["status"] == "interrupted" and metrics["signal"] == signal_name
    assert metrics["steps"] == step
    assert metrics["val/acc"] is not None  # what the validations so far reached

    first_costs = throughput_state(run_dir)
    # the command it printed, as a shell splits it
    resume = [*shlex.split(said.split("continue with: vitattn-train ")[1]), WITHOUT_FAULT]
    started = time.perf_counter()
    run_in_process("vitattn-train", *resume, data_dir=data_dir)
    second_attempt_at_most = time.perf_counter() - started
    assert_same_as_straight(run_dir, straight)
    assert_costs_of_every_attempt(run_dir, metrics, first_costs, second_attempt_at_most)


def test_the_command_to_continue_gives_again_the_places_the_run_was_given(
    tmp_path: Path, data_dir: Path
) -> None:
    """A resume replays no setting that says where from the run's files, so the printed command
    gives the run's own again: until 2026-12-02 it left them out, and as printed it was refused
    (``'paths.log_dir=...' says where something is read or written``; user audit)."""
    run_dir, logs = tmp_path / "run", tmp_path / "logs"
    places = [f"paths.log_dir={logs}", f"data.data_dir={data_dir}"]
    stopped = start(run_dir, *at_step("SigtermAtStep", 5), *places, data_dir=data_dir)
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    said = last_line(stopped)
    command = said.split("continue with: vitattn-train ")[1]
    assert shlex.split(command) == ["resume=true", f"hydra.run.dir={run_dir}", *places]
    run_in_process("vitattn-train", *shlex.split(command), WITHOUT_FAULT, data_dir=data_dir)
    assert metrics_of(run_dir)["status"] == "completed" and metrics_of(run_dir)["steps"] == 40


def throughput_state(run_dir: Path) -> dict[str, Any]:
    """What :class:`~vitattn.training.callbacks.ImagesPerSecond` keeps in ``last.ckpt``: the
    steady rates, the fit's seconds up to the checkpoint and the attempts."""
    path = run_dir / "checkpoints" / "last.ckpt"
    callbacks = torch.load(path, weights_only=False, map_location="cpu")["callbacks"]
    (state,) = (value for key, value in callbacks.items() if key.startswith("ImagesPerSecond"))
    return state


def assert_costs_of_every_attempt(
    run_dir: Path,
    first_attempt: dict[str, Any],
    first_costs: dict[str, Any],
    second_attempt_at_most: float,
) -> None:
    """A resumed run's costs are those of all its attempts, as the code decides them and without
    comparing one run's wall-clock time with another's (a resume pays its start-up again, and a
    shared machine varies): its seconds are the first attempt's recorded seconds plus the
    second's (which lie within the resume command's own time), its images/s the median of the
    steady rates of both attempts, and two attempts."""
    resumed, final_costs = metrics_of(run_dir), throughput_state(run_dir)
    assert first_attempt["attempts"] == 1 and first_costs["attempts"] == 1
    assert resumed["attempts"] == final_costs["attempts"] == 2
    # The first attempt's rates come first, then the second's; metrics.json is their median.
    earlier = first_costs["rates"]
    assert 0 < len(earlier) == first_attempt["steady_steps"] < resumed["steady_steps"]
    assert final_costs["rates"][: len(earlier)] == earlier
    assert len(final_costs["rates"]) == resumed["steady_steps"]
    assert resumed["train/images_per_sec"] == pytest.approx(statistics.median(final_costs["rates"]))
    # Seconds add up: the first attempt's, as its checkpoint recorded them, then the second's.
    assert 0 < first_costs["seconds"] <= first_attempt["seconds"]
    assert first_costs["seconds"] < final_costs["seconds"] <= resumed["seconds"]
    assert resumed["seconds"] - first_costs["seconds"] < second_attempt_at_most


def test_ckpt_path_alone_continues_the_run_in_its_own_directory(
    straight: Path, tmp_path: Path, data_dir: Path
) -> None:
    """``vitattn-train ckpt_path=<run>/checkpoints/last.ckpt``, the README's first way to resume:
    no run directory given, the run's own settings and directory."""
    run_dir = tmp_path / "run"
    assert start(run_dir, *at_step("SigtermAtStep", 25), data_dir=data_dir).returncode == 143
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    run_in_process("vitattn-train", f"ckpt_path={checkpoint}", WITHOUT_FAULT, data_dir=data_dir)
    assert_same_as_straight(run_dir, straight)


@pytest.mark.parametrize("batch", [None, 0], ids=["after-its-last-batch", "mid-validation"])
def test_a_signal_during_a_validation_resumes_with_each_step_logged_once(
    batch: int | None, straight: Path, tmp_path: Path, data_dir: Path
) -> None:
    """SIGTERM landing late, during the validation after step 20 (after its last batch, or after
    its first of 4), then resumed: the TensorBoard curves hold every step once, where the run
    never stopped has them. Until 2026-12-02 a signal after the last validation batch had
    ``last.ckpt`` written after Lightning counted step 20 for the loggers; the resumed run
    counted it again, and logged steps 21..40 at 22..41 (docs/runs.md, "Resume, interruptions,
    failures")."""
    run_dir = tmp_path / "run"
    fault = at_step("SigtermInValidation", 20)
    if batch is not None:
        fault.append(f"+callbacks.fault.batch={batch}")
    # batches of 128: the validation set in 4, one to stop after and more to come
    stopped = start(run_dir, *fault, "data.eval_batch_size=128", data_dir=data_dir)
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    assert checkpoint_step(run_dir) == 20
    resume = ["resume=true", as_override("hydra.run.dir", str(run_dir)), WITHOUT_FAULT]
    run_in_process("vitattn-train", *resume, data_dir=data_dir)
    scalars, expected = read_scalars(run_dir), read_scalars(straight)
    for tag in ("train/loss", "train/lr"):
        assert [step for step, _ in scalars[tag]] == list(range(1, 41)), tag  # each step once
        assert [step for step, _ in scalars[tag]] == [step for step, _ in expected[tag]], tag
    validated = [step for step, _ in scalars["val/acc"]]
    assert validated == sorted(set(validated)) and set(validated) <= {10, 20, 30, 40}
    if batch is None:  # a validation finished before the signal was acted on
        assert validated == [10, 20, 30, 40]
    assert_same_as_straight(run_dir, straight)


RANDOM_STATE = {
    "performer": ["attention=performer", "attention.redraw_interval=2"],
    "random_feature": ["attention=random_feature"],  # new frequencies at every step
    "bigbird": ["attention=bigbird", "attention.block=8", "attention.num_random=2"],
    "reformer": ["attention=reformer", "attention.chunk=16"],
}
"""Mechanisms that draw random numbers of their own, with settings that draw them in the run."""


@pytest.mark.parametrize("attention", sorted(RANDOM_STATE))
def test_mechanisms_with_random_state_resume_exactly(
    attention: str, tmp_path: Path, data_dir: Path
) -> None:
    """Redrawn random features, BigBird's random blocks, Reformer's rotations: stopped by
    SIGTERM and resumed, the run ends with the weights of one that was not stopped."""
    run = [*TINY, *steps(12, 4), *RANDOM_STATE[attention]]
    straight = tmp_path / "straight"
    train_with(straight, data_dir, *run)  # in this process: the same task, the same numbers
    stopped = tmp_path / "stopped"
    at_6 = [*run, *at_step("SigtermAtStep", 6), f"hydra.run.dir={stopped}"]
    assert run_cli("vitattn-train", *at_6, data_dir=data_dir, check=False).returncode == 143
    assert checkpoint_step(stopped) == 6
    resume = ["resume=true", f"hydra.run.dir={stopped}", WITHOUT_FAULT]
    run_in_process("vitattn-train", *resume, data_dir=data_dir)
    assert_same_as_straight(stopped, straight, steps=12)


def test_a_run_without_validation_keeps_last_ckpt_and_resumes_exactly_after_a_kill(
    tmp_path: Path, data_dir: Path
) -> None:
    """``+trainer.limit_val_batches=0``: vitattn's checkpoints are written at validation, so such
    a run kept none ("no checkpoint was saved"), and a run killed on the way started again from
    its first step. It now writes ``last.ckpt`` every ``val_check_interval`` steps and after its
    last step (:class:`vitattn.training.callbacks.CheckpointWithoutValidation`). The resume
    replays the recorded ``+trainer.limit_val_batches=0`` (refused until 2026-12-01, unless given
    again: :data:`vitattn.runs.recorded.TRAINER_ADDITIONS`)."""
    straight, stopped = killed_at_6_and_resumed(tmp_path, data_dir, "+trainer.limit_val_batches=0")
    assert [p.name for p in (straight / "checkpoints").iterdir()] == ["last.ckpt"]
    assert metrics_of(stopped)["status"] == "completed"


def test_a_run_without_validation_stopped_at_a_due_step_writes_last_ckpt_once(
    tmp_path: Path, data_dir: Path
) -> None:
    """SIGTERM at step 8 of a run without validation saving every 4 steps: its checkpoint was due
    there (:class:`~vitattn.training.callbacks.CheckpointWithoutValidation`) and the signal asks
    for one too (:class:`~vitattn.training.callbacks.CheckpointOnInterrupt`). Both wrote step 8,
    one after the other, while a pre-empted job's grace period ran; once is enough, and the run
    resumed from it ends as the run never stopped."""
    run = [*TINY, *steps(12, 4), "+trainer.limit_val_batches=0"]
    straight = tmp_path / "straight"
    train_with(straight, data_dir, *run)
    record = tmp_path / "saves.txt"
    plugin = f"{{_target_: tests.support.faults.RecordingCheckpointIO, record: '{record}'}}"
    run_dir = tmp_path / "run"
    overrides = [*run, *at_step("SigtermAtStep", 8), f"trainer.plugins=[{plugin}]"]
    overrides.append(as_override("hydra.run.dir", str(run_dir)))
    finished = run_cli("vitattn-train", *overrides, data_dir=data_dir, check=False)
    assert finished.returncode == 143, finished.stderr
    assert record.read_text().split() == ["4", "8"]
    assert checkpoint_step(run_dir) == 8
    assert "SIGTERM: stopping after step 8; saved " in (run_dir / "train.log").read_text()
    resume = ["resume=true", as_override("hydra.run.dir", str(run_dir)), WITHOUT_FAULT]
    run_in_process("vitattn-train", *resume, ATOMIC, data_dir=data_dir)  # the plugin given again
    assert_same_as_straight(run_dir, straight, steps=12)


def killed_at_6_and_resumed(tmp_path: Path, data_dir: Path, setting: str) -> tuple[Path, Path]:
    """12 steps with ``setting``, straight and killed at step 6 (``last.ckpt`` of step 4), then
    resumed with nothing given again: the two runs' directories, the resumed one checked to be
    the straight one bit for bit."""
    run = [*TINY, *steps(12, 4), setting]
    straight = tmp_path / "straight"
    train_with(straight, data_dir, *run)
    assert checkpoint_step(straight) == 12
    stopped = tmp_path / "stopped"
    at_6 = [*run, *at_step("SigkillAtStep", 6), f"hydra.run.dir={stopped}"]
    assert run_cli("vitattn-train", *at_6, data_dir=data_dir, check=False).returncode == -9
    assert checkpoint_step(stopped) == 4
    resume = ["resume=true", f"hydra.run.dir={stopped}", WITHOUT_FAULT]
    run_in_process("vitattn-train", *resume, data_dir=data_dir)
    assert_same_as_straight(stopped, straight, steps=12)
    return straight, stopped


@pytest.mark.parametrize(
    "setting", ["+trainer.limit_train_batches=4", "+trainer.overfit_batches=4"]
)
def test_a_run_of_short_epochs_resumes_exactly_from_the_end_of_an_epoch(
    setting: str, tmp_path: Path, data_dir: Path
) -> None:
    """``+trainer.limit_train_batches=4``: epochs of 4 batches, ``last.ckpt`` at step 4, the end
    of the first. The checkpoint said 4 batches were done in the epoch, and the resumed data
    module skipped 4 of the next epoch's (it took a whole epoch, 71 batches, for the end): the
    resumed run trained on other batches than the run never stopped. So too for a run that
    overfits 4 batches (the same 4 every epoch, in order), its setting replayed from its file."""
    killed_at_6_and_resumed(tmp_path, data_dir, setting)


@pytest.mark.parametrize(
    ("callback", "run"),
    [
        # the signal at the end of step 4, no validation after it (validating every 6 steps)
        ("SigtermAtStep", steps(12, 6)),
        # the signal after step 4's validation, in a run of 12 steps and in one of 3 epochs
        ("SigtermInValidation", steps(12, 4)),
        ("SigtermInValidation", ["trainer.max_epochs=3", "trainer.val_check_interval=4"]),
    ],
    ids=["at-its-end", "after-its-validation", "after-its-validation-max-epochs"],
)
def test_a_signal_at_the_last_step_of_an_epoch_resumes_exactly(
    callback: str, run: list[str], tmp_path: Path, data_dir: Path
) -> None:
    """SIGTERM at step 4, the last of an epoch of 4 (``+trainer.limit_train_batches=4``), acted
    on after Lightning ended the epoch, then resumed: every step logged once, at its step, with
    the losses and weights of the run never stopped. Until 2026-12-02 ``last.ckpt`` said the
    epoch was over while its batches were still counted as the epoch's: the resumed run of 12
    steps took that epoch for one with nothing left and trained steps 5..8 on the next epoch's
    batches, and the run of 3 epochs logged steps 5..12 at 4..11 (docs/runs.md, "Resume,
    interruptions, failures")."""
    settings = [*TINY, *run, "+trainer.limit_train_batches=4"]
    straight = tmp_path / "straight"
    train_with(straight, data_dir, *settings)
    stopped = tmp_path / "stopped"
    at_4 = [*settings, *at_step(callback, 4), as_override("hydra.run.dir", str(stopped))]
    result = run_cli("vitattn-train", *at_4, data_dir=data_dir, check=False)
    assert result.returncode == 143, result.stderr[-2000:]
    assert checkpoint_step(stopped) == 4
    resume = ["resume=true", as_override("hydra.run.dir", str(stopped)), WITHOUT_FAULT]
    run_in_process("vitattn-train", *resume, data_dir=data_dir)
    assert_same_as_straight(stopped, straight, steps=12)
    validated = [step for step, _ in read_scalars(stopped)["val/acc"]]
    assert validated == [step for step, _ in read_scalars(straight)["val/acc"]]


def test_a_run_accumulating_over_epochs_it_does_not_divide_resumes_exactly(
    tmp_path: Path, data_dir: Path
) -> None:
    """Epochs of 5 batches, 2 accumulated a step: 3 steps an epoch, its last of one batch.
    SIGTERM after step 5, the second of the second epoch, then resumed: the weights and losses
    of the run never stopped. Until 2026-12-02 the checkpoint counted 5 x 2 - 5 = 5 batches done
    in the epoch (4 were), took the epoch for over, and the resumed run trained on the next
    epoch's batches (data audit)."""
    settings = [
        *TINY,
        *steps(8, 4),
        "+trainer.limit_train_batches=5",
        "+trainer.accumulate_grad_batches=2",
    ]
    straight = tmp_path / "straight"
    train_with(straight, data_dir, *settings)
    stopped = tmp_path / "stopped"
    at_5 = [*settings, *at_step("SigtermAtStep", 5), as_override("hydra.run.dir", str(stopped))]
    result = run_cli("vitattn-train", *at_5, data_dir=data_dir, check=False)
    assert result.returncode == 143, result.stderr[-2000:]
    assert checkpoint_step(stopped) == 5
    saved = torch.load(stopped / "checkpoints" / "last.ckpt", weights_only=False)
    assert saved["CIFAR10DataModule"]["batches_done_in_epoch"] == 4
    resume = ["resume=true", as_override("hydra.run.dir", str(stopped)), WITHOUT_FAULT]
    run_in_process("vitattn-train", *resume, data_dir=data_dir)
    assert_same_as_straight(stopped, straight, steps=8)


def test_a_signal_at_a_runs_last_step_resumes_to_its_end(tmp_path: Path, data_dir: Path) -> None:
    """SIGTERM in the validation after step 12, the last of 3 epochs of 4: the checkpoint holds
    the fit loop as the step left it (its last epoch unfinished), and the resumed run ends that
    epoch, tests, and completes with the curves, weights and test accuracy of the run never
    stopped."""
    settings = [*TINY, "trainer.max_epochs=3", "trainer.val_check_interval=4"]
    settings.append("+trainer.limit_train_batches=4")
    straight = tmp_path / "straight"
    train_with(straight, data_dir, *settings)
    stopped = tmp_path / "stopped"
    at_12 = [
        *settings,
        *at_step("SigtermInValidation", 12),
        as_override("hydra.run.dir", str(stopped)),
    ]
    result = run_cli("vitattn-train", *at_12, data_dir=data_dir, check=False)
    assert result.returncode == 143, result.stderr[-2000:]
    assert checkpoint_step(stopped) == 12 and metrics_of(stopped)["status"] == "interrupted"
    resume = ["resume=true", as_override("hydra.run.dir", str(stopped)), WITHOUT_FAULT]
    run_in_process("vitattn-train", *resume, data_dir=data_dir)
    assert_same_as_straight(stopped, straight, steps=12)
    assert read_scalars(stopped)["val/acc"] == read_scalars(straight)["val/acc"]
    assert metrics_of(stopped)["test/acc"] == metrics_of(straight)["test/acc"]


def test_a_second_ctrl_c_exits_at_once(tmp_path: Path, data_dir: Path) -> None:
    run_dir = tmp_path / "run"
    stopped = start(
        run_dir,
        *at_step("SigintAtStep", 25, times=2),
        data_dir=data_dir,
    )
    assert stopped.returncode == 130
    assert "Ctrl-C again: exiting at once, without saving" in stopped.stderr
    assert checkpoint_step(run_dir) == 20  # the last validation's, nothing saved at step 25
    assert not (run_dir / "metrics.json").exists()


def test_a_kill_during_a_checkpoint_write_keeps_the_previous_one(
    straight: Path, tmp_path: Path, data_dir: Path
) -> None:
    run_dir = tmp_path / "run"
    killed = start(
        run_dir,
        failing_writes("kill"),  # killed half-way through writing last.ckpt at step 20
        data_dir=data_dir,
    )
    assert killed.returncode == -9
    assert checkpoint_step(run_dir) == 10  # the previous last.ckpt, whole
    assert (run_dir / "checkpoints" / ".last.ckpt.partial").is_file()  # what was being written
    # TensorBoard holds steps up to the kill, past the checkpoint: the resume drops them.
    assert max(step for step, _ in read_scalars(run_dir)["train/loss"]) >= 19

    resumed = ["resume=true", f"hydra.run.dir={run_dir}", ATOMIC]
    run_in_process("vitattn-train", *resumed, data_dir=data_dir)
    assert not list((run_dir / "checkpoints").glob(".*.partial"))
    assert_same_as_straight(run_dir, straight)


def test_a_full_disk_during_a_checkpoint_write_is_one_line_and_keeps_the_previous_one(
    tmp_path: Path, data_dir: Path
) -> None:
    run_dir, temporary = tmp_path / "run", tmp_path / "tmp"
    temporary.mkdir()
    result = start(
        run_dir,
        failing_writes("enospc"),
        data_dir=data_dir,
        env={"TMPDIR": str(temporary)},
    )
    assert result.returncode == 1
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    said = last_line(result)
    assert said.startswith(
        f"vitattn-train: error: could not write checkpoint {checkpoint} (No space left on device, "
    )
    assert " free); the previous last.ckpt is intact" in said
    assert "Traceback" not in result.stderr
    assert checkpoint_step(run_dir) == 10
    metrics = metrics_of(run_dir)
    assert metrics["status"] == "failed" and "No space left on device" in metrics["error"]
    assert not list((run_dir / "checkpoints").glob(".*.partial"))
    assert os.listdir(temporary) == []  # no temporary file left behind anywhere


def test_resuming_a_finished_run_changes_nothing(straight: Path, data_dir: Path) -> None:
    before = tree_digest(straight)
    said = refused_in_process(
        "vitattn-train", "resume=true", f"hydra.run.dir={straight}", data_dir=data_dir
    )
    assert said.startswith(f"resume=true: the run in {straight} is complete")
    assert "is complete, it finished at step 40 (trainer.max_steps=40)" in said
    assert tree_digest(straight) == before


def test_a_run_killed_after_its_last_checkpoint_keeps_its_costs_when_continued(
    straight: Path, tmp_path: Path, data_dir: Path
) -> None:
    """Killed after its last checkpoint and before ``metrics.json`` (a sweep cut while a job
    finished): the continued attempt trains no step, and the run still reports the seconds and
    the steady images/s of the attempt that did, from the checkpoint."""
    run_dir = tmp_path / "run"
    shutil.copytree(straight, run_dir)
    (run_dir / "metrics.json").unlink()
    recorded = throughput_state(run_dir)["seconds"]
    run_in_process("vitattn-train", "resume=true", f"hydra.run.dir={run_dir}", data_dir=data_dir)
    resumed, uninterrupted = metrics_of(run_dir), metrics_of(straight)
    assert resumed["attempts"] == 2 and resumed["steps"] == 40
    assert resumed["steady_steps"] == uninterrupted["steady_steps"] > 0
    assert resumed["train/images_per_sec"] == uninterrupted["train/images_per_sec"]
    # The first attempt's seconds, from its last checkpoint, plus the second's (which trained
    # no step): not this attempt's alone, and not unknown. metrics.json rounds to 0.01 s.
    assert 0 < recorded <= uninterrupted["seconds"] + 0.005
    assert round(recorded, 2) <= resumed["seconds"]


@pytest.fixture(scope="module")
def batchless(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory whose ``cifar-10-batches-py/`` holds no file: it passes the checks
    before the run and is refused by the app, as it reads the data."""
    data = tmp_path_factory.mktemp("batchless")
    (data / "cifar-10-batches-py").mkdir()
    return data


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """A run stopped by SIGTERM at step 25: one that a resume would continue."""
    run_dir = tmp_path_factory.mktemp("stopped") / "run"
    overrides = [*RUN_40, *at_step("SigtermAtStep", 25), f"hydra.run.dir={run_dir}"]
    run_cli("vitattn-train", *overrides, data_dir=data_dir, check=False)
    assert checkpoint_step(run_dir) == 25
    return run_dir


NO_DATA = ["paths.data_dir=/nonexistent", "data.download=false"]


@pytest.mark.parametrize(
    ("overrides", "message", "in_the_app"),
    [
        (["model.heads=4"], "was trained with another network: model.heads=2 (here 4)", False),
        (NO_DATA, "holds no cifar-10-batches", False),
        (["paths.data_dir={batchless}"], "cifar-10-batches-py/data_batch_1 is missing", True),
        (["optimizer.lr=-1"], "optimizer: these settings are refused", False),
        (["trainer.max_steps=0"], "trainer.max_steps=0 is not valid", False),
        (["model.depth=two"], "model.depth='two' is not valid; choose an integer", False),
    ],
)
def test_a_refused_resume_leaves_the_run_byte_for_byte(
    overrides: list[str],
    message: str,
    in_the_app: bool,
    stopped_run: Path,
    data_dir: Path,
    batchless: Path,
) -> None:
    """Refused before the app starts (checked in this process; data.download=false where no
    data are, since 2026-12-01), or by the app once Hydra has written into the run (a data
    folder without its files, found as the data are read: its own process)."""
    before = tree_digest(stopped_run)
    overrides = [override.format(batchless=batchless) for override in overrides]
    args = ["resume=true", f"hydra.run.dir={stopped_run}", WITHOUT_FAULT, *overrides]
    refuse = refused if in_the_app else refused_in_process
    assert message in refuse("vitattn-train", *args, data_dir=data_dir)
    assert tree_digest(stopped_run) == before


def test_a_refused_resume_puts_a_sparse_log_back_without_copying_it(
    stopped_run: Path, data_dir: Path, batchless: Path, tmp_path: Path
) -> None:
    """The run's log of 64 MiB of holes (a few kilobytes on disk): a resume refused once Hydra
    had written copied it whole into a temporary folder, and back into the run as 64 MiB of
    real blocks (a log of 50 GB would have filled the disk); the copy stayed in /tmp when the
    command was killed (red team)."""
    run_dir = tmp_path / "run"
    shutil.copytree(stopped_run, run_dir, symlinks=True)
    log_file = run_dir / "train.log"
    os.truncate(log_file, 64 << 20)
    before = tree_digest(run_dir)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    args = ["resume=true", f"hydra.run.dir={run_dir}", WITHOUT_FAULT]
    args += [f"paths.data_dir={batchless}"]  # refused in the app, once Hydra has written
    said = refused("vitattn-train", *args, data_dir=data_dir, env={"TMPDIR": str(temporary)})
    assert "cifar-10-batches-py/data_batch_1 is missing" in said
    assert tree_digest(run_dir) == before
    assert log_file.stat().st_blocks * 512 < 1 << 20  # still holes
    assert list(temporary.iterdir()) == []


@pytest.fixture
def small_tmpfs(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """A real tmpfs of ``request.param`` bytes mounted in ``tmp_path`` (root only: skipped where
    mounting is not allowed; the injected ENOSPC above covers such machines)."""
    with tmpfs(tmp_path / "disk", f"size={request.param}") as mount:
        yield mount


@pytest.mark.parametrize("small_tmpfs", ["200k", "400k"], indirect=True)
def test_a_real_full_disk_is_one_line_with_no_traceback(small_tmpfs: Path, data_dir: Path) -> None:
    # 200k fills up while TensorBoard writes, 400k while a checkpoint is written
    run_dir = small_tmpfs / "run"
    result = start(run_dir, data_dir=data_dir)
    output = result.stdout + result.stderr
    assert result.returncode == 1
    line = last_line(result)
    assert line.startswith("vitattn-train: error: "), output[-3000:]
    assert "no space left" in line.lower() and str(run_dir) in line and " free" in line
    assert "Traceback" not in output and "Logging error" not in output
    assert metrics_of(run_dir)["status"] == "failed"
    assert not [p for p in run_dir.rglob("*") if p.name.endswith(".partial")]
    for checkpoint in (run_dir / "checkpoints").glob("*.ckpt"):  # what was kept is whole
        torch.load(checkpoint, weights_only=True, map_location="cpu")
