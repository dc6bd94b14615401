"""The command-line tools end to end, on the real CIFAR-10 subset."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from tests.support.in_process import refused_in_process, run_in_process
from tests.support.presets import QUIET_CPU, TINY, plug, steps
from tests.support.probes import SaveFinalWeights, SaveLoggedNames
from tests.support.runners import refusal_message, refused, run_cli, train_tiny
from vitattn.analysis.events import read_scalars
from vitattn.attention import ATTENTIONS
from vitattn.errors import ConfigError
from vitattn.training.fitting import check_least_steps
from vitattn.training.instantiators import check_nodes

SHORT_RUN = [*TINY, *steps(60, 25)]


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """About 60 steps of a tiny model: the run every test below reads."""
    run_dir = tmp_path_factory.mktemp("short") / "run"
    final = run_dir.parent / "final_weights.pt"  # what the module held when training ended
    saver = plug("final", SaveFinalWeights, path=final)
    names = plug("names", SaveLoggedNames, path=run_dir.parent / "logged_names.json")
    run_in_process(
        "vitattn-train", *SHORT_RUN, *saver, *names, f"hydra.run.dir={run_dir}", data_dir=data_dir
    )
    return run_dir


@pytest.mark.slow
def test_fast_dev_run(tmp_path: Path, data_dir: Path) -> None:
    """What a terminal shows, in its order: a process of its own, stderr into stdout (in this
    process, Lightning's messages went to stderr or with Hydra's to stdout, by whether an
    earlier test had imported Lightning, and the last line of the two joined was either)."""
    result = run_cli(
        "vitattn-train", *TINY, "debug=fdr", f"hydra.run.dir={tmp_path}", data_dir=data_dir,
        merged=True,
    )  # fmt: skip
    output = result.stdout
    assert "fast_dev_run" in output
    assert "Tip:" not in output  # Lightning's adverts for optional cloud packages are dropped
    assert "Trainer(" in output or "GPU available" in output  # its other messages are not
    # It ends with the run's line, and keeps nothing but Hydra's record and log (user review:
    # no line at the end, and attention/maps.npz written)
    last = output.strip().splitlines()[-1]
    assert re.search(r"attention=softmax: best val/acc n/a, test/acc \d+\.\d\d%, ", last), last
    assert "fast_dev_run: nothing kept" in last
    kept = {path.relative_to(tmp_path).parts[0] for path in tmp_path.rglob("*")}
    assert kept == {".hydra", ".vitattn.lock", "train.log"}, kept


@pytest.mark.slow
def test_run_directory_layout(short_run: Path) -> None:
    assert (short_run / ".hydra" / "config.yaml").is_file()
    assert (short_run / "checkpoints" / "last.ckpt").is_file()
    assert list(short_run.glob("events.out.tfevents.*"))  # the run directory is the TB run
    assert (short_run / "confusion_matrix.png").is_file()
    assert (short_run / "attention" / "maps.npz").is_file()
    metrics = json.loads((short_run / "metrics.json").read_text())
    for key in ("val/acc", "test/acc", "train/images_per_sec", "params", "attention", "seconds"):
        assert metrics[key] is not None, key
    assert metrics["attention"] == "softmax"
    assert metrics["steps"] == 60
    assert 0.0 <= metrics["test/acc"] <= 1.0
    # images/s counts images, not steps: a meter counting steps would be 64 times too low (batch
    # 64). The bounds are that factor, not a timing: steady steps are usually faster than the fit's
    # average, but a busy machine may slow any of them.
    average = 60 * 64 / metrics["seconds"]
    assert average / 8 < metrics["train/images_per_sec"] < 20 * average


@pytest.mark.slow
def test_scalars_per_step(short_run: Path) -> None:
    scalars = read_scalars(short_run)
    # The x-axis counts the steps done, as checkpoints and metrics.json do.
    assert [step for step, _ in scalars["train/loss"]] == list(range(1, 61))
    assert [step for step, _ in scalars["train/acc"]] == list(range(1, 61))
    val_steps = [step for step, _ in scalars["val/acc"]]
    assert val_steps == [25, 50, 60]  # every 25 steps, and at the last step
    assert len(scalars["val/loss"]) == 3
    assert [step for step, _ in scalars["val/fidelity"]] == [25, 50, 60]
    assert "epoch" not in scalars and not [tag for tag in scalars if tag.startswith("test/")]
    (test_acc,) = scalars["~summary/acc_test"]  # a result, for the HPARAMS view
    assert test_acc == (
        60,
        pytest.approx(json.loads((short_run / "metrics.json").read_text())["test/acc"]),
    )
    assert len(scalars["train/lr"]) == 60  # one curve: both parameter groups share it
    assert scalars["train/images_per_sec"] and all(
        v > 0 for _, v in scalars["train/images_per_sec"]
    )
    first, last = scalars["train/loss"][0][1], scalars["train/loss"][-1][1]
    assert last < first  # it learns


@pytest.mark.slow
def test_every_figure_the_run_wrote_is_a_name_the_checks_take(short_run: Path) -> None:
    """The names a ``monitor`` and ``optimized_metric`` are checked against (before a run) hold
    every figure Lightning's ``callback_metrics`` held as a real run ended (what a monitor
    reads) and every number of its ``metrics.json``."""
    from omegaconf import OmegaConf

    from vitattn.models.module import ViTClassifier
    from vitattn.training.trial_build import build_callbacks
    from vitattn.utils import metric_names

    cfg = OmegaConf.load(short_run / ".hydra" / "config.yaml")
    callbacks = build_callbacks(cfg).values()  # but the probes this module's run is given
    ours = [c for c in callbacks if not type(c).__module__.startswith("tests.")]
    logged = metric_names.logged_by(ViTClassifier, ours)
    assert logged is not None
    names = json.loads((short_run.parent / "logged_names.json").read_text())
    assert {"train/lr/decay", "train/images_per_sec", "val/fidelity", "val/acc"} <= set(names)
    assert [name for name in names if not metric_names.matches(name, logged)] == []
    results = metric_names.in_results(ViTClassifier, logged, ours, tested=True)
    metrics = json.loads((short_run / "metrics.json").read_text())
    numbers = [k for k, v in metrics.items() if isinstance(v, int | float)]
    assert {"val/acc_best", "test/acc", "val/fidelity", "insight/seconds", "params"} <= set(numbers)
    assert [name for name in numbers if not metric_names.matches(name, results)] == []
    assert all(metric_names.written_by_vitattn(name) for name in numbers)


@pytest.mark.slow
@pytest.mark.parametrize("program", ["vitattn-eval", "vitattn-finetune"])
def test_a_command_whose_result_is_its_test_refuses_to_test_nothing(
    program: str, short_run: Path, tmp_path: Path, data_dir: Path
) -> None:
    """``+trainer.limit_test_batches=0`` ended vitattn-eval in ``unexpected KeyError:
    'test/acc'`` and vitattn-finetune in an ``IndexError``, once their run directories were
    made (red team)."""
    out = tmp_path / "out"
    ckpt = short_run / "checkpoints" / "last.ckpt"
    command = [f"ckpt_path={ckpt}", "+trainer.limit_test_batches=0", f"hydra.run.dir={out}"]
    said = refused_in_process(program, *command, data_dir=data_dir, creates=out)
    assert said.startswith("trainer.limit_test_batches=0 is not valid; choose a share above 0 ")


@pytest.mark.slow
def test_a_least_training_beyond_the_epochs_steps_is_one_line(
    tmp_path: Path, data_dir: Path
) -> None:
    """``trainer.min_steps=30`` where ``max_epochs=1`` holds 17 steps (batches of 256 of the
    subset) stopped after 17 steps all the same, but with no validation, no checkpoint and
    ``best val/acc n/a`` (red team): one line, once the data is read, naming the steps."""
    out = tmp_path / "out"
    epoch = ["data.batch_size=256", "trainer.max_steps=-1", "trainer.max_epochs=1"]
    command = [*QUIET_CPU, *epoch, "+trainer.min_steps=30", f"hydra.run.dir={out}"]
    result = run_in_process("vitattn-train", *command, data_dir=data_dir, check=False)
    said = refusal_message("vitattn-train", result, creates=out)
    assert said.startswith(
        "trainer.min_steps=30 is not valid; choose at most 17 (the steps of "
        "trainer.max_epochs=1 epochs of 17: "
    ), said


@pytest.mark.parametrize(
    ("settings", "most"),
    [
        ({"max_epochs": 2}, 20),
        ({"max_epochs": 2, "accumulate_grad_batches": 3}, 8),  # 4 steps an epoch: 3, 3, 3, 1
        ({"max_epochs": 1, "limit_train_batches": 4}, 4),
        ({"max_epochs": 2, "max_steps": 5}, None),  # max_steps ends the run: checked before
    ],
)
def test_the_least_steps_are_bounded_by_the_optimizer_steps_of_the_epochs(
    settings: dict[str, int], most: int | None
) -> None:
    """An epoch of 10 batches: the least steps a run can be given are its epochs' optimizer
    steps, counting a last accumulation an epoch ends early."""

    class TenBatches:
        def train_dataloader(self) -> list[int]:
            return list(range(10))

    trainer_cfg = OmegaConf.create({"max_steps": -1, **settings})
    if most is None:
        check_least_steps(OmegaConf.merge(trainer_cfg, {"min_steps": 1000}), TenBatches())
        return
    check_least_steps(OmegaConf.merge(trainer_cfg, {"min_steps": most}), TenBatches())
    said = f"^trainer.min_steps={most + 1} is not valid; choose at most {most} "
    with pytest.raises(ConfigError, match=said):
        check_least_steps(OmegaConf.merge(trainer_cfg, {"min_steps": most + 1}), TenBatches())


@pytest.mark.slow
def test_an_evaluation_of_a_share_of_test_batches_that_takes_none_is_one_line(
    short_run: Path, tmp_path: Path, data_dir: Path
) -> None:
    """``+trainer.limit_test_batches=0.0001`` ended vitattn-eval in Lightning's
    ``MisconfigurationException``: one line naming the least share, the run directory undone."""
    out = tmp_path / "out"
    ckpt = short_run / "checkpoints" / "last.ckpt"
    command = [f"ckpt_path={ckpt}", "+trainer.limit_test_batches=0.0001", f"hydra.run.dir={out}"]
    result = run_in_process("vitattn-eval", *command, data_dir=data_dir, check=False)
    said = refusal_message("vitattn-eval", result, creates=out)
    assert said.startswith("trainer.limit_test_batches=0.0001 is not valid; choose a share "), said
    assert "one of the test split's" in said


def outside_any_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as one started by hand on one machine: no cluster's variables."""
    clusters = ("SLURM_", "LSB_", "JSM_", "TORCHELASTIC_", "OMPI_", "PMI_")
    for key in list(os.environ):
        if key.startswith(clusters) or key == "MASTER_ADDR":
            monkeypatch.delenv(key)


