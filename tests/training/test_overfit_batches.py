"""Lightning's ``trainer.overfit_batches`` (and the ``debug=overfit`` preset): the same first
batches of the training split every epoch, in order, as whole batches.

Lightning puts a sampler of single images in place of a loader's sampler when it overfits,
unless the loader's sampler is a ``SequentialSampler``; the data module samples whole batches,
so that handed it images where it slices batches, and the run ended in a shape error (the old
``debug=overfit`` preset did)."""

from __future__ import annotations

import json
from pathlib import Path

import hydra
import pytest

from tests.support.in_process import run_in_process
from tests.support.presets import TINY, compose_config, plug
from tests.support.probes import SaveTrainingLabels
from tests.support.runners import refusal_message, run_cli, train_tiny
from vitattn.cli.console import check_composition
from vitattn.errors import ConfigError
from vitattn.train import validate as validate_training


def first_training_labels(data_dir: Path, tmp_path: Path, batch_size: int) -> list[int]:
    """The labels of the first ``batch_size`` images of the training split of :data:`TINY`'s
    data settings, in the split's order."""
    cfg = compose_config("train", [*TINY, f"paths.data_dir={data_dir}"], tmp_path)
    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.setup("fit")
    return datamodule.train_set.tensors[1][:batch_size].tolist()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("setting", "same"),
    [
        (["debug=overfit"], True),
        (["+trainer.overfit_batches=1"], True),
        (["+trainer.limit_train_batches=1"], False),  # the contrast: a new batch each epoch
    ],
    ids=["debug=overfit", "overfit_batches=1", "limit_train_batches=1"],
)
def test_overfitting_trains_on_the_first_batch_of_the_training_split_every_epoch(
    setting: list[str], same: bool, tmp_path: Path, data_dir: Path
) -> None:
    saved = tmp_path / "labels.json"
    run = [*setting, "trainer.max_epochs=3", "trainer.max_steps=-1", "trainer.val_check_interval=3"]
    metrics = train_tiny(
        tmp_path / "run", data_dir, *run, *plug("labels", SaveTrainingLabels, path=saved)
    )
    assert metrics["steps"] == 3 and metrics["epochs"] == 3
    batches = json.loads(saved.read_text())
    assert [batch["epoch"] for batch in batches] == [0, 1, 2]
    labels = [batch["labels"] for batch in batches]
    assert all(len(these) == 64 for these in labels)  # whole batches, not single images
    if same:
        first = first_training_labels(data_dir, tmp_path / "compose", 64)
        assert labels == [first] * 3
    else:
        assert labels[0] != labels[1] != labels[2]


@pytest.mark.parametrize(("split", "limit"), [("train", 2), ("val", 0)])
def test_a_limit_of_batches_that_overfitting_replaces_is_one_line(split: str, limit: int) -> None:
    """Lightning takes ``overfit_batches`` batches of the training and the validation split in
    place of ``limit_train_batches`` and ``limit_val_batches``, without a word: a run given
    both would not do what one of them says (``limit_val_batches=0`` validated all the same)."""
    overrides = [*TINY, "debug=overfit", f"+trainer.limit_{split}_batches={limit}"]
    with pytest.raises(ConfigError) as info:
        check_composition("train", overrides, validate_training)
    assert str(info.value) == (
        f"trainer.limit_{split}_batches is not taken with trainer.overfit_batches=1: Lightning "
        "takes that many batches of the training and the validation split in its place; drop "
        f"trainer.limit_{split}_batches"
    )


@pytest.mark.slow
def test_each_process_of_an_overfitting_run_trains_on_its_own_batches_every_epoch(
    tmp_path: Path, data_dir: Path
) -> None:
    """On several processes, each reads its shard of the training split in order
    (``DistributedSampler(shuffle=False)``): the same batches every epoch, not the other's."""
    saved = tmp_path / "labels.json"
    run_cli(
        "vitattn-train",
        *TINY,
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "+trainer.overfit_batches=2",
        "trainer.max_epochs=3",
        "trainer.val_check_interval=2",
        *plug("labels", SaveTrainingLabels, path=saved),
        f"hydra.run.dir={tmp_path / 'run'}",
        data_dir=data_dir,
    )
    per_rank = []
    for rank in (0, 1):
        batches = json.loads(saved.with_name(f"labels.json.rank{rank}").read_text())
        assert [batch["epoch"] for batch in batches] == [0, 0, 1, 1, 2, 2]
        labels = [batch["labels"] for batch in batches]
        assert all(len(these) == 64 for these in labels)
        assert labels[0:2] == labels[2:4] == labels[4:6]
        per_rank.append(labels[0:2])
    assert per_rank[0] != per_rank[1]


@pytest.mark.slow
def test_a_share_to_overfit_that_takes_no_batch_is_one_line(tmp_path: Path, data_dir: Path):
    """As ``limit_train_batches=0.0001``: Lightning failed as the fit started, the run begun."""
    out = tmp_path / "out"
    command = [*TINY, "+trainer.overfit_batches=0.0001", f"hydra.run.dir={out}"]
    result = run_in_process("vitattn-train", *command, data_dir=data_dir, check=False)
    said = refusal_message("vitattn-train", result)
    assert said.startswith("trainer.overfit_batches=0.0001 is not valid; choose a share of at ")
    assert said.endswith("a number of batches >= 1, or 0 (off)"), said
    assert not out.exists()
