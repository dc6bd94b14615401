"""An Optuna study file in a sweep directory is data: bounded before Optuna loads it, each trial
checked before the search asks for more (:mod:`vitattn.runs.optuna_study`). A study a search of
``hparams_search=optuna`` stores, edited as someone who can write the sweep directory would,
continued with ``vitattn-train``: each edit is one line naming the file, no job starts, and the
file keeps its bytes. On the code before, the typed edits ended the search in a traceback (one
with a trial left running), and the flood of trials took gigabytes to load. The bombs run as a
process of their own under a memory cap and a time limit; the rest in this process."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import studies
from tests.support.faults import FloodStudyAtSetup, SwapStudyAtStart
from tests.support.in_process import run_in_process
from tests.support.presets import FEW_STEPS, plug
from tests.support.runners import refusal_message, run_cli
from tests.support.trees import tree_digest
from vitattn.runs.layout import HOLDER, LOCK
from vitattn.runs.optuna_study import STUDY_BOUNDS

pytestmark = pytest.mark.slow

MEMORY_CAP = 5 << 30
"""Address space for the command: a refused run of a console script maps about 4 GB (torch,
OpenBLAS' threads); a study that loads gigabytes before the check fails the test."""
LIMIT = 120
"""Seconds a hostile study may keep the command (a refusal takes a few)."""
KEPT_AS_IT_IS = "it is kept as it is; choose another hydra.sweeper.study_name or hydra.sweep.dir"
TRIAL_KEPT = (
    "the study is kept as it is: choose another hydra.sweeper.study_name or hydra.sweep.dir"
)


def search(sweep: Path, *settings: str) -> list[str]:
    return ["hparams_search=optuna", *FEW_STEPS, *settings, f"hydra.sweep.dir={sweep}"]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def jobs(sweep: Path) -> list[str]:
    return sorted(p.name for p in sweep.iterdir() if p.is_dir() and p.name[0].isdigit())


def kept(sweep: Path) -> dict[str, str]:
    """What the sweep holds, but the empty lock file a command may leave (never deleted: a
    process waiting on it would lock a file no other process sees)."""
    return {name: sha for name, sha in tree_digest(sweep).items() if name != LOCK}


def refused_search(
    sweep: Path, *settings: str, data_dir: Path, capped: bool = False, multirun: bool = False
) -> str:
    """The one-line refusal of the search continued into ``sweep`` (with ``--multirun`` first,
    which a sweep parameter on the command line needs); the sweep keeps its bytes (the study,
    the holder's record of the sweep's lock) and no job starts."""
    study = sweep / "optuna.db"
    before, found = digest(study), kept(sweep)
    command = ["--multirun"] * multirun + search(sweep, *settings)
    if capped:
        result = run_cli(
            "vitattn-train", *command, data_dir=data_dir, check=False, timeout=LIMIT,
            memory=MEMORY_CAP,
        )  # fmt: skip
    else:
        result = run_in_process("vitattn-train", *command, data_dir=data_dir, check=False)
    message = refusal_message("vitattn-train", result)
    assert digest(study) == before
    assert kept(sweep) == found
    assert not jobs(sweep)
    return message


def planted_refusal(
    tmp_path: Path, plant: Callable[[Path], None], *settings: str, **run: Any
) -> tuple[Path, str]:
    """The study a search of ``hparams_search=optuna`` made in ``<tmp_path>/search``, edited by
    ``plant`` (given its path), and the search continued into it: the study's path and the
    one-line refusal (:func:`refused_search`, with ``settings`` and ``run``)."""
    path = studies.made_study(tmp_path / "search")
    plant(path)
    return path, refused_search(path.parent, *settings, **run)


def sql(*statements: str) -> Callable[[Path], None]:
    """An edit of a study file by SQL ``statements``."""
    return lambda path: studies.edit(path, *statements)


LR_AS_A_CHOICE = (
    """update trial_params set param_value = 0, distribution_json = '{"name": """
    """"CategoricalDistribution", "attributes": {"choices": [1, 2]}}' """
    "where param_name = 'optimizer.lr'"
)
TYPED = {
    "a parameter of another kind": (
        [LR_AS_A_CHOICE],
        "trial 0 stores optimizer.lr as categorical choice(1, 2), and "
        "hydra.sweeper.params.optimizer.lr is float from 0.0001 to 0.003, log (Optuna keeps a "
        f"parameter's kind, and a choice's options, for the whole study); {TRIAL_KEPT}",
    ),
    "a choice past its options": (
        ["update trial_params set param_value = 99 where param_name = 'attention.k'"],
        "holds a trial Optuna cannot read (IndexError: tuple index out of range): " + KEPT_AS_IT_IS,
    ),
    "a complete trial whose value is null": (
        ["update trial_values set value = null"],
        f"holds a trial Optuna cannot read (AssertionError): {KEPT_AS_IT_IS}",
    ),
    "a complete trial without a value": (
        ["delete from trial_values"],
        "trial 0 is not one Optuna writes (values should be set for a complete trial.); "
        + TRIAL_KEPT,
    ),
    "a complete trial with two values in a study of one direction": (
        [
            "insert into trial_values(trial_id, objective, value, value_type) "
            "values (1, 1, 0.5, 'FINITE')"
        ],
        f"trial 0 holds 2 value(s) for the study's 1 direction(s); {TRIAL_KEPT}",
    ),
    "a distribution nested 100,000 deep": (
        [
            "update trial_params set distribution_json = '"
            + "[" * 100_000
            + "]" * 100_000
            + "' where param_name = 'attention.k'"
        ],
        "holds a trial Optuna cannot read (RecursionError: maximum recursion depth exceeded",
    ),
}


@pytest.mark.parametrize("edit", list(TYPED))
def test_a_study_optuna_would_not_write_is_one_line_and_kept(
    edit: str, tmp_path: Path, data_dir: Path
) -> None:
    statements, message = TYPED[edit]
    path, said = planted_refusal(tmp_path, sql(*statements), data_dir=data_dir)
    assert said.startswith(f"study {studies.STUDY} in {path} (hydra.sweeper.storage)"), said
    assert message in said


FILE_KEPT = "it is kept as it is; move it away or choose another hydra.sweep.dir or"
NOT_OPTUNAS = {
    "a view where a table belongs (a recursive one counted for ever)": (
        [
            "alter table trials rename to trials_real",
            "create view trials as with recursive n(i) as (select 1 union all select i + 1 "
            "from n) select i as trial_id, i as number, 1 as study_id, 'FAIL' as state, null "
            "as datetime_start, null as datetime_complete from n",
        ],
        f"optuna.db (hydra.sweeper.storage) holds a view (trials), which Optuna never makes: "
        f"{FILE_KEPT}",
    ),
    "a trigger": (
        ["create trigger planted before insert on trials begin select raise(abort, 'no'); end"],
        "holds a trigger (planted), which Optuna never makes",
    ),
    "an index of its own (an expression sqlite evaluates for each row Optuna writes: a hang)": (
        [
            "create index ix_trials_planted on trials("
            # nothing for the study's trials 0-2 (made at once), 100 x 200 MB from trial 3 on
            + ", ".join(["length(hex(zeroblob((number >= 3) * 100000000)))"] * 100)
            + ")"
        ],
        "holds an index (ix_trials_planted), which Optuna never makes",
    ),
    "a generated column (evaluated as each row is written)": (
        [
            "alter table trial_values add column planted integer generated always as "
            "(length(hex(zeroblob(100000000)))) virtual"
        ],
        "holds a table (trial_values) that is not as Optuna makes it (CREATE TABLE trial_values",
    ),
    "two studies of one name": (
        [
            "drop index ix_studies_study_name",
            "insert into studies values (2, 'vitattn')",
            "insert into study_directions values (2, 'MAXIMIZE', 2, 0)",
        ],
        "holds two studies of one name, which Optuna never makes",
    ),
    "2,000 directions": (
        [
            "insert into study_directions(direction, study_id, objective) with recursive "
            "n(i) as (select 1 union all select i + 1 from n where i < 2000) "
            "select 'MINIMIZE', 1, i from n"
        ],
        "holds 2001 directions of studies, more than the 1000 a search reads",
    ),
    "a direction that is no word of Optuna's": (
        ["update study_directions set direction = 'SIDEWAYS'"],
        "optuna.db: 'SIDEWAYS' is not among the defined enum values",
    ),
    "two versions of the schema": (
        ["insert into alembic_version values ('v3.0.0.a')"],
        "optuna.db: Version table 'alembic_version' has more than one head present",
    ),
    "a trial's state that is no word of Optuna's": (
        ["update trials set state = 'BOGUS' where trial_id = 1"],
        "holds a trial Optuna cannot read (LookupError: 'BOGUS' is not among the defined",
    ),
    "trials numbered 0, 5, 2": (
        ["update trials set number = 5 where trial_id = 2"],
        "numbers its 3 trials otherwise than 0 to 2, as Optuna numbers them",
    ),
    "a CHECK constraint Optuna never makes (the search's first ask broke it, until 2026-11-30)": (
        [
            "pragma legacy_alter_table = on",  # the other tables still name `trials`
            "alter table trials rename to trials_before",
            "create table trials (trial_id integer not null primary key, number integer, "
            "study_id integer references studies (study_id), state varchar(8) not null "
            "check (state != 'RUNNING'), datetime_start datetime, datetime_complete datetime)",
            "insert into trials select * from trials_before",
            "drop table trials_before",
        ],
        "(hydra.sweeper.storage) holds a table (trials) that is not as Optuna makes it (CREATE "
        "TABLE trials (trial_id integer not null primary key, number integer, study_id integer "
        "references studies (study_id), state varchar(8) not null check (state != 'RUNNING'), "
        f"datetime_start datetime, datetime_complete datetime)): {FILE_KEPT}",
    ),
    "study attributes that are not JSON (the metric names read as the search starts)": (
        [
            "insert into study_system_attributes(study_id, key, value_json) "
            "values (1, 'study:metric_names', '{')"
        ],
        "optuna.db (hydra.sweeper.storage) holds study attributes Optuna cannot read "
        "(JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 "
        "(char 1)): it is kept as it is",
    ),
    "a reported value that is text (the pruner failed on it in every job)": (
        [
            "insert into trial_intermediate_values(trial_id, step, intermediate_value, "
            "intermediate_value_type) values (1, 1, 'abc', 'FINITE')"
        ],
        "trial 0 holds a reported value that is not a number",
    ),
}


@pytest.mark.parametrize("edit", list(NOT_OPTUNAS))
def test_a_study_file_optuna_never_makes_is_one_line_and_kept(
    edit: str, tmp_path: Path, data_dir: Path
) -> None:
    """Each was a traceback on the code before (a view, a hang; two studies of one name, a
    third added to the file before the traceback), or a study whose jobs all failed."""
    statements, message = NOT_OPTUNAS[edit]
    hangs = edit.startswith(("a view", "an index"))  # its own process, under a time limit
    _, said = planted_refusal(tmp_path, sql(*statements), data_dir=data_dir, capped=hangs)
    assert message in said, said


def test_a_journal_naming_a_file_to_delete_is_refused_and_the_file_kept(
    tmp_path: Path, data_dir: Path
) -> None:
    """A rollback journal beside the study that records a super-journal: sqlite, playing the
    journal back as the check opened the study, read the file it names and deleted it (a file
    outside the sweep, here), and the search went on (red team)."""
    victim = tmp_path / "victim"
    victim.write_text("kept\n")
    name = str(victim).encode()
    trailer = struct.pack(">I", 0) + name + struct.pack(">I", len(name))
    magic = bytes.fromhex("d9d505f920a163d7")  # sqlite's pager.c, aJournalMagic
    trailer += struct.pack(">I", sum(name) & 0xFFFFFFFF) + magic

    def plant(path: Path) -> None:
        path.with_name("optuna.db-journal").write_bytes(b"\x01" + bytes(511) + trailer)

    path, said = planted_refusal(tmp_path, plant, data_dir=data_dir)
    assert said.startswith(f"{path} (hydra.sweeper.storage) has beside it optuna.db-journal, a "), (
        said
    )
    assert "names a super-journal, a file sqlite would read and delete" in said
    assert victim.read_text() == "kept\n"
    assert path.with_name("optuna.db-journal").stat().st_size == 512 + len(trailer)


def fifo_journal(path: Path, victim: Path) -> str:
    os.mkfifo(path.with_name("optuna.db-journal"))
    return "has beside it optuna.db-journal, which is not a regular file (a FIFO), and sqlite "


def hard_linked_study(path: Path, victim: Path) -> str:
    path.rename(victim)
    os.link(victim, path)
    return "is a hard link (one of 2 names of one file), and sqlite would write the file of its "


def linked_study(path: Path, victim: Path) -> str:
    path.rename(victim)
    studies.edit(victim, "PRAGMA journal_mode=wal")
    path.symlink_to(victim)
    return f"is a symbolic link (to {victim}), and sqlite would make and write its files beside "


@pytest.mark.parametrize("plant", [fifo_journal, hard_linked_study, linked_study])
def test_what_sqlite_would_open_beside_a_study_is_checked_before_it_opens_it(
    plant: Callable[[Path, Path], str], tmp_path: Path, data_dir: Path
) -> None:
    """The study was opened by sqlite before the sweep directory's check of links: a FIFO as its
    journal held the search for ever; a study hard-linked to a file outside had a planted
    journal played back into that file; a linked one had sqlite make ``-wal`` and ``-shm``
    beside the file outside (audit). Each is now one line before sqlite opens anything, and the
    file outside keeps its bytes and gets no file beside it."""
    victim = tmp_path / "outside" / "victim.db"
    victim.parent.mkdir()
    path = studies.made_study(tmp_path / "search")
    said_first = plant(path, victim)
    before = digest(victim) if victim.exists() else None
    said = refused_search(path.parent, data_dir=data_dir, capped=True)
    assert said.startswith(f"{path} (hydra.sweeper.storage) {said_first}"), said
    assert said.endswith("move it away or choose another hydra.sweep.dir or hydra.sweeper.storage")
    assert (digest(victim) if victim.exists() else None) == before
    assert sorted(p.name for p in victim.parent.iterdir()) == (["victim.db"] if before else [])


@pytest.mark.parametrize(
    ("planted", "said"),
    [
        ({"hydra": [1]}, "holds a list where the mapping overrides belongs"),
        (
            {"hydra": {"overrides": {"task": [f"k{i}=choice(1,2,3)" for i in range(1001)]}}},
            "holds 1,001 overrides in hydra.overrides.task, more than the 1,000 a sweep's "
            "command line may have",
        ),
        ({"hydra": {"overrides": {"task": [["seed=1"]]}}}, "holds a list in hydra.overrides"),
    ],
)
def test_a_multirun_yaml_planted_in_a_search_is_one_line_before_a_trial(
    planted: dict, said: str, tmp_path: Path, data_dir: Path
) -> None:
    """A search writes no ``multirun.yaml``, and each of its trials read the sweep's overrides
    from one there: a list in it ended every trial in an ``AttributeError``, each stored failed
    in the study, and 95,000 overrides took each trial 51 s and 1.5 GB to parse (audit)."""

    def plant(path: Path) -> None:
        path.with_name("multirun.yaml").write_text(yaml.safe_dump(planted))

    path, refused = planted_refusal(tmp_path, plant, data_dir=data_dir)
    assert refused.startswith(f"{path.with_name('multirun.yaml')}: {said}"), refused
    assert refused.endswith("; remove it")


def test_a_gp_search_into_a_study_of_more_trials_than_it_fits_is_one_line(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Optuna's GPSampler fits the complete trials and the running ones at each ask, and a trial
    running for another search is left running: a study of thousands took an hour and gigabytes
    an ask (here a bound of 5: three complete, three running elsewhere, one to go)."""
    import optuna

    from vitattn.runs import optuna_sweeper

    monkeypatch.setattr(optuna_sweeper, "GP_MAX_TRIALS", 5)

    def plant(path: Path) -> None:
        storage = optuna.storages.RDBStorage(f"sqlite:///{path}")
        study = optuna.load_study(study_name=studies.STUDY, storage=storage)
        for _ in range(3):
            study.ask().set_user_attr("sweep_dir", "/elsewhere")
        storage.engine.dispose()

    settings = ["hydra/sweeper/sampler=gp", "hydra.sweeper.n_trials=4"]
    path, said = planted_refusal(tmp_path, plant, *settings, data_dir=data_dir)
    assert said == (
        f"study {studies.STUDY} in {path} (hydra.sweeper.storage) holds 6 complete or running "
        "trials, which hydra/sweeper/sampler=gp fits with the 1 to go, more than the 5 it takes: "
        "it is kept as it is; choose another hydra.sweeper.study_name or hydra.sweep.dir, or "
        "another sampler"
    )


def test_a_gp_search_of_more_trials_than_it_fits_is_one_line(tmp_path: Path) -> None:
    """4,000 trials took 233 s and 2.9 GB for one ask on this machine."""
    from tests.support.runners import assert_one_line_refusal
    from vitattn.train import validate

    assert_one_line_refusal(
        "train",
        ["hparams_search=optuna", "hydra/sweeper/sampler=gp", "hydra.sweeper.n_trials=1001"],
        validate,
        r"^hydra\.sweeper\.n_trials=1001 is not valid; choose at most 1000 with "
        r"hydra/sweeper/sampler=gp ",
        tmp_path / "run",
    )


def test_a_refused_search_puts_the_holders_record_back(tmp_path: Path, data_dir: Path) -> None:
    """The search is refused after the command took the sweep's lock and named itself in its
    holder's record: the record an earlier command left is put back byte for byte, its file's
    mode too (on the code before, the refused command's own record replaced it; then, the
    record came back readable by all)."""
    earlier = json.dumps(
        {"pid": 4242, "started": "2026-11-28 01:02:03", "program": "vitattn-train", "command": ""}
    )

    def plant(path: Path) -> None:
        (path.parent / HOLDER).write_text(earlier + "\n")
        (path.parent / HOLDER).chmod(0o600)
        studies.edit(
            path, "update trial_params set param_value = 99 where param_name = 'attention.k'"
        )

    path, said = planted_refusal(tmp_path, plant, data_dir=data_dir)
    assert "holds a trial Optuna cannot read" in said
    assert (path.parent / HOLDER).read_text() == earlier + "\n"
    assert stat.S_IMODE((path.parent / HOLDER).stat().st_mode) == 0o600


def test_a_study_swapped_while_a_trial_trains_is_one_line(tmp_path: Path, data_dir: Path) -> None:
    """Someone replaces the study file while the search's first trial trains: the search cannot
    tell Optuna the trial's end. On the code before that was Optuna's traceback; now one line
    naming the storage, the job's directory kept, the file put there kept as it is."""
    import optuna

    sweep, other = tmp_path / "search", tmp_path / "another.db"
    sweep.mkdir()
    optuna.create_study(study_name="another", storage=f"sqlite:///{other}")
    planted = digest(other)
    swap = plug("swap", SwapStudyAtStart, study=sweep / "optuna.db", other=other)
    result = run_in_process(
        "vitattn-train", *search(sweep, "hydra.sweeper.n_trials=2", *swap), data_dir=data_dir,
        check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert refusal_message("vitattn-train", result) == (
        f"hydra.sweeper.storage=sqlite:///{sweep / 'optuna.db'}: Optuna could not go on with the "
        "study (StorageInternalError: An exception is raised during the commit. This typically "
        "happens due to invalid data in the commit, e.g. exceeding max length.); the study keeps "
        "what the search told it, and the jobs run so far their directories: check the file "
        "(changed outside Optuna?) and run the search again to go on"
    )
    assert len(jobs(sweep)) == 1 and digest(sweep / "optuna.db") == planted


def test_a_study_flooded_as_a_trial_starts_is_refused_by_its_pruner(
    tmp_path: Path, data_dir: Path
) -> None:
    """A job's pruner loads every trial of the study as the job sets up (Optuna's pruners
    compare a trial with the others), so it checks the file's bounds first
    (:func:`vitattn.runs.optuna_sweeper.job_trial`): a study flooded after the search checked
    it fails that job in its one line, before any training step."""
    path = studies.made_study(tmp_path / "search")
    flood = plug("flood", FloodStudyAtSetup, study=path, trials=STUDY_BOUNDS.trials)
    pruning = [  # the flood's callback first, then the pruner's
        "~callbacks.optuna_pruning",
        *flood,
        "+callbacks.optuna_pruning._target_=vitattn.training.callbacks.OptunaPruning",
        "hydra.sweeper.pruner={_target_:optuna.pruners.MedianPruner}",
    ]
    result = run_in_process(
        "vitattn-train", *search(path.parent, "hydra.sweeper.n_trials=4", *pruning),
        data_dir=data_dir, check=False,
    )  # fmt: skip
    said = refusal_message("vitattn-train", result)
    assert said == (
        f"{path} (hydra.sweeper.storage) holds {STUDY_BOUNDS.trials + 4} trials, more than the "
        f"{STUDY_BOUNDS.trials} a search reads: it is kept as it is; move it away or choose "
        "another hydra.sweep.dir or hydra.sweeper.storage"
    )
    (job,) = jobs(path.parent)
    metrics = json.loads((path.parent / job / "metrics.json").read_text())
    assert metrics["status"] == "failed" and "steps" not in metrics


def metric_names(names: Any) -> Callable[[Path], None]:
    """An edit that names the study's values ``names`` as Optuna's ``set_metric_names`` does."""
    return sql(
        "insert into study_system_attributes(study_id, key, value_json) "
        f"values (1, 'study:metric_names', '{json.dumps(names)}')"
    )


def test_a_search_continued_for_another_metric_is_one_line(tmp_path: Path, data_dir: Path) -> None:
    """The study's trials hold val/acc_best: on the code before, a search continued with
    ``optimized_metric=test/acc`` (the same direction) added test accuracies to them without a
    word, and the best trial was chosen across the two metrics."""
    path, said = planted_refusal(
        tmp_path, metric_names(["val/acc_best"]), "optimized_metric=test/acc", data_dir=data_dir
    )
    assert said == (
        f"optimized_metric=test/acc, but study {studies.STUDY} in sqlite:///{path} names its "
        "values ['val/acc_best'] (its trials hold those values, which a search for another "
        "metric would mix with its own); choose another hydra.sweeper.study_name or "
        "hydra.sweep.dir"
    )


def test_metric_names_optuna_would_not_write_are_one_line(tmp_path: Path, data_dir: Path) -> None:
    _, said = planted_refusal(tmp_path, metric_names({"a": [1]}), data_dir=data_dir)
    assert "names its values otherwise than Optuna writes them" in said


def test_a_trials_run_attribute_nested_deep_is_left_out_of_the_results(
    tmp_path: Path, data_dir: Path
) -> None:
    """The search writes each trial's ``run`` (a user attribute it set) into
    ``optimization_results.yaml``: one nested 900 deep (JSON Optuna reads) made the YAML writer
    recurse past Python's limit, after the search ran its trials, on every run again. It is
    written only as text now, so a finished search just writes its results."""
    path = studies.made_study(tmp_path / "search")
    deep = "[" * 900 + "]" * 900
    studies.edit(
        path,
        f"insert into trial_user_attributes(trial_id, key, value_json) values (1, 'run', '{deep}')",
    )
    run_in_process(
        "vitattn-train", *search(path.parent, "hydra.sweeper.n_trials=3"), data_dir=data_dir
    )
    results = yaml.safe_load((path.parent / "optimization_results.yaml").read_text())
    assert [trial["run"] for trial in results["trials"]] == [None, None, None]


def test_sqlites_log_beside_a_study_counts_toward_its_bytes(tmp_path: Path, data_dir: Path) -> None:
    """sqlite reads its journal and write-ahead log into the study as it opens it: a crafted
    journal of 400 MB was rolled into a study of 115 KB, past the bound on its bytes."""

    def write_ahead_log(path: Path) -> None:
        log = path.with_name("optuna.db-wal")
        log.touch()
        os.truncate(log, 65 << 20)  # sparse: no disk used

    path, said = planted_refusal(tmp_path, write_ahead_log, data_dir=data_dir)
    planted = path.with_name("optuna.db-wal")
    assert "(hydra.sweeper.storage) holds 68" in said and "more than the 67108864" in said
    assert planted.stat().st_size == 65 << 20


def test_a_search_continued_with_a_choice_of_other_options_is_one_line(
    tmp_path: Path, data_dir: Path
) -> None:
    """A user who narrowed ``attention.k`` and continued the search into the same study got
    Optuna's ``ValueError: CategoricalDistribution does not support dynamic value space.`` in a
    traceback, with a trial left running."""
    path, said = planted_refusal(
        tmp_path, lambda _: None, "attention.k=choice(4,8)", data_dir=data_dir, multirun=True
    )
    assert said == (
        f"study {studies.STUDY} in {path} (hydra.sweeper.storage): trial 0 stores attention.k as "
        "categorical choice(4, 8, 16, 32, 64), and hydra.sweeper.params.attention.k is "
        "categorical choice(4, 8) (Optuna keeps a parameter's kind, and a choice's options, for "
        f"the whole study); {TRIAL_KEPT}"
    )


def flood_of_trials(path: Path) -> None:
    studies.add_trials(path, 200_000, params=1)


def flood_of_rows(path: Path) -> None:
    studies.add_trials(path, 5_000, params=60)


def mountain_of_json(path: Path) -> None:
    """A trial's attribute of 20 MiB of JSON: seven million empty lists once parsed."""
    mountain = "[" + "[]," * ((20 << 20) // 3) + "[]]"
    studies.edit(
        path,
        "insert into trial_user_attributes(trial_id, key, value_json) "
        f"values (1, 'mountain', '{mountain}')",
    )


def heavy_file(path: Path) -> None:
    """A file past the bound on its bytes, its weight in a column nobody checks the length of."""
    studies.edit(path, f"update version_info set library_version = '{'x' * (65 << 20)}'")


BOMBS = {
    "200,000 trials": (flood_of_trials, "holds 200003 trials, more than the 10000 a search reads"),
    "300,000 parameters": (
        flood_of_rows,
        "holds 305015 rows of trials, more than the 250000 a search reads",
    ),
    "20 MiB of JSON": (mountain_of_json, "characters of names and JSON, more than the 16777216"),
    "a file of 65 MiB": (heavy_file, "bytes, more than the 67108864 a search reads"),
}


@pytest.mark.parametrize("bomb", list(BOMBS))
def test_a_study_larger_than_a_search_reads_is_one_line_and_kept(
    bomb: str, tmp_path: Path, data_dir: Path
) -> None:
    plant, message = BOMBS[bomb]
    path, said = planted_refusal(tmp_path, plant, data_dir=data_dir, capped=True)
    assert said.startswith(f"{path} (hydra.sweeper.storage) holds "), said
    assert message in said
    assert said.endswith(
        "it is kept as it is; move it away or choose another hydra.sweep.dir or "
        "hydra.sweeper.storage"
    )
