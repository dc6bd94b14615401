"""``vitattn-check``: its settings, what each section finds, and the CPU dry run end to end."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import vitattn.check.numerics as numerics_module
from tests.support.compiling import compile_stood_down
from tests.support.in_process import refused_in_process, run_in_process
from tests.support.presets import compose_config
from tests.support.runners import assert_one_line_refusal
from vitattn.attention import ATTENTIONS
from vitattn.bench.scaling_table import Row
from vitattn.bench.settings import DType
from vitattn.check.app import check_command
from vitattn.check.kernels import KernelsRun
from vitattn.check.numerics import check_attention, relative_error, tolerance
from vitattn.check.report import cautions, problems
from vitattn.check.settings import CheckSettings, NumericsSettings, load_settings
from vitattn.check.training import TrainingRow
from vitattn.errors import ConfigError

NO_GPU = not torch.cuda.is_available()

BAD_INPUTS = [
    (["attentions=[softmax,nope]"], r"attentions=\[nope\] names no registered attention"),
    (["sections=[numerics,speed]"], r"sections=\[numerics,speed\]: Invalid value 'speed'"),
    (["kernels.seq_lens=[0,64]"], r"kernels.seq_lens has 0, which is not valid"),
    (["numerics.dtypes=[float8]"], r"numerics.dtypes=\[float8\]: Invalid value 'float8'"),
    (["training.steps=2"], r"training.steps=2 is not valid; choose an integer >= 4"),
    # overflowed in every section once the run directory was made (red team)
    (["seed=1000000000000000000000"], r"^seed=1000000000000000000000 is not valid; choose an "),
    # said every dtype was "not finite", blaming the machine (red team)
    (["numerics.stress_scale=inf"], r"^numerics\.stress_scale=inf is not valid; choose a posi"),
    # checked nothing and exited 0 (red team)
    (["sections=[]"], r"^sections=\[\] is not valid; choose one or more of numerics, training, "),
    (["numerics.dtypes=[]"], r"^numerics\.dtypes=\[\] is not valid; choose one or more of "),
    # an unexpected RuntimeError once the run directory was made (red team)
    (
        ["numerics.seq_len=1000000000000"],
        r"^numerics\.seq_len=1000000000000: the exact attention of \d+ inputs x \d+ heads ",
    ),
    (["training.model=vit_huge"], r"training.model=vit_huge is not a known model; choose one"),
    (["numerics.stress_scale=0"], r"numerics.stress_scale=0.0 is not valid; choose a positive"),
    (["typo=1"], r"^typo=1 sets typo, which is not a setting; choose among: attentions, "),
    (
        ["+kernels.variants.fast.attention=performer", "+kernels.variants.fast.k=3"],
        r"kernels.variants.fast.k is not a setting of configs/attention/performer.yaml",
    ),
    (["kernels.compiled=[linear,nope]"], r"kernels.compiled=\[nope\] names no registered"),
    (
        ["+kernels.variants.fast.attention=linear", "+kernels.variants.fast.compile=yes"],
        r"kernels.variants.fast.compile='yes' is not valid; choose true or false",
    ),
    (
        [
            "+kernels.variants.g.attention=linear",
            "+kernels.variants.g.compile_mode=reduce-overhead",
        ],
        r"kernels.variants.g.compile_mode=reduce-overhead needs kernels.variants.g.compile=true",
    ),
    (
        [
            "+kernels.variants.g.attention=linear",
            "+kernels.variants.g.compile=true",
            "+kernels.variants.g.compile_mode=fast",
        ],
        r"kernels.variants.g.compile_mode='fast' is not valid; choose one of default \| reduce-",
    ),
    (
        [
            "kernels.compiled=[linear]",
            "+kernels.variants.linear_compiled={attention:linear,compile:true,"
            "compile_mode:reduce-overhead}",
        ],
        r"^kernels.variants.linear_compiled and kernels.compiled=\[linear\] both name the row "
        r"linear_compiled; rename the variant or drop linear from kernels.compiled$",
    ),
    (["device=tpu"], r"device=tpu is not valid; choose gpu or cpu"),
    (["matmul_precision=low"], r"matmul_precision=low: Invalid value 'low', expected one of"),
    (["kernels.dtype=float8"], r"kernels.dtype=float8: Invalid value 'float8'"),
    (["+data.colour=red"], r"^data\.colour is not a data setting; choose among: augment_seed, "),
    (["data.batch_size=0"], r"^data\.batch_size=0 is not valid; choose "),
    # A profile's key that no section reads (they were taken, and nothing read them).
    (
        ["+profiles.cpu.numerics.seq_lens=[64]"],
        r"^profiles\.cpu\.numerics\.seq_lens is not read; did you mean seq_len\? a profile's "
        r"numerics gives batch_size, heads, seq_len, head_dim$",
    ),
    (
        ["+profiles.gpu.numerics.stress_scale=2"],  # numerics.stress_scale is set directly
        r"^profiles\.gpu\.numerics\.stress_scale is not read; a profile's numerics gives ",
    ),
    (
        ["+profiles.cpu.kernel={seq_lens:[64]}"],
        r"^profiles\.cpu\.kernel is not read; did you mean kernels\? a profile gives numerics, "
        r"training, reference, kernels$",
    ),
    (["+profiles.cpu.extra=1"], r"^profiles\.cpu\.extra is not read; a profile gives numerics"),
    (
        ["+profiles.tpu={numerics:{seq_len:8}}"],
        r"^profiles\.tpu is not read; a profile is a device's: gpu or cpu$",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_INPUTS)
def test_bad_input_is_one_line_before_the_run(
    overrides: list[str], message: str, tmp_path: Path
) -> None:
    assert_one_line_refusal(
        "check", ["device=cpu", *overrides], load_settings, message, tmp_path / "run"
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ['training.overrides=["model.depthh=2"]'],
            r"^training\.overrides=\[model\.depthh=2\] \(with model=vit attention=\w+ \(and every "
            r"other attention trained\)\): model\.depthh is not a setting of .*VisionTransformer; "
            r"did you mean model\.depth\? ",
        ),
        (
            ['training.overrides=["model.depth=0"]'],  # the trial build's: every row failed
            r"^training\.overrides=\[model\.depth=0\] \(with model=vit attention=\w+ .*\): "
            r"model\.depth=0 is not valid; choose an integer >= 1$",
        ),
        (
            ["training.model=vit_pixel", 'training.overrides=["model.attention.impl=torch"]'],
            r"^training\.overrides=\[model\.attention\.impl=torch\] \(with model=vit_pixel .*\): "
            r"model\.attention\.impl=torch sets a key inside model\.attention, .*; set "
            r"attention\.impl=torch$",
        ),
        (
            ["sections=[reference]", 'training.overrides=["+seeed=1"]'],
            r"^training\.overrides=\[\+seeed=1\] \(with model=vit attention=softmax\): "
            r"\+seeed=1 adds seeed, which vitattn does not ",
        ),
        (
            ["sections=[training]", 'training.overrides=["-m"]'],  # ran, then a traceback
            r"^training\.overrides=\[-m\]: -m is a flag of a command line, not an override; ",
        ),
        (  # every row failed, and the check exited 0 (red team)
            ["sections=[training]", "training.precision=banana"],
            r"^training\.precision='banana' is not valid; choose one of .*\| bf16-mixed \|",
        ),
    ],
)
def test_the_overrides_the_check_trains_with_are_checked_before_the_run(
    overrides: list[str], message: str, tmp_path: Path
) -> None:
    """They were checked only as each row trained: every row failed with the same line."""
    assert_one_line_refusal(
        "check", ["device=cpu", *overrides], check_command, message, tmp_path / "run"
    )


def test_the_bench_refuses_a_precision_lightning_does_not_take(tmp_path: Path) -> None:
    """Its run directory was made, then an unexpected ValueError ended it (red team)."""
    from vitattn.bench.app import check_command as check_bench_command

    assert_one_line_refusal(
        "bench",
        ["mode=train", "train.precision=banana"],
        check_bench_command,
        r"^train\.precision='banana' is not valid; choose one of ",
        tmp_path / "run",
    )


def test_overrides_some_attentions_take_are_their_rows_to_report(tmp_path: Path) -> None:
    """``attention.impl=torch`` is efficient's (its plain path), and linformer has no ``impl``:
    linformer's row says so, as a setting the bench takes at some sizes only. With linformer
    alone, it is refused naming linformer."""
    overrides = ['training.overrides=["attention.impl=torch"]', "sections=[training]"]
    chosen = ["device=cpu", "attentions=[efficient,linformer]", *overrides]
    check_command(compose_config("check", chosen, tmp_path / "run"))
    message = r"^training\.overrides=\[attention\.impl=torch\] \(with model=vit "
    message += r"attention=linformer\): attention\.impl is not a setting of .*LinformerAttention; "
    assert_one_line_refusal(
        "check",
        ["device=cpu", "attentions=[linformer]", *overrides],
        check_command,
        message,
        tmp_path / "run",
    )


def test_a_refusal_composes_each_attention_after_the_first_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A typo in ``training.overrides`` was composed three times with each of the twelve
    attentions (37 compositions: 21 s to refuse on a 2-core machine), to word twelve refusals of
    which the line shows the first: an attention after it whose composition fails is refused
    on that one composition."""
    import hydra

    from vitattn.bench.train_speed import check_train_overrides

    composed: list[list[str]] = []
    compose = hydra.compose

    def counted(*args: Any, **kwargs: Any) -> Any:
        composed.append(list(kwargs["overrides"]))
        return compose(*args, **kwargs)

    monkeypatch.setattr(hydra, "compose", counted)
    attentions = sorted(ATTENTIONS)
    with pytest.raises(ConfigError, match=rf"attention={attentions[0]} \(and every other "):
        check_train_overrides("training.overrides", ["model.depthh=2"], "vit", attentions)
    later = [overrides for overrides in composed if f"attention={attentions[0]}" not in overrides]
    assert len(later) == len(attentions) - 1
    composed.clear()  # a later attention that takes them: the overrides are taken
    check_train_overrides(
        "training.overrides", ["attention.impl=torch"], "vit", ["linformer", "efficient"]
    )
    assert any("attention=efficient" in overrides for overrides in composed)


