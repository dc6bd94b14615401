"""Training on a GPU does not wait for the GPU at every step: the host reads a device value (an
``.item()``, a ``bool(tensor)``, ...) only at logging steps, with ``trainer=gpu``'s
``log_every_n_steps``. Counted on the CPU by wrapping every way a tensor reaches the host, over
the training steps (validation excluded). Reads of the optimizer's step counters are not counted:
torch keeps those on the CPU next to GPU parameters (``state["step"]``, unless the optimizer is
fused or capturable, where nothing reads them), so they never wait for the GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from tests.support.presets import compose_config
from tests.support.runners import train_tiny

READS = ("item", "tolist", "__bool__", "__float__", "__int__")
"""Tensor methods that hand a value to the host: on a GPU, each waits for the queued work."""

COUNTS: dict[str, int] = {}


class HostReadCounter(L.Callback):
    """Counts host reads of tensors from training step ``start`` on, validation left out."""

    def __init__(self, start: int = 10) -> None:
        self.start = start
        self.originals: dict[str, Any] = {}

    def _install(self, trainer: L.Trainer) -> None:
        if self.originals:
            return
        host_side = {
            id(state["step"])
            for optimizer in trainer.optimizers
            for state in optimizer.state.values()
            if isinstance(state.get("step"), torch.Tensor)
        }
        for name in READS:
            original = getattr(torch.Tensor, name)
            self.originals[name] = original

            def counted(tensor: torch.Tensor, *args: Any, _original: Any = original) -> Any:
                if id(tensor) not in host_side:
                    COUNTS["reads"] = COUNTS.get("reads", 0) + 1
                return _original(tensor, *args)

            setattr(torch.Tensor, name, counted)

    def _remove(self, *_: Any) -> None:
        for name, original in self.originals.items():
            setattr(torch.Tensor, name, original)
        self.originals = {}

    def on_train_batch_start(self, trainer: L.Trainer, *_: Any) -> None:
        if trainer.global_step == self.start:
            COUNTS["from_step"] = trainer.global_step
        if trainer.global_step >= self.start:
            self._install(trainer)

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        COUNTS["to_step"] = trainer.global_step

    on_validation_start = _remove
    on_train_end = _remove
    on_exception = _remove


def reads_per_step(
    tmp_path: Path, data_dir: Path, log_every_n_steps: int, *overrides: str
) -> float:
    COUNTS.clear()
    train_tiny(
        tmp_path / f"every_{log_every_n_steps}",
        data_dir,
        *overrides,
        "trainer.max_steps=110",
        "trainer.val_check_interval=1000",
        f"trainer.log_every_n_steps={log_every_n_steps}",
        "+callbacks.host_reads._target_=tests.test_host_syncs.HostReadCounter",
    )
    steps = COUNTS["to_step"] - COUNTS["from_step"]
    assert steps >= 90
    return COUNTS.get("reads", 0) / steps


@pytest.mark.slow
def test_training_steps_read_the_device_only_when_they_log(
    tmp_path: Path, data_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    gpu_cfg = compose_config("train", ["trainer=gpu"], tmp_path / "composed")
    every = gpu_cfg.trainer.log_every_n_steps
    assert every >= 20
    # The counter sees a read per step when every step logs (the CPU default) ...
    assert reads_per_step(tmp_path, data_dir, 1) >= 1
    # ... and with trainer=gpu's setting, a few reads per logging step and one per refresh of
    # the progress bar (which still shows the loss): the images/s meter, the NaN guard and the
    # metrics add none of their own.
    refresh = 10
    bar = f"callbacks.progress_bar.refresh_rate={refresh}"
    assert reads_per_step(tmp_path, data_dir, every, bar) < 10 / every + 1 / refresh
    assert "train/loss=" in capfd.readouterr().out
