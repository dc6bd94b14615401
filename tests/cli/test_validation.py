"""Checking a composed config before a run: every bad value is one line naming it, and nothing
else escapes; a run whose config passes starts."""

from __future__ import annotations

import contextlib
import math
import os
import re
import subprocess
import sys
import tempfile
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import DictConfig, OmegaConf

from tests.support.presets import TINY, compose_config
from tests.support.runners import checked_in_a_fresh_process
from vitattn.cli.console import check_composition
from vitattn.cli.validation import check_types, finished_run, given_first, target_nodes
from vitattn.errors import ConfigError, own_refusal
from vitattn.train import train
from vitattn.train import validate as validate_training
from vitattn.training.trial_build import TRIAL_OUTPUT_DIR, check_buildable
from vitattn.utils.checks import describe, matches


@pytest.mark.parametrize(
    ("value", "hint", "expected"),
    [
        (3, int, True),
        (True, int, False),  # a bool is not a count
        (3, float, True),
        ("3", float, False),
        (None, int | None, True),
        ("bf16-mixed", typing.Literal["32-true", "bf16-mixed"], True),
        ("bf16", typing.Literal["32-true", "bf16-mixed"], False),
        ([0.9, 0.99], tuple[float, float], True),
        ("0.9", tuple[float, float], False),
        ({"_target_": "x"}, typing.Callable, True),
        ("abc", float | Path, False),  # Path is a class a config can only give as a nested node
    ],
)
def test_matches(value: object, hint: object, expected: bool) -> None:
    assert matches(value, hint) is expected