@pytest.mark.parametrize(
    ("override", "why"),
    [
        # was refused on a CPU for a trainer nobody builds (red team)
        ("trainer=gpu", "the command trains with a trainer of its own (training.steps, "),
        ("trainer.max_steps=1", "the command trains with a trainer of its own"),  # was ignored
        # doubled the images/s, counted with the check's own batch (red team)
        ("data.batch_size=4", "the images each measured step counts are training.batch_size's"),
        ("hydra.run.dir=/tmp/x", "the command composes the settings without running a Hydra"),
        ("attention=linear", "the command chooses them (training.model, its attentions, "),
    ],
)
def test_an_override_the_check_trains_without_is_one_line(
    override: str, why: str, tmp_path: Path
) -> None:
    """The check trains with a trainer of its own (the bench's ``bare_trainer``), its own batch
    size and its own choices: an override of them is refused, not taken without effect."""
    overrides = ["device=cpu", "sections=[training]", "attentions=[linear]"]
    overrides.append(f'training.overrides=["{override}"]')
    with pytest.raises(ConfigError) as refused:
        check_command(compose_config("check", overrides, tmp_path / "run"))
    assert str(refused.value).startswith(
        f"training.overrides=[{override}]: {override} is not taken: {why}"
    ), refused.value


def test_overrides_no_section_trains_with_are_not_checked(tmp_path: Path) -> None:
    cfg = compose_config(
        "check", ["device=cpu", "sections=[numerics]", 'training.overrides=["x=1"]'], tmp_path
    )
    check_command(cfg)


