"""The settings (:mod:`vitattn.bench.settings`): the schema, the checks, one-line refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.presets import compose_config
from tests.support.runners import assert_one_line_refusal
from vitattn.attention import ATTENTIONS
from vitattn.bench.app import benchmark
from vitattn.bench.settings import (
    DType,
    Level,
    Mode,
    check_budgets,
    load_settings,
    refuse_moved_settings,
)
from vitattn.errors import ConfigError
from vitattn.utils.config import CONFIG_DIR

BAD_INPUTS = [
    (["attentions=[softmax,nope]"], r"attentions=\[nope\] names no registered attention; .*linear"),
    (
        ["mode=fast"],
        r"mode=fast: Invalid value 'fast', expected one of \[scaling, approx, spectrum, train\]",
    ),
    (["dtype=float8"], r"dtype=float8: Invalid value 'float8', expected one of \[float32, float64"),
    (["level=model"], r"level=model: Invalid value 'model', expected one of \[kernel, block\]"),
    (["repeats=abc"], r"repeats=abc: Value 'abc' of type 'str' could not be converted to Integer"),
    (["repeats=0"], r"repeats=0 is not valid; choose an integer >= 1"),
    (["warmup=-1"], r"warmup=-1 is not valid; choose an integer >= 0"),
    (["warmup=5", "warmup_max=3"], r"warmup_max=3 is not valid; choose an integer >= warmup=5"),
    (["settle=0"], r"settle=0.0 is not valid; choose a positive number"),
    (["seq_lens=[0,64]"], r"seq_lens has 0, which is not valid"),
    (["head_dims=[]"], r"head_dims=\[\] is not valid; give a list such as \[32,64\]"),
    (
        ["head_dims=[0]"],
        r"head_dims has 0, which is not valid; choose integers >= 1, e.g. \[32,64\]",
    ),
    (["reference=nope"], r"^reference=nope is not a registered attention; choose from: .*linear"),
    (["guard.max_call_seconds=0"], r"guard.max_call_seconds=0.0 is not valid; choose a positive"),
    (["guard.max_memory_bytes=lots"], r"guard.max_memory_bytes=lots is not valid"),
    (["spectrum.energy=1.5"], r"spectrum.energy=1.5 is not valid; choose 0 < energy <= 1"),
    (["approx.trials=0"], r"approx.trials=0 is not valid; choose an integer >= 1"),
    (["device=tpu"], r"device=tpu is not valid; choose auto, cpu, cuda or cuda:<index>"),
    (["+knobs.linear.k=4"], r"knobs.linear.k is not a setting of configs/attention/linear.yaml"),
    (
        ["attentions=[linformer]", "+knobs.linformer.k=-3"],
        r"^knobs.linformer.k=-3 is not valid; choose an integer >= 1 \(refused at every size: "
        r"seq_lens=\[256, 1024, 4096\], head_dims=\[64\]\)$",
    ),
    (
        ["attentions=[lf]", "+variants.lf={attention:linformer,k:0}", "head_dims=[32,64]"],
        r"^variants.lf.k=0 is not valid; choose an integer >= 1 \(refused at every size",
    ),
    (
        ["attentions=[linformer]", "+knobs.linformer.k=300", "seq_lens=[64,256]"],
        r"^knobs.linformer.k=300 is larger than the 64 tokens it attends over; choose 1 <= "
        r"knobs.linformer.k <= 64 .*\(refused at every size: seq_lens=\[64, 256\]",
    ),
    (["mode=spectrum"], r"ckpt_path is required for mode=spectrum"),
    (["mode=approx", "ckpt_path=nowhere.ckpt"], r"ckpt_path=nowhere.ckpt is not a file"),
    (["+variants.fast.attention=nope"], r"variants.fast.attention=\[nope\] names no registered"),
    (
        ["+variants.fast.attention=linear", "+variants.fast.k=3"],
        r"variants.fast.k is not a setting",
    ),
    (
        ["mode=approx", "attentions=[linformer]", "approx.budgets.linformer.values=[-3,-4]"],
        r"^approx.budgets.linformer.values: k=-3 is not valid; choose an integer >= 1 \(refused "
        r"at each of approx.budgets.linformer.values=\[-3, -4\], at approx.seq_len=256, "
        r"approx.head_dim=64\)$",
    ),
    (
        ["mode=approx", "attentions=[linformer]", "approx.budgets.linformer.values=[300]"],
        r"^approx.budgets.linformer.values: k=300 is larger than the 256 tokens it attends over; "
        r"choose 1 <= k <= 256 .*\(refused at each of",
    ),
    (
        ["mode=approx", "attentions=[performer]", "+knobs.performer.redraw_interval=-1"],
        r"^knobs.performer.redraw_interval=-1 is not valid; choose an integer >= 0 .*\(refused "
        r"at each of approx.budgets.performer.values=\[16, 32, 64, 128, 256, 512, 1024\], at",
    ),
    (
        ["mode=approx", "attentions=[lf]", "+variants.lf={attention:linformer,k:0}"],
        r"^variants.lf.k=0 is not valid; choose an integer >= 1 \(refused at "
        r"approx.seq_len=256, approx.head_dim=64\)$",
    ),
    (
        ["mode=approx", "attentions=[nystrom]", "approx.budgets.nystrom.knob=m"],
        r"approx.budgets.nystrom.knob=m is not a setting of configs/attention/nystrom.yaml",
    ),
    (
        ["train.implementations=[vitattn,keras]"],
        r"train.implementations=\['vitattn', 'keras'\] is not valid; choose from vitattn, "
        r"plain_loop, timm, report_style",
    ),
    (["train.model=vit_huge"], r"train.model=vit_huge is not a known model; choose one of: vit"),
    (["typo=1"], r"^typo=1 sets typo, which is not a setting; .*choose among: approx, "),
    (["compiled=[linear,nope]"], r"compiled=\[nope\] names no registered attention; .*linear"),
    (["compiled=linear"], r"compiled=linear: Invalid value assigned: str is not a ListConfig"),
    (
        ["attentions=[softmax,linear]", "compiled=[linear,performer,nystrom]"],
        r"^compiled=\[performer,nystrom\] names attentions not measured "
        r"\(attentions=\[softmax,linear\]\); add them there or drop them here$",
    ),
    (
        [
            "attentions=[linear,linear_compiled]",
            "+variants.linear_compiled={attention:linear,compile:true,compile_mode:max-autotune}",
            "compiled=[linear]",
        ],
        r"^variants.linear_compiled and compiled=\[linear\] both name the row linear_compiled; "
        r"rename the variant or drop linear from compiled$",
    ),
    # The data settings, as vitattn-train checks them (they were taken, and used by mode=approx).
    (["+data.colour=red"], r"^data\.colour is not a data setting; choose among: augment_seed, "),
    (["data.grayscale=maybe"], r"^data\.grayscale='maybe' is not valid; choose true or false$"),
    (["data.batch_size=0"], r"^data\.batch_size=0 is not valid; choose an integer >= 1$"),
    (["+data.colour=null"], r"^data\.colour is not a data setting; choose among: "),  # red team
    (["data.batch_size=null"], r"^data\.batch_size=None is not valid; choose an integer"),
    (
        ["mode=approx", "compiled=null"],
        r"^compiled=null times kernels compiled in mode=scaling, not mode=approx "
        r"\(mode=train compiles with train.compile\)$",
    ),
    # a checkpoint the mode does not read was ignored, and the bench measured random inputs
    (
        ["mode=scaling", "ckpt_path=/nowhere/last.ckpt"],
        r"^ckpt_path=/nowhere/last\.ckpt is read by mode=approx and mode=spectrum, not "
        r"mode=scaling; drop it, or choose one of those modes$",
    ),
    (
        ["mode=train", "ckpt_path=/nowhere/last.ckpt"],
        r"^ckpt_path=/nowhere/last\.ckpt is read by mode=approx and mode=spectrum, not mode=train",
    ),
    # overflowed once the run directory was made (red team)
    (["threads=1000000000000"], r"^threads=1000000000000 is not valid; choose an integer 1 <= "),
    (["seed=-1"], r"^seed=-1 is not valid; choose an integer 0 <= seed <= 4294967295$"),
    # every row failed and the bench exited 0 (red team)
    # "or null" only where null is valid (guard.max_call_seconds above): said of every one
    (["mlp_ratio=inf"], r"^mlp_ratio=inf is not valid; choose a positive number$"),
    # a block without an MLP was measured and reported ok
    (
        ["level=block", "heads=4", "head_dims=[8,64]", "mlp_ratio=0.01"],
        r"^mlp_ratio=0.01 is not valid; choose a number >= 0.0313 \(level=block's MLP is heads=4 "
        r"x head_dim=8 times it wide\)$",
    ),
    (["approx.qk_std=inf"], r"^approx\.qk_std=inf is not valid; choose a positive number"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_INPUTS)
def test_bad_input_is_one_config_error_before_the_run(
    overrides: list[str], message: str, tmp_path: Path
) -> None:
    """What ``vitattn-bench`` checks before Hydra starts: composition, then the settings."""
    assert_one_line_refusal("bench", overrides, load_settings, message, tmp_path / "run")


def test_the_overrides_mode_train_trains_with_are_checked_before_the_run(tmp_path: Path) -> None:
    from vitattn.bench.app import check_command

    message = r"^train\.overrides=\[model\.depth=0\] \(with model=vit attention=softmax\): "
    message += "model\\.depth=0 is not valid; choose an integer >= 1$"
    overrides = ["mode=train", 'train.overrides=["model.depth=0"]']
    assert_one_line_refusal("bench", overrides, check_command, message, tmp_path / "run")
    check_command(compose_config("bench", overrides[1:], tmp_path / "run"))  # scaling: unused


def test_a_batch_size_among_the_overrides_is_refused_not_counted_wrong(tmp_path: Path) -> None:
    """``data.batch_size=4`` among ``train.overrides`` trained with 4 images a step and counted
    ``train.batch_size`` (8): the images/s written were doubled (red team)."""
    from vitattn.bench.app import check_command

    message = r"^train\.overrides=\[data\.batch_size=4\]: data\.batch_size=4 is not taken: the "
    message += r"images each measured step counts are train\.batch_size's: set that$"
    overrides = ["mode=train", 'train.overrides=["data.batch_size=4"]']
    assert_one_line_refusal("bench", overrides, check_command, message, tmp_path / "run")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # filled the RAM until the kernel killed the bench, with no line (red team)
        (
            ["approx.pixels=true", "approx.images=1000000000000"],
            r"^approx\.images: the exact attention of 1000000000000 inputs x \d+ heads x 1024 "
            r"tokens \(approx\.head_dim=64\) alone holds .* GiB, more than the memory guard's ",
        ),
        (["approx.seq_len=1000000000000"], r"^approx\.seq_len: the exact attention of "),
        (
            ["approx.seq_len=4096", "guard.max_memory_bytes=1000000"],
            r"more than the memory guard's 1\.0 MiB \(guard\.max_memory_bytes\); lower it$",
        ),
    ],
)
def test_an_approximation_whose_exact_attention_would_not_fit_is_one_line(
    overrides: list[str], message: str, tmp_path: Path
) -> None:
    from vitattn.bench.app import check_command

    command = ["mode=approx", *overrides]
    assert_one_line_refusal("bench", command, check_command, message, tmp_path / "run")
    check_command(compose_config("bench", ["mode=approx", "approx.pixels=true"], tmp_path / "r"))


def test_data_settings_left_null_are_the_checkpoints_and_taken(tmp_path: Path) -> None:
    """``null`` (the bench's default of ``grayscale``, ``normalize`` and ``shift``) means "as the
    checkpoint's run was trained": not a value the data module refuses."""
    overrides = ["data.grayscale=true", "data.batch_size=16"]
    settings = load_settings(compose_config("bench", overrides, tmp_path / "run"))
    assert settings.data is None  # the data node is not the bench's own
    resolved = ["data.grayscale=${oc.env:VITATTN_NO_SUCH_VARIABLE,null}"]  # null once resolved
    load_settings(compose_config("bench", resolved, tmp_path / "run"))


@pytest.mark.parametrize(
    "overrides", [["seq_lens=[0,64]"], ["attentions=[softmax,nope]"], ["mode=spectrum"]]
)
def test_the_task_checks_its_settings_too(overrides: list[str], tmp_path: Path) -> None:
    cfg = compose_config("bench", overrides, tmp_path / "run")
    with pytest.raises(ConfigError):
        benchmark(cfg)
    assert not (tmp_path / "run").exists()


def test_settings_a_mechanism_takes_at_one_size_of_the_grid_are_measured(tmp_path: Path) -> None:
    """``knobs.linformer.k=100`` is too many for 64 tokens and fine for 256: the bench measures,
    and the row at n=64 says why it has no figures (only settings refused at every size are
    refused before the run)."""
    overrides = ["attentions=[linformer]", "+knobs.linformer.k=100", "seq_lens=[64,256]"]
    settings = load_settings(compose_config("bench", overrides, tmp_path / "run"))
    assert settings.knobs == {"linformer": {"k": 100}} and settings.seq_lens == [64, 256]


def test_budget_values_a_mechanism_takes_at_one_size_of_the_inputs_are_measured(
    tmp_path: Path,
) -> None:
    """``mode=approx``: a budget refused at some of its values only is measured (those rows say
    why), and so is one refused at ``approx.seq_len`` but taken at the pixel inputs' 1024
    tokens. With ``ckpt_path`` nothing is refused before the run: the checkpoint's inputs have
    their own n, known once it is read."""
    overrides = ["mode=approx", "attentions=[linformer]"]
    for more in (
        ["approx.budgets.linformer.values=[-3,8]"],
        ["approx.budgets.linformer.values=[300]", "approx.pixels=true"],
    ):
        settings = load_settings(compose_config("bench", overrides + more, tmp_path / "run"))
        assert settings.approx.budgets["linformer"]["knob"] == "k"
    assert not (tmp_path / "run").exists()


def test_level_train_moved_to_mode_train() -> None:
    for arguments in (["level=train"], ["-m", "level=kernel,train"]):
        with pytest.raises(ConfigError) as raised:
            refuse_moved_settings(arguments)
        assert str(raised.value) == "level=train is now mode=train (its settings stay under train:)"
    assert refuse_moved_settings(["level=block", "mode=train"]) == ["level=block", "mode=train"]
    assert refuse_moved_settings(["~seed", "~data"]) == ["~seed", "~data"]  # was a traceback


def test_the_composed_config_is_typed(tmp_path: Path) -> None:
    overrides = ["mode=approx", "dtype=bfloat16", "level=block", "seq_lens=[64,16,64]"]
    settings = load_settings(compose_config("bench", overrides, tmp_path))
    assert (settings.mode, settings.dtype, settings.level) == (
        Mode.approx,
        DType.bfloat16,
        Level.block,
    )
    assert settings.seq_lens == [16, 64]  # sorted, repeats dropped
    assert settings.device in ("cpu", "cuda")  # auto, resolved
    # mode=approx with attentions=null: every registered attention but the reference.
    assert settings.attentions == sorted(set(ATTENTIONS) - {"softmax"})
    assert settings.train.implementations == ["vitattn", "plain_loop", "timm", "report_style"]


@pytest.mark.parametrize(
    ("compiled", "rows"),
    [
        ("[]", ["softmax", "linear", "softmax_naive"]),
        (
            "[linear,softmax]",
            ["softmax", "softmax_compiled", "linear", "linear_compiled", "softmax_naive"],
        ),
        ("null", ["softmax", "softmax_compiled", "linear", "linear_compiled", "softmax_naive"]),
    ],
)
def test_compiled_adds_each_attentions_compiled_row_after_its_eager_one(
    compiled: str, rows: list[str], tmp_path: Path
) -> None:
    """``compiled=[...]``: the attentions also timed compiled (``null``: each one measured), each
    as the variant ``<name>_compiled`` right after its eager row."""
    overrides = ["attentions=[softmax,linear,softmax_naive]", f"compiled={compiled}"]
    settings = load_settings(compose_config("bench", overrides, tmp_path))
    assert settings.attentions == rows
    for row in rows:
        if row.endswith("_compiled"):
            attention = row.removesuffix("_compiled")
            assert settings.variants[row] == {"attention": attention, "compile": True}


def test_a_variant_that_is_what_compiled_makes_is_no_clash(tmp_path: Path) -> None:
    """A user's variant ``linear_compiled`` with another mode is refused beside
    ``compiled=[linear]`` (it was replaced without a word); the same settings are one row."""
    overrides = ["attentions=[linear]", "compiled=[linear]"]
    overrides += ["+variants.linear_compiled={attention:linear,compile:true}"]
    settings = load_settings(compose_config("bench", overrides, tmp_path))
    assert settings.attentions == ["linear", "linear_compiled"]


def test_budget_knobs_of_the_config_are_settings_of_the_attentions(tmp_path: Path) -> None:
    budgets = load_settings(compose_config("bench", [], tmp_path)).approx.budgets
    configured = [
        n for n in sorted(ATTENTIONS) if (CONFIG_DIR / "attention" / f"{n}.yaml").is_file()
    ]
    checked = check_budgets(budgets, configured)
    assert set(checked) <= set(ATTENTIONS)
    assert {"linformer", "nystrom", "performer"} & set(ATTENTIONS) <= set(checked)