def test_describe_names_what_is_valid() -> None:
    assert describe(int | None) == "an integer or null"
    assert describe(typing.Literal[16, "16"] | None) == "one of 16 | null"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.heads=abc", r"^model.heads='abc' is not valid; choose an integer$"),
        ("optimizer.lr=abc", r"^optimizer.lr='abc' is not valid; choose a number$"),
        (
            "optimizer.lr=-1",
            r"^optimizer: these settings are refused \(ValueError: Invalid learning rate",
        ),
        ("trainer.max_steps=0", r"^trainer.max_steps=0 is not valid; choose -1"),
        ("trainer.max_steps=-2", r"^trainer.max_steps=-2 is not valid"),
        ("trainer.max_epochs=0", r"^trainer.max_epochs=0 is not valid"),
        ("trainer.precision=bf16-fast", r"^trainer.precision='bf16-fast' is not valid; choose"),
        ("trainer.precision=16-true", r"^trainer.precision=16-true \(fp16 weights, no loss scal"),
        ("+model.colour=red", r"^model.colour is not a setting of .*VisionTransformer"),
        ("model.dropout=2", r"^model.dropout=2 is not valid; choose 0 <= model.dropout < 1"),
        (
            "scheduler.min_lr_ratio=2",
            r"^scheduler.min_lr_ratio=2 is not valid; choose 0 <= scheduler.min_lr_ratio <= 1$",
        ),
        ("data.batch_size=0", r"^data.batch_size=0 is not valid; choose an integer >= 1$"),
        ("seed=-1", r"^seed=-1 is not valid; choose an integer 0 <= seed <= 4294967295, or null"),
        ("seed=abc", r"^seed='abc' is not valid; choose an integer 0 <= seed <= 4294967295"),
        ("test=abc", r"^test='abc' is not valid; choose true or false$"),
        ("resume=maybe", r"^resume='maybe' is not valid; choose true or false$"),
        (
            "ckpt_path=",
            r"^ckpt_path='' is not valid; choose a checkpoint file \(\.ckpt\), or null$",
        ),
        ("matmul_precision=low", r"^matmul_precision='low' is not valid; choose one of highest"),
        ("trainer.accelerator=tpu9", r"^trainer: these settings are refused .*accelerator"),
        (
            "trainer.gradient_clip_val=-1",
            r"^trainer.gradient_clip_val=-1 is not valid; choose a number > 0 .*, or 0 or null "
            r"\(no clipping\)$",
        ),
        ("trainer.gradient_clip_val=nan", r"^trainer.gradient_clip_val=nan is not valid"),
        (
            "trainer.check_val_every_n_epoch=0",
            r"^trainer.check_val_every_n_epoch=0 is not valid; choose an integer >= 1, or null",
        ),
        ("trainer.check_val_every_n_epoch=-2", r"^trainer.check_val_every_n_epoch=-2 is not"),
        ("trainer.log_every_n_steps=-1", r"^trainer.log_every_n_steps=-1 is not valid; choose an"),
        (
            "+trainer.accumulate_grad_batches=0",
            r"^trainer.accumulate_grad_batches=0 is not valid; choose an integer >= 1 \(batches",
        ),
        ("+trainer.accumulate_grad_batches=-1", r"^trainer.accumulate_grad_batches=-1 is not"),
        # each failed once the run directory was made, or trained nothing and exited 0
        ("trainer.val_check_interval=0", r"^trainer.val_check_interval=0 is not valid; choose a "),
        ("+trainer.max_time=00:00:00:00", r"^trainer.max_time='00:00:00:00' is not valid; choose"),
        # Lightning's dict form: a part timedelta does not take, no time, not a number
        (
            "+trainer.max_time={hour:1}",
            r"^trainer.max_time=\{'hour': 1\} is not valid; choose parts from weeks, days, hours, "
            r"minutes, seconds, milliseconds, microseconds, each a number, adding up to a time "
            r"above zero$",
        ),
        ("+trainer.max_time={minutes:0}", r"^trainer.max_time=\{'minutes': 0\} is not valid"),
        ("+trainer.max_time={minutes:-1}", r"^trainer.max_time=\{'minutes': -1\} is not valid"),
        ("+trainer.max_time={days:abc}", r"^trainer.max_time=\{'days': 'abc'\} is not valid"),
        ("+trainer.max_time={weeks:1e300}", r"^trainer.max_time=\{'weeks': 1e\+300\} is not"),
        (  # Lightning's own check, before anything is made
            "+trainer.overfit_batches=-1",
            r"^trainer: these settings are refused \(MisconfigurationException: You have passed "
            r"invalid value -1 for overfit_batches, it has to be in \[0.0, 1.0\] or an int",
        ),
        ("+trainer.overfit_batches=abc", r"^trainer.overfit_batches='abc' is not valid; choose "),
        (
            "trainer.use_distributed_sampler=true",
            r"^trainer.use_distributed_sampler=true is not taken: the data module shards its own ",
        ),
        ("trainer.max_epochs=-1", r"^trainer.max_epochs=-1 with trainer.max_steps=-1 trains for "),
        ("data.mixup_alpha=nan", r"^data.mixup_alpha=nan is not valid; choose a finite number "),
        ("data.cutmix_alpha=inf", r"^data.cutmix_alpha=inf is not valid; choose a finite number"),
        # taken and ignored, or half the run's files written elsewhere (red team)
        ("+trainer.logger=false", r"^trainer.logger is not taken: a run's loggers come from the "),
        ("+trainer.callbacks=[]", r"^trainer.callbacks is not taken: a run's callbacks come from"),
        (
            "trainer.default_root_dir=/tmp/elsewhere",
            r"^trainer.default_root_dir=/tmp/elsewhere is not taken: a run writes in its run "
            r"directory \(\$\{paths.output_dir\}\); choose it with hydra.run.dir$",
        ),
        ("trainer.num_sanity_val_steps=-2", r"^trainer.num_sanity_val_steps=-2 is not valid; "),
        # metrics of 7 classes on a head of 10: a ValueError at the first validation
        ("module.num_classes=7", r"^module.num_classes=7 is not the network's model.num_classes"),
        (
            "callbacks.model_checkpoint.monitor=val_acc",
            r"^callbacks.model_checkpoint.monitor=val_acc is not a figure this run logs; choose "
            r"among: train/loss, train/acc, val/loss, val/acc, .*val/fidelity/layer_<i>",
        ),
        (
            "+callbacks.stop={_target_:lightning.pytorch.callbacks.EarlyStopping,monitor:val/los}",
            r"^callbacks.stop.monitor=val/los is not a figure this run logs",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_it(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_composition("train", [override], validate_training)
    text = str(info.value)
    assert "\n" not in text
    assert re.search(message, text), text


@pytest.mark.parametrize("devices", ["100000", "'100000'"])
def test_more_cpu_processes_than_cpus_is_one_line(devices: str) -> None:
    """On the CPU each device is a process Lightning starts: a resume replaying
    ``trainer.devices=1000`` from a run's file stalled the machine (red team)."""
    said = (
        r"^trainer.devices=('?)100000\1 is not valid; choose a number of processes from 1 to "
        r"\d+ \(two for each CPU this process may use, \d+ here\) or auto$"
    )
    with pytest.raises(ConfigError, match=said):
        check_composition("train", ["trainer=cpu", f"trainer.devices={devices}"], validate_training)


def test_two_cpu_processes_on_one_cpu_pass(monkeypatch) -> None:
    """``trainer=ddp``'s smoke test on the CPU (two processes) runs on a one-core machine."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    check_composition("train", ["trainer=ddp", "trainer.accelerator=cpu"], validate_training)
    with pytest.raises(ConfigError, match=r"^trainer.devices=3 is not valid; .* from 1 to 2 "):
        check_composition("train", ["trainer=cpu", "trainer.devices=3"], validate_training)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["+trainer.enable_checkpointing=false"],
            r"^trainer.enable_checkpointing=false is refused by Lightning beside the callbacks "
            r"that use it \(model_checkpoint, last_checkpoint\); drop them with it: "
            r"~callbacks.model_checkpoint ~callbacks.last_checkpoint$",
        ),
        (["+trainer.enable_progress_bar=false"], r"\(progress_bar\); drop them with it: "),
        (["+trainer.enable_progress_bar=false", "~callbacks.progress_bar"], None),
        # Lightning's MisconfigurationException once the run had begun
        (["~logger"], r"^a run without loggers \(~logger\) has no curve for callbacks.lr_monitor"),
        (["~logger", "~callbacks.lr_monitor"], None),
        (
            [
                "+trainer.enable_checkpointing=false",
                "~callbacks.model_checkpoint",
                "~callbacks.last_checkpoint",
            ],
            None,
        ),
    ],
)
def test_a_trainer_flag_off_beside_its_callbacks_is_one_line(
    overrides: list[str], message: str | None
) -> None:
    """Lightning refused the trainer once the run directory was made, its cause cut off."""
    if message is None:
        check_composition("train", overrides, validate_training)
        return
    with pytest.raises(ConfigError, match=message):
        check_composition("train", overrides, validate_training)


def test_the_default_configs_pass() -> None:
    cpu = ["trainer=cpu"]
    for overrides in ([], ["model=vit_pixel"], ["experiment=lra_image", *cpu], ["trainer=ddp"]):
        check_composition("train", overrides, validate_training)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["callbacks.model_checkpoint.monitor=val/fidelity/layer_3"], None),
        # a layer the network has not: Lightning stopped the run at its first validation
        (
            ["callbacks.model_checkpoint.monitor=val/fidelity/layer_4"],
            r"^callbacks.model_checkpoint.monitor=val/fidelity/layer_4 names a layer the network "
            r"has not; with model.depth=4 choose layer_0 to layer_3$",
        ),
        (
            ["model.depth=1", "callbacks.model_checkpoint.monitor=val/entropy_gap/layer_0"],
            r"^callbacks.model_checkpoint.monitor=val/entropy_gap/layer_0 is a per-layer figure, "
            r"which a network of model.depth=1 does not log; choose its mean",
        ),
        # as Python writes the layer's number: the run logs layer_1, never layer_01
        (
            ["callbacks.model_checkpoint.monitor=val/fidelity/layer_01"],
            r"^callbacks.model_checkpoint.monitor=val/fidelity/layer_01 is not a figure this run",
        ),
        # a search may name a layer only some of its trials' networks have: it fails the others
        (
            [
                "-m",
                "hparams_search=optuna",
                "model.depth=choice(1,4)",
                "optimized_metric=val/fidelity/layer_1",
            ],
            None,
        ),
        (["model.depth=12", "callbacks.model_checkpoint.monitor=val/fidelity/layer_11"], None),
        (["hparams_search=optuna_pareto"], None),
        # Lightning's ModelCheckpoint monitors the step too: the latest checkpoints kept
        (["callbacks.model_checkpoint.monitor=step", "callbacks.model_checkpoint.mode=max"], None),
        (["callbacks.model_checkpoint.monitor=train/lr/decay"], None),
        # TensorBoard's one curve of the learning rate; Lightning's figures are per group
        (
            ["callbacks.model_checkpoint.monitor=train/lr"],
            r"^callbacks.model_checkpoint.monitor=train/lr is not a figure this run logs; "
            r"choose among: .*train/lr/<group>",
        ),
        (
            ["+callbacks.stop={_target_:lightning.pytorch.callbacks.EarlyStopping,monitor:step}"],
            r"^callbacks.stop.monitor=step is not a figure this run logs",
        ),
        (
            ["hparams_search=optuna", "optimized_metric=val/acc_bset"],
            r"^optimized_metric=val/acc_bset is not a number of this run's metrics.json; choose "
            r"among: val/loss, val/acc, .*test/acc, .*val/acc_best, .*seconds",
        ),
        (
            ["hparams_search=optuna_pareto", "optimized_metric=[val/acc_best,nope]"],
            r"^optimized_metric=nope is not a number",
        ),
        # read by a search only: a run that is none checks it not
        (["callbacks.model_checkpoint.monitor=val/loss", "optimized_metric=nope"], None),
        # the best val/acc is the checkpoint's, and the speed the throughput callback's
        (
            ["hparams_search=optuna", "callbacks=none"],
            r"^optimized_metric=val/acc_best is not a number of this run's metrics.json; choose "
            r"among: val/loss, val/acc, test/loss, test/acc, train/loss, ",
        ),
        (
            ["hparams_search=optuna_pareto", "~callbacks.throughput"],
            r"^optimized_metric=train/images_per_sec is not a number of this run's metrics.json",
        ),
        # told to take a missing figure, as Lightning's EarlyStopping(strict=False) is
        (
            [
                "+callbacks.stop={_target_:lightning.pytorch.callbacks.EarlyStopping,monitor:val/f,strict:false}"
            ],
            None,
        ),
        (["hparams_search=optuna", "callbacks.optuna_pruning.monitor=val/loss"], None),
        # a callback of the user's own may log any name: nothing to check the monitor against
        (
            [
                "+callbacks.mine={_target_:lightning.pytorch.callbacks.DeviceStatsMonitor}",
                "callbacks.model_checkpoint.monitor=val/mine",
            ],
            None,
        ),
        (
            ["hparams_search=optuna", "callbacks.optuna_pruning.monitor=val_acc"],
            r"^callbacks.optuna_pruning.monitor=val_acc is not a figure this run logs",
        ),
        (
            ["hparams_search=optuna", "test=false", "optimized_metric=test/acc"],
            r"^optimized_metric=test/acc is not a",
        ),
        (
            [
                "callbacks.attention_insight.images=0",
                "callbacks.model_checkpoint.monitor=val/fidelity",
            ],
            r"^callbacks.model_checkpoint.monitor=val/fidelity is not a figure this run logs; "
            r"choose among: .*train/images_per_sec, epoch, step$",
        ),
    ],
)
def test_a_monitored_figure_is_one_the_run_logs(overrides: list[str], message: str | None) -> None:
    """A ``monitor`` Lightning would not find stopped the run at its first validation; an
    ``optimized_metric`` no run writes failed every trial of a search, which exited 0."""
    if message is None:
        check_composition("train", overrides, validate_training)
        return
    with pytest.raises(ConfigError, match=message):
        check_composition("train", overrides, validate_training)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_a_gpu_trainer_without_a_gpu_says_what_to_use() -> None:
    with pytest.raises(ConfigError, match=r"^trainer.accelerator=gpu but this machine has no CUDA"):
        check_composition("train", ["trainer=gpu"], validate_training)


def test_a_target_given_as_an_interpolation_is_checked_resolved(tmp_path: Path) -> None:
    """``_target_: ${attention._target_}`` is the attention's class, as Hydra builds it; it had
    been checked unresolved, outside the config (a traceback of InterpolationKeyError)."""
    node = "model.attention={_target_:${attention._target_},_partial_:true,k:8}"
    check_composition("train", ["attention=linformer", node], validate_training)
    cfg = compose_config("train", [], tmp_path)
    OmegaConf.set_struct(cfg, False)
    cfg.extra = OmegaConf.create({"_target_": "${nope}"})
    with pytest.raises(ConfigError, match=r"^extra._target_ cannot be resolved \(Interpolation"):
        check_types(cfg)


def test_a_setting_added_to_a_class_is_checked_by_its_type_hint(tmp_path: Path) -> None:
    cfg = compose_config("train", [], tmp_path)
    node = OmegaConf.create({"_target_": "tests.cli.test_validation.with_a_new_knob"})
    OmegaConf.set_struct(cfg, False)
    cfg.extra = node
    cfg.extra.ratio = "half"
    with pytest.raises(ConfigError, match=r"^extra.ratio='half' is not valid; choose a number$"):
        check_types(cfg)


@pytest.mark.parametrize(
    ("overrides", "first"),
    [
        (["optimizer.lr=abc"], ["optimizer"]),
        (["trainer=cpu", "+model.colour=red", "trainer.max_steps=5"], ["model", "trainer"]),
        (["trainer=cpu", "optimizer.lr=abc"], ["optimizer"]),
        (["attention=linformer", "attention.k=abc"], ["attention"]),
        ([], []),
    ],
)
def test_the_nodes_a_command_sets_are_checked_first(
    overrides: list[str], first: list[str], tmp_path: Path
) -> None:
    """Checking a node imports its target: a mistake on the command line is named after
    importing its own (torch's optimizer), not every target before it (Lightning's)."""
    cfg = compose_config("train", overrides, tmp_path)
    in_config_order = [path for path, _ in target_nodes(cfg)]
    checked = [path for path, _ in given_first(cfg, target_nodes(cfg))]
    assert sorted(checked) == sorted(in_config_order)
    assert checked[: len(first)] == first
    assert checked[len(first) :] == [path for path in in_config_order if path not in first]


REFUSED_BEFORE_LIGHTNING = {
    "optimizer.lr=abc": "optimizer.lr='abc' is not valid; choose a number",
    "optimizer.lr=-1": (
        "optimizer: these settings are refused (ValueError: Invalid learning rate: -1)"
    ),
    "model.depth=-1": "model.depth=-1 is not valid; choose an integer >= 1",
    "attention=performer attention.num_features=0": (
        "attention.num_features=0 is not valid; choose an integer >= 1"
    ),
    "scheduler.warmup_steps=-1": "scheduler.warmup_steps=-1 is not valid; choose an integer >= 0",
    "data.batch_size=0": "data.batch_size=0 is not valid; choose an integer >= 1",
    "data.val_fraction=abc": "data.val_fraction='abc' is not valid; choose a number",
    "data.shift=blur": (
        "data.shift='blur' is not valid; choose one of none | quantize | rotate | invert"
    ),
    "data.mixup_alpha=0.2 data.normalize=false": (
        "data.mixup_alpha/data.cutmix_alpha mix float images; they need data.normalize=true"
    ),
    "+data.colour=red": (
        "data.colour is not a data setting; choose among: augment_seed, batch_size, "
        "crop_padding, cutmix_alpha, data_dir, download, "
        "download_timeout, eval_batch_size, grayscale, hflip, luma_mean, luma_std, mixup_alpha, "
        "normalize, num_workers, pin_memory, randaugment_group, randaugment_magnitude, "
        "randaugment_ops, "
        "shift, split_seed, url, val_fraction"
    ),
}


@pytest.mark.slow
def test_a_mistake_in_what_torch_alone_builds_is_refused_before_lightning_is_imported() -> None:
    """A type or a range typed in the network, its attention, the optimizer, the schedule or the
    data settings is one line before the data module or the trainer imports Lightning (seconds
    apart here);
    every case in one process, which must not have imported Lightning by the end."""
    script = (
        "import sys; from vitattn.cli.console import check_composition; "
        "from vitattn.train import validate; from vitattn.errors import ConfigError\n"
        "for line in sys.stdin.read().splitlines():\n"
        "    try: check_composition('train', line.split(), validate)\n"
        "    except ConfigError as error: print(error)\n"
        "    else: print('accepted')\n"
        "print('lightning' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        input="\n".join(REFUSED_BEFORE_LIGHTNING),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.stdout.splitlines() == [*REFUSED_BEFORE_LIGHTNING.values(), "False"], (
        result.stdout + result.stderr[-2000:]
    )


@pytest.mark.slow
def test_a_file_that_is_no_checkpoint_is_refused_before_lightning_or_peft_is_imported(
    tmp_path: Path,
) -> None:
    """``vitattn-eval``, ``vitattn-finetune`` and a resume read the checkpoint they are given
    before they build anything: a file that is none is one line before Lightning (or PEFT and
    its transformers) is imported, seconds sooner; each command in one process, which must not
    have imported either by the end."""
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"not a checkpoint")
    expected = f"{junk} is not a torch checkpoint (not a zip archive, as torch.save writes one)"
    for command in ("eval", "finetune", "train"):
        said, imported = checked_in_a_fresh_process(command, [f"ckpt_path={junk}"])
        assert said.startswith(expected), (command, said)
        assert imported == [], (command, imported)


@pytest.mark.parametrize("command_line", list(REFUSED_BEFORE_LIGHTNING))
def test_a_mistake_refused_before_lightning_reads_as_after_it(
    command_line: str, tmp_path: Path
) -> None:
    """The line refusing a mistake is the one every check together gives (the same check,
    made earlier)."""
    cfg = compose_config("train", command_line.split(), tmp_path)
    with pytest.raises(ConfigError) as early:
        validate_training(cfg)
    with pytest.raises(ConfigError) as late:
        check_types(cfg)
        check_buildable(cfg)
    assert str(early.value) == str(late.value) == REFUSED_BEFORE_LIGHTNING[command_line]


def with_a_new_knob(ratio: float = 0.5) -> float:
    """A target whose only knob is a float: the checker learns its type from the hint."""
    return ratio


def test_finished_runs(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.json"
    (tmp_path / ".hydra").mkdir()  # a completed run has its config (runs.layout.run_state)
    (tmp_path / ".hydra" / "config.yaml").write_text("seed: 1\n")
    trainer = OmegaConf.create({"max_steps": 40, "max_epochs": 10})
    assert finished_run(metrics, trainer) is None  # no metrics.json: nothing finished
    metrics.write_text('{"status": "interrupted", "steps": 25, "epochs": 0}')
    assert finished_run(metrics, trainer) is None
    metrics.write_text('{"status": "completed", "steps": 40, "epochs": 0}')
    assert finished_run(metrics, trainer) == "it finished at step 40 (trainer.max_steps=40)"
    assert finished_run(metrics, OmegaConf.create({"max_steps": 80, "max_epochs": 10})) is None
    metrics.write_text('{"status": "completed", "steps": 350, "epochs": 10}')
    by_epochs = OmegaConf.create({"max_steps": -1, "max_epochs": 10})
    assert finished_run(metrics, by_epochs) == "it finished after 10 epochs (trainer.max_epochs=10)"
    # trainer.max_steps overrides trainer.max_epochs: 350 steps of 10 epochs, 500 asked
    assert finished_run(metrics, OmegaConf.create({"max_steps": 500, "max_epochs": 10})) is None


# --- every knob, any value: one line or a run that starts -------------------------------------


NOT_PROBED = {
    "data.data_dir",
    "data.url",
    "data.download",
    "data.download_timeout",
    "trainer.devices",
}
"""Where the data comes from: a probe would reach for the network (tested in tests/data). How
many processes train: more than one, and Lightning's launcher starts the command line again in
each, here pytest's own, which waits for them at the rendezvous for ever (DDP on two CPU
processes is tested through the console script in tests/test_sweeps.py)."""


def knobs(cfg: DictConfig) -> list[str]:
    """The numeric, text and boolean settings of the groups a user sets most."""
    found = []
    for group in ("model", "attention", "optimizer", "scheduler", "data", "trainer", "module"):
        for key, value in cfg[group].items():
            if str(key).startswith("_") or isinstance(value, DictConfig):
                continue
            if group == "module" and key in ("net", "optimizer", "scheduler", "num_classes"):
                continue  # interpolations of the groups above
            if value is None or isinstance(value, bool | int | float | str):
                found.append(f"{group}.{key}")
    return [knob for knob in found if knob not in NOT_PROBED]


KNOBS = knobs(compose_config("train", TINY, Path("/tmp/unused")))
ATTENTIONS_WITH_KNOBS = ["softmax", "linformer", "nystrom", "performer", "local", "reformer"]


@contextlib.contextmanager
def working_directory(folder: Path) -> Iterator[None]:
    """``folder`` as the working directory for the block."""
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def as_override(value: object) -> str:
    """A value as the command line writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return str(value)


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=600),
    st.floats(min_value=-10, max_value=10),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e-9, 0.5]),
    st.sampled_from(["abc", "true", "mean", "cls", "sdpa", "2d", "32-true", "auto"]),
)