@pytest.mark.slow
def test_more_nodes_than_any_cluster_starts_is_one_line_not_a_wait(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, data_dir: Path
) -> None:
    """``trainer.num_nodes=2`` on one machine waited for a second node for Lightning's 30
    minutes (red team): one line before anything is written."""
    outside_any_cluster(monkeypatch)
    out = tmp_path / "out"
    command = [*TINY, "+trainer.num_nodes=2", f"hydra.run.dir={out}"]
    result = run_in_process("vitattn-train", *command, data_dir=data_dir, check=False)
    said = refusal_message("vitattn-train", result, creates=out)
    assert said.startswith("trainer.num_nodes=2, but nothing starts this run on the other 1 "), said


@pytest.mark.parametrize(
    "started_by", [{"MASTER_ADDR": "10.0.0.1"}, {"TORCHELASTIC_RUN_ID": "run"}, {}]
)
def test_more_nodes_are_taken_where_something_starts_them(
    started_by: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Processes started by hand on each node (``MASTER_ADDR``) or by torchrun are left to
    Lightning; one node is never refused."""
    outside_any_cluster(monkeypatch)
    for key, value in started_by.items():
        monkeypatch.setenv(key, value)
    nodes = 2 if started_by else 1
    check_nodes(OmegaConf.create({"num_nodes": nodes}))


@pytest.mark.slow
@pytest.mark.parametrize("limit", ["0", "0.0"])
@pytest.mark.parametrize("program", ["vitattn-train", "vitattn-finetune"])
def test_a_command_that_trains_refuses_to_train_nothing(
    program: str, limit: str, short_run: Path, tmp_path: Path, data_dir: Path
) -> None:
    """``+trainer.limit_train_batches=0`` trained no step, tested the untrained network and
    reported it as the run's result, with exit status 0."""
    out = tmp_path / "out"
    given = ["debug=smoke"]
    if program == "vitattn-finetune":
        given = [f"ckpt_path={short_run / 'checkpoints' / 'last.ckpt'}"]
    command = [*given, f"+trainer.limit_train_batches={limit}", f"hydra.run.dir={out}"]
    said = refused_in_process(program, *command, data_dir=data_dir, creates=out)
    assert said.startswith(f"trainer.limit_train_batches={limit} is not valid; choose a share "), (
        said
    )
    assert said.endswith(f"{program} at 0 trains no step"), said


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        ["vitattn-eval"],
        ["vitattn-bench", "mode=spectrum", "spectrum.images=2"],
        ["vitattn-bench", "mode=approx", "attentions=[linear]", "approx.trials=1",
         "approx.packages=false", "approx.images=2"],
    ],
    ids=["eval", "spectrum", "approx"],
)  # fmt: skip
def test_grey_images_for_a_colour_checkpoint_are_one_line_that_says_what_to_do(
    command: list[str], short_run: Path, tmp_path: Path, data_dir: Path
) -> None:
    """The bench's modes that read a checkpoint ended in an unexpected RuntimeError of a
    matmul's shapes, and vitattn-eval said to set model.in_channels, a setting it has not
    (red team)."""
    out = tmp_path / "out"
    ckpt = short_run / "checkpoints" / "last.ckpt"
    program, *settings = command
    result = run_in_process(
        program,
        *settings,
        f"ckpt_path={ckpt}",
        "data.grayscale=true",
        f"hydra.run.dir={out}",
        data_dir=data_dir,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"{program}: error: model.in_channels=3 does not match the data: its images have 1 "
        f"channel(s) (data.grayscale=true); the network is {ckpt}'s: leave data.grayscale null "
        "(as it was trained), or give a checkpoint trained on such images"
    )
    assert not out.exists()


