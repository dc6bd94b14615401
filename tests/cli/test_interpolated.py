"""An override that sets a key inside an interpolation (``model.attention`` is ``${attention}``)
is refused in one line naming the key to set instead. Hydra refuses
``model.attention.landmarks=3`` and suggests ``+model.attention.landmarks=3``, which replaced
the interpolation: the run was refused for a ``TypeError``, or started and failed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_additions import hook
from tests.support.runners import assert_one_line_refusal, refused
from vitattn.cli.console import check_composition
from vitattn.cli.interpolated import referred

COPY = "a key set there replaces the copy and nothing reads it"


@pytest.mark.parametrize(
    ("config_name", "overrides", "message"),
    [
        (
            "train",
            ["attention=nystrom", "model.attention.landmarks=3"],
            rf"^model\.attention\.landmarks=3 sets a key inside model\.attention, which is "
            rf"\$\{{attention\}} \(a copy of attention\): {COPY}; set attention\.landmarks=3$",
        ),
        (
            "train",  # the form Hydra's own message for the one above suggests
            ["attention=nystrom", "+model.attention.landmarks=3"],
            rf"^\+model\.attention\.landmarks=3 sets .*: {COPY}; set attention\.landmarks=3$",
        ),
        (
            "train",
            ["+model.attention.foo=1"],  # no attention has it: its settings are named
            rf"^\+model\.attention\.foo=1 sets .*: {COPY}; attention has no foo: choose among "
            r"attention\.impl, attention\.dropout, attention\.sdpa_backend$",
        ),
        (
            "train",  # softmax has no landmarks: attention.landmarks=3 would be refused in turn
            ["model.attention.landmarks=3"],
            r"^model\.attention\.landmarks=3 sets .*; attention has no landmarks: choose among ",
        ),
        (
            "train",  # a group's choice is not the node set by the command line: it is a copy
            ["model=vit_pixel", "+model.attention.foo=1"],
            r"^\+model\.attention\.foo=1 sets a key inside model\.attention, .*; attention has no ",
        ),
        (
            "train",  # two copies on the way: the key is the one both refer to
            ["+module.net.attention.impl=naive"],
            rf"^\+module\.net\.attention\.impl=naive sets a key inside module\.net, which is "
            rf"\$\{{model\}} \(a copy of model\): {COPY}; set attention\.impl=naive$",
        ),
        (
            "train",
            ["++module.net.depth=2"],
            rf"^\+\+module\.net\.depth=2 sets a key inside module\.net, which is \$\{{model\}} "
            rf"\(a copy of model\): {COPY}; set \+\+model\.depth=2$",
        ),
        (
            "train",  # it started the run, which failed with a TypeError
            ["+module.scheduler.foo=1"],
            r"^\+module\.scheduler\.foo=1 sets a key inside module\.scheduler, which is "
            r"\$\{oc\.select:scheduler,null\}: a key set there replaces the interpolation and "
            r"nothing reads it; set the setting it refers to$",
        ),
        (
            "train",
            ["+trainer.default_root_dir.x=1"],
            r"^\+trainer\.default_root_dir\.x=1 sets a key inside trainer\.default_root_dir, "
            r"which is \$\{paths\.output_dir\}, a value: no key can be set inside it$",
        ),
        (
            "check",
            ["device=cpu", "numerics.batch_size.x=1"],
            r"^numerics\.batch_size\.x=1 sets a key inside numerics\.batch_size, which is "
            r"\$\{profiles\.\$\{device\}\.numerics\.batch_size\}: .*; set the setting it "
            r"refers to$",
        ),
        (  # red team: `model.attention=${attention}` counted as the command line's own node
            "train",
            ["model.attention=${attention}", "+model.attention.foo=1"],
            rf"^\+model\.attention\.foo=1 sets a key inside model\.attention, which is "
            rf"\$\{{attention\}} \(a copy of attention\): {COPY}; attention has no foo: ",
        ),
        (  # and the node it names is the one the command line set
            "train",
            ["model.attention=${model.patch_size}", "+model.attention.impl=naive"],
            r"^\+model\.attention\.impl=naive sets a key inside model\.attention, which is "
            r"\$\{model\.patch_size\}, a value: no key can be set inside it$",
        ),
        (  # it suggested attention.impl=${attention.impl}, which refers to itself
            "train",
            ["+model.attention.impl=${attention.impl}"],
            r"^\+model\.attention\.impl=\$\{attention\.impl\} sets a key inside "
            r"model\.attention, .*; model\.attention\.impl is \$\{attention\.impl\} already: "
            r"there is nothing to set$",
        ),
    ],
)
def test_a_key_set_inside_an_interpolation_is_one_line(
    config_name: str, overrides: list[str], message: str, tmp_path: Path
) -> None:
    assert_one_line_refusal(config_name, overrides, hook(config_name), message, tmp_path / "run")


UNRESOLVED = r"cannot be resolved \(.+\): an interpolation names a setting of this config"


@pytest.mark.parametrize(
    ("config_name", "overrides", "named"),
    [
        ("train", ["data.shift=${nope}"], r"data\.shift=\$\{nope\}"),
        ("train", ["optimizer.lr=${oc.env:VITATTN_UNSET_LR}"], r"optimizer\.lr=\S+"),
        ("train", ["-m", "seed=1,2", "trainer.max_steps=${nope}"], r"trainer\.max_steps=\S+"),
        ("train", ["data.shift=${data.shift}"], r"data\.shift=\S+"),  # refers to itself
        # the bench's scaling mode never builds the data: it took this and ran
        ("bench", ["mode=scaling", "data.shift=${nope}"], r"data\.shift=\$\{nope\}"),
        ("bench", ["mode=approx", "data.shift=${nope}"], r"data\.shift=\$\{nope\}"),
        ("bench", ["seq_lens=[64,${nope}]"], r"seq_lens=\[64,\$\{nope\}\]"),
        ("bench", ["data.shift=${oc.decode:'[1'}"], r"data\.shift=\S+"),
        ("check", ["training.overrides=[${nope}]"], r"training\.overrides=\S+"),
    ],
)
def test_a_value_that_cannot_be_resolved_is_one_line_naming_it(
    config_name: str, overrides: list[str], named: str, tmp_path: Path
) -> None:
    message = rf"^{named} {UNRESOLVED}"
    assert_one_line_refusal(config_name, overrides, hook(config_name), message, tmp_path / "run")


@pytest.mark.parametrize(
    ("config_name", "overrides"),
    [
        (
            "train",
            ["callbacks.model_checkpoint.dirpath=${paths.output_dir}/fit"],
        ),  # the app resolves it
        ("train", ["data.url=${oc.env:VITATTN_UNSET_URL,http://localhost/c.tar.gz}"]),
        ("train", ["model.attention=${attention}"]),
        ("bench", ["batch_size=${heads}"]),
    ],
)
def test_a_value_that_resolves_is_taken(config_name: str, overrides: list[str]) -> None:
    check_composition(config_name, overrides, hook(config_name))


def test_a_sweeps_refusal_names_the_override_as_typed_and_the_sweep_to_type(
    tmp_path: Path,
) -> None:
    assert_one_line_refusal(
        "train",
        ["-m", "attention=nystrom", "model.attention.landmarks=3,4"],
        hook("train"),
        r"^model\.attention\.landmarks=3,4 sets a key inside model\.attention, .*; set "
        r"attention\.landmarks=3,4$",
        tmp_path / "run",
    )


def test_an_added_key_after_a_deletion_is_named_before_the_apps_refusal(tmp_path: Path) -> None:
    """``~scheduler +scheduler.foo=1``: the app refused the scheduler it could not build
    (``TypeError: 'DictConfig' object is not callable``); the addition nothing reads says more."""
    assert_one_line_refusal(
        "train",
        ["~scheduler", "+scheduler.foo=1"],
        hook("train"),
        r"^\+scheduler\.foo=1 adds scheduler\.foo, which vitattn does not read; choose among: ",
        tmp_path / "run",
    )


@pytest.mark.parametrize(
    "overrides",
    [
        ["attention=nystrom", "attention.landmarks=3"],  # what the refusals say to set
        ["attention=linear", "model.depth=2", "module.label_smoothing=0.0"],
        ["++attention.landmarks=3", "attention=nystrom"],
        ["attention.impl=naive"],
        # The command line replaced the node itself: what it adds to it is read (red team).
        [
            "module.scheduler={_target_:torch.optim.lr_scheduler.StepLR,_partial_:true,"
            "step_size:1}",
            "+module.scheduler.gamma=0.5",
        ],
        [
            "model.attention={_target_:vitattn.attention.softmax.SoftmaxAttention,_partial_:true}",
            "+model.attention.impl=naive",
        ],
    ],
)
def test_what_the_refusals_suggest_is_taken(overrides: list[str]) -> None:
    check_composition("train", overrides, hook("train"))


def test_a_sweeps_jobs_share_the_composition_without_their_swept_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each job of ``model.depth=1,...,8`` with an addition is composed once, and the config
    without the dotted overrides once for them all (red team: it was once a job)."""
    import hydra

    calls: list[list[str]] = []
    compose = hydra.compose

    def counted(config_name: str, overrides: list[str], **options: object) -> object:
        calls.append(list(overrides))
        return compose(config_name, overrides=overrides, **options)

    monkeypatch.setattr(hydra, "compose", counted)
    depths = ",".join(str(depth) for depth in range(1, 9))
    check_composition("train", ["-m", f"model.depth={depths}", "+trainer.detect_anomaly=true"])
    assert len(calls) == 8 + 1


