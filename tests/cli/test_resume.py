"""Command lines that continue a run: ``resume=true`` and ``ckpt_path=``."""

from __future__ import annotations

from pathlib import Path

import pytest

from vitattn.cli.overrides import given_values
from vitattn.cli.resume import resume_arguments
from vitattn.errors import ConfigError
from vitattn.runs.trust import MOVED_TARGETS, allowed_targets


def run_with_overrides(tmp_path: Path, recorded: str) -> Path:
    """A run directory with an (empty) ``last.ckpt`` and ``recorded`` as its overrides.yaml."""
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    (run / ".hydra" / "overrides.yaml").write_text(recorded)
    return run


def test_resume_arguments_take_the_runs_settings_and_directory(tmp_path: Path) -> None:
    run = run_with_overrides(
        tmp_path,
        "- attention=linear\n- model.heads=2\n- trainer.max_steps=40\n- ckpt_path=old.ckpt\n",
    )
    ckpt = str(run / "checkpoints" / "last.ckpt")
    assert resume_arguments([f"ckpt_path={ckpt}", "trainer.max_steps=80"]) == [
        "attention=linear",
        "model.heads=2",
        f"ckpt_path={ckpt}",
        "trainer.max_steps=80",
        f"hydra.run.dir={run}",
    ]
    assert resume_arguments(["resume=true", f"hydra.run.dir={run}"])[-1] == f"ckpt_path={ckpt}"
    assert resume_arguments(["-m", f"ckpt_path={ckpt}"]) == ["-m", f"ckpt_path={ckpt}"]
    with pytest.raises(ConfigError, match=r"resume=true needs the run to continue"):
        resume_arguments(["resume=true"])
    with pytest.raises(ConfigError, match=r"resume=true: .*last.ckpt does not exist"):
        resume_arguments(["resume=true", f"hydra.run.dir={tmp_path}"])


def test_a_sweep_jobs_checkpoint_given_quoted_continues_the_job_in_its_directory(
    tmp_path: Path,
) -> None:
    """A sweep's job directory holds ``=`` and ``,`` (``attention=linear,seed=1``), so its
    checkpoint is given quoted: the job continues in its own directory, which is passed on quoted
    too, as Hydra reads it back (the quotes once made the path one of no file)."""
    job = run_with_overrides(tmp_path, "- attention=linear\n- seed=1\n")
    job = job.rename(tmp_path / "attention=linear,seed=1")
    ckpt = job / "checkpoints" / "last.ckpt"
    continued = resume_arguments([f"ckpt_path='{ckpt}'", "trainer.max_steps=80"])
    assert continued[:2] == ["attention=linear", "seed=1"]
    assert given_values(continued)["hydra.run.dir"] == str(job)
    assert given_values(continued)["ckpt_path"] == str(ckpt)
    resumed = resume_arguments(["resume=true", f'hydra.run.dir="{job}"'])
    assert given_values(resumed)["ckpt_path"] == str(ckpt)
    assert resumed[-1] == f'ckpt_path="{ckpt}"'


def test_a_node_given_now_replaces_what_the_run_recorded_under_it(tmp_path: Path) -> None:
    """``~callbacks.mine`` (or ``callbacks.mine=...``) on the command line drops a recorded
    ``+callbacks.mine._target_=...`` and its settings: they are not replayed, nor refused."""
    run = run_with_overrides(
        tmp_path,
        "- model.heads=2\n- +callbacks.mine._target_=mypkg.Mine\n- +callbacks.mine.step=3\n",
    )
    resume = ["resume=true", f"hydra.run.dir={run}"]
    with pytest.raises(ConfigError, match=r"line 2: callbacks\.mine\._target_=mypkg\.Mine"):
        resume_arguments(resume)
    # deleting it now: not replayed, and no deletion left for Hydra to find nothing to delete
    dropped = resume_arguments([*resume, "~callbacks.mine"])
    assert dropped == ["model.heads=2", *resume, f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"]
    kept = resume_arguments([*resume, "~callbacks.mine", "~callbacks.model_summary"])
    assert kept[-2:] == [
        "~callbacks.model_summary",
        f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}",
    ]
    mine = "+callbacks.mine._target_=mypkg.Mine"
    assert resume_arguments([*resume, mine])[:3] == [
        "model.heads=2",
        "+callbacks.mine.step=3",
        *resume[:1],
    ]


