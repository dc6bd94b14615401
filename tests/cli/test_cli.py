"""The console scripts' shared main: every refusal is one line, before anything is created."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support.in_process import refused_in_process
from tests.support.runners import BIN, assert_one_line_refusal, run_cli
from vitattn.cli.console import (
    EXCLUDE_KEYS,
    NUMBERED_JOB_DIR,
    check_baseline,
    check_composition,
    check_group_choices,
    check_path_names,
    composition_message,
    console_main,
    explicit_run_dir,
    explicit_sweep_dir,
    name_jobs_by_what_differs,
    single_runs,
)
from vitattn.errors import ConfigError
from vitattn.utils.config import (
    CONFIG_DIR,
    MAX_NAME,
    gpu_precision,
    job_directory_name,
    run_directory_name,
)
from vitattn.utils.machine import usable_cpus


def test_unknown_group_choice_is_one_clear_error() -> None:
    check_group_choices(["attention=softmax", "model=vit_pixel", "-m", "seed=1,2"])
    with pytest.raises(ConfigError, match=r"attention=nope is not a known attention; .*softmax"):
        check_group_choices(["attention=nope"])
    with pytest.raises(ConfigError, match=r"model=vit_tiny .*vit, vit_pixel"):
        check_group_choices(["-m", "model=vit,vit_tiny"])
    with pytest.raises(ConfigError, match=r"logger=null .*: csv, .*left out with ~logger, not"):
        check_group_choices(["logger=null"])  # Hydra's traceback: group=null is no choice


@pytest.mark.parametrize(
    ("program", "given"), [("vitattn-train", []), ("vitattn-eval", ["ckpt_path=/no/such.ckpt"])]
)
def test_a_group_set_to_null_is_one_line(program: str, given: list[str], data_dir: Path) -> None:
    said = refused_in_process(program, *given, "logger=null", data_dir=data_dir)
    assert said.startswith("logger=null is not a known logger; choose one of: ")
    assert said.endswith(" (a group is left out with ~logger, not null)")


def test_a_small_sweep_is_checked_job_by_job_and_a_large_one_value_by_value() -> None:
    """Each swept value was checked with the first value of the others only, and no more than
    64 of them: ``model.embed_dim=32,20 model.heads=2,8`` trained three jobs before the fourth
    failed, and ``seed=range(0,70) model.heads=4,3`` started 140 jobs (red team)."""
    assert single_runs(["a=1", "b=2"]) == [["a=1", "b=2"]]
    assert single_runs(["-m", "a=1,2", "b=3", "c=4,5"]) == [
        ["a=1", "b=3", "c=4"],
        ["a=1", "b=3", "c=5"],
        ["a=2", "b=3", "c=4"],
        ["a=2", "b=3", "c=5"],
    ]
    large = single_runs(["-m", "a=range(0,70)", "b=4,3"])
    assert large[:3] == [["a=0", "b=4"], ["a=1", "b=3"], ["a=2", "b=4"]]
    assert len(large) == 70
    # the seeds are not combined with the others: 3 compositions, not 6, each within the first
    assert single_runs(["-m", "attention=a,b", "seed=1,2,3"]) == [
        ["attention=a", "seed=1"],
        ["attention=b", "seed=2"],
        ["attention=a", "seed=3"],
    ]
    assert len(single_runs(["-m", "seed=range(0,70)", "b=4,3"])) == 70


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        (
            ["model.embed_dim=32,20", "model.heads=2,8"],
            r"^model\.embed_dim=20 is not divisible by model\.heads=8",
        ),
        (["seed=range(0,70)", "model.heads=4,3"], r"is not divisible by model\.heads=3"),
    ],
)
def test_a_sweep_whose_jobs_fail_together_is_refused_before_it_starts(
    sweep: list[str], message: str, tmp_path: Path
) -> None:
    from vitattn.train import validate

    assert_one_line_refusal("train", ["-m", *sweep], validate, message, tmp_path / "run")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["model.foo=1"], r"^Could not override 'model.foo'; .*Key 'foo' is not in struct$"),
        (["-m", "model.depth=2,3", "model.bar=1,2"], r"'model.bar'.*not in struct"),
        (["+model=vit"], r"model"),
        (["~attention=[1]"], r"^Config group override deletion value must be a string"),
    ],
)
def test_a_rejected_override_is_one_line(arguments: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_composition("train", arguments)
    assert "\n" not in str(info.value)
    assert re.search(message, str(info.value)), str(info.value)


def test_the_validate_hook_sees_the_composed_config() -> None:
    seen = []
    check_composition("train", ["model.depth=3"], validate=lambda cfg: seen.append(cfg.model.depth))
    assert seen == [3]
    with pytest.raises(ConfigError, match="too deep"):

        def refuse(cfg):
            raise ConfigError("too deep")

        check_composition("train", ["model.depth=3"], validate=refuse)


def test_composition_message_drops_hydra_noise() -> None:
    error = Exception("Error merging override a=b")
    error.__cause__ = ValueError("Value 'b' could not be converted to Integer\n    full_key: a\n")
    assert composition_message(error) == "a=b: Value 'b' could not be converted to Integer"


def test_console_main_refuses_before_hydra_runs(monkeypatch, capsys, tmp_path: Path) -> None:
    ran = []
    monkeypatch.setattr(sys, "argv", ["vitattn-train", "attention=flash"])
    with pytest.raises(SystemExit) as info:
        console_main("vitattn-train", lambda: ran.append(1), config_name="train")
    assert info.value.code == 1 and ran == []
    err = capsys.readouterr().err.strip()
    assert err.startswith("vitattn-train: error: attention=flash is not a known attention")
    assert "\n" not in err


def test_console_main_passes_help_to_hydra_unchecked(monkeypatch) -> None:
    ran = []
    monkeypatch.setattr(sys, "argv", ["vitattn-train", "--help", "attention=flash"])
    console_main("vitattn-train", lambda: ran.append(list(sys.argv)), config_name="train")
    assert ran == [["vitattn-train", "--help", "attention=flash"]]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("program", "purpose", "groups", "absent"),
    [
        ("vitattn-train", "fit a Vision Transformer", ["attention", "model", "optimizer"], []),
        ("vitattn-eval", "test accuracy of a checkpoint", ["data", "trainer"], ["attention"]),
        ("vitattn-finetune", "LoRA", ["data", "optimizer", "trainer"], ["attention"]),
        ("vitattn-bench", "measure attention mechanisms", ["data"], ["optimizer", "trainer"]),
        ("vitattn-check", "prove a machine", ["data"], ["attention", "trainer"]),
    ],
)
def test_help_names_the_app_examples_and_its_groups(
    program: str, purpose: str, groups: list[str], absent: list[str], data_dir: Path
) -> None:
    text = run_cli(program, "--help", data_dir=data_dir).stdout
    assert text.startswith(f"{program}: ") and purpose in text
    assert "powered by Hydra" not in text
    assert text.count(f"  {program} ") >= 3  # three examples
    section = text.split("== Config groups (group=option) ==\n")[1].split("\n\n")[0]
    listed = {line.split()[0] for line in section.splitlines()}
    assert set(groups) <= listed and not set(absent) & listed


@pytest.mark.slow
@pytest.mark.parametrize("program", ["vitattn-train", "vitattn-bench", "vitattn-check"])
def test_help_piped_into_a_reader_that_stops_is_quiet(program: str) -> None:
    """``--help | head``: the reader closes the pipe before the help is written; no traceback."""
    process = subprocess.Popen(
        [str(BIN / program), "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    process.stdout.close()  # the reader is gone before the first line
    _, errors = process.communicate(timeout=120)
    assert process.returncode == 1 and errors.decode() == ""


@pytest.mark.parametrize(
    "arguments",
    [
        ["-m", "attention=linear,softmax", "~callbacks.confusion_report"],
        ["~data.data_dir", "seed=1"],
        ["--cfg", "job", "~model.depth", "attention"],
        ["-i", "defaults", "a=1"],
        ["-cd", "~/configs", "-cn", "train", "~seed", "+x=~/y"],
        ["--config-dir=~/configs", "a=1"],
        ["--experimental-rerun", "~/run/.hydra/config.pickle"],
    ],
)
def test_the_overrides_are_what_hydras_parser_reads(arguments: list[str]) -> None:
    """Deletions (``~key``) and words the grammar refuses are overrides; a flag's value is not."""
    from hydra._internal.utils import get_args_parser

    from vitattn.cli.overrides import overrides_of

    assert overrides_of(arguments) == get_args_parser().parse_args(arguments).overrides


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        (
            "~data.data_dir",
            "data.data_dir is not set; give the directory that holds (or will receive) "
            "cifar-10-batches-py/: data.data_dir=<directory>",
        ),
        (
            "attention",
            "attention cannot be read (missing EQUAL at '<EOF>'); see "
            "https://hydra.cc/docs/advanced/override_grammar/basic/",
        ),
        (  # reached the terminal as it was: red team
            "+seeed=\x1b[31mred\rX",
            "+seeed=\\x1b[31mred\\rX cannot be read (token recognition error at: '\\x1b'); see "
            "https://hydra.cc/docs/advanced/override_grammar/basic/",
        ),
        (  # Hydra's OSError "File name too long", a traceback: red team
            "+" + "k" * 300 + "=1",
            "+" + "k" * 300 + "=1: its key is 300 bytes, more than the 255 Hydra can take (it "
            "looks each key up as a file name)",
        ),
    ],
)
def test_a_deletion_or_a_bare_word_is_checked_as_hydra_reads_it(
    argument: str, message: str, tmp_path: Path, data_dir: Path
) -> None:
    """A deletion is part of the config checked (it was left out, and ``~data.data_dir`` made a
    run directory before failing with a traceback), and a word with no ``=`` is refused in the
    one line of every override the grammar cannot read."""
    run_dir = tmp_path / "run"
    args = [argument, f"hydra.run.dir={run_dir}"]
    assert refused_in_process("vitattn-train", *args, data_dir=data_dir, creates=run_dir) == message