@pytest.mark.parametrize(
    ("interpolation", "key"),
    [
        ("${attention}", "attention"),
        ("${paths.output_dir}", "paths.output_dir"),
        ("${oc.select:scheduler,null}", None),
        ("${profiles.${device}.numerics}", None),
        ("${.sibling}", None),
        ("${1st}", None),
        ("${a..b}", None),
        ("prefix ${attention}", None),
        ("${attention}${model}", None),
    ],
)
def test_only_a_plain_interpolation_names_a_key(interpolation: str, key: str | None) -> None:
    assert referred(interpolation) == key


def test_the_bench_refuses_a_value_it_cannot_resolve_and_makes_nothing(
    tmp_path: Path, data_dir: Path
) -> None:
    run_dir = tmp_path / "run"
    args = ["mode=scaling", "data.shift=${nope}", "seq_lens=[16]", f"hydra.run.dir={run_dir}"]
    said = refused("vitattn-bench", *args, data_dir=data_dir, creates=run_dir)
    assert said.startswith("data.shift=${nope} cannot be resolved (Interpolation key 'nope'")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_console_refuses_it_in_one_line_and_makes_nothing(
    tmp_path: Path, data_dir: Path
) -> None:
    run_dir = tmp_path / "run"
    args = ["+module.scheduler.foo=1", "debug=smoke", f"hydra.run.dir={run_dir}"]
    said = refused("vitattn-train", *args, data_dir=data_dir, creates=run_dir)
    assert said.startswith("+module.scheduler.foo=1 sets a key inside module.scheduler, which")
    assert list(tmp_path.iterdir()) == []
