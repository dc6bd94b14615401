"""A run's recorded overrides are typed settings of vitattn's configs (issue 43): each rule of
:mod:`vitattn.runs.recorded` on the config vitattn composes, without a run."""

from __future__ import annotations

import pytest

from vitattn.runs.recorded import (
    TRAINER_ADDITIONS,
    RecordedOverrideError,
    RecordedSettings,
    hydra_changes,
    is_group,
    says_where,
)
from vitattn.utils.config import CONFIG_DIR

SOURCE = "run/.hydra/overrides.yaml line 4"


@pytest.fixture(scope="module")
def recorded() -> RecordedSettings:
    """The settings of a run recorded with ``attention=local`` and ``logger=many_loggers``."""
    return RecordedSettings.of(
        [("attention=local", "f line 1"), ("logger=many_loggers", "f line 2")], ["trainer=cpu"]
    )


REPLAYED = [
    "model.embed_dim=32",
    "trainer.max_steps=12",
    "optimizer.lr=1e-3",
    "optimizer.lr=1",  # an integer for a number
    "data.hflip=false",
    "trainer.precision=bf16-mixed",
    "callbacks.model_checkpoint.monitor=val/loss",
    "attention.window=5",  # a setting of the recorded group choice
    "model.mlp_dim=64",  # null by default: a number
    "summary.baseline=softmax",  # null by default: a word
    "seed=3",
    "attention=linear",
    "~callbacks.throughput",
    "~logger.csv",
    "+trainer.limit_val_batches=0",  # a Lightning argument configs/trainer/ leaves out
    "+trainer.limit_train_batches=0.25",
    "+trainer.accumulate_grad_batches=2",
    "+trainer.detect_anomaly=true",
]


@pytest.mark.parametrize("text", REPLAYED)
def test_typed_settings_of_vitattns_configs_are_replayed(
    recorded: RecordedSettings, text: str
) -> None:
    recorded.check(text, SOURCE)


REFUSED = {
    "callbacks.last_checkpoint.filename=../../victim/evil_last": "says where",
    "logger.csv.name=../../victim/csvdir": "says where",
    "logger.csv.version=../x": "says where",
    "logger.tensorboard.save_dir=/tmp": "says where",
    "data.data_dir=/elsewhere": "says where",
    "data.url=http://127.0.0.1:9/a.tar.gz": "says where",
    "paths.root_dir=/elsewhere": "says where",
    "++paths.anything=1": "says where",
    "trainer.default_root_dir=/elsewhere": "says where",
    "callbacks.interrupt_checkpoint.dirpath=/elsewhere": "says where",
    "ckpt_path=/elsewhere/their.ckpt": "says where",
    "task_name=../../x": "says where",
    "model.embed_dim=abc": "is not an integer",
    "model.embed_dim=2.5": "is not an integer",
    "model.embed_dim=10000000000": "is not an integer",
    "optimizer.lr=nan": "is not a finite number",
    "optimizer.lr=inf": "is not a finite number",
    "data.hflip=1": "is not true or false",
    "data.shift=../../victim": "is not a plain word",
    "data.shift=/etc/passwd": "is not a plain word",
    "data.shift=${paths.root_dir}": "is not a plain word",
    "model.pool=[mean]": "is not a plain word",
    "model.attention=x": "not a plain setting",
    "module.net={depth: 1}": "not a plain setting",
    "+trainer.limit_val_batches=../x": "is not a finite number",
    "+trainer.limit_val_batches=inf": "is not a finite number",
    "+trainer.accumulate_grad_batches=2.5": "is not an integer",
    "+trainer.detect_anomaly=1": "is not true or false",
    "+trainer.gradient_clip_algorithm=/etc/x": "is not a plain word",
    "+trainer.model_registry=hub": "not a setting of vitattn's configs",
    "+trainer.num_nodes=2": "not a setting of vitattn's configs",
    "+trainer.profiler=simple": "not a setting of vitattn's configs",
    "+trainer.limit_val_batches.x=2": "not a setting of vitattn's configs",
    "+model.limit_val_batches=2": "not a setting of vitattn's configs",
    "+callbacks.x.step=3": "not a setting of vitattn's configs",
    "attention=../../d/inside": "is not a choice of attention",
    "attention@model.attention=linear": "is not a choice of attention",
    "~trainer.plugins": "may delete only one of the callbacks or loggers",
    "~paths": "says where",
}


@pytest.mark.parametrize("text", sorted(REFUSED))
def test_anything_else_is_refused_in_one_line_naming_the_line(
    recorded: RecordedSettings, text: str
) -> None:
    with pytest.raises(RecordedOverrideError, match=REFUSED[text].replace(".", r"\.")) as refused:
        recorded.check(text, SOURCE)
    assert str(refused.value).startswith(f"{SOURCE}: ") and "\n" not in str(refused.value)


