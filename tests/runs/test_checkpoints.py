"""No file a colleague sends runs code: checkpoints are read with torch's ``weights_only``
unpickler (older ones, with OmegaConf hyper-parameters, still load), CIFAR-10 batch files with an
unpickler that builds arrays only, and a blocked ``_target_`` in a run's recorded overrides is
one line that leaves the run as it was. Each payload here really would run ``touch`` if
unpickled or instantiated: the marker file staying absent is the test."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from tests.support.presets import tiny_net
from tests.support.trees import tree_digest
from vitattn.cli.console import check_composition
from vitattn.errors import ConfigError, DataError
from vitattn.runs.checkpoints import UnsafeCheckpointError, read_checkpoint


class Payload:
    """Unpickled, it runs ``touch <marker>``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str]]:
        return os.system, (f"touch {self.marker}",)


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "PWNED"


@pytest.fixture
def payload_checkpoint(tmp_path: Path, marker: Path) -> Path:
    """A checkpoint dictionary like vitattn-train's, carrying a payload in its settings."""
    path = tmp_path / "run" / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    torch.save(
        {"global_step": 3, "hyper_parameters": {"net": {"depth": 2}, "x": Payload(marker)}}, path
    )
    # the payload is real: the unsafe unpickler runs it
    torch.load(path, weights_only=False)
    assert marker.exists()
    marker.unlink()
    return path


def test_a_checkpoint_with_code_is_refused_in_one_line_and_never_runs(
    payload_checkpoint: Path, marker: Path
) -> None:
    with pytest.raises(UnsafeCheckpointError) as raised:
        read_checkpoint(payload_checkpoint)
    message = str(raised.value)
    assert "\n" not in message and "was not loaded" in message and "may carry code" in message
    assert "posix.system" in message or "os.system" in message
    assert "weights_only=False" not in message  # torch's advice to trust the file is not quoted
    assert not marker.exists()


@pytest.mark.parametrize(
    ("config_name", "validate_path", "extra"),
    [
        ("train", "vitattn.train.validate", []),
        ("eval", "vitattn.eval.validate", []),
        ("finetune", "vitattn.finetune.validate", []),
        ("bench", "vitattn.bench.app.load_settings", ["mode=approx"]),
        ("bench", "vitattn.bench.app.load_settings", ["mode=spectrum"]),
    ],
)
def test_every_command_that_takes_a_checkpoint_refuses_a_payload(
    config_name: str,
    validate_path: str,
    extra: list[str],
    payload_checkpoint: Path,
    marker: Path,
    tmp_path: Path,
) -> None:
    from hydra.utils import get_method

    validate = get_method(validate_path)
    arguments = [*extra, f"ckpt_path={payload_checkpoint}", f"hydra.run.dir={tmp_path / 'out'}"]
    with pytest.raises(ConfigError, match=r"was not loaded: .* may carry code") as raised:
        check_composition(config_name, arguments, validate)
    assert "\n" not in str(raised.value)
    assert not marker.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("contents", "said"),
    [
        (
            b'{"status": "completed", "test/acc": 0.5}\n',  # a run's metrics.json
            "is not a torch checkpoint (not a zip archive, as torch.save writes one); pass a "
            ".ckpt saved by vitattn-train",
        ),
        (b"", "is empty, not a torch checkpoint; pass a .ckpt saved by vitattn-train"),
    ],
)
def test_a_file_that_is_no_torch_checkpoint_is_told_so_in_one_line(
    contents: bytes, said: str, tmp_path: Path
) -> None:
    """It was "not a readable checkpoint (RuntimeError: mmap can only be used with files saved
    with `torch.save(_use_new_zipfile_serialization=True), please torch.save your checkpoint
    ...)": torch's advice to save the file again, beside the point for a file that is none."""
    path = tmp_path / "metrics.json"
    path.write_bytes(contents)
    with pytest.raises(ConfigError) as raised:
        read_checkpoint(path)
    assert str(raised.value) == f"{path} {said}"


def test_a_checkpoint_of_an_earlier_version_with_omegaconf_settings_still_loads(
    tmp_path: Path,
) -> None:
    from vitattn.loading import load_classifier
    from vitattn.models.module import ViTClassifier

    module = ViTClassifier(
        net=tiny_net(), optimizer={"_target_": "torch.optim.AdamW", "_partial_": True}
    )
    old = {
        "state_dict": module.state_dict(),
        "pytorch-lightning_version": "2.2.0",
        "global_step": 0,
        # written the old way: Lightning's save_hyperparameters kept the DictConfig
        "hyper_parameters": OmegaConf.create(dict(module.hparams)),
        "datamodule_hyper_parameters": OmegaConf.create({"normalize": True, "grayscale": False}),
    }
    path = tmp_path / "old.ckpt"
    torch.save(old, path)
    assert read_checkpoint(path)["hyper_parameters"]["net"]["depth"] == 1
    loaded = load_classifier(path)  # Lightning's own loading, with its weights_only default
    for name, tensor in module.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_a_batch_file_with_code_is_refused_and_never_runs(tmp_path: Path, marker: Path) -> None:
    from vitattn.data.cifar10 import read_batch_file

    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({"data": Payload(marker), "labels": [0]}))
    with pytest.raises(DataError, match="may carry code") as raised:
        read_batch_file(path)
    assert "\n" not in str(raised.value) and not marker.exists()


def test_a_blocked_target_in_a_runs_recorded_overrides_is_one_line_and_touches_nothing(
    tmp_path: Path, marker: Path
) -> None:
    from vitattn.cli.resume import resume_arguments

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / "checkpoints").mkdir()
    torch.save({"global_step": 1, "hyper_parameters": {"net": {}}}, run / "checkpoints/last.ckpt")
    recorded = ["+callbacks.x._target_=os.system", f"+callbacks.x.command=touch {marker}"]
    (run / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(recorded))
    before = tree_digest(run)
    refusal = r"overrides\.yaml line 1: callbacks\.x\._target_=os\.system is not something vitattn"
    with pytest.raises(ConfigError, match=refusal) as raised:
        resume_arguments(["resume=true", f"hydra.run.dir={run}"])
    assert "\n" not in str(raised.value)
    assert tree_digest(run) == before and not marker.exists()
