"""An override that adds a key nothing reads (``+seeed=3``, which Hydra's own message for
``seeed=3`` suggests) is refused in one line naming it and the keys that are there; additions the
app reads (a map's new entry, a target's setting, Hydra's own, a key that was there) are not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.runners import assert_one_line_refusal, refused
from vitattn.cli.console import check_composition
from vitattn.errors import ConfigError

TRAIN_KEYS = "attention, callbacks, ckpt_path, data, logger, matmul_precision, model, module"


def hook(config_name: str) -> Callable[[Any], Any] | None:
    """The app's own ``validate`` hook, which runs after the check of additions (none for
    ``eval``, whose hook needs a checkpoint)."""
    if config_name == "eval":
        return None
    if config_name == "train":
        from vitattn.train import validate

        return validate
    if config_name == "bench":
        from vitattn.bench.app import load_settings

        return load_settings
    from vitattn.check.app import load_settings as load_check_settings

    return load_check_settings


@pytest.mark.parametrize(
    ("config_name", "overrides", "message"),
    [
        (
            "train",
            ["+seeed=3"],
            rf"^\+seeed=3 adds seeed, which vitattn does not read; did you mean seed\? choose "
            rf"among: {TRAIN_KEYS}, .*, seed, ",
        ),
        (
            "train",
            ["+training.compil=true"],
            r"^\+training\.compil=true adds training\.compil, which vitattn does not read; did "
            r"you mean trainer\? choose among: attention, .*, trainer$",
        ),
        (
            "train",
            ["++training.compil=true"],
            r"^\+\+training\.compil=true adds training\.compil, which vitattn does not read; ",
        ),
        (
            "train",
            ["+bar.baz=2"],
            rf"^\+bar\.baz=2 adds bar\.baz, which vitattn does not read; choose among: "
            rf"{TRAIN_KEYS}, ",
        ),
        (
            "train",
            ["+summary.baselin=x"],
            r"^\+summary\.baselin=x adds summary\.baselin, which vitattn does not read; did you "
            r"mean summary\.baseline\? choose among: summary\.baseline$",
        ),
        (
            "train",
            ["+summary={baselin: x}"],  # merged into a node that is there: its keys are looked at
            r"^\+summary=\{baselin: x\} adds summary\.baselin, which vitattn does not read; did "
            r"you mean summary\.baseline\? choose among: summary\.baseline$",
        ),
        (
            "train",
            ["+summary.baseline.foo=1"],  # the baseline became the text {'foo': 1}: red team
            r"^\+summary\.baseline\.foo=1 adds summary\.baseline\.foo under summary\.baseline, "
            r"which is null, not a node of settings: nothing reads keys there$",
        ),
        (
            "eval",
            # a TypeError after the run directory was made, while eval's logger was null: red
            # team; it has the tensorboard logger since 2026-12-02
            ["+logger.foo=1"],
            r"^\+logger\.foo=1 adds logger\.foo, which vitattn does not read; choose among: "
            r"logger\.tensorboard$",
        ),
        (
            "bench",
            ["+attentions.foo=1"],  # Hydra's AssertionError, a traceback of 30 lines: red team
            r"^\+attentions\.foo=1 cannot be added \(Unexpected type for root: NoneType\): no key "
            r"can be added under a setting that is null$",
        ),
        (
            "bench",
            ["+foo=1"],
            r"^\+foo=1 adds foo, which vitattn does not read; choose among: approx, attentions, ",
        ),
        (
            "bench",
            ["+guard.max_memori_bytes=1"],
            r"^\+guard\.max_memori_bytes=1 adds guard\.max_memori_bytes, .* did you mean "
            r"guard\.max_memory_bytes\? choose among: guard\.free_below, ",
        ),
        (
            "check",
            ["device=cpu", "+foo=1"],
            r"^\+foo=1 adds foo, which vitattn does not read; choose among: attentions, data, ",
        ),
        (
            "check",
            ["device=cpu", "++numerics.tolerance=1"],
            r"^\+\+numerics\.tolerance=1 adds numerics\.tolerance, .*; choose among: "
            r"numerics\.batch_size, ",
        ),
    ],
)
def test_an_addition_nothing_reads_is_one_line(
    config_name: str, overrides: list[str], message: str, tmp_path: Path
) -> None:
    validate = hook(config_name)
    assert_one_line_refusal(config_name, overrides, validate, message, tmp_path / "run")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["seeed=3"],
            rf"^seeed=3 sets seeed, which is not a setting; did you mean seed\? choose among: "
            rf"{TRAIN_KEYS}, .*, seed, ",
        ),
        (
            ["model.depht=2"],
            r"^model\.depht is not a setting of vitattn\.models\.vit\.VisionTransformer; did you "
            r"mean model\.depth\? choose among: .*, depth, ",
        ),
        (
            ["-m", "attention=softmax,linear", "attention.landmarks=8"],
            r"^attention\.landmarks is not a setting of vitattn\.attention\.softmax\."
            r"SoftmaxAttention; choose among: dropout, head_dim, heads, impl, ",
        ),
        (  # named as typed, not one job's modell.depth=1
            ["-m", "attention=softmax,linear", "modell.depth=1,2"],
            rf"^modell\.depth=1,2 sets modell\.depth, which is not a setting; did you mean "
            rf"model\? choose among: {TRAIN_KEYS}, ",
        ),
    ],
)
def test_a_key_that_is_not_there_set_without_a_plus_is_told_as_its_addition_would_be(
    overrides: list[str], message: str, tmp_path: Path
) -> None:
    """Hydra's own line ("Could not override 'seeed'; To append to your config use +seeed=3")
    suggested the addition that is then refused: the line names the key and what is valid."""
    from vitattn.train import validate

    assert_one_line_refusal("train", overrides, validate, message, tmp_path / "run")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["~callbacks.throughputt"],
            r"^~callbacks\.throughputt deletes callbacks\.throughputt, which is not there; did "
            r"you mean callbacks\.throughput\? choose among: callbacks\.attention_insight, ",
        ),
        (
            ["~model.bogus"],
            r"^~model\.bogus deletes model\.bogus, which is not there; choose among: "
            r"model\._target_, model\.attention, ",
        ),
        (
            ["-m", "seed=1,2", "~logger.tensorbord"],
            r"^~logger\.tensorbord deletes logger\.tensorbord, which is not there; did you mean "
            r"logger\.tensorboard\? ",
        ),
    ],
)
def test_a_deletion_of_a_key_that_is_not_there_names_the_keys_that_are(
    overrides: list[str], message: str, tmp_path: Path
) -> None:
    """Hydra's line ("Could not delete from config. 'callbacks.throughputt' does not exist")
    named no key that is there (user audit, 2026-12-02)."""
    from vitattn.train import validate

    assert_one_line_refusal("train", overrides, validate, message, tmp_path / "run")


def test_a_sweep_is_refused_before_its_jobs_run(tmp_path: Path) -> None:
    assert_one_line_refusal(
        "train", ["-m", "seed=1,2", "+sead=1"], None, r"^\+sead=1 adds sead, ", tmp_path / "run"
    )


def test_a_sweeps_refusal_names_the_override_as_typed(tmp_path: Path) -> None:
    """The refusal names ``+seed2=1,2`` as the command line gives it, not one job's ``+seed2=1``."""
    assert_one_line_refusal(
        "train",
        ["-m", "seed=1,2", "+seed2=1,2"],
        None,
        r"^\+seed2=1,2 adds seed2, which vitattn does not read; did you mean seed\? ",
        tmp_path / "run",
    )