SHORT_RUN = [
    "trainer.max_steps=2",
    "trainer.val_check_interval=1",
    "+trainer.limit_val_batches=1",
    "+trainer.limit_test_batches=1",
    "data.batch_size=8",
    "data.eval_batch_size=8",
    "logger=csv",
]
"""A run of two steps, before the probed value (which wins over these)."""


@pytest.mark.slow
@settings(
    max_examples=int(os.environ.get("VITATTN_PROPERTY_EXAMPLES", "60")),
    derandomize="VITATTN_PROPERTY_EXAMPLES" not in os.environ,  # CI: the same examples each run
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    attention=st.sampled_from(ATTENTIONS_WITH_KNOBS),
    knob=st.sampled_from([*KNOBS, "attention.__knob__"]),
    value=VALUES,
    data=st.data(),
)
def test_any_value_of_any_knob_is_refused_in_one_line_or_trains(
    attention: str, knob: str, value: object, data: st.DataObject, data_dir: Path
) -> None:
    """The contract of every setting: a run with it starts and trains, or it is refused in one
    line, naming it, before anything exists. What fails in the run (not in the check) must be a
    one-line error too, never a traceback."""
    base = [*TINY, f"paths.data_dir={data_dir}", f"attention={attention}", *SHORT_RUN]
    if knob == "attention.__knob__":
        cfg = compose_config("train", base, Path("/tmp/unused"))
        names = [k for k in cfg.attention if not str(k).startswith("_")]
        if not names:
            return
        knob = f"attention.{data.draw(st.sampled_from(names))}"
    overrides = [*base, f"{knob}={as_override(value)}"]
    try:
        check_composition("train", overrides, validate_training)
    except ConfigError as error:
        said = str(error)
        assert "\n" not in said and said, said
        # It names the setting, or, where torch or Lightning refused and said why in its own
        # words, the group (model.embed_dim=0 once named model.mlp_dim)
        group = knob.split(".", 1)[0]
        assert knob in said or said.startswith(f"{group}: these settings are refused"), said
        return
    # In the run's folder: a knob that says where (trainer.default_root_dir=2d, or null: the
    # working directory) writes there, not into the repository
    with tempfile.TemporaryDirectory() as run_dir, working_directory(Path(run_dir)):
        try:
            train(compose_config("train", overrides, Path(run_dir)))
        except Exception as error:
            problem = own_refusal(error)  # what the console script would print in one line
            assert problem is not None, f"{knob}={value!r}: {type(error).__name__}: {error}"
            assert "\n" not in str(problem)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.shift=${nope}", r"^data\.shift=\$\{nope\} cannot be resolved \(Interpolation key "),
        (
            "model.depth=${oc.env:VITATTN_NO_SUCH_VARIABLE}",
            r"^model\.depth=\S+ cannot be resolved \(KeyError raised while resolving ",
        ),
    ],
)
def test_a_value_that_cannot_be_resolved_is_one_line(
    override: str, message: str, tmp_path: Path
) -> None:
    """The keys the command line sets were read from Hydra's record of it, resolving each: an
    interpolation that cannot be resolved ended in a traceback (red team); then it named the
    node, not the override."""
    from tests.support.runners import assert_one_line_refusal
    from vitattn.train import validate

    assert_one_line_refusal("train", [override], validate, message, tmp_path / "run")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (  # the run started, then "unexpected InstantiationException" named neither
            "callbacks.model_checkpoint.mode=maximum",
            r"^callbacks\.model_checkpoint: these settings are refused "
            r"\(MisconfigurationException: `mode` can be min, max but got maximum\)$",
        ),
        (
            "callbacks.model_checkpoint.save_top_k=-5",
            r"^callbacks\.model_checkpoint: .*save_top_k=-5\. Must be >= -1\)$",
        ),
        # taken and clamped to 1, or taken as they were
        ("callbacks.throughput.window=0", r"^callbacks\.throughput\.window=0 is not valid; "),
        ("callbacks.nan_guard.check_every_n_steps=0", r"^callbacks\.nan_guard\.check_every_n"),
        ("callbacks.attention_insight.images=-3", r"^callbacks\.attention_insight\.images=-3 "),
        ("callbacks.confusion_report.errors=-1", r"choose an integer 0 <= errors <= 256$"),
        # Lightning's ValueError once the run had begun (red team)
        ("callbacks.model_summary.max_depth=-5", r"^callbacks\.model_summary\.max_depth=-5 is "),
        ("callbacks.progress_bar.refresh_rate=-1", r"choose an integer >= 0 \(0: no bar\)$"),
    ],
)
def test_a_callbacks_setting_it_refuses_is_one_line_before_the_run(
    override: str, message: str, tmp_path: Path
) -> None:
    """Each callback is built once before the run, its paths under a directory that is never
    made (red team)."""
    from tests.support.runners import assert_one_line_refusal
    from vitattn.train import validate

    assert_one_line_refusal("train", [override], validate, message, tmp_path / "run")
    assert not Path(TRIAL_OUTPUT_DIR).exists()


@pytest.mark.parametrize(
    "override",
    [
        "callbacks.attention_insight.every_n_validations=0",  # documented as off (review)
        "callbacks.attention_insight.images=0",
        "callbacks.progress_bar.refresh_rate=0",
        "callbacks.model_checkpoint.save_top_k=-1",
    ],
)
def test_a_callbacks_setting_it_takes_is_taken(override: str) -> None:
    check_composition("train", [override], validate_training)
