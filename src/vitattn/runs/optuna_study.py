"""An Optuna search's stored study, read as data: bounded before Optuna loads it, and each of its
trials checked to be one Optuna writes, in this search's space, before the search asks for more.

A sweep directory someone else can write may hold an ``optuna.db`` made to hurt whoever continues
the search: a database that is no study, or a study whose trials Optuna cannot read (a choice's
index past its options, a complete trial without its value), that stores a parameter as another
kind than the search now asks for, or that holds so many trials that loading them takes
gigabytes. Each is refused in one line naming the file, which is kept as it is; the same line
meets a user who changed a parameter's kind (or a choice's options) and continued the search
into the same study. Links in a sweep directory are refused before this, with its lock
(:func:`vitattn.runs.layout.refuse_planted_links`).

sqlite itself acts on what the file says as it opens and writes it: a rollback journal beside the
study is played back, and one that records a super-journal (a transaction across several
databases, which Optuna never makes) names a file sqlite reads whole and then deletes, anywhere;
an index, a table's ``CHECK`` or default, or a generated column is an expression sqlite
evaluates for each row Optuna writes, which can take hours or gigabytes. A journal with a
super-journal is refused before sqlite opens the study, and every object of the study's schema
must be one Optuna itself makes (:func:`optuna_schema`), before Optuna writes a row.
"""

from __future__ import annotations

import functools
import math
import os
import sqlite3
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from vitattn.errors import ConfigError
from vitattn.runs.files import UnreadableFileError, one_line, open_regular, what_is_at
from vitattn.runs.optuna_space import SPACE_SETTING, describe
from vitattn.utils.checks import invalid, is_number
from vitattn.utils.config import cut_apart

SQLITE = "sqlite:///"
OPTUNA_TABLES = {"studies", "trials", "version_info", "alembic_version"}
"""Tables every Optuna study database has (its schema's version among them): a database with
tables of these names but not Optuna's own would get Optuna's added."""
MAX_SHOWN = 1000
"""The most characters of a study's text (read from its file) one log line shows."""


@dataclass(frozen=True)
class StudyBounds:
    """The most of a sqlite study file a search reads (what a study of this size takes to load:
    docs/runs.md)."""

    file_bytes: int = 64 * 2**20
    trials: int = 10_000
    rows: int = 250_000
    """Rows of the trials' tables (parameters, values, reports, attributes) in all."""
    text_bytes: int = 16 * 2**20
    """Characters of names and JSON (attributes, distributions) in all, parsed as the trials
    load."""
    directions: int = 1_000
    """Directions of the file's studies in all (a search has one per metric it optimizes)."""


STUDY_BOUNDS = StudyBounds()
TRIAL_TABLES = (
    "trials",
    "trial_params",
    "trial_values",
    "trial_intermediate_values",
    "trial_user_attributes",
    "trial_system_attributes",
    "trial_heartbeats",
)
"""Optuna's tables with a row per trial or more (their names are Optuna's, never the file's)."""
TEXT_COLUMNS = {
    "studies": ("study_name",),
    "study_user_attributes": ("key", "value_json"),
    "study_system_attributes": ("key", "value_json"),
    "trial_params": ("param_name", "distribution_json"),
    "trial_user_attributes": ("key", "value_json"),
    "trial_system_attributes": ("key", "value_json"),
}
"""Optuna's columns of names and JSON, which Optuna parses as it loads a study."""