@pytest.mark.skipif(not NO_GPU, reason="the refusal is for a machine without a GPU")
def test_the_gpu_check_without_a_gpu_points_to_the_dry_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"device=gpu: no CUDA GPU is visible here; .*device=cpu"):
        load_settings(compose_config("check", [], tmp_path))


def test_the_dry_run_is_typed_and_sized_for_a_cpu(tmp_path: Path) -> None:
    settings = load_settings(compose_config("check", ["device=cpu"], tmp_path))
    assert isinstance(settings, CheckSettings)
    assert settings.torch_device == torch.device("cpu")
    assert settings.attentions == sorted(ATTENTIONS)
    assert settings.training.precision == "32-true"
    assert settings.numerics.dtypes == [DType.float32, DType.bfloat16, DType.float16]
    assert (settings.numerics.seq_len, settings.kernels.seq_lens) == (64, [64, 256])
    # compiling 12 tiny models costs a minute each on 2 cores: only the reference compiles here
    assert settings.training.compile is False and settings.reference.compile is True
    # and one kernel, linear, is also timed compiled: the row linear_compiled
    assert settings.kernels.compiled == ["linear"]
    assert settings.kernels.variants["linear_compiled"] == {"attention": "linear", "compile": True}


def test_an_empty_list_of_compiled_kernels_times_none_compiled(tmp_path: Path) -> None:
    """``kernels.compiled=[]`` (the GPU run's sparse part, say) was refused as naming no
    registered attention; it means no compiled rows."""
    overrides = ["device=cpu", "kernels.compiled=[]"]
    settings = load_settings(compose_config("check", overrides, tmp_path))
    assert settings.kernels.compiled == []
    assert not any(v.get("compile") for v in settings.kernels.variants.values())