KINDS = {"number": (int, float), "integer": (int,), "flag": (bool,), "word": (str,)}


@pytest.mark.parametrize("name", sorted(TRAINER_ADDITIONS))
def test_each_trainer_addition_is_an_argument_lightning_types_so(name: str) -> None:
    """:data:`TRAINER_ADDITIONS` names arguments of Lightning's ``Trainer`` that
    ``configs/trainer/`` leaves out, each with a type its annotation admits (and no type it
    does not: a flag is not taken for an integer)."""
    import typing

    import lightning
    from omegaconf import OmegaConf

    hints = typing.get_type_hints(lightning.pytorch.Trainer.__init__)
    assert name in hints
    admitted = set(typing.get_args(hints[name]) or (hints[name],)) - {type(None)}
    assert set(KINDS[TRAINER_ADDITIONS[name]]) <= admitted
    assert name not in OmegaConf.load(CONFIG_DIR / "trainer" / "default.yaml")


@pytest.mark.parametrize("preset", ["optuna", "optuna_pareto"])
def test_a_recorded_choice_that_sets_hydras_own_settings_is_refused(preset: str) -> None:
    """A trial of a search records ``hparams_search=optuna``, whose option sets Hydra's mode and
    sweeper: replayed, a resume would start a search of its own (red team, 2026-12-02)."""
    with pytest.raises(RecordedOverrideError) as refused:
        RecordedSettings.of(
            [("attention=linformer", "f line 1"), (f"hparams_search={preset}", "f line 4")], []
        )
    message = str(refused.value)
    assert message.startswith(f"f line 4: 'hparams_search={preset}' chooses an option that sets ")
    assert "hydra.mode, hydra.sweeper (" in message and "\n" not in message
    assert "run it again into its hydra.sweep.dir" in message


@pytest.mark.parametrize(
    "choices",
    [
        ["experiment=report"],
        ["experiment=lra_image", "attention=nystrom"],
        ["debug=fdr", "logger=many_loggers"],
        ["debug=smoke", "trainer=ddp", "callbacks=none"],
        ["model=vit_pixel", "optimizer=adam", "trainer=gpu"],
    ],
)
def test_recorded_choices_that_set_nothing_of_hydras_are_taken(choices: list[str]) -> None:
    settings = RecordedSettings.of([(c, f"f line {i}") for i, c in enumerate(choices, 1)], [])
    assert settings.node("trainer.max_steps") is not None


def test_a_search_given_now_is_the_users_own() -> None:
    """The comparison is with the choices given on the command line: what they set of Hydra's
    is the user's."""
    assert not hydra_changes("train", ["hparams_search=optuna"], ["attention=linformer"])
    assert hydra_changes("train", [], ["hparams_search=optuna"]) == ["hydra.mode", "hydra.sweeper"]


def test_a_recorded_group_choice_must_exist_before_anything_is_composed() -> None:
    with pytest.raises(
        RecordedOverrideError, match=r"^f line 1: 'attention=flash' is not a choice"
    ):
        RecordedSettings.of([("attention=flash", "f line 1")], [])


def test_the_settings_of_a_node_the_command_line_gives_are_plain_values() -> None:
    """``+callbacks.mine._target_=...`` given now: its recorded settings are replayed when they
    are plain values, and refused when they say where or are not plain."""
    settings = RecordedSettings.of([], ["+callbacks.mine._target_=mypkg.Mine"])
    settings.check("+callbacks.mine.step=3", SOURCE)
    with pytest.raises(RecordedOverrideError, match="says where"):
        settings.check("+callbacks.mine.dirpath=/elsewhere", SOURCE)
    with pytest.raises(RecordedOverrideError, match="null, a flag, a number or a plain word"):
        settings.check("+callbacks.mine.step=../../x", SOURCE)


@pytest.mark.parametrize(
    ("key", "where"),
    [
        ("data.data_dir", True),
        ("callbacks.x.filename", True),
        ("logger.wandb.name", True),
        ("hydra.run.dir", True),
        ("paths.log_dir", True),
        ("trainer.max_steps", False),
        ("callbacks.model_checkpoint.monitor", False),
        ("model.embed_dim", False),
    ],
)
def test_says_where(key: str, where: bool) -> None:
    assert says_where(key) is where


def test_a_recorded_key_longer_than_a_file_name_is_no_group() -> None:
    """A recorded override's key is looked up as a config group's folder: one of 300 characters
    raised ``OSError`` ("File name too long") where it is no group (red team)."""
    assert is_group("attention") and not is_group("k" * 300)