@pytest.mark.slow
def test_the_console_refuses_an_addition_in_one_line_and_makes_nothing(
    tmp_path: Path, data_dir: Path
) -> None:
    run_dir = tmp_path / "run"
    args = ["+seeed=3", "trainer.max_steps=1", f"hydra.run.dir={run_dir}"]
    said = refused("vitattn-train", *args, data_dir=data_dir, creates=run_dir)
    assert said.startswith("+seeed=3 adds seeed, which vitattn does not read; did you mean seed?")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("config_name", "overrides"),
    [
        ("train", ["++seed=3"]),  # there before: ++ sets it
        ("train", ["+trainer.limit_val_batches=2"]),  # the target's signature checks it
        ("train", ["+callbacks.x={_target_:vitattn.training.callbacks.NanGuard}"]),
        ("train", ["+callbacks.x._target_=vitattn.training.callbacks.NanGuard"]),
        ("train", ["++hydra.job.chdir=false", "++hydra.job.env_set.X=1"]),  # Hydra's
        ("train", ["+attention@model.attention=linear"]),  # a group, with a package
        ("train", ["+optimizer@extra=adam"]),
        ("train", ["experiment=vit_best"]),
        ("bench", ["+variants.fast.attention=linear", "attentions=[fast]"]),  # a map's entry
        ("bench", ["+knobs.linformer.k=16"]),
        ("bench", ["+approx.budgets.performer_unbiased={knob:features,values:[16]}"]),
        ("bench", ["+variants={linear_compiled:{attention:linear,compile:true}}"]),  # merged
        ("bench", ["++seed=3"]),
        ("check", ["device=cpu", "+kernels.variants.g.attention=linear"]),
    ],
)
def test_an_addition_the_app_reads_is_taken(config_name: str, overrides: list[str]) -> None:
    check_composition(config_name, overrides)