def test_null_compiled_kernels_are_every_attention_compiled(tmp_path: Path) -> None:
    """``kernels.compiled=null``: each attention also timed compiled (of them, the kernels time
    those checked)."""
    overrides = ["device=cpu", "kernels.compiled=null"]
    settings = load_settings(compose_config("check", overrides, tmp_path))
    compiled = {v["attention"] for v in settings.kernels.variants.values() if v.get("compile")}
    assert compiled == set(ATTENTIONS)


def test_the_kernels_time_the_variants_of_the_attentions_checked_only(tmp_path: Path) -> None:
    """A variant of a mechanism not checked (the feature maps' ``impl=autograd``, a compiled
    performer) ran in every kernels run, so that each part of a GPU run timed them again."""
    from vitattn.check.kernels import run_kernels

    overrides = ["device=cpu", "attentions=[linear]", "kernels.compiled=[performer]"]
    overrides += ["kernels.seq_lens=[32]", "kernels.repeats=1"]
    settings = load_settings(compose_config("check", overrides, tmp_path))
    assert {"performer_compiled", "performer_autograd"} <= set(settings.kernels.variants)
    run = run_kernels(settings)
    assert [row.attention for row in run.rows] == ["softmax", "linear"]


@pytest.mark.slow
def test_the_kernels_time_each_variant_right_after_its_mechanism(tmp_path: Path) -> None:
    """Issue 42: compiled rows next to eager ones, as ``vitattn-bench`` puts them (and the
    docs' ``impl=autograd`` rows "next to their default"). The check put every variant after the
    last mechanism: ``linear_compiled`` rows under ``performer_autograd``'s, far from ``linear``'s
    in check.md and check.json."""
    from vitattn.check.kernels import run_kernels

    overrides = ["device=cpu", "attentions=[linear,performer]", "kernels.compiled=[linear]"]
    overrides += ["kernels.seq_lens=[32]", "kernels.repeats=1"]
    settings = load_settings(compose_config("check", overrides, tmp_path))
    run = run_kernels(settings)
    expected = ["softmax", "linear", "linear_compiled", "performer", "performer_autograd"]
    assert [row.attention for row in run.rows] == expected
    assert [entry["attention"] for entry in run.summary] == expected


LINEAR_EAGER_AND_COMPILED = (
    "vitattn-check",
    "device=cpu",
    "sections=[training]",
    "attentions=[linear]",
    "training.compile=true",
)


@pytest.mark.slow
def test_the_training_section_trains_eager_and_compiled_side_by_side(
    tmp_path: Path, data_dir: Path
) -> None:
    run_dir = tmp_path / "check"
    run_in_process(*LINEAR_EAGER_AND_COMPILED, f"hydra.run.dir={run_dir}", data_dir=data_dir)
    rows = json.loads((run_dir / "check.json").read_text())["training"]
    assert [(r["attention"], r["compiled"]) for r in rows] == [("linear", False), ("linear", True)]
    assert all(r["status"] == "ok" and r["images_per_sec"] > 0 for r in rows)
    assert rows[0]["compile_seconds"] is None and rows[1]["compile_seconds"] >= 0
    assert rows[0]["params"] == rows[1]["params"]
    # The same weights, batches and augmentations: compiled, the same losses (before the rows
    # were seeded alike, the compiled row's augmentations went on from the eager row's).
    for loss in ("loss_first", "loss_last"):
        assert rows[1][loss] == pytest.approx(rows[0][loss], abs=1e-5), loss