@pytest.mark.parametrize(
    "arguments",
    [["hydra.run.dir="], ["paths.log_dir="], ["-m", "hydra.sweep.dir=", "seed=1,2"]],
    ids=["run", "log", "sweep"],
)
def test_an_empty_output_location_is_one_line_and_nothing_is_written(
    arguments: list[str], tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hydra takes an empty ``hydra.run.dir`` as the working directory (it wrote ``.hydra/`` and
    ``train.log`` there, then the run refused the folder), and an empty ``paths.log_dir`` as the
    file system's root."""
    monkeypatch.chdir(tmp_path)
    setting = arguments[-2] if arguments[0] == "-m" else arguments[0]
    key = setting.removesuffix("=")
    assert refused_in_process("vitattn-train", *arguments, data_dir=data_dir).startswith(
        f"{key} is empty; give a directory ({key}=<dir>), or leave it out for the default under "
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("program", "arguments", "instead"),
    [
        ("vitattn-eval", ["ckpt_path=x.ckpt", "paths.output_dir={out}"], "hydra.run.dir={out}"),
        ("vitattn-train", ["-m", "paths.output_dir={out},{out}2", "seed=1,2"], "hydra.sweep.dir"),
    ],
)
def test_the_run_directory_is_chosen_by_hydra_alone(
    program: str, arguments: list[str], instead: str, tmp_path: Path, data_dir: Path
) -> None:
    """``paths.output_dir`` is the directory Hydra makes: given apart from it, a run wrote its
    lock, ``.hydra`` and log to one folder and its results to another, and ``vitattn-eval
    '~logger'`` ended a finished test as failed, its figure written into a folder nothing made
    (eval audit, 2026-12-02)."""
    given = [argument.format(out=tmp_path / "out") for argument in arguments]
    said = refused_in_process(program, *given, data_dir=data_dir)
    assert said.startswith("paths.output_dir=")
    assert " is not valid: paths.output_dir is the run directory Hydra makes; " in said
    assert instead.format(out=tmp_path / "out") in said
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_wrong_type_is_refused_in_one_line_with_no_run_directory(
    tmp_path: Path, data_dir: Path
) -> None:
    run_dir = tmp_path / "run"
    args = ["model.foo=1", f"hydra.run.dir={run_dir}"]
    said = refused_in_process("vitattn-train", *args, data_dir=data_dir, creates=run_dir)
    assert said.startswith("model.foo is not a setting of vitattn.models.vit.VisionTransformer; ")


@pytest.mark.parametrize("program", ["vitattn-eval", "vitattn-finetune", "vitattn-bench"])
def test_a_sweep_jobs_path_unquoted_is_one_line_that_shows_it_quoted(
    program: str, tmp_path: Path, data_dir: Path
) -> None:
    """A sweep's job directory is named by its settings (``attention=linear,seed=1``, as the
    sweep's last lines print it); Hydra reads its ``=`` as syntax. Unquoted, one line names the
    override and shows it quoted, ready to copy, where Hydra said "mismatched input '='"."""
    checkpoint = f"{tmp_path}/sweep/attention=linear,seed=1/checkpoints/last.ckpt"
    run_dir = tmp_path / "run"
    args = [f"ckpt_path={checkpoint}", f"hydra.run.dir={run_dir}"]
    said = refused_in_process(program, *args, data_dir=data_dir, creates=run_dir)
    assert said == (
        f"ckpt_path={checkpoint} cannot be read (mismatched input '=' expecting <EOF>); Hydra "
        f"""reads '=' and ',' as its own syntax: quote the value, e.g. 'ckpt_path="{checkpoint}"'"""
    )


def test_a_list_of_overrides_unquoted_is_one_line_that_quotes_its_elements() -> None:
    """``training.overrides=[model.depth=2,optimizer.lr=1e-3]``: the line showed the whole list
    quoted, which Hydra reads as one string (then refused: not a list); each element is quoted,
    and Hydra reads the shown value back as the list."""
    import shlex

    from vitattn.cli.overrides import check_syntax
    from vitattn.utils.hydra_grammar import parsed

    with pytest.raises(ConfigError) as raised:
        check_syntax(["training.overrides=[model.depth=2,optimizer.lr=1e-3]"])
    said = str(raised.value)
    shown = """'training.overrides=["model.depth=2","optimizer.lr=1e-3"]'"""
    assert said.endswith(f"quote the values of the list, e.g. {shown}"), said
    assert parsed(shlex.split(shown)[0]).value() == ["model.depth=2", "optimizer.lr=1e-3"]
    for given, elements in [  # the red team's: each was shown as the whole list quoted
        ("[~scheduler,model.depth=2]", ["~scheduler", "model.depth=2"]),
        (
            "[model.depth=2,optimizer.betas=[0.9,0.99]]",
            ["model.depth=2", "optimizer.betas=[0.9,0.99]"],
        ),
    ]:
        with pytest.raises(ConfigError) as raised:
            check_syntax([f"training.overrides={given}"])
        shown = str(raised.value).rsplit("e.g. ", 1)[1]
        assert parsed(shlex.split(shown)[0]).value() == elements
    with pytest.raises(ConfigError, match=r"quote the values of the list, each in double quotes; "):
        check_syntax(["training.overrides=[model.depth=2,]"])


@pytest.mark.parametrize("given", ["/tmp/my sweep", "'/tmp/my sweep'", '"/tmp/my sweep"'])
def test_the_directories_a_command_names_are_read_as_hydra_reads_them(given: str) -> None:
    """The run and sweep directories the console checks and locks are the ones Hydra writes:
    quoted or not, ``/tmp/my sweep`` (the quotes once made them paths relative to the working
    directory, beginning with a quote, where the lock would have been taken)."""
    assert explicit_run_dir([f"hydra.run.dir={given}"]) == Path("/tmp/my sweep")
    assert explicit_sweep_dir(["-m", f"hydra.sweep.dir={given}"]) == Path("/tmp/my sweep")


def test_a_sweep_names_its_jobs_by_the_settings_that_take_several_values() -> None:
    arguments = ["-m", "attention=softmax,linear", "seed=1,2", "trainer.max_steps=5", "+x.y=1"]
    named = name_jobs_by_what_differs(arguments)
    assert named[:-1] == arguments
    assert named[-1] == f"{EXCLUDE_KEYS}=[trainer.max_steps,x.y]"
    assert name_jobs_by_what_differs(["attention=linear", "seed=1"]) == [
        "attention=linear",
        "seed=1",
    ]  # a single run: as given
    own = ["-m", "seed=1,2", f"{EXCLUDE_KEYS}=[seed]"]
    assert name_jobs_by_what_differs(own) == own  # the user's own choice stands


@pytest.mark.parametrize(
    ("override_dirname", "expected"),
    [
        ("attention=linear,seed=1", "attention=linear,seed=1"),
        ("", "3"),
        ("data.data_dir=/a/b", "data.data_dir=_a_b"),
    ],
)
def test_job_directory_names(override_dirname: str, expected: str) -> None:
    assert job_directory_name(override_dirname, 3) == expected


def test_a_long_job_name_is_cut_and_kept_unique() -> None:
    first = job_directory_name("optimizer.lr=" + "1" * 300, 0)
    second = job_directory_name("optimizer.lr=" + "1" * 299 + "2", 0)
    assert len(first) <= MAX_NAME and len(second) <= MAX_NAME and first != second
    assert run_directory_name("2026-01-01_00-00-00_000000", "linear").endswith("_linear")
    assert run_directory_name("2026-01-01_00-00-00_000000", "") == "2026-01-01_00-00-00_000000"


def test_a_sweep_that_repeats_a_value_numbers_its_jobs() -> None:
    named = name_jobs_by_what_differs(["-m", "seed=1,1", "trainer.max_steps=5"])
    assert named[-2:] == [
        f"{EXCLUDE_KEYS}=[trainer.max_steps]",
        f"hydra.sweep.subdir='{NUMBERED_JOB_DIR}'",
    ]
    searching = name_jobs_by_what_differs(["hparams_search=optuna", "trainer.max_steps=5"])
    assert searching[-1] == f"{EXCLUDE_KEYS}=[hparams_search,trainer.max_steps]"
    # A search's jobs are numbered by the sweeper's name: Optuna may try the same values twice.
    assert job_directory_name("optimizer.lr=0.001", 3, "hydra_plugins.x.OptunaSweeper") == (
        "3_optimizer.lr=0.001"
    )
    assert job_directory_name("seed=1", 3, "hydra._internal.BasicSweeper") == "seed=1"


def test_a_searchs_job_names_show_its_decimals_to_four_digits() -> None:
    """Optuna suggests floats in full; the job's name (its directory, its TensorBoard run) shows
    them to four significant digits, and its number keeps two alike apart."""
    suggested = "attention.k=8,optimizer.lr=0.00019182157424526137,optimizer.weight_decay=-2.5e-07"
    optuna = "hydra_plugins.vitattn_optuna.OptunaSearch"
    assert job_directory_name(suggested, 5, optuna) == (
        "5_attention.k=8,optimizer.lr=0.0001918,optimizer.weight_decay=-2.5e-07"
    )
    near = suggested.replace("0.00019182157424526137", "0.00019182157424526138")
    assert job_directory_name(near, 6, optuna) != job_directory_name(suggested, 5, optuna)
    # A grid sweep's names are how a re-run finds its completed jobs: those stay in full.
    basic = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
    assert job_directory_name(suggested, 5, basic) == suggested


@pytest.mark.parametrize(
    ("available", "capability", "precision"),
    [
        (True, (7, 5), "16-mixed"),
        (True, (8, 0), "bf16-mixed"),
        (True, (9, 0), "bf16-mixed"),
        (False, None, "bf16-mixed"),
    ],
)
def test_trainer_gpu_picks_bf16_where_the_gpu_has_it(
    monkeypatch: pytest.MonkeyPatch, available: bool, capability: Any, precision: str
) -> None:
    import torch

    from tests.support.presets import compose_config

    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: capability)
    assert gpu_precision() == precision  # T4 is 7.5, A100 8.0, H100 9.0
    cfg = compose_config("train", ["trainer=gpu"], Path("/nonexistent"))
    assert cfg.trainer.precision == precision
    user = compose_config("train", ["trainer=gpu", "trainer.precision=32-true"], Path("/x"))
    assert user.trainer.precision == "32-true"


