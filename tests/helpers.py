"""What the tests share: tiny settings, configs composed as the CLI composes them, a runner for
the console scripts, and callbacks that tests plug into real runs (``+callbacks.x._target_``)."""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

from vitattn.models.vit import VisionTransformer
from vitattn.runs.checkpoint_io import AtomicCheckpointIO
from vitattn.utils.config import CONFIG_DIR, PROJECT_ROOT

BIN = Path(sys.executable).parent
"""Where the console scripts of this environment are."""

SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"

QUIET_CPU = ["trainer=cpu", "data.eval_batch_size=512", "callbacks.progress_bar.refresh_rate=0"]
"""A CPU trainer without a progress bar, evaluating in large batches."""

TINY = [*QUIET_CPU, "model.embed_dim=32", "model.depth=1", "model.heads=2", "data.batch_size=64"]
"""Settings small enough for a CPU test, used by every training test."""


def steps(max_steps: int, validate_every: int) -> list[str]:
    """Overrides for a run of ``max_steps`` training steps validating every ``validate_every``."""
    return [f"trainer.max_steps={max_steps}", f"trainer.val_check_interval={validate_every}"]


FEW_STEPS = [*TINY, *steps(8, 4)]
"""A few steps of the tiny model, validating twice."""

RUN_40 = [*TINY, *steps(40, 10)]
"""Forty steps of the tiny model, long enough to be stopped in the middle."""


def tiny_vit(attention: str = "softmax", knobs: dict[str, Any] | None = None) -> VisionTransformer:
    """A seeded two-layer ViT of 16 tokens (16 x 16 images, 4 x 4 patches) with ``attention``."""
    from vitattn.bench.kernels import attention_factory

    torch.manual_seed(0)
    return VisionTransformer(
        image_size=16,
        patch_size=4,
        embed_dim=32,
        depth=2,
        heads=2,
        num_classes=10,
        attention=attention_factory(attention, knobs),
    )


def assert_one_line_refusal(
    config_name: str, overrides: list[str], validate: Any, message: str, run_dir: Path
) -> None:
    """Composing ``configs/<config_name>.yaml`` with ``overrides`` and validating it with
    ``validate`` (as the app does before Hydra starts) raises one line matching ``message``,
    and nothing is created at ``run_dir``."""
    from vitattn.cli.console import check_composition
    from vitattn.errors import ConfigError

    with pytest.raises(ConfigError, match=message) as raised:
        check_composition(config_name, [*overrides, f"hydra.run.dir={run_dir}"], validate)
    assert "\n" not in str(raised.value)
    assert not run_dir.exists()