@pytest.mark.slow
def test_a_training_row_is_the_same_whatever_trained_before_it(
    tmp_path: Path, data_dir: Path
) -> None:
    """Each row trains on the batches the seed gives, augmented alike: the data module's epoch
    order was drawn before the check seeded anything (another order in every process) and its
    augmentation continued from the rows before, so a row's losses, and with them "the loss did
    not fall", came and went from one run to the next."""

    def softmax_row(*attentions: str) -> dict:
        run_dir = tmp_path / "-".join(attentions)
        overrides = ["device=cpu", "sections=[training]", f"attentions=[{','.join(attentions)}]"]
        run_in_process("vitattn-check", *overrides, f"hydra.run.dir={run_dir}", data_dir=data_dir)
        rows = json.loads((run_dir / "check.json").read_text())["training"]
        return next(r for r in rows if r["attention"] == "softmax")

    alone, after_bigbird = softmax_row("softmax"), softmax_row("bigbird", "softmax")
    assert (alone["loss_first"], alone["loss_last"]) == (
        after_bigbird["loss_first"],
        after_bigbird["loss_last"],
    )


@pytest.mark.slow
def test_a_batch_larger_than_the_training_images_is_a_problem_naming_the_checks_setting(
    tmp_path: Path, data_dir: Path
) -> None:
    """Each training row and the reference say that ``training.batch_size`` is too large (the
    data module named ``data.batch_size``, which the check does not take; the reference ended the
    check with it), and the report lists both as problems."""
    pytest.importorskip("timm")
    run_dir = tmp_path / "check"
    overrides = ["device=cpu", "sections=[training,reference]", "attentions=[softmax]"]
    result = run_in_process(
        "vitattn-check",
        *overrides,
        "training.batch_size=100000",
        f"hydra.run.dir={run_dir}",
        data_dir=data_dir,
        check=False,
    )
    report = json.loads((run_dir / "check.json").read_text())
    said = "unsupported: training.batch_size=100000 is larger than the"
    (row,) = report["training"]
    assert row["status"].startswith(said), row["status"]
    assert report["reference"]["status"].startswith(said), report["reference"]
    assert [p.split(": ", 1)[0] for p in report["problems"]] == ["training", "reference"]
    assert all(said in p for p in report["problems"]), report["problems"]
    # it exited 0 with every row failed: now 1, the problems counted in the last line
    assert result.returncode == 1, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last == f"vitattn-check: 2 problems, listed first in {run_dir / 'check.md'}"


def test_a_compiled_row_that_ran_eager_is_a_problem(tmp_path: Path, data_dir: Path) -> None:
    """On an H200 with torch 2.11 the compiled rows trained at their eager speed, reported as
    compiled: Dynamo had skipped the network's forward (pytorch/pytorch#190286). Here the same
    silence has another cause, a stance that stands ``torch.compile`` down; the row says what
    ran, and it is a problem."""
    run_dir = tmp_path / "check"
    with compile_stood_down():
        result = run_in_process(
            *LINEAR_EAGER_AND_COMPILED, f"hydra.run.dir={run_dir}", data_dir=data_dir, check=False
        )
    report = json.loads((run_dir / "check.json").read_text())
    eager, compiled = report["training"]
    assert (eager["compiled"], eager["status"]) == (False, "ok")
    ran_eager = "ran eager: torch.compile compiled no graph of the network"
    assert (compiled["compiled"], compiled["status"]) == (True, ran_eager)
    assert report["problems"] == [f"training: linear: {ran_eager}"]
    assert ran_eager in result.stdout + result.stderr
    assert result.returncode == 1


def test_float32_products_are_as_vitattn_train_makes_them_and_said(
    tmp_path: Path, data_dir: Path
) -> None:
    """The check trains "as vitattn-train runs it", which sets TF32 for float32 products
    (``matmul_precision: high``); on an H200 it ran at ``highest`` (Lightning warned). The
    setting is applied before the sections and named in the report."""
    before = torch.get_float32_matmul_precision()
    run_dir = tmp_path / "check"
    try:
        run_in_process(
            "vitattn-check",
            "device=cpu",
            "sections=[numerics]",
            "attentions=[softmax]",
            "matmul_precision=medium",
            f"hydra.run.dir={run_dir}",
            data_dir=data_dir,
        )
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)
    assert json.loads((run_dir / "check.json").read_text())["environment"]["matmul_precision"] == (
        "medium"
    )
    assert "float32 matmuls medium" in (run_dir / "check.md").read_text()
    composed = load_settings(compose_config("check", ["device=cpu"], tmp_path))
    assert composed.matmul_precision.value == "high"  # the default: configs/train.yaml's