@pytest.mark.slow
def test_hparams_view_lists_the_results(short_run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    accumulator = EventAccumulator(str(short_run))  # the run holds its HPARAMS session
    accumulator.Reload()
    assert {"~summary/acc_best_val", "~summary/acc_test", "~summary/seconds"} <= set(
        accumulator.Tags()["scalars"]
    )
    content = accumulator.PluginTagToContent("hparams")
    session = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hparams = session.session_start_info.hparams
    assert hparams["attention"].string_value == "softmax"
    assert hparams["model/heads"].number_value == 2


@pytest.mark.slow
def test_last_checkpoint_holds_final_weights(short_run: Path) -> None:
    checkpoint = torch.load(short_run / "checkpoints" / "last.ckpt", weights_only=False)
    final = torch.load(short_run.parent / "final_weights.pt", weights_only=False)
    assert checkpoint["global_step"] == final.pop("global_step") == 60
    assert checkpoint["state_dict"].keys() == final.keys()
    for name, weights in final.items():
        assert torch.equal(checkpoint["state_dict"][name], weights), name


@pytest.mark.slow
def test_eval_reproduces_test_accuracy(short_run: Path, tmp_path: Path, data_dir: Path) -> None:
    trained = json.loads((short_run / "metrics.json").read_text())
    run_in_process(
        "vitattn-eval",
        f"ckpt_path={trained['ckpt_path']}",
        "trainer=cpu",
        f"hydra.run.dir={tmp_path}",
        data_dir=data_dir,
    )
    evaluated = json.loads((tmp_path / "metrics.json").read_text())
    assert evaluated["test/acc"] == pytest.approx(trained["test/acc"], abs=1e-6)
    assert evaluated["params"] == trained["params"]


@pytest.mark.slow
def test_eval_tests_a_bf16_run_at_its_precision(tmp_path: Path, data_dir: Path) -> None:
    """A ``bf16-mixed`` run's best checkpoint gives the run's ``test/acc`` and ``test/loss``
    again: the checkpoint records the precision, and ``vitattn-eval`` tests at it. On the code
    before it tested at ``32-true`` (a loss some 1e-5 off, an accuracy 0.2655 for the run's
    0.2675 in the eval audit's larger run)."""
    run = tmp_path / "run"
    bf16 = [*TINY, *steps(12, 6), "trainer.precision=bf16-mixed", f"hydra.run.dir={run}"]
    run_in_process("vitattn-train", *bf16, data_dir=data_dir)
    trained = json.loads((run / "metrics.json").read_text())
    recorded = torch.load(trained["ckpt_path"], weights_only=True)["vitattn_precision"]
    assert recorded == {"trainer": "bf16-mixed", "matmul": "high"}
    run_in_process(
        "vitattn-eval",
        f"ckpt_path={trained['ckpt_path']}",
        "trainer=cpu",
        f"hydra.run.dir={tmp_path / 'eval'}",
        data_dir=data_dir,
    )
    evaluated = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    for key in ("test/acc", "test/loss"):
        assert evaluated[key] == pytest.approx(trained[key], abs=1e-7), key


BAD_INPUTS = [
    (["attention=nope"], r"attention=nope is not a known attention; choose one of: .*softmax"),
    (["model=vit_huge"], r"model=vit_huge is not a known model; choose one of: vit, vit_pixel"),
    (
        ["model.embed_dim=100", "model.heads=8"],
        r"model.embed_dim=100 is not divisible by model.heads=8",
    ),
    (["model.patch_size=3"], r"model.patch_size=3 does not divide model.image_size=32"),
    (["attention=linformer", "attention.k=100"], r"attention.k=100 is larger than the 64 tokens"),
    (["attention=nystrom", "attention.landmarks=65"], r"attention.landmarks=65 is more than"),
    (["attention=performer", "attention.num_features=0"], r"attention.num_features=0 is not valid"),
    (["attention=random_feature", "attention.num_features=0"], r"attention.num_features=0 is not"),
    (["attention=local", "attention.window=0"], r"attention.window=0 is not valid"),
    # torch takes any word with a warning and keeps float32 products as they were
    (["matmul_precision=low"], r"matmul_precision='low' is not valid; choose one of highest \|"),
    (["model.compile=sometimes"], r"model.compile='sometimes' is not valid; choose true, false or"),
    # the patch embedding trained on 0..255 without a word; the lookup failed at its first
    # forward, once the run was made (data audit, 2026-12-02)
    (
        ["data.normalize=false"],
        r"^data.normalize=false does not match model.embedding=patch, which reads normalised "
        r"pixels; set data.normalize=true$",
    ),
    (
        ["model.embedding=intensity", "model.patch_size=1"],
        r"^data.normalize=true does not match model.embedding=intensity, which reads the 8-bit "
        r"pixel values; set data.normalize=false$",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_INPUTS)
def test_bad_input_ends_in_one_line(
    overrides: list[str], message: str, tmp_path: Path, data_dir: Path
) -> None:
    """Refused before the app starts: checked in this process (``refused`` below runs the
    console script's own process, for a refusal from inside the app)."""
    run_dir = tmp_path / "run"
    args = [*overrides, "trainer=cpu", f"hydra.run.dir={run_dir}"]
    said = refused_in_process("vitattn-train", *args, data_dir=data_dir, creates=run_dir)
    assert re.search(message, said), said


@pytest.mark.slow
def test_a_batch_larger_than_each_processs_share_is_refused_before_the_run(
    tmp_path: Path, data_dir: Path
) -> None:
    """Each of 2 processes takes 2,289 of the 4,577 training images: a batch of 3,000 trained 0
    steps there and the run said it completed, with the untrained network's test/acc (data
    audit, 2026-12-02). Refused once the data is read, before anything is written."""
    run_dir = tmp_path / "run"
    args = ["trainer.devices=2", "data.batch_size=3000", "trainer=cpu", f"hydra.run.dir={run_dir}"]
    said = refused("vitattn-train", *args, data_dir=data_dir, creates=run_dir)
    assert said == (
        "data.batch_size=3000 is larger than the 2289 training images of each of the 2 "
        "processes; choose a smaller batch size"
    )


@pytest.mark.slow
def test_missing_data_that_cannot_be_downloaded_ends_in_one_line(tmp_path: Path, data_dir: Path):
    """The data module's refusal, after the app started and tried the download: its own
    process, which exits with status 1 and leaves no run directory."""
    run_dir = tmp_path / "run"
    nowhere = ["paths.data_dir=/nonexistent/cifar", "data.url=http://127.0.0.1:9/cifar.tar.gz"]
    args = [*nowhere, "trainer=cpu", f"hydra.run.dir={run_dir}"]
    said = refused("vitattn-train", *args, data_dir=data_dir, creates=run_dir)
    assert re.search(
        r"data.data_dir=/nonexistent/cifar holds no cifar-10-batches-py/ .*put the official", said
    ), said


@pytest.mark.slow
@pytest.mark.parametrize("outputs_there", [False, True])
def test_a_run_refused_in_the_app_leaves_no_run_folder_and_one_line(
    tmp_path: Path, data_dir: Path, outputs_there: bool
) -> None:
    """A run directory Hydra named (no ``hydra.run.dir``), refused once the app ran (the data
    folder holds no batch file: found as the data are read): the space its lock set aside kept
    it from being removed, and Lightning's "Seed set to 42" came on stderr before the one line
    (red team). The folders Hydra made above it for this run go too, those that were there stay
    (``outputs/train/runs`` was left empty until 2026-12-02; user audit)."""
    outputs = tmp_path / "outputs"
    if outputs_there:
        (outputs / "train" / "runs").mkdir(parents=True)
    (tmp_path / "data" / "cifar-10-batches-py").mkdir(parents=True)
    args = [f"paths.data_dir={tmp_path / 'data'}", "data.download=false", "trainer=cpu"]
    result = run_cli(
        "vitattn-train", *args, f"paths.log_dir={outputs}", data_dir=data_dir, check=False
    )
    said = refusal_message("vitattn-train", result)
    assert "cifar-10-batches-py/data_batch_1" in said, said
    assert result.stderr.strip().splitlines() == [f"vitattn-train: error: {said}"]
    if outputs_there:
        assert list((outputs / "train" / "runs").iterdir()) == []
    else:
        assert not outputs.exists()


@pytest.mark.slow
def test_damaged_data_ends_in_one_line(tmp_path: Path, data_dir: Path) -> None:
    import shutil

    shutil.copytree(data_dir / "cifar-10-batches-py", tmp_path / "cifar-10-batches-py")
    (tmp_path / "cifar-10-batches-py" / "data_batch_2").write_bytes(b"not a pickle")
    run_dir = tmp_path / "run"
    result = run_cli(
        "vitattn-train", "trainer=cpu", f"hydra.run.dir={run_dir}", data_dir=tmp_path, check=False
    )
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert "data_batch_2 is truncated or not a CIFAR-10 batch file" in last_line
    assert not run_dir.exists()


def test_existing_run_directory_is_not_emptied(tmp_path: Path, data_dir: Path) -> None:
    keep = tmp_path / "notes.txt"
    keep.write_text("mine")
    said = refused_in_process(
        "vitattn-train", "model.patch_size=5", f"hydra.run.dir={tmp_path}", data_dir=data_dir
    )
    assert said.startswith("model.patch_size=5 does not divide")
    assert keep.read_text() == "mine"
    assert not (tmp_path / ".hydra").exists()


def test_eval_rejects_a_missing_checkpoint(tmp_path: Path, data_dir: Path) -> None:
    run_dir = tmp_path / "run"
    said = refused_in_process(
        "vitattn-eval",
        f"ckpt_path={tmp_path}/none.ckpt",
        f"hydra.run.dir={run_dir}",
        data_dir=data_dir,
        creates=run_dir,
    )
    assert said.startswith(f"ckpt_path={tmp_path}/none.ckpt")


@pytest.mark.slow
def test_epoch_based_run_validates_at_its_last_step(tmp_path: Path, data_dir: Path) -> None:
    epoch = ["trainer.max_epochs=1", "+trainer.limit_train_batches=7"]
    metrics = train_tiny(tmp_path, data_dir, *epoch, "trainer.val_check_interval=5")
    assert metrics["steps"] == 7
    assert (metrics["attention"], metrics["model"]) == ("softmax", "vit")
    val_steps = [step for step, _ in read_scalars(tmp_path)["val/acc"]]
    assert val_steps == [5, 7]  # after step 5, and after the last step, 7: as last.ckpt says
    assert (
        torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 7
    )


def test_max_steps_overrides_max_epochs(tmp_path: Path, data_dir: Path) -> None:
    """``trainer.max_steps`` overrides ``trainer.max_epochs``, as the trainer's config says:
    Lightning stops at whichever comes first, and 12 steps asked of 4-batch epochs with
    ``max_epochs=2`` trained 8 and said the run completed (training audit)."""
    settings = ["trainer.max_epochs=2", "+trainer.limit_train_batches=4", *steps(12, 6)]
    metrics = train_tiny(tmp_path, data_dir, *settings)
    assert (metrics["status"], metrics["steps"], metrics["epochs"]) == ("completed", 12, 3)


def test_a_resume_that_trains_longer_says_its_schedule_is_planned_anew(
    tmp_path: Path, data_dir: Path
) -> None:
    """A run resumed to train longer has its schedule planned for the new length: its learning
    rate jumps from the end of the old cosine to the middle of the new one. It did so without a
    word while the docs said the schedule went on where it stopped (training audit)."""
    first = [*TINY, *steps(8, 4), f"hydra.run.dir={tmp_path}"]
    run_in_process("vitattn-train", *first, data_dir=data_dir)
    longer = ["resume=true", f"hydra.run.dir={tmp_path}", "trainer.max_steps=12"]
    run_in_process("vitattn-train", *longer, data_dir=data_dir)
    said = (tmp_path / "train.log").read_text()
    assert (
        "the schedule was planned for 8 steps and is now planned for 12 (the run's length "
        "changed): resumed at step 8, the learning rate goes over to the 12-step schedule" in said
    ), said
    rate = dict(read_scalars(tmp_path)["train/lr"])  # by logged step, 1 to 12
    assert rate[8] < rate[1] / 10  # the 8-step schedule annealed
    assert max(rate[step] for step in (9, 10, 11, 12)) > 2 * rate[8]  # the jump the line says


def test_a_run_accumulating_batches_validates_every_so_many_steps(
    tmp_path: Path, data_dir: Path
) -> None:
    """``trainer.val_check_interval`` counts optimizer steps, as its config says, where
    Lightning counts batches: a run accumulating 2 batches a step validated every step for an
    interval of 2 (training audit), and so chose its best checkpoint among twice as many."""
    settings = ["+trainer.accumulate_grad_batches=2", *steps(4, 2)]
    train_tiny(tmp_path, data_dir, *settings)
    assert [step for step, _ in read_scalars(tmp_path)["val/acc"]] == [2, 4]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stop", "val_steps"),
    [(["trainer.max_epochs=3"], [6, 9]), (["trainer.max_steps=7"], [6, 7])],
    ids=["epochs", "steps"],
)
def test_a_run_validating_every_second_epoch_validates_its_last_step(
    stop: list[str], val_steps: list[int], tmp_path: Path, data_dir: Path
) -> None:
    """With ``check_val_every_n_epoch=2`` a run ending in an odd epoch (the third of 3, or at
    step 7 of 3-batch epochs) stopped after it without a validation: the final weights had no
    ``val/acc`` and ``last.ckpt`` held step 6 (red team). Its last step is validated now."""
    epochs = [
        "trainer.check_val_every_n_epoch=2",
        "trainer.val_check_interval=1.0",
        "+trainer.limit_train_batches=3",
        *stop,
    ]
    metrics = train_tiny(tmp_path, data_dir, *epochs)
    assert metrics["steps"] == val_steps[-1]
    assert [step for step, _ in read_scalars(tmp_path)["val/acc"]] == val_steps
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == val_steps[-1]


@pytest.mark.parametrize(
    ("setting", "stop", "valid"),
    [
        ("+trainer.min_steps=9", "trainer.max_steps=8", "at most 8"),
        ("+trainer.min_epochs=3", "trainer.max_epochs=2", "at most 2"),
    ],
)
def test_least_training_beyond_the_stop_is_one_line_before_the_run(
    setting: str, stop: str, valid: str, tmp_path: Path, data_dir: Path
) -> None:
    """Lightning stops at ``max_steps`` or ``max_epochs`` whatever ``min_steps`` and
    ``min_epochs`` ask, but skipped the last validation for them: the final weights had no
    ``val/acc`` and no checkpoint (red team). Refused before anything is made."""
    run_dir = tmp_path / "run"
    said = refused_in_process(
        "vitattn-train",
        *TINY,
        stop,
        setting,
        f"hydra.run.dir={run_dir}",
        data_dir=data_dir,
        creates=run_dir,
    )
    name, value = setting.lstrip("+").split("=")
    assert said.startswith(f"{name}={value} is not valid; choose {valid} ("), said


@pytest.mark.slow
@pytest.mark.parametrize(
    ("settings", "most"),
    [(["trainer.val_check_interval=100"], r"\d+"), (["+trainer.limit_train_batches=3"], "3")],
)
def test_a_validation_interval_an_epoch_cannot_hold_is_one_line_before_the_run(
    settings: list[str], most: str, tmp_path: Path, data_dir: Path
) -> None:
    """With ``check_val_every_n_epoch`` set, Lightning counts an integer ``val_check_interval``
    within each epoch: one above an epoch's batches failed as the fit started, an "unexpected
    ValueError" with the run directory made. Refused once the data is read, nothing left."""
    run_dir = tmp_path / "run"
    epochs = ["trainer.check_val_every_n_epoch=2", "trainer.val_check_interval=4"]
    command = [*TINY, *epochs, *settings, "trainer.max_steps=8", f"hydra.run.dir={run_dir}"]
    result = run_in_process("vitattn-train", *command, data_dir=data_dir, check=False)
    said = refusal_message("vitattn-train", result, creates=run_dir)
    interval = 100 if "trainer.val_check_interval=100" in settings else 4
    assert re.fullmatch(
        rf"trainer.val_check_interval={interval} is not valid; choose at most {most} \(an "
        r"epoch's training batches: trainer.check_val_every_n_epoch=2 counts it within each "
        r"epoch\), a fraction of an epoch \(1.0: its end\), or "
        r"trainer.check_val_every_n_epoch=null \(it counts steps across epochs\)",
        said,
    ), said


@pytest.mark.slow
def test_same_seed_same_metrics(tmp_path: Path, data_dir: Path) -> None:
    overrides = ["trainer.max_steps=8", "logger=csv"]
    runs = [train_tiny(tmp_path / str(i), data_dir, *overrides) for i in range(2)]
    for key in ("train/loss", "val/acc", "val/loss", "test/acc"):
        assert runs[0][key] == runs[1][key], key


@pytest.mark.slow
@pytest.mark.parametrize("model", ["vit", "vit_pixel"])
@pytest.mark.parametrize("attention", sorted(ATTENTIONS))
def test_fast_dev_run_per_attention(attention: str, model: str, tmp_path: Path, data_dir: Path):
    settings = [f"attention={attention}", f"model={model}", "model.mlp_dim=null"]
    batches = ["data.batch_size=8", "data.eval_batch_size=8"]
    metrics = train_tiny(tmp_path, data_dir, *settings, *batches, "debug=fdr")
    assert metrics["steps"] == 1
    assert metrics["attention"] == attention
    assert 0.0 <= float(metrics["test/acc"]) <= 1.0


@pytest.mark.slow
def test_a_refusal_after_the_fit_keeps_the_run_and_records_it(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refusal raised as the fit's best checkpoint is tested (one of its values out of
    bounds) was taken for a refusal before the run, and the run directory, its checkpoints and
    logs, removed (red team): the fit's files stay, and ``metrics.json`` records the failure."""
    import json

    from vitattn.errors import ConfigError

    def refuse(*_: object) -> None:
        raise ConfigError("best.ckpt: refused as the checkpoint reader would")

    monkeypatch.setattr("vitattn.training.fitting.run_test_on_best", refuse)
    run = tmp_path / "run"
    result = run_in_process(
        "vitattn-train", "debug=smoke", "trainer.max_steps=4", f"hydra.run.dir={run}",
        data_dir=data_dir, check=False,
    )  # fmt: skip
    said = "the fit ended, and its test could not run: best.ckpt: refused as the checkpoint"
    assert result.returncode == 1 and said in result.stderr, result.stderr
    assert list((run / "checkpoints").glob("*.ckpt")), "the fit's checkpoints are kept"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "failed" and said in metrics["error"]


@pytest.mark.slow
@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_a_share_of_batches_that_takes_none_is_one_line(
    split: str, tmp_path: Path, data_dir: Path
) -> None:
    """``+trainer.limit_train_batches=0.0001`` failed in Lightning as the fit started, the run
    begun (red team), and ``limit_test_batches=0.0001`` once the fit had ended: now one line,
    once the data is read, naming the least share."""
    out = tmp_path / "out"
    command = ["debug=smoke", f"+trainer.limit_{split}_batches=0.0001", f"hydra.run.dir={out}"]
    result = run_in_process("vitattn-train", *command, data_dir=data_dir, check=False)
    said = refusal_message("vitattn-train", result)
    assert said.startswith(
        f"trainer.limit_{split}_batches=0.0001 is not valid; choose a share of at least "
    ), said
    assert f"one of the {split} split's" in said
    assert not out.exists()  # refused before anything was written: the directory undone


def test_lightnings_dict_form_of_max_time_trains(tmp_path: Path, data_dir: Path) -> None:
    """``+trainer.max_time={hours:1}``, as Lightning documents it (a dict of ``timedelta``'s
    parts): the trainer was given the config's mapping, which Lightning's timer took for a
    ``timedelta``, and the run was refused ("Missing key total_seconds")."""
    run = tmp_path / "run"
    overrides = [*TINY, *steps(2, 2), "+trainer.max_time={hours:1,minutes:30}"]
    run_in_process("vitattn-train", *overrides, f"hydra.run.dir={run}", data_dir=data_dir)
    assert json.loads((run / "metrics.json").read_text())["status"] == "completed"