@pytest.mark.slow
@pytest.mark.parametrize("package", ["vitattn.bench", "vitattn.check"])
def test_python_dash_m_runs_the_same_app(package: str, data_dir: Path) -> None:
    """``python -m vitattn.bench`` / ``python -m vitattn.check``, for a machine whose PATH lacks
    the console scripts: the same app and help."""
    program = f"vitattn-{package.split('.')[1]}"
    by_module = run_cli("python", "-m", package, "--help", data_dir=data_dir).stdout
    assert by_module == run_cli(program, "--help", data_dir=data_dir).stdout


def test_the_console_side_imports_no_torch() -> None:
    """``--help`` and a refusal stay fast: the cli room loads neither torch nor Lightning (the
    trial build of a config is :mod:`vitattn.training.trial_build`'s)."""
    import subprocess
    import sys

    code = (
        "import sys, vitattn.cli.console, vitattn.cli.validation, vitattn.cli.resume; "
        "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.slow
def test_a_flag_after_an_override_is_argparses_usage_error_before_anything_is_made(
    tmp_path: Path, data_dir: Path
) -> None:
    """``-m`` after an override is one Hydra's parser refuses. On the code before, the sweep's
    folders and lock were made first, and left behind; the line also showed an
    ``exclude_keys`` override the user never typed."""
    sweep = tmp_path / "new" / "sweep"
    result = run_cli(
        "vitattn-train", "trainer=cpu", "-m", "seed=1,2", f"hydra.sweep.dir={sweep}",
        data_dir=data_dir, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"vitattn-train: error: unrecognized arguments: seed=1,2 hydra.sweep.dir={sweep}"
    )
    assert not (tmp_path / "new").exists()


def test_the_job_names_go_beside_the_overrides_so_a_flag_may_follow_them() -> None:
    """Hydra's parser takes the overrides as one run of words: on the code before, the names
    were added after the user's ``--cfg hydra`` and refused as arguments it does not know."""
    named = name_jobs_by_what_differs(["hparams_search=optuna", "seed=1", "--cfg", "hydra"])
    assert named == [
        "hparams_search=optuna",
        "seed=1",
        f"{EXCLUDE_KEYS}=[hparams_search,seed]",
        "--cfg",
        "hydra",
    ]
    assert name_jobs_by_what_differs(["-m", "--cfg", "job"]) == ["-m", "--cfg", "job"]


@pytest.mark.slow
def test_a_search_shows_its_hydra_config(tmp_path: Path, data_dir: Path) -> None:
    result = run_cli(
        "vitattn-train", "hparams_search=optuna", f"hydra.sweep.dir={tmp_path / 'search'}",
        "--cfg", "hydra", data_dir=data_dir, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "_target_: hydra_plugins.vitattn_optuna.optuna_search.OptunaSearch" in result.stdout
    assert not (tmp_path / "search").exists()


def test_two_commands_at_once_are_argparses_usage_error_not_a_traceback(
    tmp_path: Path, data_dir: Path
) -> None:
    """Hydra raises a ``ValueError`` with its traceback for ``-m`` with ``--cfg``."""
    sweep = tmp_path / "sweep"
    result = run_cli(
        "vitattn-train", "-m", "seed=1,2", f"hydra.sweep.dir={sweep}", "--cfg", "job",
        data_dir=data_dir, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "vitattn-train: error: only one of --run, --multirun, --cfg, --info and "
        "--shell-completion can be specified"
    )
    assert not sweep.exists()


LONG_NAME = "a" * 300


@pytest.mark.parametrize(
    "override",
    [
        f"hydra.run.dir=/tmp/x/{LONG_NAME}",
        f"hydra.sweep.dir=/tmp/{LONG_NAME}",
        f"paths.log_dir=/tmp/{LONG_NAME}",
        f"ckpt_path=/tmp/{LONG_NAME}.ckpt",
        f"data.data_dir=/tmp/{LONG_NAME}",
        f"callbacks.last_checkpoint.filename={LONG_NAME}",
        "paths.log_dir=" + "/abc" * 1100,  # 4,400 bytes in all
    ],
)
def test_a_path_no_file_system_takes_is_one_line(override: str) -> None:
    """Each ended in a traceback of ``File name too long`` from the checks that look at it (a
    run directory, a checkpoint), or made the run directory first (the data) (red team)."""
    with pytest.raises(ConfigError, match=r"a file system takes; choose a shorter path$") as error:
        check_path_names([override])
    assert str(error.value).startswith(override.split("=", 1)[0] + "=")


@pytest.mark.parametrize(
    "override", [f"+note={LONG_NAME}", "data.url=https://example.org/" + "b" * 300, "seed=1"]
)
def test_a_long_value_that_names_no_path_is_taken(override: str) -> None:
    check_path_names([override])


@pytest.mark.parametrize("program", ["vitattn-train", "vitattn-eval"])
def test_the_console_refuses_a_path_too_long_before_anything(
    program: str, tmp_path: Path, data_dir: Path
) -> None:
    said = refused_in_process(program, f"ckpt_path={tmp_path}/{LONG_NAME}.ckpt", data_dir=data_dir)
    assert said.endswith(
        "a name in it is 305 bytes, more than the 255 a file system takes; choose a shorter path"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def own_configs(tmp_path: Path) -> Path:
    """A folder of the user's own config groups, as ``--config-dir`` gives Hydra: an experiment
    and an attention of their own."""
    folder = tmp_path / "mine"
    (folder / "experiment").mkdir(parents=True)
    (folder / "experiment" / "small.yaml").write_text("# @package _global_\nmodel:\n  depth: 1\n")
    (folder / "attention").mkdir()
    softmax = (CONFIG_DIR / "attention" / "softmax.yaml").read_text()
    (folder / "attention" / "my_softmax.yaml").write_text(softmax)
    (folder / "my_train.yaml").write_text("defaults:\n  - train\n  - _self_\nmodel:\n  depth: 1\n")
    return folder


def test_the_config_groups_of_a_config_dir_are_choices(own_configs: Path) -> None:
    """``-cd <dir> experiment=small``, which Hydra runs, was refused: "experiment=small is not a
    known experiment" (red team)."""
    from vitattn.train import validate

    chosen = ["experiment=small", "attention=my_softmax"]
    check_group_choices(chosen, extra_dirs=(own_configs,))
    check_composition("train", chosen, validate, extra_dirs=(own_configs,))
    with pytest.raises(ConfigError, match=r"^attention=nope is not a known attention; .*my_softm"):
        check_group_choices(["attention=nope"], extra_dirs=(own_configs,))
    # -cn my_train: a primary config of the folder (review: "Cannot find primary config")
    check_composition("my_train", ["trainer.max_steps=3"], validate, extra_dirs=(own_configs,))


@pytest.mark.parametrize("flag", ["-cd", "--config-dir"])
def test_a_command_with_a_config_dir_is_checked_with_its_configs(
    flag: str, own_configs: Path, data_dir: Path
) -> None:
    args = [flag, str(own_configs), "attention=my_softmax", "model.heads=3"]
    said = refused_in_process("vitattn-train", *args, data_dir=data_dir)
    assert said.startswith("model.embed_dim=256 is not divisible by model.heads=3"), said


def test_a_config_dir_that_is_no_folder_is_one_line(tmp_path: Path, data_dir: Path) -> None:
    said = refused_in_process("vitattn-train", "-cd", str(tmp_path / "none"), data_dir=data_dir)
    assert said == (
        f"--config-dir {tmp_path / 'none'} is not a folder; give a folder of config groups "
        "(<dir>/experiment/<name>.yaml), which Hydra adds to configs/"
    )


@pytest.mark.parametrize(
    ("baseline", "message"),
    [
        ("summary.baseline=[1,2]", r"^summary\.baseline=\[1, 2\] is not valid; choose key=value "),
        ("summary.baseline={a:1}", r"^summary\.baseline=\{'a': 1\} is not valid; "),
        (
            "summary.baseline=flash",
            r"^summary\.baseline='flash' is not valid; choose one of the sweep's values "
            r"\(softmax, linear, 1, 2\), or key=value pairs",
        ),
        (
            "summary.baseline='attention=flash, model.depth=1'",
            r"choose attention=softmax or attention=linear \(the values the sweep gives it\)$",
        ),
    ],
)
def test_a_sweeps_baseline_its_summary_cannot_find_is_one_line(baseline: str, message: str) -> None:
    """The sweep ran, and its summary said so once every job had trained (red team)."""
    with pytest.raises(ConfigError, match=message):
        check_baseline(["-m", "attention=softmax,linear", "model.depth=1,2", baseline])


@pytest.mark.parametrize(
    "arguments",
    [
        ["-m", "attention=softmax,linear", "summary.baseline=linear"],
        ["-m", "attention=softmax,linear", "summary.baseline='attention=linear, model.depth=3'"],
        ["-m", "seed=range(0,3)", "summary.baseline=2"],
        ["-m", "hparams_search=optuna", "summary.baseline=flash"],  # its trials' settings
        ["summary.baseline=[1,2]"],  # no sweep: no summary
    ],
)
def test_a_baseline_the_summary_can_find_is_taken(arguments: list[str]) -> None:
    check_baseline(arguments)


@pytest.mark.parametrize(
    ("launcher", "message"),
    [
        (  # a traceback, with the sweep's folder made
            ["hydra/launcher=joblib", "hydra.launcher.n_jobs=0"],
            r"^hydra\.launcher\.n_jobs=0 is not valid; choose a number of jobs at once >= 1, ",
        ),
        (  # each job ended at once, then a traceback
            ["hydra/launcher=local", "hydra.launcher.timeout_min=-1"],
            r"^hydra\.launcher\.timeout_min=-1 is not valid; choose an integer >= 1$",
        ),
        (["hydra/launcher=local", "hydra.launcher.cpus_per_task=0"], r"cpus_per_task=0 is not"),
        (
            ["hydra/launcher=slurm", "hydra.launcher.mem_gb=0"],
            r"choose a positive number, or null$",
        ),
    ],
)
def test_a_launcher_setting_out_of_range_is_one_line(launcher: list[str], message: str) -> None:
    from vitattn.train import validate

    with pytest.raises(ConfigError, match=message):
        check_composition("train", ["-m", "seed=1,2", *launcher], validate)


@pytest.mark.parametrize(
    "launcher",
    [["hydra/launcher=joblib", "hydra.launcher.n_jobs=-2"], ["hydra/launcher=slurm"]],
)
def test_a_launcher_in_range_is_taken(launcher: list[str]) -> None:
    from vitattn.train import validate

    check_composition("train", ["-m", "seed=1,2", *launcher], validate)


def machine_bound(bound: str, data_root: Path) -> tuple[list[str], str]:
    """Settings a job's own machine bounds (``bound``: its GPU, its CPUs, its disks) that this
    machine does not meet, and this machine's refusal of them."""
    cpus = usable_cpus()
    return {
        "gpu": (["trainer=gpu"], r"^trainer\.accelerator=gpu but this machine has no CUDA GPU; "),
        "cpus": (
            [f"data.num_workers={cpus + 1}", f"hydra.launcher.cpus_per_task={cpus + 1}"],
            rf"^data\.num_workers={cpus + 1} is not valid; choose 0\.\.{cpus} \(the CPUs this",
        ),
        "disks": (
            [f"data.data_dir={data_root / 'on-the-nodes'}", "data.download=false"],
            r"holds no cifar-10-batches-py/ and data\.download=false; put the official",
        ),
    }[bound]


@pytest.mark.parametrize("bound", ["gpu", "cpus", "disks"])
def test_what_a_jobs_own_machine_bounds_is_left_to_it_in_a_slurm_sweep(
    bound: str, tmp_path: Path
) -> None:
    """A SLURM sweep is checked on the machine that submits it, and its jobs train on others:
    ``trainer=gpu`` from a login node without a GPU (the README's SLURM command), more
    DataLoader workers than the login node has CPUs, data on the nodes' own disks were refused
    before anything was submitted. Each job checks them where it runs."""
    from vitattn.train import validate

    settings, _ = machine_bound(bound, tmp_path)
    check_composition("train", ["-m", "seed=1,2", "hydra/launcher=slurm", *settings], validate)


def test_the_readmes_slurm_sweep_is_checked_as_it_would_be_submitted() -> None:
    """The README's SLURM command, as it stands (``experiment=report``: ``trainer=gpu``), passes
    every check before its jobs are submitted, on this machine, which has no GPU in CI."""
    import shlex

    from vitattn.train import validate
    from vitattn.utils.config import PROJECT_ROOT

    readme = (PROJECT_ROOT / "README.md").read_text()
    command = re.search(r"^vitattn-train -m hydra/launcher=slurm [^\n]*\\\n[^\n]*", readme, re.M)
    assert command is not None, "the README has no SLURM sweep"
    words = shlex.split(command.group(0).replace("\\\n", " "), comments=True)
    assert words[:2] == ["vitattn-train", "-m"] and "experiment=report" in words, words
    check_composition("train", words[1:], validate)


@pytest.mark.parametrize(
    "bound",
    [
        pytest.param(
            "gpu",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU"),
        ),
        "cpus",
        "disks",
    ],
)
def test_what_this_machine_bounds_is_refused_for_a_sweep_on_it(bound: str, tmp_path: Path) -> None:
    """The same settings in a sweep whose jobs run here (submitit's local launcher, which asks
    for CPUs as SLURM's does) are refused before it starts."""
    from vitattn.train import validate

    settings, message = machine_bound(bound, tmp_path)
    with pytest.raises(ConfigError, match=message):
        check_composition("train", ["-m", "seed=1,2", "hydra/launcher=local", *settings], validate)


@pytest.mark.parametrize(
    ("workers", "valid"),
    [
        ("9", r"choose 0\.\.8 \(hydra\.launcher\.cpus_per_task=8: the CPUs each job asks for\)$"),
        ("-1", r"choose 0\.\.8 \(hydra\.launcher\.cpus_per_task=8: "),
    ],
)
def test_a_slurm_jobs_workers_are_bounded_by_the_cpus_it_asks_for(workers: str, valid: str) -> None:
    from vitattn.train import validate

    sweep = ["-m", "seed=1,2", "hydra/launcher=slurm", "hydra.launcher.cpus_per_task=8"]
    with pytest.raises(ConfigError, match=rf"^data\.num_workers={workers} is not valid; {valid}"):
        check_composition("train", [*sweep, f"data.num_workers={workers}"], validate)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            ["trainer=ddp"],  # two devices; the launcher's one task per node
            r"^trainer\.devices=2 but hydra\.launcher\.tasks_per_node=1: Lightning trains one "
            r"process per SLURM task and refuses a job whose tasks per node are not its devices; ",
        ),
        (
            ["+trainer.num_nodes=2"],
            r"^trainer\.num_nodes=2 but hydra\.launcher\.nodes=1: Lightning refuses a job on ",
        ),
        (
            ["trainer=gpu", "trainer.devices=4", "hydra.launcher.tasks_per_node=4"],
            r"^trainer\.devices=4 on trainer\.accelerator=gpu but hydra\.launcher\.gpus_per_node=1"
            r": each job would ask SLURM for fewer GPUs than it trains on; set "
            r"hydra\.launcher\.gpus_per_node=4$",
        ),
        (
            ["trainer=ddp", "hydra.launcher.tasks_per_node=2"],  # auto: the GPU the job asks for
            r"^trainer\.devices=2 on trainer\.accelerator=auto but hydra\.launcher\.gpus_per_node"
            r"=1: each job would ask SLURM for fewer GPUs than it trains on; ",
        ),
    ],
)
def test_what_a_slurm_job_asks_for_must_be_what_it_trains_on(
    settings: list[str], message: str
) -> None:
    """Each job would have waited in SLURM's queue to fail as Lightning starts (``devices``
    against ``--ntasks-per-node``, ``num_nodes`` against the nodes) or without the GPUs it
    trains on."""
    from vitattn.train import validate

    with pytest.raises(ConfigError, match=message):
        check_composition("train", ["-m", "seed=1,2", "hydra/launcher=slurm", *settings], validate)