def test_numerics_compare_float32_at_full_precision_whatever_the_setting(
    tmp_path: Path, monkeypatch
) -> None:
    """With TF32 (``matmul_precision: high``) a GPU's float32 products round to 10 bits, beyond
    the float32 tolerance of 1e-3: the numerics section compares at ``highest``, then puts the
    setting back for the sections after it."""
    seen: list[str] = []
    monkeypatch.setattr(
        numerics_module,
        "check_attention",
        lambda *args: seen.append(torch.get_float32_matmul_precision()) or [],
    )
    settings = load_settings(compose_config("check", ["device=cpu"], tmp_path))
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        numerics_module.run_numerics(settings)
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)
    assert seen == ["highest"] * len(ATTENTIONS)


def test_a_size_given_wins_over_the_profile(tmp_path: Path) -> None:
    overrides = ["device=cpu", "numerics.seq_len=32", "kernels.seq_lens=[128,32]"]
    settings = load_settings(compose_config("check", overrides, tmp_path))
    assert (settings.numerics.seq_len, settings.numerics.heads) == (32, 2)
    assert settings.kernels.seq_lens == [32, 128]


def test_relative_error_is_the_largest_difference_over_the_largest_value() -> None:
    reference = torch.tensor([1.0, -4.0, 2.0])
    assert relative_error(torch.tensor([1.0, -4.0, 2.5]), reference) == pytest.approx(0.5 / 4)
    assert relative_error(reference.clone(), reference) == 0.0
    assert relative_error(None, None) == 0.0
    assert tolerance(torch.bfloat16) > tolerance(torch.float16) > tolerance(torch.float32) > 0


class HalfGoesWrong(nn.Module):
    """Exact in fp32; in a half dtype either off by ``factor`` or overflowing to inf."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-1) @ v
        if q.dtype == torch.float32:
            return out
        if self.mode == "scaled":
            return out * 1.1
        return out + (q * 1e4).exp()  # inf in fp16 and bf16 once q is large enough


@pytest.mark.parametrize(
    ("mode", "status"), [("scaled", "large error"), ("overflow", "not finite")]
)
def test_numerics_finds_a_kernel_that_is_wrong_in_half_precision(
    mode: str, status: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(numerics_module, "build_kernel", lambda *a, **k: HalfGoesWrong(mode))
    settings = NumericsSettings(
        batch_size=1, heads=2, seq_len=16, head_dim=8, stress_scale=10.0,
        dtypes=[DType.float32, DType.bfloat16],
    )  # fmt: skip
    fp32, bf16 = check_attention("broken", settings, torch.device("cpu"), seed=0)
    assert (fp32.status, fp32.error) == ("ok", 0.0)
    assert bf16.status == status
    assert problems([fp32, bf16], [], None) == [
        f"numerics: broken in bfloat16: {status} (error {bf16.error:.2e}, tolerance "
        f"{bf16.tolerance:.1e})"
    ]


def test_a_loss_that_does_not_fall_is_a_problem() -> None:
    row = TrainingRow("linear", "vit", 8, "32-true", 8, loss_first=2.3, loss_last=2.4)
    row.loss_falling = False
    assert problems([], [row], None) == ["training: linear: the loss did not fall (2.300 -> 2.400)"]


def test_a_kernel_faster_than_its_datasheet_floor_is_a_problem() -> None:
    """A floor is the least time the device's figures allow: a call measured at 112% of a floor
    taken against a datasheet's figures says the run's FLOPs are wrong, not that the call beat
    the device. Within the timing's noise (up to 110%) it is no problem; against measured
    figures (a CPU's, which a shared machine's load moves) it is the bench's warning alone."""
    rows = [
        Row("softmax", 1024, 64, fwd_floor_pct=95.0, fwd_bwd_floor_pct=112.4),
        Row("linear", 1024, 64, fwd_floor_pct=108.0, fwd_bwd_floor_pct=None),
        Row("performer", 1024, 64),
    ]
    assert problems([], [], KernelsRun(rows, [], {"measured": False})) == [
        "kernels: softmax at n=1024 ran at 112% of its floor, faster than the device's figures "
        "allow: the floors of this run are too high (a measured peak or bandwidth too low, or "
        "FLOPs counted too many)"
    ]
    assert problems([], [], KernelsRun(rows, [], {"measured": True})) == []


