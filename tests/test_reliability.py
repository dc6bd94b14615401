"""The NaN guard, half precision per attention, bad knobs and checkpoints, unwritable outputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from tests.support.faults import CrashAtStep
from tests.support.in_process import refused_in_process, run_in_process
from tests.support.mounts import fill, tmpfs
from tests.support.presets import RUN_40, TINY, compose_config, plug, steps
from tests.support.probes import ComputeDtypeProbe
from tests.support.runners import refused, run_cli, train_tiny
from vitattn.attention import ATTENTIONS
from vitattn.errors import ConfigError


@pytest.mark.slow
@pytest.mark.parametrize("diverging", ["NanLossAtStep", "InfiniteLossAtStep"])
def test_nan_or_infinite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(
    diverging: str, tmp_path: Path, data_dir: Path
) -> None:
    result = run_cli(
        "vitattn-train",
        *RUN_40,
        f"+callbacks.nan._target_=tests.support.faults.{diverging}",
        "+callbacks.nan.step=15",
        f"hydra.run.dir={tmp_path}",
        data_dir=data_dir,
        check=False,
    )
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("vitattn-train: error: train/loss became NaN or infinite by step")
    kept = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert kept["global_step"] == 10  # the validation before the NaN, not after
    assert all(torch.isfinite(t).all() for t in kept["state_dict"].values())
    assert json.loads((tmp_path / "metrics.json").read_text())["status"] == "failed"
    assert list(tmp_path.glob("events.out.tfevents.*"))


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["16-mixed", "bf16-true"])
@pytest.mark.parametrize("attention", sorted(ATTENTIONS))
def test_half_precision_trains_every_attention(
    attention: str, precision: str, tmp_path: Path, data_dir: Path
) -> None:
    """Mixed precision (Lightning uses bf16-mixed on a CPU, which has no fp16 AMP), and bf16
    weights throughout (no fp32 master weights: the patch embedding takes the fp32 images, and
    every mechanism's fp32 internals come back in bf16). 16-true is refused (tests/utils)."""
    probe = tmp_path / "dtypes.json"
    metrics = train_tiny(
        tmp_path,
        data_dir,
        f"attention={attention}",
        f"trainer.precision={precision}",
        *steps(3, 3),
        "data.batch_size=16",
        "logger=csv",
        *plug("probe", ComputeDtypeProbe, path=probe),
    )
    assert math.isfinite(float(metrics["train/loss"])) and math.isfinite(float(metrics["val/loss"]))
    assert 0.0 <= float(metrics["test/acc"]) <= 1.0
    # bf16 is really used: the kernel gets bf16 q (from autocast's projection, or bf16 weights)
    # and gives bf16 back; only bf16-true keeps the weights themselves in bf16.
    weights = "torch.bfloat16" if precision == "bf16-true" else "torch.float32"
    expected = {"parameters": weights, "q": "torch.bfloat16", "attention_output": "torch.bfloat16"}
    assert json.loads(probe.read_text()) == expected


@pytest.mark.slow
def test_an_unexpected_error_is_one_line_and_its_traceback_goes_to_the_log(
    tmp_path: Path, data_dir: Path
) -> None:
    crash = plug("crash", CrashAtStep, step=3)
    said = refused("vitattn-train", *RUN_40, *crash, f"hydra.run.dir={tmp_path}", data_dir=data_dir)
    log = tmp_path / "train.log"
    assert said == f"unexpected RuntimeError: boom at step 3; the traceback is in {log}"
    assert "Traceback (most recent call last)" in log.read_text()
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["error"] == "RuntimeError: boom at step 3"


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_checkpoint_of_another_network_is_refused(tmp_path: Path, data_dir: Path) -> None:
    run = tmp_path / "softmax"
    run_in_process(
        "vitattn-train", *TINY, "trainer.max_steps=2", f"hydra.run.dir={run}", data_dir=data_dir
    )
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    checkpoint = run / "checkpoints" / "last.ckpt"
    args = [f"ckpt_path={checkpoint}", "attention=linear", f"hydra.run.dir={tmp_path / 'new'}"]
    said = refused_in_process("vitattn-train", *args, data_dir=data_dir, creates=tmp_path / "new")
    assert said.startswith(
        f"ckpt_path={checkpoint} was trained with another network: "
        "model.attention._target_=vitattn.attention.softmax.SoftmaxAttention"
    )
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before  # untouched
    assert json.loads((run / "metrics.json").read_text())["status"] == "completed"


@pytest.mark.slow
def test_eval_refuses_a_file_that_is_not_a_vitattn_checkpoint(
    tmp_path: Path, data_dir: Path
) -> None:
    foreign = tmp_path / "resnet.ckpt"
    torch.save({"state_dict": {"conv1.weight": torch.zeros(1)}}, foreign)
    run_dir = tmp_path / "eval"
    args = [f"ckpt_path={foreign}", f"hydra.run.dir={run_dir}"]
    said = refused("vitattn-eval", *args, data_dir=data_dir, creates=run_dir)
    assert said.startswith(f"ckpt_path={foreign} is not a vitattn-train checkpoint")


def test_a_checkpoint_with_missing_weights_is_a_one_line_error(tmp_path: Path) -> None:
    from hydra.utils import instantiate

    from vitattn.loading import load_classifier
    from vitattn.lora.module import save_plain_checkpoint

    module = instantiate(compose_config("train", TINY, tmp_path).module)
    path = save_plain_checkpoint(module, tmp_path / "damaged.ckpt")
    checkpoint = torch.load(path, weights_only=False)
    for name in ("net.head.weight", "net.norm.bias"):
        del checkpoint["state_dict"][name]
    torch.save(checkpoint, path)
    with pytest.raises(ConfigError) as info:
        load_classifier(path)
    message = str(info.value)
    # named before Lightning loads it (whose strict load lists each missing key on a line)
    assert message == (
        f"{path}: state_dict lacks net.head.weight (and 1 more), which the network its config "
        "builds has; nothing was loaded"
    )


@pytest.mark.slow
@pytest.mark.parametrize("program", ["vitattn-train", "vitattn-eval"])
def test_output_directory_that_cannot_be_written(
    program: str, tmp_path: Path, data_dir: Path
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    result = run_cli(
        program,
        f"hydra.run.dir={blocker}/run",
        *(["ckpt_path=x.ckpt"] if program == "vitattn-eval" else []),
        data_dir=data_dir,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"{program}: error: hydra.run.dir={blocker}/run is not writable: {blocker} is a file, "
        "not a directory; choose another location"
    )
    assert blocker.read_text() == "not a directory"


@pytest.mark.parametrize("setting", ["hydra.run.dir", "hydra.sweep.dir", "paths.log_dir"])
def test_a_full_disk_at_the_start_is_one_line_and_nothing_is_made(
    setting: str, tmp_path: Path, data_dir: Path
) -> None:
    """A real tmpfs with no byte left, as the run's location (for ``paths.log_dir``, Hydra's
    own folders: it wrote them, then failed with a traceback)."""
    with tmpfs(tmp_path / "disk", "size=64k") as disk:
        fill(disk)
        target = disk / "runs" / "run"
        sweep = ["-m", "seed=1,2"] if setting == "hydra.sweep.dir" else []  # flags first
        said = refused_in_process("vitattn-train", *sweep, f"{setting}={target}", data_dir=data_dir)
        assert said == (
            f"{setting}={target} cannot be written: no space left on its device (0 bytes free); "
            "free space or choose another location"
        )
        assert [path.name for path in disk.iterdir()] == ["fill"]


@pytest.mark.parametrize(
    ("entries", "run"),
    [(3, "made/run"), (4, "run")],
    ids=["a folder of the path", "the run's own files"],
)
def test_a_run_directory_that_cannot_be_made_is_one_line_and_what_was_made_is_removed(
    entries: int, run: str, tmp_path: Path, data_dir: Path
) -> None:
    """Bytes to spare, but a real file system out of file entries: room for the first folder
    and not the run (3), or for the run and its lock and not the record of who holds it (4).
    The line says so, and the folders and lock made on the way are gone."""
    with tmpfs(tmp_path / "disk", f"size=1m,nr_inodes={entries}") as disk:
        (disk / "taken").touch()
        run_dir = disk / run
        said = refused_in_process("vitattn-train", f"hydra.run.dir={run_dir}", data_dir=data_dir)
        assert said.startswith(
            f"hydra.run.dir={run_dir} cannot be written: no room for another file on its device ("
        ), said
        assert said.endswith("free space or choose another location")
        assert [path.name for path in disk.iterdir()] == ["taken"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_run_directory_where_no_folder_can_be_made_is_one_line(data_dir: Path) -> None:
    """``/proc`` takes no new folder (it once ended in mkdir's traceback)."""
    said = refused_in_process("vitattn-train", "hydra.run.dir=/proc/vitattn/run", data_dir=data_dir)
    assert said == (
        "hydra.run.dir=/proc/vitattn/run cannot be written: no such file or directory; "
        "choose a directory you can write to"
    )


@pytest.mark.slow
def test_a_failed_continuation_of_a_completed_run_keeps_its_results(
    tmp_path: Path, data_dir: Path
) -> None:
    run_in_process(
        "vitattn-train", *TINY, *steps(4, 2), f"hydra.run.dir={tmp_path}", data_dir=data_dir
    )
    finished = (tmp_path / "metrics.json").read_bytes()
    assert json.loads(finished)["status"] == "completed"
    crash = plug("crash", CrashAtStep, step=6)
    continuation = ["resume=true", f"hydra.run.dir={tmp_path}", "trainer.max_steps=8", *crash]
    said = refused("vitattn-train", *continuation, data_dir=data_dir)
    assert said.startswith("unexpected RuntimeError: boom at step 6")
    assert (tmp_path / "metrics.json").read_bytes() == finished
    attempts = json.loads((tmp_path / "failed_attempts.json").read_text())
    assert [a["error"] for a in attempts] == ["RuntimeError: boom at step 6"]