@pytest.mark.parametrize(
    "settings",
    [
        [
            "trainer=ddp", "trainer.accelerator=gpu", "trainer.devices=4", "+trainer.num_nodes=2",
            "hydra.launcher.tasks_per_node=4", "hydra.launcher.gpus_per_node=4",
            "hydra.launcher.nodes=2",
        ],  # four GPUs on each of two nodes
        ["trainer=gpu", "trainer.devices=-1"],  # every GPU the job gets: its one
        ["trainer=gpu", "trainer.devices=auto"],
        # auto on a job that asks for no GPU: two CPU processes
        ["trainer=ddp", "hydra.launcher.tasks_per_node=2", "hydra.launcher.gpus_per_node=0"],
    ],
)  # fmt: skip
def test_a_slurm_job_that_asks_for_what_it_trains_on_is_taken(settings: list[str]) -> None:
    from vitattn.train import validate

    check_composition("train", ["-m", "seed=1,2", "hydra/launcher=slurm", *settings], validate)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the job would train on this machine's GPU")
def test_a_job_refuses_a_gpu_its_machine_lacks_as_its_trainer_is_built(
    tmp_path: Path, data_dir: Path
) -> None:
    """What a SLURM job runs: Hydra's app, the sweep's job alone, without the console's checks
    (they ran on the machine that submitted it). Its trainer's devices are checked as it is
    built, in one line the job's ``metrics.json`` records: Lightning's own refusal ended in
    "unexpected InstantiationException", its traceback in the log."""
    sweep = tmp_path / "sweep"
    script = (
        "import sys; from vitattn.train import _hydra_main\n"
        f"sys.argv = ['vitattn-train', '-m', 'trainer=gpu', 'hydra.sweep.dir={sweep}']\n"
        "_hydra_main()\n"
    )
    result = run_cli(sys.executable, "-c", script, data_dir=data_dir, check=False)
    said = (
        "trainer.accelerator=gpu but this machine has no CUDA GPU; use trainer=cpu (or "
        "trainer.accelerator=cpu)"
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == f"vitattn-train: error: {said}"
    (metrics,) = sweep.glob("*/metrics.json")
    assert json.loads(metrics.read_text()) == {"status": "failed", "error": said}


def test_hydra_mode_multirun_is_a_sweep_as_the_flag_is() -> None:
    """``hydra.mode=MULTIRUN seed=1,2``, which Hydra runs as two jobs, was refused: "Ambiguous
    value for argument 'seed=1,2'" (red team)."""
    from vitattn.train import validate

    assert single_runs(["hydra.mode=MULTIRUN", "seed=1,2"]) == [
        ["hydra.mode=MULTIRUN", "seed=1"],
        ["hydra.mode=MULTIRUN", "seed=2"],
    ]
    check_composition("train", ["hydra.mode=MULTIRUN", "seed=1,2"], validate)


def test_hydras_rerun_of_a_pickle_is_refused_in_one_line(tmp_path: Path, data_dir: Path) -> None:
    """Hydra unpickles the file ``--experimental-rerun`` names (a traceback where there was
    none; code of the pickle's where there was one)."""
    marker = tmp_path / "marker"

    class Planted:
        def __reduce__(self) -> tuple:
            return (Path.touch, (marker,))

    import pickle

    planted = tmp_path / "config.pickle"
    planted.write_bytes(pickle.dumps(Planted()))
    rerun = ["--experimental-rerun", str(planted)]
    said = refused_in_process("vitattn-train", *rerun, data_dir=data_dir)
    assert said.startswith("--experimental-rerun is not taken: Hydra would unpickle the file")
    assert not marker.exists()


def test_a_seed_out_of_range_in_a_sweep_of_64_combinations_is_refused(tmp_path: Path) -> None:
    """The seeds' own jobs came after the 64 combinations of the others, past the cut: 128 jobs
    launched with ``seed=-5`` among them (review)."""
    from vitattn.train import validate

    sweep = ["attention=softmax,linear", "model.depth=1,2", "trainer.max_steps=range(1,17)"]
    message = r"^seed=-5 is not valid; choose an integer 0 <= seed <= "
    assert_one_line_refusal("train", ["-m", *sweep, "seed=1,-5"], validate, message, tmp_path / "r")


def test_a_config_dir_given_with_a_tilde_is_read_as_hydra_reads_it(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hydra does not expand ``~`` in ``--config-dir``: the checks composed a folder the app
    then did not find, in three lines (review)."""
    (tmp_path / "cd").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    said = refused_in_process("vitattn-train", "--config-dir=~/cd", data_dir=data_dir)
    assert said.startswith("--config-dir ~/cd is not a folder; ")


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        # counted, not listed: a sweep of 10**8 seeds held the checks past a minute and ended
        # in MemoryError under 4 GB
        (
            ["seed=range(0,100000000)"],
            "the sweep has 100000000 jobs (seed: 100000000 values); at most 10000 run in one "
            "sweep: sweep fewer values, or split it into sweeps of their own hydra.sweep.dir",
        ),
        (["seed=range(0,200)", "optimizer.lr=range(0.001,0.01,0.0001)"], "the sweep has 18000"),
        # an IndexError in the checks
        (["seed=range(10,0)"], "seed=range(10,0) gives no value, so the sweep would run no job"),
        # Hydra's traceback
        (["optimizer.lr=interval(0.001,0.01)"], "optimizer.lr=interval(0.001,0.01): an interval"),
        # Hydra's two lines once the sweep directory was taken, its lock left there (red team)
        (
            ["hparams_search=optuna", "hydra.sweeper.params.optimizer.lr=interval(1,0)"],
            "hydra.sweeper.params.optimizer.lr=interval(1,0): Hydra's own settings take one "
            "value, not a sweep; a search's space is given with -m as the setting it searches",
        ),
        (["hydra/launcher=basic,joblib"], "hydra/launcher=basic,joblib: Hydra's own settings"),
    ],
)
def test_a_sweep_of_no_job_or_too_many_is_one_line(
    sweep: list[str], message: str, tmp_path: Path, data_dir: Path
) -> None:
    out = tmp_path / "sweep"
    command = ["-m", *sweep, f"hydra.sweep.dir={out}"]
    said = refused_in_process("vitattn-train", *command, data_dir=data_dir, creates=out)
    assert said.startswith(message), said


@pytest.mark.parametrize(
    "program",
    ["vitattn-train", "vitattn-eval", "vitattn-finetune", "vitattn-bench", "vitattn-check"],
)
@pytest.mark.parametrize("name", ["../victim", "a/b", "", ".hidden"])
def test_a_task_name_that_is_no_plain_name_is_one_line_and_writes_nothing(
    program: str, name: str, tmp_path: Path, data_dir: Path
) -> None:
    """``task_name`` names the run's log file: ``../victim`` appended every program's log to a
    file beside the run directory, one the user had (red team); ``a/b`` ended in a traceback."""
    victim = tmp_path / "victim.log"
    victim.write_text("kept\n")
    run = tmp_path / "run"
    said = refused_in_process(
        program, f"task_name={name}", f"hydra.run.dir={run}", data_dir=data_dir, creates=run
    )
    assert said.startswith(f"task_name='{name}' is not valid; choose a name of at most 100 "), said
    assert victim.read_text() == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.log"]


@pytest.mark.parametrize(
    "command",
    [
        ["vitattn-train"],
        ["vitattn-eval", "ckpt_path={ckpt}"],
        ["vitattn-finetune", "ckpt_path={ckpt}"],
        ["vitattn-bench"],
        ["vitattn-check"],
    ],
    ids=["train", "eval", "finetune", "bench", "check"],
)
def test_a_new_run_into_a_folder_holding_a_run_is_one_line_and_changes_nothing(
    command: list[str], tiny_run: Path, tmp_path: Path, data_dir: Path
) -> None:
    """A new run in a run's folder wrote over its metrics.json and .hydra/ and mixed its curves
    with the run's in TensorBoard (red team: vitattn-eval into a training run)."""
    from tests.support.trees import copy_run, tree_digest

    run = copy_run(tiny_run, tmp_path / "run")
    before = tree_digest(run)
    ckpt = run / "checkpoints" / "last.ckpt"
    program, *settings = command
    arguments = [text.format(ckpt=ckpt) for text in settings]
    said = refused_in_process(program, *arguments, f"hydra.run.dir={run}", data_dir=data_dir)
    assert said.startswith(f"hydra.run.dir={run} holds a run already"), said
    assert ("resume=true continues it" in said) == (program == "vitattn-train")
    assert tree_digest(run) == before


def test_the_help_examples_of_vitattn_train_compare_an_approximation(tmp_path: Path) -> None:
    """Each ``vitattn-train --help`` example that picks an attention builds one that approximates
    at its settings: the first example was Linformer with ``k=64`` on the 64 tokens of the
    default model, exact by construction, the comparison the docs call one with nothing to
    compare (user review)."""
    import hydra
    import yaml

    from tests.support.presets import compose_config
    from vitattn.attention import exact_by_construction
    from vitattn.utils.config import CONFIG_DIR

    template = yaml.safe_load((CONFIG_DIR / "hydra" / "help" / "train.yaml").read_text())
    examples = [
        line.split("#")[0].split()[1:]
        for line in template["template"].splitlines()
        if line.strip().startswith("vitattn-train ") and "attention=" in line
    ]
    assert examples
    for words in examples:
        overrides = [word for word in words if "=" in word and not word.startswith("-")]
        overrides = [o.split("=")[0] + "=" + o.split("=")[1].split(",")[0] for o in overrides]
        cfg = compose_config("train", overrides, tmp_path)
        net = hydra.utils.instantiate(cfg.model)
        assert exact_by_construction(net) is None, words


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_the_cpus_bounding_workers_and_processes_are_those_this_process_may_use(
    tmp_path: Path,
) -> None:
    """A run confined to one CPU (``taskset``, SLURM's ``--cpus-per-task``, a container's
    cpuset: its affinity) may start one DataLoader worker and two CPU processes, whatever the
    node has; ``os.cpu_count()`` counts the node's (a job given 8 of 128 CPUs could start 128
    workers)."""
    refusals = {
        "data.num_workers=2": r"data\.num_workers=2 is not valid; choose 0\.\.1 \(the CPUs this "
        r"process may use; ",
        "trainer.devices=3": r"trainer\.devices=3 is not valid; choose a number of processes from "
        r"1 to 2 \(two for each CPU this process may use, 1 here\) or auto",
        # one worker is taken: the run goes on to its (here missing) data folder
        "data.num_workers=1": r"data\.data_dir=.* holds no cifar-10-batches-py/",
    }
    for number, (override, said) in enumerate(refusals.items()):
        run_dir = tmp_path / f"run{number}"
        result = run_cli(
            "vitattn-train",
            "trainer=cpu",
            override,
            f"hydra.run.dir={run_dir}",
            data_dir=tmp_path,
            check=False,
            cpus={min(os.sched_getaffinity(0))},  # one this process may use
        )
        assert result.returncode == 1, result.stderr
        assert re.search(rf"^vitattn-train: error: {said}", result.stderr, re.MULTILINE)
        assert not run_dir.exists()