def test_a_recorded_checkpoint_path_is_never_replayed(tmp_path: Path) -> None:
    """The checkpoint to continue from is the command's: a ``ckpt_path`` the run recorded (its
    own, or someone else's checkpoint) is left out, whether the command gives ``resume=true`` or
    ``ckpt_path=``."""
    run = run_with_overrides(tmp_path, "- ckpt_path=/elsewhere/their.ckpt\n- model.heads=2\n")
    last = run / "checkpoints" / "last.ckpt"
    for command in (["resume=true", f"hydra.run.dir={run}"], [f"ckpt_path={last}"]):
        arguments = resume_arguments(command)
        assert [arg for arg in arguments if arg.startswith("ckpt_path=")] == [f"ckpt_path={last}"]
        assert "model.heads=2" in arguments


def test_a_run_recorded_before_its_callbacks_moved_continues_under_their_new_names(
    tmp_path: Path,
) -> None:
    """A run whose overrides name a callback by its earlier path (``vitattn.callbacks.NanGuard``)
    resumes with the current one, which the configs name and Hydra imports. A callback the
    recorded overrides *add* is not a setting of vitattn's configs: it is refused, even one that
    vitattn builds, and is given on the command line instead."""
    run = run_with_overrides(
        tmp_path,
        "- callbacks.nan_guard._target_=vitattn.callbacks.NanGuard\n"
        "- '+callbacks.maps={_target_: vitattn.insight.AttentionInsight, every_n_steps: 5}'\n"
        "- +callbacks.other._target_=vitattn.callbacks_of_mine.NanGuard\n",
    )
    resume = ["resume=true", f"hydra.run.dir={run}"]
    with pytest.raises(ConfigError, match=r"line 3: .*vitattn\.callbacks_of_mine\.NanGuard"):
        resume_arguments(resume)
    with pytest.raises(ConfigError, match=r"line 2: .*callbacks\.maps, which is not a setting"):
        resume_arguments([*resume, "~callbacks.other"])
    arguments = resume_arguments([*resume, "~callbacks.other", "~callbacks.maps"])
    assert arguments[:1] == ["callbacks.nan_guard._target_=vitattn.training.callbacks.NanGuard"]
    from hydra.utils import get_class

    for old, new in MOVED_TARGETS.items():
        assert new in allowed_targets(), old
        assert get_class(new).__name__ == old.rsplit(".", 1)[-1]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('- &a ["x", "x"]\n- &b [*a, *a]\n- [*b, *b]\n', "anchor"),
        ("- " + "[" * 100 + "]" * 100 + "\n", "deep"),
    ],
    ids=["alias bomb", "nested 100 deep"],
)
def test_recorded_overrides_are_read_within_the_bounds_of_run_files(
    tmp_path: Path, text: str, said: str
) -> None:
    """``overrides.yaml`` is read by the bounded reader's rules even where this function is the
    first to read it: an anchor or alias, or nesting past the bound, is one line naming the file,
    before a node is built."""
    from vitattn.cli.resume import recorded_overrides

    path = tmp_path / "overrides.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        recorded_overrides(path)
    message = str(raised.value)
    assert message.startswith(str(path)) and said in message and "\n" not in message


def test_recorded_overrides_keep_their_lines(tmp_path: Path) -> None:
    from vitattn.cli.resume import recorded_overrides

    path = tmp_path / "overrides.yaml"
    path.write_text("- attention=linear\n- seed=3\n")
    assert recorded_overrides(path) == [("attention=linear", 1), ("seed=3", 2)]