def compose_config(name: str, overrides: list[str], output_dir: Path) -> DictConfig:
    """Compose ``configs/<name>.yaml`` as the CLI would, with the run directory set."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name=name, overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)
        cfg.hydra.runtime.output_dir = str(output_dir)
    return cfg


def train_with(run_dir: Path, data_dir: Path, *overrides: str) -> dict[str, Any]:
    """``vitattn-train``'s task with ``overrides`` on the data in ``data_dir``, in this process.
    Hydra's global state is cleared before and after, so module and session fixtures (which run
    outside the per-test clean-up) may call it too."""
    from hydra.core.global_hydra import GlobalHydra

    from vitattn.train import train

    GlobalHydra.instance().clear()
    try:
        return train(compose_config("train", [f"paths.data_dir={data_dir}", *overrides], run_dir))
    finally:
        GlobalHydra.instance().clear()


def train_tiny(run_dir: Path, data_dir: Path, *overrides: str) -> dict[str, Any]:
    """``vitattn-train``'s task on the tiny settings (and ``overrides``), in this process."""
    return train_with(run_dir, data_dir, *TINY, *overrides)


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file (``summary.csv``, ``results.csv``, ...) as dictionaries."""
    with path.open() as handle:
        return list(csv.DictReader(handle))


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table in ``text``: its rows (header first, the ``---`` rule left out) as
    lists of stripped cells."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(set(cell) <= set("-: ") for cell in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def run_cli(
    program: str,
    *args: str,
    data_dir: Path,
    check: bool = True,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run console script ``program`` (``vitattn-train``, ...) with ``args`` on the data in
    ``data_dir``; with ``check``, a non-zero exit fails the test with the output's tail. The
    repository root is on ``PYTHONPATH``, so that a run can use the callbacks and plugins of
    this module (``+callbacks.x._target_=tests.helpers.SigtermAtStep``)."""
    environment = {
        **os.environ,
        "VITATTN_DATA_DIR": str(data_dir),
        "HYDRA_FULL_ERROR": "0",
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])
        ),
        **(env or {}),
    }
    result = subprocess.run(
        [str(BIN / program), *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout,
    )
    return checked(result) if check else result


def checked(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """``result``, or the test failed with its output's tail where the command exited non-zero."""
    if result.returncode != 0:
        command = " ".join(result.args)
        pytest.fail(f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def run_sweep(
    sweep: Path, *overrides: str, data_dir: Path, check: bool = True, in_process: bool = True
) -> Any:
    """``vitattn-train -m`` with ``overrides``, its jobs in ``sweep``; in this process (Hydra's
    basic launcher runs the jobs one after another in the command's process anyway) unless
    ``in_process`` is false."""
    from tests.in_process import run_in_process

    multirun = ["-m", *overrides, f"hydra.sweep.dir={sweep}"]
    run = run_in_process if in_process else run_cli
    return run("vitattn-train", *multirun, data_dir=data_dir, check=check)


def refused(
    program: str,
    *args: str,
    data_dir: Path,
    creates: Path | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run ``program`` expecting a refusal: exit status 1, no traceback, one last line
    ``<program>: error: <message>``, and no ``creates`` (the run directory it would have made).
    Returns the message."""
    result = run_cli(program, *args, data_dir=data_dir, check=False, env=env)
    return refusal_message(program, result, creates)


def refusal_message(
    program: str, result: subprocess.CompletedProcess, creates: Path | None = None
) -> str:
    """The message of a refusal, once ``result`` is one: exit status 1, no traceback, one last
    line ``<program>: error: <message>``, and no ``creates``."""
    line = last_line(result)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert line.startswith(f"{program}: error: "), result.stderr[-3000:]
    if creates is not None:
        assert not creates.exists(), f"{creates} was created"
    return line.removeprefix(f"{program}: error: ")


def last_line(result: subprocess.CompletedProcess) -> str:
    """The last line a command printed on stderr (where a refusal's one line goes)."""
    lines = result.stderr.strip().splitlines()
    return lines[-1] if lines else ""


class SigtermAtStep(L.Callback):
    """Send this process SIGTERM when the global step reaches ``step`` (a pre-empted job)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


class SigintAtStep(L.Callback):
    """Press Ctrl-C (send SIGINT) ``times`` times when the global step reaches ``step``."""

    def __init__(self, step: int, times: int = 1) -> None:
        self.step = step
        self.times = times

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            for _ in range(self.times):
                os.kill(os.getpid(), signal.SIGINT)


class FailingCheckpointIO(AtomicCheckpointIO):
    """Fail the ``failing_save``-th write of ``last.ckpt`` half-way through: with a full disk
    (``ENOSPC``), or by SIGKILL of the whole process (``how="kill"``)."""

    def __init__(self, failing_save: int = 2, how: str = "enospc") -> None:
        super().__init__()
        self.failing_save = failing_save
        self.how = how
        self.saves_of_last = 0
        self._fail_this_write = False

    def save_checkpoint(self, checkpoint: dict, path: Any, storage_options: Any = None) -> None:
        if Path(path).name == "last.ckpt":
            self.saves_of_last += 1
            self._fail_this_write = self.saves_of_last == self.failing_save
        super().save_checkpoint(checkpoint, path, storage_options)

    def write(self, checkpoint: dict, handle: Any) -> None:
        if not self._fail_this_write:
            super().write(checkpoint, handle)
            return
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        handle.write(buffer.getvalue()[: buffer.tell() // 2])
        handle.flush()
        if self.how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


KEPT = b"a colleague's file: its bytes must stay as they are\n"
"""What a file outside a run holds (``elsewhere/kept.txt``): a hostile file must leave it so."""


def copy_run(run: Path, target: Path) -> Path:
    """A copy of the run directory ``run`` at ``target``, without its lock files (a copy is no
    process's); ``target``."""
    import shutil

    shutil.copytree(run, target)
    for lock in target.glob(".vitattn.lock*"):
        lock.unlink()
    return target


def tree_digest(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root``: equal digests, equal trees."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


PAUSE_SECONDS = "TESTS_PAUSE_SECONDS"
"""The environment variable that sets :class:`PauseAfterStep`'s pause where its settings do not:
the process a test kills pauses, a continuation with the same settings does not wait."""


class PauseAfterStep(L.Callback):
    """Sleep ``seconds`` (by default ``$TESTS_PAUSE_SECONDS``, else not at all) after every
    training step from ``step`` on: a run that stays busy long enough for another process to
    meet it."""

    def __init__(self, step: int, seconds: float | None = None) -> None:
        self.step = step
        self.seconds = float(os.environ.get(PAUSE_SECONDS, "0")) if seconds is None else seconds

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step >= self.step:
            import time

            time.sleep(self.seconds)


class CrashAtStep(L.Callback):
    """Raise an unexpected ``RuntimeError`` at global step ``step`` (a bug in the middle of a
    run)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError(f"boom at step {self.step}")


class NanLossAtStep(L.Callback):
    """Make the parameters NaN after ``step`` steps, so the next loss is NaN (a diverged run)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any):
        if trainer.global_step == self.step:
            with torch.no_grad():
                for parameter in pl_module.parameters():
                    parameter.fill_(float("nan"))


class InfiniteLossAtStep(L.Callback):
    """From global step ``step`` on, the training step returns a loss of +inf (its logits are
    finite, the loss overflows): the other way a run diverges."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any
    ) -> None:
        if trainer.global_step != self.step:
            return
        training_step = pl_module.training_step

        def infinite(*step_args: Any, **step_kwargs: Any) -> Any:
            loss = training_step(*step_args, **step_kwargs)
            return loss * float("inf")

        pl_module.training_step = infinite  # type: ignore[method-assign]


class SaveFinalWeights(L.Callback):
    """Save the module's weights as they are when training ends, to ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        torch.save({"global_step": trainer.global_step, **pl_module.state_dict()}, self.path)


class ComputeDtypeProbe(L.Callback):
    """Write to ``path`` (JSON) the dtypes of one training step: the parameters', and of the
    first attention kernel's q and output, as the kernel receives and returns them."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.seen: dict[str, str] = {}
        self._handle: Any = None

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any
    ) -> None:
        from vitattn.attention.common.base import AttentionKernel

        if self._handle is not None or self.seen:
            return
        kernel = next(m for m in pl_module.modules() if isinstance(m, AttentionKernel))

        def record(module: Any, inputs: tuple, output: torch.Tensor) -> None:
            self.seen = {
                "parameters": str(next(pl_module.parameters()).dtype),
                "q": str(inputs[0].dtype),
                "attention_output": str(output.dtype),
            }
            self._handle.remove()

        self._handle = kernel.register_forward_hook(record)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        Path(self.path).write_text(json.dumps(self.seen))


class CountTestImages(L.Callback):
    """Write to ``<path>.rank<k>`` how many test images this process evaluated."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.images = 0

    def on_test_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        self.images += len(batch[1])

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        Path(f"{self.path}.rank{trainer.global_rank}").write_text(str(self.images))