def test_figures_a_busy_machine_may_have_moved_are_cautions() -> None:
    """A share past the floor against figures this process measured, a reference row whose
    images/s spread beyond 10% and a load above the CPUs were a log line at most, under
    "Problems: none" (audit): each is a caution, and nothing else is."""
    rows = [
        Row("softmax", 256, 16, fwd_floor_pct=60.0, fwd_bwd_floor_pct=123.0),
        Row("linear", 256, 16, fwd_floor_pct=109.0, fwd_bwd_floor_pct=80.0),
    ]
    reference = {
        "results": [
            {"implementation": "vitattn", "compile": False, "spread": 0.08},
            {"implementation": "timm", "compile": False, "spread": 2.17},
            {"implementation": "timm", "compile": True, "spread": None},
        ]
    }
    quiet = {"cpus": 2, "load_average": 1.9, "load_average_end": 0.5}
    measured = KernelsRun(rows, [], {"measured": True})
    assert cautions(quiet, reference, measured) == [
        "kernels: softmax at n=256 ran at 123% of its floor, faster than the device's figures "
        "allow: the floors of this run are too high (a measured peak or bandwidth too low, or "
        "FLOPs counted too many)",
        "reference: timm eager's images/s spread 217% over its repeats (steady: up to 10%): its "
        "ratios are not steady",
    ]
    busy = {"cpus": 2, "load_average": 1.0, "load_average_end": 4.3}
    assert cautions(busy, None, KernelsRun(rows, [], {"measured": False})) == [
        "the machine was busy (load 1.0 at the start, 4.3 at the end, on 2 CPUs): its timings "
        "include waiting for a CPU"
    ]  # against a datasheet, a share past the floor is a problem instead
    assert cautions({"cpus": None}, None, None) == []


@pytest.mark.slow
def test_a_reference_row_compiled_that_ran_eager_is_a_problem(
    tmp_path: Path, data_dir: Path
) -> None:
    """The reference section's compiled rows that ran eager said so in their status, and the
    report listed no problem (review): as the training section's rows, each is one."""
    pytest.importorskip("timm")
    run_dir = tmp_path / "check"
    with compile_stood_down():
        run_in_process(
            "vitattn-check", "device=cpu", "sections=[reference]", f"hydra.run.dir={run_dir}",
            data_dir=data_dir, check=False,
        )  # fmt: skip
    report = json.loads((run_dir / "check.json").read_text())
    ran_eager = [
        f"reference: {row['implementation']} compiled: {row['status']}"
        for row in report["reference"]["results"]
        if row["compile"]
    ]
    assert ran_eager and all("ran eager" in line for line in ran_eager), ran_eager
    assert report["problems"] == ran_eager


@pytest.mark.skipif(NO_GPU, reason="needs a CUDA GPU")
def test_every_attention_is_finite_in_half_precision_on_the_gpu(tmp_path: Path) -> None:
    """The issue's bar: q, k scaled by 10 at n = 1024 stay finite in fp16 and bf16."""
    settings = load_settings(compose_config("check", ["sections=[numerics]"], tmp_path))
    for name in settings.attentions or []:
        for row in check_attention(name, settings.numerics, settings.torch_device, settings.seed):
            assert row.finite and row.finite_stressed, (name, row)


