"""Commands that reuse a checkpoint read the data as the checkpoint's run was trained on it.

The case that needs it: a Long Range Arena model (grayscale, raw 8-bit intensities) evaluated,
fine-tuned or inspected without repeating ``data.grayscale=true data.normalize=false``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.support.presets import QUIET_CPU, TINY, compose_config, steps
from tests.support.runners import trained_run
from vitattn.data.as_trained import as_trained, saved_data_settings
from vitattn.data.cifar10 import CIFAR10DataModule
from vitattn.errors import ConfigError

# experiment=lra_image at test size: grayscale, un-normalised, one token per pixel.
LRA_TINY = [
    "experiment=lra_image",
    *QUIET_CPU,
    *steps(3, 3),
    "+trainer.limit_val_batches=1",
    "data.batch_size=16",
    "logger=csv",
]


@pytest.fixture(scope="module")
def lra_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    return trained_run(tmp_path_factory, "lra", data_dir, *LRA_TINY)


@pytest.mark.slow
def test_checkpoints_carry_the_data_settings(lra_run: Path) -> None:
    saved = saved_data_settings(lra_run / "checkpoints" / "last.ckpt")
    assert (saved["grayscale"], saved["normalize"], saved["shift"]) == (True, False, "none")


@pytest.mark.slow
def test_eval_reproduces_an_lra_run_without_repeating_its_data_settings(
    lra_run: Path, data_dir: Path, tmp_path: Path
) -> None:
    from vitattn.eval import evaluate

    trained = json.loads((lra_run / "metrics.json").read_text())
    cfg = compose_config(
        "eval",
        [f"ckpt_path={trained['ckpt_path']}", "trainer=cpu", f"paths.data_dir={data_dir}"],
        tmp_path,
    )
    assert cfg.data.grayscale is None  # nothing about the data given
    metrics = evaluate(cfg)
    assert float(metrics["test/acc"]) == pytest.approx(trained["test/acc"], abs=1e-6)
    assert float(metrics["test/loss"]) == pytest.approx(trained["test/loss"], rel=1e-5)


@pytest.mark.slow
def test_a_value_given_for_the_data_wins_over_the_checkpoint(lra_run: Path, tmp_path: Path) -> None:
    ckpt = lra_run / "checkpoints" / "last.ckpt"
    cfg = compose_config("eval", [f"ckpt_path={ckpt}", "data.shift=invert"], tmp_path)
    data = as_trained(cfg.data, saved_data_settings(ckpt))
    assert (data.grayscale, data.normalize, data.shift) == (True, False, "invert")
    # only the settings asked for are taken from the checkpoint
    data = as_trained(cfg.data, saved_data_settings(ckpt), settings=("grayscale",))
    assert (data.grayscale, data.normalize) == (True, None)


@pytest.mark.slow
def test_eval_reads_the_data_settings_from_the_bytes_it_built_the_network_from(
    lra_run: Path, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint is replaced, by one whose data settings say three normalised channels,
    right after vitattn-eval has read the bytes it builds the grayscale network from: the data
    is still read as that network was trained."""
    from vitattn.eval import evaluate
    from vitattn.runs import checkpoints

    trained = json.loads((lra_run / "metrics.json").read_text())
    ckpt = tmp_path / "shared.ckpt"
    ckpt.write_bytes(Path(trained["ckpt_path"]).read_bytes())
    other = torch.load(ckpt, map_location="cpu", weights_only=False)
    other[checkpoints.DATA_SETTINGS_KEY].update(grayscale=False, normalize=True)
    replacement = tmp_path / "replacement.ckpt"
    torch.save(other, replacement)
    read_at_most = checkpoints.read_at_most

    def read_then_replace(path: Path, bound: int) -> bytes:
        data = read_at_most(path, bound)
        replacement.replace(ckpt)  # another process rewrites the file
        return data

    monkeypatch.setattr(checkpoints, "read_at_most", read_then_replace)
    cfg = compose_config(
        "eval", [f"ckpt_path={ckpt}", "trainer=cpu", f"paths.data_dir={data_dir}"], tmp_path
    )
    metrics = evaluate(cfg)
    assert not replacement.exists()  # the file was replaced during the run
    assert saved_data_settings(ckpt)["grayscale"] is False
    assert float(metrics["test/acc"]) == pytest.approx(trained["test/acc"], abs=1e-6)


def test_without_saved_settings_the_data_module_defaults_apply(tmp_path: Path) -> None:
    foreign = tmp_path / "plain.ckpt"
    torch.save({"state_dict": {}}, foreign)
    cfg = compose_config("eval", [f"ckpt_path={foreign}"], tmp_path)
    for ckpt in (foreign, None):
        data = as_trained(cfg.data, saved_data_settings(ckpt))
        assert (data.grayscale, data.normalize, data.shift) == (False, True, "none")


