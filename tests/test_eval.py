"""``vitattn-eval`` as TensorBoard reads it: the evaluation is a run of the log directory with an
HPARAMS session as a training run's, its test accuracy under the tag training's has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra.utils import instantiate

from tests.support.in_process import run_in_process
from tests.support.presets import TINY, compose_config
from vitattn.training.hparams import TRAINING_COLUMNS
from vitattn.training.logger import FINETUNING_RESULTS, RESULTS, summary_tag

CHECKPOINT = "~checkpoint"
"""The setting that names the checkpoint evaluated."""


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log directory holding a tiny, untrained checkpoint where ``vitattn-train`` puts one:
    ``train/runs/tiny/checkpoints/last.ckpt``."""
    from vitattn.lora.module import save_plain_checkpoint

    root = tmp_path_factory.mktemp("eval")
    cfg = compose_config("train", TINY, root / "compose")
    module = instantiate(cfg.module)
    data_settings = dict(instantiate(cfg.data).hparams)
    checkpoint = root / "outputs" / "train" / "runs" / "tiny" / "checkpoints" / "last.ckpt"
    save_plain_checkpoint(module, checkpoint, data_settings=data_settings)
    return root / "outputs"


@pytest.fixture(scope="module")
def evaluation(log_dir: Path, data_dir: Path) -> Path:
    """The run directory of ``vitattn-eval`` of that checkpoint, on the inverted images, with
    ``configs/eval.yaml``'s loggers (none given)."""
    run = log_dir / "eval" / "runs" / "tiny"
    run_in_process(
        "vitattn-eval",
        f"ckpt_path={log_dir / 'train' / 'runs' / 'tiny' / 'checkpoints' / 'last.ckpt'}",
        "trainer=cpu",
        "data.eval_batch_size=512",
        "data.shift=invert",
        f"paths.log_dir={log_dir}",
        f"hydra.run.dir={run}",
        data_dir=data_dir,
    )
    return run


@pytest.mark.slow
def test_an_evaluation_writes_its_test_accuracy_and_an_hparams_session(evaluation: Path) -> None:
    """With the default config an evaluation wrote no event files; given a TensorBoard logger,
    no ``test/acc`` (the logger drops ``test/``), no session, nothing naming the checkpoint
    (audit)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    tested = json.loads((evaluation / "metrics.json").read_text())["test/acc"]
    accumulator = EventAccumulator(str(evaluation))
    accumulator.Reload()
    (logged,) = accumulator.Scalars(summary_tag("test/acc", RESULTS))
    assert logged.value == pytest.approx(tested)  # the column training runs show theirs in

    content = accumulator.PluginTagToContent(metadata.PLUGIN_NAME)
    start = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    assert start.hparams["attention"].string_value == "softmax"
    assert start.hparams["data/shift"].string_value == "invert"
    assert start.hparams["model/depth"].number_value == 1
    assert start.hparams["optimizer/lr"].number_value == pytest.approx(1e-3)
    # The checkpoint by its training run's TensorBoard name, no path (DESIGN.md).
    assert start.hparams[CHECKPOINT].string_value == "train/runs/tiny/checkpoints/last.ckpt"
    texts = [value.string_value for value in start.hparams.values()]
    assert not [text for text in texts if str(evaluation.parents[3]) in text], texts
    end = plugin_data_pb2.HParamsPluginData.FromString(content[metadata.SESSION_END_INFO_TAG])
    assert end.session_end_info.status == api_pb2.STATUS_SUCCESS

    # The layout, which TensorBoard may read for the whole log directory: every task's results,
    # training's columns (the seed a number, as training runs record it) and the checkpoint.
    experiment = metadata.parse_experiment_plugin_data(content[metadata.EXPERIMENT_TAG])
    metrics = [info.name.tag for info in experiment.metric_infos]
    every = {summary_tag(key, task) for task in (RESULTS, FINETUNING_RESULTS) for key in task}
    assert metrics[0] == "~summary/acc_test" and set(metrics) == every
    columns = {info.name: info.type for info in experiment.hparam_infos}
    assert {*TRAINING_COLUMNS, CHECKPOINT} <= set(columns)
    assert columns["seed"] == api_pb2.DATA_TYPE_FLOAT64


def test_eval_logs_to_tensorboard_unless_told_not_to(tmp_path: Path) -> None:
    """As ``vitattn-train`` and Lightning's ``Trainer`` do; ``~logger`` leaves it out."""
    assert "tensorboard" in compose_config("eval", ["ckpt_path=x.ckpt"], tmp_path).logger
    assert not compose_config("eval", ["ckpt_path=x.ckpt", "~logger"], tmp_path).get("logger")