@pytest.mark.slow
def test_the_dry_run_writes_the_same_files_as_on_a_gpu(tmp_path: Path, data_dir: Path) -> None:
    run_dir = tmp_path / "check"
    # No time guard: on a loaded machine it may skip n = 256, and this test is not about timing.
    no_guard = "kernels.max_call_seconds=null"
    run_in_process(
        "vitattn-check", "device=cpu", no_guard, f"hydra.run.dir={run_dir}", data_dir=data_dir
    )
    for name in ("check.md", "check.json", "check_kernels.png"):
        assert (run_dir / name).stat().st_size > 0, name
    result = json.loads((run_dir / "check.json").read_text())
    attentions = sorted(ATTENTIONS)
    assert result["environment"]["device"] == "cpu"
    assert [(r["attention"], r["dtype"]) for r in result["numerics"]] == [
        (a, d) for a in attentions for d in ("float32", "bfloat16", "float16")
    ]
    # On the CPU the fp32 run is the reference itself: any difference is a bug in the check.
    assert all(r["error"] == 0 for r in result["numerics"] if r["dtype"] == "float32")
    assert [r["status"] for r in result["numerics"]] == ["ok"] * len(result["numerics"])
    training = {r["attention"]: r for r in result["training"]}
    assert sorted(training) == attentions
    assert result["problems"] == []  # what a good machine shows
    for row in training.values():
        assert row["status"] == "ok", row
        # the profile's learning rate lowers the loss well beyond what a draw moves it
        assert row["loss_last"] < row["loss_first"] - 0.03, row
        assert row["images_per_sec"] > 0 and row["gflop_per_image"] > 0
        assert row["loss_first"] is not None and row["loss_last"] is not None
        assert row["mfu"] is None and row["peak_memory_gb"] is None  # no GPU: no peak to compare
    assert not any(row["compiled"] for row in training.values())  # the cpu profile's choice
    assert all(row["seconds"] > 0 for row in training.values())  # where the section's time went
    seconds = result["seconds"]  # what each section took: the GPU profile's goal is 10 minutes
    assert list(seconds) == ["numerics", "training", "reference", "kernels"]
    assert all(value > 0 for value in seconds.values())
    assert seconds["training"] >= sum(row["seconds"] for row in training.values()) - 0.5
    reference = result["reference"]  # eager, then compiled beside it (reference.compile)
    assert [(r["implementation"], r["compile"]) for r in reference["results"]] == [
        ("vitattn", False),
        ("vitattn", True),
        ("timm", False),
        ("timm", True),
    ]
    assert all((r["compile_seconds"] is not None) == r["compile"] for r in reference["results"])
    assert reference["ratios"]["vitattn/timm"] > 0
    assert reference["ratios"]["vitattn compiled/timm compiled"] > 0
    summary = {r["attention"]: r for r in result["kernels"]["summary"]}
    variants = ["performer_autograd", "random_feature_autograd", "linear_compiled"]
    assert sorted(summary) == sorted([*attentions, *variants])
    assert all(r["largest_seq_len"] == 256 for r in summary.values())
    text = (run_dir / "check.md").read_text()
    for heading in ("## Problems", "## Numerics", "## Training", "## Against timm", "## Kernels"):
        assert heading in text
    assert re.search(r"^Took: numerics \d+ s, training .*, kernels .* in all\.$", text, re.M)
    # Every kernel row against its floor on this CPU's measured figures, with its operators.
    kernels = result["kernels"]
    assert kernels["floor_device"]["measured"] and kernels["floor_device"]["peak_tflops"] > 0
    for row in kernels["results"]:
        assert row["fwd_bwd_floor_ms"] > 0 and row["fwd_bwd_floor_pct"] > 0, row
        assert row["fwd_bwd_dispatches"] > 0 and row["flops_source"] == "counted", row
        assert row["compiled"] == (row["attention"] == "linear_compiled"), row
    by_name = {(r["attention"], r["seq_len"]): r for r in kernels["results"]}
    for n in (64, 256):  # compiled: the same floor, fewer operators (Inductor fused them)
        eager, compiled = by_name["linear", n], by_name["linear_compiled", n]
        assert compiled["fwd_bwd_floor_ms"] == eager["fwd_bwd_floor_ms"]
        assert compiled["fwd_bwd_dispatches"] < eager["fwd_bwd_dispatches"]
    assert "% of floor" in text and "| ops" in text and "measured in this process" in text


def test_the_console_script_refuses_the_gpu_check_without_a_gpu(
    tmp_path: Path, data_dir: Path
) -> None:
    if not NO_GPU:
        pytest.skip("this machine has a GPU")
    message = refused_in_process(
        "vitattn-check", f"hydra.run.dir={tmp_path / 'run'}", data_dir=data_dir,
        creates=tmp_path / "run",
    )  # fmt: skip
    assert message.startswith("device=gpu: no CUDA GPU is visible here")


def test_a_sections_seconds_read_as_minutes_and_seconds() -> None:
    from vitattn.check.report import took_line

    assert took_line({"numerics": 49.6, "training": 189.2, "kernels": 0.4}) == (
        "Took: numerics 50 s, training 3 min 9 s, kernels 0 s; 3 min 59 s in all."
    )
