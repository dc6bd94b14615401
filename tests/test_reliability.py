"""Exact resume, SIGTERM, NaN guard, mixed precision per attention, bad input, determinism."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from tests.helpers import TINY, compose_config, run_cli
from vitattn.analysis.events import read_scalars
from vitattn.attention import ATTENTIONS
from vitattn.utils.errors import ConfigError

RUN_40 = [*TINY, "trainer.max_steps=40", "trainer.val_check_interval=10"]
SIGTERM_AT_25 = ["+callbacks.stop._target_=tests.helpers.SigtermAtStep", "+callbacks.stop.step=25"]


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    return checkpoint["state_dict"]


def test_sigterm_then_resume_equals_an_uninterrupted_run(
    tmp_path: Path, data_dir: Path, helpers_importable: None
) -> None:
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    run_cli("vitattn-train", *RUN_40, f"hydra.run.dir={straight}", data_dir=data_dir)

    # Pre-empted at step 25, in the middle of the first epoch (71 batches of 64).
    stopped = run_cli(
        "vitattn-train",
        *RUN_40,
        *SIGTERM_AT_25,
        f"hydra.run.dir={interrupted}",
        data_dir=data_dir,
        check=False,
    )
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    assert torch.load(interrupted / "checkpoints" / "last.ckpt", weights_only=False)[
        "global_step"
    ] == (25)
    assert not (interrupted / "metrics.json").exists()

    # Only the run directory is given: its settings and last.ckpt are picked up.
    run_cli("vitattn-train", "resume=true", f"hydra.run.dir={interrupted}", data_dir=data_dir)

    expected, resumed = weights(straight), weights(interrupted)
    assert expected.keys() == resumed.keys()
    for name in expected:
        assert torch.equal(expected[name], resumed[name]), name
    losses = {run: read_scalars(run)["train/loss"] for run in (straight, interrupted)}
    steps = [step for step, _ in losses[interrupted]]
    assert steps == sorted(set(steps)) and len(steps) == 40  # every step once
    assert losses[interrupted] == losses[straight]
    metrics = json.loads((interrupted / "metrics.json").read_text())
    assert metrics["steps"] == 40 and metrics["status"] == "completed"


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(
    tmp_path: Path, data_dir: Path, helpers_importable: None
) -> None:
    result = run_cli(
        "vitattn-train",
        *RUN_40,
        "+callbacks.nan._target_=tests.helpers.NanLossAtStep",
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
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.parametrize("attention", sorted(ATTENTIONS))
def test_mixed_precision_training_steps_per_attention(
    attention: str, tmp_path: Path, data_dir: Path
) -> None:
    from vitattn.train import train

    overrides = [
        *TINY,
        f"paths.data_dir={data_dir}",
        f"attention={attention}",
        "trainer.precision=16-mixed",  # Lightning uses bf16-mixed on CPU, which has no fp16 AMP
        "trainer.max_steps=3",
        "trainer.val_check_interval=3",
        "data.batch_size=16",
        "logger=csv",
        "test=false",
    ]
    metrics = train(compose_config("train", overrides, tmp_path))
    assert math.isfinite(float(metrics["train/loss"])) and math.isfinite(float(metrics["val/loss"]))


# --- bad input ---------------------------------------------------------------------------------

KNOB_ERRORS = [
    (["attention=linformer", "attention.k=100"], r"attention.k=100 is larger than the 64 tokens"),
    (["attention=nystrom", "attention.landmarks=65"], r"attention.landmarks=65 is more than"),
    (["attention=performer", "attention.num_features=0"], r"attention.num_features=0 is not valid"),
    (["attention=random_feature", "attention.num_features=0"], r"attention.num_features=0 is not"),
]
if "local" in ATTENTIONS:
    KNOB_ERRORS.append((["attention=local", "attention.window=0"], r"attention.window=0"))


@pytest.mark.parametrize(("overrides", "message"), KNOB_ERRORS)
def test_attention_knob_out_of_range_is_one_line(
    overrides: list[str], message: str, tmp_path: Path, data_dir: Path
) -> None:
    run_dir = tmp_path / "run"
    result = run_cli(
        "vitattn-train",
        *TINY,
        *overrides,
        f"hydra.run.dir={run_dir}",
        data_dir=data_dir,
        check=False,
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("vitattn-train: error: "), result.stderr[-2000:]
    assert re.search(message, lines[-1]), lines[-1]
    assert not run_dir.exists()  # nothing half-written


def test_checkpoint_of_another_network_is_refused(tmp_path: Path, data_dir: Path) -> None:
    run = tmp_path / "softmax"
    run_cli(
        "vitattn-train", *TINY, "trainer.max_steps=2", f"hydra.run.dir={run}", data_dir=data_dir
    )
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    result = run_cli(
        "vitattn-train",
        f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}",
        "attention=linear",
        data_dir=data_dir,
        check=False,
    )
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"vitattn-train: error: ckpt_path={run / 'checkpoints' / 'last.ckpt'} was trained with "
            "another network: model.attention._target_=vitattn.attention.softmax.SoftmaxAttention"
        )
    )
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before  # untouched
    assert json.loads((run / "metrics.json").read_text())["status"] == "completed"


def test_eval_refuses_a_file_that_is_not_a_vitattn_checkpoint(
    tmp_path: Path, data_dir: Path
) -> None:
    foreign = tmp_path / "resnet.ckpt"
    torch.save({"state_dict": {"conv1.weight": torch.zeros(1)}}, foreign)
    run_dir = tmp_path / "eval"
    result = run_cli(
        "vitattn-eval",
        f"ckpt_path={foreign}",
        f"hydra.run.dir={run_dir}",
        data_dir=data_dir,
        check=False,
    )
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(f"vitattn-eval: error: ckpt_path={foreign} is not a vitattn-train checkpoint")
    )
    assert not run_dir.exists()


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
    assert message.startswith(
        f"ckpt_path={path} is not a vitattn-train checkpoint (RuntimeError: Error(s) in loading"
    )
    assert "\n" not in message  # torch lists each missing key on a line of its own


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