def test_a_groups_choice_the_config_does_not_choose_is_refused(tmp_path: Path) -> None:
    """``+group=option`` of a group the primary config does not choose adds a node nothing
    reads: no vitattn command reads a group its config does not choose. Until 2026-12-02 it
    was taken (``vitattn-eval +attention=linear``, which Hydra's refusal of ``attention=linear``
    suggests, tested the checkpoint's own network while its run recorded linear attention)."""
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "one.yaml").write_text("size: 1\n")
    (tmp_path / "chosen").mkdir()
    (tmp_path / "chosen" / "a.yaml").write_text("size: 2\n")
    (tmp_path / "main.yaml").write_text("defaults:\n  - chosen: a\n  - _self_\nseed: 1\n")
    refusal = r"^\+extra=one adds the group extra, which this command does not read; the "
    refusal += "groups it reads: chosen$"
    with pytest.raises(ConfigError, match=refusal):
        check_composition("main", ["+extra=one"], config_dir=tmp_path)
    check_composition("main", ["chosen=a"], config_dir=tmp_path)
    refusal = r"^\+sed=2 adds sed, which vitattn does not read; did you mean seed\? choose among: "
    refusal += "chosen, seed$"
    with pytest.raises(ConfigError, match=refusal):
        check_composition("main", ["+sed=2"], config_dir=tmp_path)


@pytest.mark.parametrize(
    ("config_name", "addition", "reads"),
    [
        ("eval", "+attention=linear", "callbacks, data, logger, paths, trainer"),
        ("finetune", "+model=vit", "callbacks, data, logger, optimizer, paths, scheduler, trainer"),
    ],
)
def test_a_network_group_added_to_a_command_that_rebuilds_a_checkpoint_is_refused(
    config_name: str, addition: str, reads: str
) -> None:
    group = addition[1:].split("=")[0]
    refusal = (
        f"{addition} adds the group {group}, which this command does not read (the network is "
        f"rebuilt from ckpt_path, as it was trained); the groups it reads: {reads}"
    )
    with pytest.raises(ConfigError) as refused:
        check_composition(config_name, ["ckpt_path=x.ckpt", addition])
    assert str(refused.value) == refusal


@pytest.mark.parametrize("typed", ["seeed=3", "+seeed=3"])
def test_a_key_nothing_reads_is_refused_before_the_apps_own_checks(typed: str) -> None:
    """The app's checks locate every target of the config, importing Lightning: a misspelled
    key outside the targets' settings took 7 s to refuse on a 2-core machine, where naming it
    needs the config alone (0.8 s). A target's setting (``model.depht``) is the app's to name,
    from the target's signature."""

    def the_apps_checks(cfg: Any) -> None:
        raise AssertionError("the app's checks ran before the unread key was named")

    key = typed.lstrip("+").split("=")[0]
    said = f"(sets|adds) {key}, which (is not a setting|vitattn does not read)|{key} is not a"
    with pytest.raises(ConfigError, match=said):
        check_composition("train", [typed], the_apps_checks)