@pytest.mark.slow
def test_finetune_and_its_merged_checkpoint_keep_the_base_input_format(
    lra_run: Path, data_dir: Path, tmp_path: Path
) -> None:
    from vitattn.eval import evaluate
    from vitattn.finetune import finetune

    run_dir = tmp_path / "finetune"
    overrides = [
        f"ckpt_path={lra_run / 'checkpoints' / 'last.ckpt'}",
        f"paths.data_dir={data_dir}",
        *[o for o in LRA_TINY if not o.startswith("experiment=")],
        "trainer.max_steps=2",
        "lora.rank=2",
        "lora.target_modules=[attn.qkv]",
        "data.shift=invert",
    ]
    metrics = finetune(compose_config("finetune", overrides, run_dir))
    merged = run_dir / "checkpoints" / "merged.ckpt"
    saved = saved_data_settings(merged)
    assert (saved["grayscale"], saved["normalize"], saved["shift"]) == (True, False, "invert")
    # vitattn-eval on the merged checkpoint: the inverted grayscale test set, with no data settings
    cfg = compose_config(
        "eval", [f"ckpt_path={merged}", "trainer=cpu", f"paths.data_dir={data_dir}"], tmp_path
    )
    assert float(evaluate(cfg)["test/acc"]) == pytest.approx(metrics["test/acc_merged"], abs=1e-6)


@pytest.mark.slow
def test_bench_spectrum_reads_an_lra_checkpoint(lra_run: Path, data_dir: Path, tmp_path: Path):
    from vitattn.bench.app import benchmark

    cfg = compose_config(
        "bench",
        [
            "mode=spectrum",
            f"ckpt_path={lra_run / 'checkpoints' / 'last.ckpt'}",
            "spectrum.images=1",
            f"paths.data_dir={data_dir}",
        ],
        tmp_path,
    )
    benchmark(cfg)
    assert (tmp_path / "spectrum_summary.csv").is_file()


def test_grayscale_statistics_are_fitted_on_the_training_split_or_given(data_dir: Path) -> None:
    """Fitted on the training split and kept in the hyperparameters a checkpoint stores; given
    (a checkpoint's, through :func:`as_trained`), used as they are, whatever the folder holds."""
    fitted = CIFAR10DataModule(data_dir, grayscale=True)
    fitted.setup("fit")
    luma = fitted.train_set.tensors[0].float() / 255
    assert fitted.hparams["luma_mean"] == pytest.approx(float(luma.mean()))
    assert fitted.hparams["luma_std"] == pytest.approx(float(luma.std()))
    given = CIFAR10DataModule(data_dir, grayscale=True, luma_mean=0.25, luma_std=0.5)
    given.setup("fit")
    assert (float(given.mean), float(given.std)) == (0.25, 0.5)
    assert (given.hparams["luma_mean"], given.hparams["luma_std"]) == (0.25, 0.5)


@pytest.mark.slow
def test_a_grayscale_checkpoint_scores_alike_beside_other_training_files(
    tmp_path_factory: pytest.TempPathFactory, data_dir: Path, tmp_path: Path
) -> None:
    """The same test images, beside training files of another folder, are normalised as the
    network was trained: its checkpoint holds the statistics. Until 2026-12-02 each command
    fitted them again on the folder at hand: the data audit's run scored 0.1377 on one folder
    and 0.1347 on the other, which held the same test batch."""
    from vitattn.eval import evaluate

    gray = [*TINY, *steps(6, 6), "data.grayscale=true", "model.in_channels=1", "logger=csv"]
    run = trained_run(tmp_path_factory, "gray", data_dir, *gray)
    trained = json.loads((run / "metrics.json").read_text())
    saved = saved_data_settings(trained["ckpt_path"])
    assert saved["luma_mean"] is not None and saved["luma_std"] is not None
    other = tmp_path / "other" / "cifar-10-batches-py"
    other.mkdir(parents=True)
    batches = data_dir / "cifar-10-batches-py"
    for name in ("batches.meta", "test_batch"):
        (other / name).write_bytes((batches / name).read_bytes())
    for index in range(1, 6):  # one batch five times: other training statistics
        (other / f"data_batch_{index}").write_bytes((batches / "data_batch_3").read_bytes())
    scores = []
    for folder in (data_dir, other.parent):
        cfg = compose_config(
            "eval",
            [f"ckpt_path={trained['ckpt_path']}", "trainer=cpu", f"paths.data_dir={folder}"],
            tmp_path / folder.name,
        )
        metrics = evaluate(cfg)
        scores.append((float(metrics["test/acc"]), float(metrics["test/loss"])))
    assert scores[0] == scores[1]
    assert scores[0][0] == pytest.approx(trained["test/acc"], abs=1e-6)


@pytest.mark.parametrize("setting", ["grayscale", "normalize", "hflip"])
def test_an_unresolved_setting_is_a_one_line_error(setting: str, data_dir: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        CIFAR10DataModule(data_dir, **{setting: None})
    assert str(raised.value) == f"data.{setting}=None is not valid; choose true or false"