def sqlite_database(storage: str | None) -> str | None:
    """The database of a sqlite storage URL as SQLAlchemy, and so Optuna, reads it
    (``make_url(storage).database``: a ``?`` starts the URL's query, ``%xx`` is decoded);
    ``None`` for another storage, one in memory, or a URL SQLAlchemy cannot read."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if not storage or not storage.startswith(SQLITE):
        return None
    try:
        return make_url(storage).database or None
    except ArgumentError:
        return None


def storage_file(storage: str | None) -> Path | None:
    """The file Optuna opens for a sqlite storage URL (:func:`sqlite_database`; ``None`` for
    another storage, or one in memory)."""
    database = sqlite_database(storage)
    return None if database is None else Path(database)


def check_storage_text(storage: str | None) -> None:
    """Refuse in one line a sqlite storage URL whose text after ``sqlite:///`` is not the file
    SQLAlchemy opens (a sweep directory with a ``?`` or a ``%xx`` in
    ``sqlite:///${hydra.sweep.dir}/optuna.db`` puts the study outside it, where no check of the
    sweep directory looks); nothing is opened."""
    if not storage or not storage.startswith(SQLITE):
        return
    database = sqlite_database(storage)
    if database != (storage.removeprefix(SQLITE) or None):
        raise invalid(
            "hydra.sweeper.storage",
            one_line(storage)[:MAX_SHOWN],
            "a sqlite URL whose file path holds no '?' or '%' (SQLAlchemy reads ?... as the "
            f"URL's query and decodes %xx: this one opens {one_line(database)[:MAX_SHOWN]}), "
            "e.g. a hydra.sweep.dir without them",
        )


def check_storage_file(storage: str | None, bounds: StudyBounds = STUDY_BOUNDS) -> None:
    """Refuse in one line a sqlite storage whose file is not an Optuna study (Optuna would add
    its tables to another database, or fail in a traceback on a file that is not one), or is one
    larger than ``bounds``; read only, never changed (but for sqlite's own recovery of a write
    cut off by a kill, from its journal), never made."""
    path = storage_file(storage)
    if path is None:
        return
    problem = planted_problem(path)  # before sqlite opens anything of it, or makes a file
    if problem is None and (not path.exists() or path.stat().st_size == 0):
        return
    if problem is None:
        problem = "is not a file" if not path.is_file() else too_large(stored_bytes(path), bounds)
    if problem is None:
        # A write cut off by a kill leaves a journal that sqlite rolls back as the file opens,
        # Optuna's open as much as this one: read-only, that open would fail. The study is
        # then checked as the roll-back left it.
        journal = path.with_name(f"{path.name}-journal")
        mode = "rw" if journal.is_file() and journal.stat().st_size > 0 else "ro"
        problem = super_journal_problem(journal) if mode == "rw" else None
    if problem is None:
        try:
            database = sqlite3.connect(sqlite_uri(path, mode), uri=True)
            try:
                problem = database_problem(database, bounds)
            finally:
                database.close()
            problem = problem or too_large(stored_bytes(path), bounds)
        except sqlite3.OperationalError as error:
            if "locked" in str(error):  # a live study: not one to move away
                raise ConfigError(
                    f"{one_line(path)} (hydra.sweeper.storage) is in use: another process "
                    f"holds it locked ({one_line(error)}); run again once it is done, or choose "
                    "another hydra.sweeper.storage"
                ) from None
            problem = f"is not an Optuna study ({one_line(error)})"
        except sqlite3.Error as error:
            problem = f"is not an Optuna study ({one_line(error)})"
    if problem:
        raise ConfigError(
            f"{one_line(path)} (hydra.sweeper.storage) {problem}: it is kept as it is; move it "
            "away or choose another hydra.sweep.dir or hydra.sweeper.storage"
        )


SQLITE_SIBLINGS = ("-journal", "-wal", "-shm")
"""The files sqlite keeps beside a database (``<name>-journal`` and the like), which it opens,
plays back into the database and makes as it opens the database."""


def planted_problem(path: Path) -> str | None:
    """Why sqlite must not open the database ``path``, from what is there, before anything is
    opened (:func:`os.lstat` alone), or ``None``: the database, or a file sqlite keeps beside it
    (:data:`SQLITE_SIBLINGS`), that is a symbolic link (sqlite makes its journal beside the file
    it points at), a hard link (a journal played back writes the other name's file too), or not
    a regular file (sqlite's open of a FIFO journal waits for ever). Checked before the sweep
    directory's own check of links, which comes after the study is read."""
    for name in (path.name, *(f"{path.name}{suffix}" for suffix in SQLITE_SIBLINGS)):
        entry = path.with_name(name)
        try:
            status = entry.lstat()
        except FileNotFoundError:
            continue
        except OSError as error:
            return f"cannot be checked ({one_line(error)})"
        if stat.S_ISLNK(status.st_mode):
            why = "sqlite would make and write its files beside what it points at"
        elif stat.S_ISREG(status.st_mode) and status.st_nlink > 1:
            why = "sqlite would write the file of its other names too"
        elif stat.S_ISREG(status.st_mode) or (entry == path and stat.S_ISDIR(status.st_mode)):
            continue  # a folder where the study goes is "not a file", below
        else:
            why = "sqlite would wait on it or read it as its own"
        where = "" if entry == path else f"has beside it {one_line(entry.name)}, which "
        return f"{where}is {what_is_at(entry)}, and {why}"
    return None


def sqlite_uri(path: Path, mode: str) -> str:
    """The sqlite URI that opens the file ``path`` in ``mode`` (``ro``, ``rw``), its path quoted:
    unquoted, sqlite reads a ``#`` of the path as the URI's fragment and a ``?`` as its query,
    and opens (or makes) another file."""
    return f"file:{quote(str(path))}?mode={mode}"


JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")
"""The eight bytes sqlite ends a rollback journal with where it records a super-journal's name
(sqlite's ``pager.c``, ``writeSuperJournal``: the name, its length, its checksum, these)."""


def super_journal_problem(journal: Path) -> str | None:
    """Why the rollback journal ``journal`` must not be played back, or ``None``: it records a
    super-journal, whose named file sqlite would read whole and delete as it opens the study."""
    try:
        with open_regular(journal, max_bytes=None) as file:
            size = os.fstat(file.fileno()).st_size
            if size < len(JOURNAL_MAGIC) + 8:
                return None
            file.seek(size - len(JOURNAL_MAGIC))
            if file.read(len(JOURNAL_MAGIC)) != JOURNAL_MAGIC:
                return None
    except UnreadableFileError as error:
        return f"has beside it {one_line(journal.name)}, which {error.problem}"
    return (
        f"has beside it {one_line(journal.name)}, a journal that names a super-journal, a file "
        "sqlite would read and delete as it plays the journal back (Optuna never writes one)"
    )


SQL_SHOWN = 300
"""The most characters of a table's SQL a refusal shows."""
SchemaObject = tuple[str, str, str, str]
"""An object of a sqlite schema: its type, name, table and SQL (spaces as one)."""


@functools.cache
def optuna_schema() -> frozenset[SchemaObject]:
    """The objects of the schema the installed Optuna makes for a new study database (tables,
    their indexes and sqlite's automatic ones), read from one made for the purpose."""
    import optuna

    with tempfile.TemporaryDirectory(prefix="vitattn-optuna-schema-") as folder:
        path = Path(folder) / "schema.db"
        storage = optuna.storages.RDBStorage(f"{SQLITE}{path}")
        storage.engine.dispose()
        database = sqlite3.connect(path)
        try:
            return frozenset(schema_of(database))
        finally:
            database.close()


def schema_of(database: sqlite3.Connection) -> list[SchemaObject]:
    """The objects of ``database``'s schema, their SQL with its runs of spaces made one."""
    listed = database.execute("select type, name, tbl_name, coalesce(sql, '') from sqlite_master")
    return [(str(a), str(b), str(c), " ".join(str(d).split())) for a, b, c, d in listed]


def schema_problem(database: sqlite3.Connection) -> str | None:
    """The first object of ``database``'s schema the installed Optuna does not make (a view, a
    trigger, an index of its own, a table whose columns or constraints are not Optuna's), told
    as a problem of the file, or ``None``."""
    made = optuna_schema()
    told_first = {"view": 0, "trigger": 1, "index": 2}  # a view is told as one, not its table
    for found in sorted(schema_of(database), key=lambda found: told_first.get(found[0], 3)):
        if found in made:
            continue
        kind, name, _, sql = found
        shown = one_line(name)[:MAX_SHOWN]
        if kind == "table" and any(o[:2] == ("table", name) for o in made):
            return (
                f"holds a table ({shown}) that is not as Optuna makes it "
                f"({cut_apart(one_line(sql), SQL_SHOWN)})"
            )
        return f"holds a{'n' if kind == 'index' else ''} {kind} ({shown}), which Optuna never makes"
    return None


def stored_bytes(path: Path) -> int:
    """The bytes of the study at ``path`` with sqlite's journal and write-ahead log beside it,
    which sqlite reads into the study as it opens it."""
    beside = [path.with_name(f"{path.name}{suffix}") for suffix in ("-journal", "-wal")]
    return path.stat().st_size + sum(p.stat().st_size for p in beside if p.is_file())


def too_large(size: int, bounds: StudyBounds) -> str | None:
    if size > bounds.file_bytes:
        return f"holds {size} bytes, more than the {bounds.file_bytes} a search reads"
    return None


def database_problem(database: sqlite3.Connection, bounds: StudyBounds) -> str | None:
    """What keeps ``database`` from being a study a search reads, or ``None``."""
    listed = database.execute("select name from sqlite_master where type in ('table', 'view')")
    if not OPTUNA_TABLES.issubset(row[0] for row in listed):
        return "is a database without an Optuna study"
    problem = schema_problem(database)  # a view named trials could count for ever
    if problem is not None:
        return problem
    listed = database.execute("select name from sqlite_master where type = 'table'")
    tables = {row[0] for row in listed}
    trials = count(database, "trials")
    if trials > bounds.trials:
        return f"holds {trials} trials, more than the {bounds.trials} a search reads"
    if "study_directions" in tables:
        directions = count(database, "study_directions")
        if directions > bounds.directions:
            return (
                f"holds {directions} directions of studies, more than the {bounds.directions} a "
                "search reads"
            )
    twice = "select 1 from studies group by study_name having count(*) > 1"
    if database.execute(twice).fetchone() is not None:
        return "holds two studies of one name, which Optuna never makes"
    others = (table for table in TRIAL_TABLES if table != "trials" and table in tables)
    rows = trials + sum(count(database, table) for table in others)
    if rows > bounds.rows:
        return f"holds {rows} rows of trials, more than the {bounds.rows} a search reads"
    text = sum(
        text_length(database, table, column)
        for table, columns in TEXT_COLUMNS.items()
        if table in tables
        for column in columns
    )
    if text > bounds.text_bytes:
        return (
            f"holds {text} characters of names and JSON, more than the {bounds.text_bytes} a "
            "search reads"
        )
    return None


def count(database: sqlite3.Connection, table: str) -> int:
    """Rows of ``table``, one of Optuna's table names written here, never one from the file."""
    return int(database.execute(f"select count(*) from {table}").fetchone()[0])


def text_length(database: sqlite3.Connection, table: str, column: str) -> int:
    """Characters of ``column`` of ``table``, Optuna's names (:data:`TEXT_COLUMNS`)."""
    query = f"select coalesce(sum(length({column})), 0) from {table}"
    return int(database.execute(query).fetchone()[0])


UNREADABLE = (
    LookupError,  # an enum's word that is not one (a trial's state, a direction)
    ValueError,
    TypeError,
    AttributeError,
    AssertionError,
    OverflowError,
    RecursionError,
)
"""What Optuna raises on a stored trial it never writes (``AssertionError`` for a complete
trial's missing value, ``IndexError`` for a choice past its options)."""


def storage_named(storage: str | None) -> str:
    """``hydra.sweeper.storage`` as a refusal names it: its sqlite file, else its URL."""
    return f"{one_line(storage_file(storage) or storage or 'memory')} (hydra.sweeper.storage)"


def check_stored_trials(
    study: Any, storage: str | None, distributions: Mapping[str, Any], directions: Sequence[str]
) -> list[Any]:
    """Refuse in one line a study (in ``storage``, a URL) whose trials Optuna cannot load, one
    trial Optuna would not write, or one that stores a parameter of the space as another kind,
    or a choice with other options, than ``distributions`` (Optuna refuses it in a traceback as
    the search asks for the parameter, with a trial left running); the trials, as read."""
    from sqlalchemy.exc import SQLAlchemyError

    name = one_line(study.study_name)[:MAX_SHOWN]
    where = storage_named(storage)
    try:
        trials = study.get_trials(deepcopy=False)
    except (*UNREADABLE, SQLAlchemyError) as error:
        said = one_line(error)[:MAX_SHOWN]
        raise ConfigError(
            f"study {name} in {where} holds a trial Optuna cannot read ({type(error).__name__}"
            f"{': ' + said if said else ''}): it is kept as it is; choose another "
            "hydra.sweeper.study_name or hydra.sweep.dir"
        ) from None
    numbers = sorted(trial.number for trial in trials)
    if numbers != list(range(len(trials))):  # Optuna numbers a study's trials 0, 1, 2...
        raise ConfigError(
            f"study {name} in {where} numbers its {len(trials)} trials otherwise than 0 to "
            f"{len(trials) - 1}, as Optuna numbers them: it is kept as it is; choose another "
            "hydra.sweeper.study_name or hydra.sweep.dir"
        )
    for trial in trials:
        why = trial_problem(trial, distributions, len(directions))
        if why is not None:
            raise ConfigError(
                f"study {name} in {where}: trial {trial.number} {why}; the study is kept as it "
                "is: choose another hydra.sweeper.study_name or hydra.sweep.dir"
            )
    return trials


def trial_problem(trial: Any, distributions: Mapping[str, Any], objectives: int) -> str | None:
    """Why a stored trial cannot be part of this search, or ``None``."""
    from optuna.distributions import check_distribution_compatibility
    from optuna.trial import TrialState

    for name, stored in trial.distributions.items():
        wanted = distributions.get(name)
        if wanted is None:
            continue
        try:
            check_distribution_compatibility(stored, wanted)
        except ValueError:
            return (
                f"stores {one_line(name)[:MAX_SHOWN]} as {shown(stored)}, and "
                f"{SPACE_SETTING}.{name} is {shown(wanted)} (Optuna keeps a parameter's kind, "
                "and a choice's options, for the whole study)"
            )
    try:
        trial._validate()  # what Optuna's own create_trial checks
    except UNREADABLE as error:
        return f"is not one Optuna writes ({one_line(error)[:MAX_SHOWN]})"
    values = trial.values if trial.state == TrialState.COMPLETE else None
    if values is not None and len(values) != objectives:
        return f"holds {len(values)} value(s) for the study's {objectives} direction(s)"
    reported = trial.intermediate_values.values()
    if not all(isinstance(v, float | int) and not isinstance(v, bool) for v in reported):
        return "holds a reported value that is not a number"  # the pruner would fail on it
    return constraints_problem(trial)


def constraints_problem(trial: Any) -> str | None:
    """Why a stored trial's constraints are not finite numbers, or ``None``: Optuna compares
    each with 0 in ``best_trial``, ``best_trials`` and TPE's split, after every trial ran."""
    try:
        constraints = stored_constraints(trial)
    except UNREADABLE as error:
        return f"holds constraints Optuna cannot read ({one_line(error)[:MAX_SHOWN]})"
    if not all(is_number(c) and math.isfinite(c) for c in constraints):
        shown = one_line(constraints)[:MAX_SHOWN]
        return f"holds constraints {shown}, which are not all finite numbers"
    return None


def stored_constraints(trial: Any) -> list[Any]:
    """A stored trial's constraint values as Optuna reads them: ``FrozenTrial.constraints``
    (Optuna 5: the system attribute ``constraints``, a list, and ``constraints:<name>``), or
    the list ``constraints`` (Optuna 4, whose trials have no such property)."""
    if hasattr(type(trial), "constraints"):
        return list(trial.constraints.values())
    return list(trial.system_attrs.get("constraints") or [])


def shown(distribution: Any) -> str:
    """A distribution in words (:func:`describe`), bounded: its options come from a file."""
    kind = type(distribution).__name__.removesuffix("Distribution").lower()
    return f"{kind} {one_line(describe(distribution))[:200]}"
