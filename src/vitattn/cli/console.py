"""The console scripts' shared ``main``: check the command line, then hand it to Hydra.

Every ``vitattn-*`` command is a Hydra app. Before Hydra creates a run directory, the command
line is checked here, and anything wrong ends in one line on stderr (``<program>: error: ...``)
and exit status 1, with nothing created:

* an override Hydra's grammar cannot read (a sweep job's path unquoted), shown quoted;
* a config-group choice that does not exist (``attention=flash``), with the valid ones;
* an output location that cannot be written;
* a value the config's schema rejects (a word where a number belongs, an unknown key): the
  config is composed as the app will compose it, sweeps value by value;
* whatever the app's own ``validate`` hook rejects on the composed config;
* an addition (``+key=value``, ``++key=value``) of a key nothing reads (``+seeed=3``: Hydra's
  own hint for ``seeed=3``), with the keys that are there (:mod:`vitattn.cli.additions`);
  and a key that is not there set without ``+`` (``seeed=3``, ``model.depht=2``), told as its
  addition would be, where Hydra's line suggested that addition (:func:`added_instead`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from vitattn.cli.additions import MAX_SHOWN, check_additions, deletion_refusal, value_of
from vitattn.cli.interpolated import crossing, unresolved
from vitattn.cli.overrides import (
    NAME_MAX,
    check_syntax,
    given_path,
    given_values,
    key_of,
    override_positions,
    overrides_of,
)
from vitattn.cli.validation import (
    check_launcher,
    check_task_name,
    for_another_machine,
    jobs_run_elsewhere,
)
from vitattn.errors import ConfigError, VitattnError, fail
from vitattn.runs.continuation import (
    check_continuation,
    kept_not_reused,
    planned_jobs,
    set_failed_jobs_aside,
)
from vitattn.runs.disk import FULL, short_of_space, space_left
from vitattn.runs.files import one_line
from vitattn.runs.layout import HOLDER, RunDir, check_run_files
from vitattn.runs.lock import RESERVE_BYTES, ddp_worker, hold_run_directory
from vitattn.runs.optuna_sweeper import check_search
from vitattn.runs.task import remember_missing_parents, remember_run_directory
from vitattn.utils import checks
from vitattn.utils.config import (
    CONFIG_DIR,
    PROJECT_ROOT,
    all_group_options,
    cut_apart,
    group_folders,
    hydra_configs,
)
from vitattn.utils.hydra_grammar import parsed, values_count

Validator = Callable[[DictConfig], Any]

HYDRA_INFO_FLAGS = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--version")
"""Flags that make Hydra print something instead of running: nothing to check."""

MULTIRUN_FLAGS = ("-m", "--multirun")


def only_prints(arguments: Sequence[str]) -> bool:
    """Whether Hydra prints something instead of running (:data:`HYDRA_INFO_FLAGS`)."""
    return any(arg.split("=", 1)[0] in HYDRA_INFO_FLAGS for arg in arguments)


def multirun(arguments: Sequence[str]) -> bool:
    """Whether the command line runs a sweep: ``-m``/``--multirun``, or ``hydra.mode=MULTIRUN``,
    which Hydra takes as the flag."""
    if any(arg in MULTIRUN_FLAGS for arg in arguments):
        return True
    mode = given_values(arguments).get("hydra.mode")
    return isinstance(mode, str) and mode.upper() == "MULTIRUN"


MAX_COMPOSITIONS = 64
"""A sweep of at most this many jobs is checked job by job; a larger one, each swept value at
least once, in at most this many compositions (each takes about half a second)."""

OUTPUT_SETTINGS = ("hydra.run.dir", "hydra.sweep.dir", "paths.log_dir")


def console_main(
    program: str,
    hydra_main: Callable[[], Any],
    *,
    config_name: str,
    prepare: Callable[[list[str]], list[str]] | None = None,
    validate: Validator | None = None,
    continues_runs: bool = False,
) -> None:
    """Check ``sys.argv`` (after ``prepare`` rewrote it, e.g. to resume a run), then run the
    Hydra app ``hydra_main``; a :class:`VitattnError` ends the command in one line. A command
    that ``continues_runs`` (``vitattn-train``) may write into a run's folder to continue it."""
    arguments = sys.argv[1:]
    check_flags(arguments)
    try:
        source = config_source(arguments, config_name)
        config_name = source.name
        if not only_prints(arguments):
            check_syntax(arguments)
            check_no_sweep_of_hydra(arguments)
            check_sweep_size(arguments)
            check_path_names(arguments)
            check_output_dir_not_set(arguments)
            check_baseline(arguments)
        check_given_runs(arguments)
        check_run_dir_is_new(arguments, continues_runs, held_by_none=True)
        if prepare is not None:
            arguments = prepare(arguments)
        if not only_prints(arguments):
            check_output_dirs(arguments)
            if source.extra_dirs is not None:  # else the user's own config tree: Hydra's to read
                check_group_choices(arguments, extra_dirs=source.extra_dirs)
                check_composition(config_name, arguments, validate, extra_dirs=source.extra_dirs)
    except VitattnError as error:
        fail(program, error)
        sys.exit(1)
    informational = only_prints(arguments)
    named = name_jobs_by_what_differs(arguments)
    sweep_dir = explicit_sweep_dir(arguments)
    continuing = sweep_dir is not None and not informational and basic_sweep(arguments)
    continuing = continuing and source.extra_dirs is not None  # else a config tree of the user's
    try:
        remember_run_directory(explicit_run_dir(arguments))  # a file there it cannot read: a line
        jobs = planned_jobs(overrides_of(named), sweep_dir) if continuing else []
        if continuing:
            check_continuation(config_name, jobs, sweep_dir, source.extra_dirs or ())
        for setting, directory in [
            ("hydra.run.dir", explicit_run_dir(arguments)),
            ("hydra.sweep.dir", sweep_dir),
        ]:
            if directory is not None and not informational:
                hold(directory, setting, program)
        # after the lock where a holder is recorded: a run still going there is named as the
        # directory's holder, and one that was killed has left its lock's file
        check_run_dir_is_new(arguments, continues_runs)
        if continuing:
            not_reused = kept_not_reused(jobs, sweep_dir)
            if not_reused is not None:
                print(f"{program}: {not_reused}", file=sys.stderr)
            for attempt in set_failed_jobs_aside(jobs, sweep_dir):
                print(f"{program}: a failed attempt is kept in {attempt}", file=sys.stderr)
    except VitattnError as error:
        fail(program, error)
        sys.exit(1)
    sys.argv = [sys.argv[0], *named]
    try:
        hydra_main()
    except BrokenPipeError:
        # Piped into a reader that stopped early (`--help | head`): it has what it wanted. As
        # Python's documentation advises, stdout then points at devnull, so exiting is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


def check_flags(arguments: Sequence[str]) -> None:
    """The command line read by Hydra's own parser (its flags, then the overrides), as the app
    will read it: one it refuses (``-m`` after an override) ends here, with argparse's usage
    line and exit status 2, as it would in Hydra, but before any folder or lock is made."""
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    parsed = parser.parse_args(list(arguments))
    commands = [parsed.run, parsed.cfg is not None, parsed.multirun, parsed.shell_completion]
    if sum(commands) + (parsed.info is not None) > 1:  # Hydra's ValueError, with a traceback
        parser.error(
            "only one of --run, --multirun, --cfg, --info and --shell-completion can be specified"
        )


@dataclass(frozen=True)
class ConfigSource:
    """The config a command line has the app compose: ``name`` (``--config-name``, else the
    app's), from ``configs/`` and the folders ``extra_dirs`` (``--config-dir``, which Hydra adds
    to its search path), or ``None`` where ``--config-path`` gives a tree of the user's own."""

    name: str
    extra_dirs: tuple[Path, ...] | None


def config_source(arguments: Sequence[str], config_name: str) -> ConfigSource:
    """:class:`ConfigSource` of ``arguments``, as Hydra's parser reads them; a ``--config-dir``
    that is no folder is one line (Hydra's message took three), and so is Hydra's
    ``--experimental-rerun``."""
    from hydra._internal.utils import get_args_parser

    parsed = get_args_parser().parse_args(list(arguments))
    if parsed.experimental_rerun is not None:  # Hydra unpickles the file it names
        raise ConfigError(
            "--experimental-rerun is not taken: Hydra would unpickle the file it names, and a "
            "pickle can run code; give the settings as overrides (a run's are in "
            "<run>/.hydra/overrides.yaml)"
        )
    name = parsed.config_name or config_name
    if parsed.config_path is not None:
        return ConfigSource(name, None)
    if parsed.config_dir is None:
        return ConfigSource(name, ())
    folder = Path(os.path.abspath(parsed.config_dir))  # as Hydra reads it: no ~ expanded
    if not folder.is_dir():
        raise ConfigError(
            f"--config-dir {one_line(parsed.config_dir)} is not a folder; give a folder of config "
            "groups (<dir>/experiment/<name>.yaml), which Hydra adds to configs/"
        )
    return ConfigSource(name, (folder,))


def hold(directory: Path, setting: str, program: str) -> None:
    """:func:`hold_run_directory`, and one line naming ``setting`` where the directory cannot be
    made or written (a full disk or quota, a folder the process may not write, a read-only
    file system): the line says why, and what was made for it is removed."""
    try:
        hold_run_directory(directory, program)
    except OSError as error:
        if error.errno in FULL and short_of_space(directory, RESERVE_BYTES):
            reason = f"no space left on its device ({space_left(directory)})"
            advice = "free space or choose another location"
        elif error.errno in FULL:  # bytes enough: files counted, or a quota, at their limit
            reason = (
                f"no room for another file on its device ({space_left(directory)}; its count "
                "of files, or a quota, is at its limit)"
            )
            advice = "free space or choose another location"
        else:
            said = error.strerror or type(error).__name__
            reason = said[:1].lower() + said[1:]
            advice = "choose a directory you can write to"
        raise ConfigError(f"{setting}={directory} cannot be written: {reason}; {advice}") from None


def hold_sweep_directory(sweep_dir: Path) -> None:
    """Hold ``sweep_dir`` for the whole sweep, whoever named it (the sweepers call this first):
    the console holds a ``hydra.sweep.dir`` given on the command line, but a folder Hydra names
    (no ``hydra.sweep.dir``, as the README's first sweep) was held by nothing, so its
    continuation, run while the sweep still ran, set the running job aside as a cut one and
    trained it again, or failed a search's live trial (red team). Refused in one line, as the
    console refuses it."""
    program = Path(sys.argv[0]).name
    try:
        hold(sweep_dir, "hydra.sweep.dir", program)
    except VitattnError as error:
        fail(program, error)
        sys.exit(1)


EXCLUDE_KEYS = "hydra.job.config.override_dirname.exclude_keys"
NUMBERED_JOB_DIR = (
    "${hydra.job.num}_${vitattn_job_dir:${hydra.job.override_dirname},${hydra.job.num}}"
)


def name_jobs_by_what_differs(arguments: Sequence[str]) -> list[str]:
    """For a sweep (``-m``, or a search: ``hparams_search=...``), ``arguments`` plus Hydra's
    ``override_dirname.exclude_keys`` set to the overrides that take one value: a job's
    directory (``hydra/default.yaml``) and TensorBoard run are then named by the settings that
    differ, ``attention=linear,seed=1``, not by every override. A sweep that repeats a value
    numbers its jobs (``0_seed=1``, ``1_seed=1``) so that no two share a directory. Arguments
    are returned as given for a single run, a command line Hydra will reject, or one that sets
    the excluded keys itself."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    overrides = overrides_of(arguments)
    searching = any(text.split("=", 1)[0] == "hparams_search" for text in overrides)
    if not searching and not multirun(arguments):
        return list(arguments)
    if any(text.split("=", 1)[0] == EXCLUDE_KEYS for text in overrides):
        return list(arguments)
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return list(arguments)
    fixed = sorted(
        {
            override.key_or_group
            for override in parsed
            if not override.is_sweep_override() and not override.key_or_group.startswith("hydra")
        }
    )
    added = [f"{EXCLUDE_KEYS}=[{','.join(fixed)}]"] if fixed else []
    repeats = any(  # a range's values are distinct, and may be too many to list
        len(values) != len(set(values))
        for values in (
            list(override.sweep_string_iterator())
            for override in parsed
            if override.is_choice_sweep() and not override.key_or_group.startswith("hydra")
        )
    )
    if repeats and not any(text.startswith("hydra.sweep.subdir=") for text in overrides):
        added.append(f"hydra.sweep.subdir='{NUMBERED_JOB_DIR}'")  # two jobs, the same values
    # beside the user's overrides: Hydra's parser takes them as one run of words, and a flag
    # may follow them (``hparams_search=optuna --cfg hydra``)
    end = override_positions(arguments)[-1] + 1 if added else len(arguments)
    return [*arguments[:end], *added, *arguments[end:]]


def explicit_run_dir(arguments: Sequence[str]) -> Path | None:
    """``hydra.run.dir`` of a single run when given as a plain path, else ``None``."""
    if multirun(arguments):
        return None
    value = given_path(arguments, "hydra.run.dir")
    return Path(value) if value else None


def check_given_runs(arguments: Sequence[str]) -> None:
    """Refuse in one line, before anything reads or writes them, the run directories a single
    run's command names (``hydra.run.dir``, the run of ``ckpt_path``) when one holds a symbolic
    link or a file the bounded reader refuses (:func:`vitattn.runs.layout.check_run_files`); a
    sweep's jobs are checked by :func:`check_continuation`."""
    if multirun(arguments) or only_prints(arguments):
        return
    runs = [explicit_run_dir(arguments)]
    ckpt_path = given_path(arguments, "ckpt_path")
    if ckpt_path:
        of_checkpoint = RunDir.of_checkpoint(Path(ckpt_path).expanduser())
        runs.append(of_checkpoint.path if of_checkpoint is not None else None)
    for run in runs:
        if run is not None:
            check_run_files(run.expanduser())


def check_run_dir_is_new(
    arguments: Sequence[str], continues_runs: bool, held_by_none: bool = False
) -> None:
    """Refuse in one line a single run whose ``hydra.run.dir`` holds a run already (its
    ``.hydra/`` or ``metrics.json``), unless the command continues it (``vitattn-train``'s
    ``resume=true`` or ``ckpt_path=``, where ``continues_runs``): a new run there wrote over the
    other's ``metrics.json`` and ``.hydra/`` and mixed its curves with the other's in
    TensorBoard (red team). With ``held_by_none``, only a folder whose lock no holder has
    recorded (before the lock is taken: nothing is written to refuse it)."""
    if multirun(arguments) or only_prints(arguments):
        return
    if ddp_worker():
        return  # in the folder its rank-zero process made
    run = explicit_run_dir(arguments)
    if run is None:
        return
    given = given_values(arguments)
    if continues_runs and (str(given.get("resume")).lower() == "true" or given.get("ckpt_path")):
        return
    held = RunDir(run.expanduser())
    if held_by_none and os.path.lexists(held.path / HOLDER):
        return  # checked once the lock is taken: its holder may be running there now
    if held.hydra_dir.is_dir() or held.metrics_file.is_file():
        again = " (vitattn-train resume=true continues it)" if continues_runs else ""
        raise ConfigError(
            f"hydra.run.dir={one_line(run)[:MAX_SHOWN]} holds a run already{again}; choose a new "
            "hydra.run.dir, or leave it out for a new folder under outputs/: a run there would "
            "write over its results and mix its curves with them"
        )


def basic_sweep(arguments: Sequence[str]) -> bool:
    """Whether a sweep runs with Hydra's basic sweeper (not a search such as Optuna's)."""
    keys = [key_of(arg) for arg in overrides_of(arguments)]
    return not any(key in ("hparams_search", "hydra/sweeper") for key in keys)


MAX_SWEEP_JOBS = 10_000
"""The most jobs one sweep (``-m``) runs: far above a study of every attention over seeds and
rates, and far below what Hydra, listing each job's overrides, and this check can hold."""


def check_no_sweep_of_hydra(arguments: Sequence[str]) -> None:
    """Refuse in one line a sweep of one of Hydra's own settings
    (``hydra.sweeper.params.optimizer.lr=interval(1,0)``): Hydra said so in two lines of its
    own once the sweep directory was taken, and left its lock there (red team)."""
    from hydra.errors import HydraException

    for text in overrides_of(arguments):
        try:
            override = parsed(text)
        except HydraException:
            return  # check_syntax names it
        key = override.key_or_group
        if override.is_sweep_override() and (
            key == "hydra" or key.startswith(("hydra.", "hydra/"))
        ):
            raise ConfigError(
                f"{one_line(text)[:MAX_SHOWN]}: Hydra's own settings take one value, not a sweep; "
                "a search's space is given with -m as the setting it searches "
                "(-m hparams_search=optuna 'optimizer.lr=tag(log,interval(1e-4,1e-2))'), or under "
                "hydra.sweeper.params in a config"
            )


def check_sweep_size(arguments: Sequence[str]) -> None:
    """Refuse in one line a sweep of Hydra's basic sweeper with no job (``seed=range(10,0)``:
    an ``IndexError`` in the checks) or more than :data:`MAX_SWEEP_JOBS` (``seed=range(0,10**8)``
    held the command past a minute, and then ended in ``MemoryError`` under 4 GB), counted
    before any job's overrides are listed, or with an ``interval`` (Hydra's traceback)."""
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException

    if not multirun(arguments) or not basic_sweep(arguments):
        return
    jobs, widest = 1, ("", 1)
    for text in overrides_of(arguments):
        try:
            override = parsed(text)
        except HydraException:
            return  # check_syntax names it
        if not override.is_sweep_override() or override.key_or_group.startswith("hydra"):
            continue
        if override.value_type == ValueType.INTERVAL_SWEEP:  # Hydra's traceback
            raise ConfigError(
                f"{one_line(text)[:MAX_SHOWN]}: an interval is sampled by a search "
                "(hparams_search=optuna); a sweep (-m) runs the values of a choice (a,b,c) or "
                "a range(start, stop, step)"
            )
        count = values_count(override)
        if count is None:
            continue
        if count == 0:
            raise ConfigError(
                f"{one_line(text)[:MAX_SHOWN]} gives no value, so the sweep would run no job: "
                "a range(start, stop, step) counts from start toward stop, which it leaves out"
            )
        jobs *= count
        widest = max(widest, (override.key_or_group, count), key=lambda pair: pair[1])
    if jobs > MAX_SWEEP_JOBS:
        raise ConfigError(
            f"the sweep has {jobs} jobs ({widest[0]}: {widest[1]} values); at most "
            f"{MAX_SWEEP_JOBS} run in one sweep: sweep fewer values, or split it into sweeps "
            "of their own hydra.sweep.dir"
        )


BASELINE = "summary.baseline"
BASELINE_FORMS = (
    "key=value pairs, quoted (\"summary.baseline='attention=softmax, model.depth=2'\"), or one "
    "value of the sweep (summary.baseline=linear)"
)


def check_baseline(arguments: Sequence[str]) -> None:
    """Refuse in one line a sweep's ``summary.baseline`` that its summary could never find,
    before the sweep runs (its summary said so only once every job had trained): a list or a
    map; with Hydra's basic sweeper, a value none of the swept settings takes, or a pair whose
    key is swept and whose value is not among the key's."""
    from hydra.errors import HydraException

    if not multirun(arguments):
        return
    given = given_values(arguments)
    if BASELINE not in given or given[BASELINE] is None:
        return
    value = given[BASELINE]
    if isinstance(value, list | dict):
        raise checks.invalid(BASELINE, value, BASELINE_FORMS)
    if not basic_sweep(arguments):
        return  # a search's settings are its trials'
    swept: dict[str, list[str]] = {}
    for text in overrides_of(arguments):
        try:
            override = parsed(text)
        except HydraException:
            return
        if override.is_sweep_override():
            swept[str(override.key_or_group)] = list(override.sweep_string_iterator())
    if not swept:
        return
    spec = str(value)
    pairs = [part.strip() for part in spec.split(",") if part.strip()]
    if pairs and all("=" in pair for pair in pairs):
        for key, _, wanted in (pair.partition("=") for pair in pairs):
            options = swept.get(key.strip())
            if options is not None and wanted.strip() not in options:
                named = " or ".join(f"{key.strip()}={option}" for option in options)
                raise checks.invalid(BASELINE, spec, f"{named} (the values the sweep gives it)")
        return
    every = list(dict.fromkeys(option for options in swept.values() for option in options))
    if spec not in every:
        raise checks.invalid(
            BASELINE, spec, f"one of the sweep's values ({', '.join(every)}), or {BASELINE_FORMS}"
        )


def explicit_sweep_dir(arguments: Sequence[str]) -> Path | None:
    """``hydra.sweep.dir`` of a sweep (``-m``, or a search) when given as a plain path, else
    ``None``."""
    if not multirun(arguments) and basic_sweep(arguments):
        return None  # a single run
    value = given_path(arguments, "hydra.sweep.dir")
    return Path(value) if value else None


def check_group_choices(
    arguments: Sequence[str], config_dir: Path = CONFIG_DIR, extra_dirs: Sequence[Path] = ()
) -> None:
    """Reject ``group=name`` overrides (sweeps included) whose config file does not exist, in
    ``config_dir`` or any of ``extra_dirs`` (``--config-dir``).

    Hydra would fail too, but with a multi-line message; this names the setting and the valid
    choices in one line, before any run directory exists.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        overrides = OverridesParser.create().parse_overrides(overrides_of(arguments))
    except HydraException:
        return  # a syntax error: check_syntax reports it in one line
    for override in overrides:
        group = override.key_or_group
        if override.is_delete() or override.package or group.startswith("hydra/"):
            continue
        if not group_folders(group, extra_dirs, config_dir):
            continue
        if override.is_sweep_override():  # one by one: a range may give 10**8 of them
            values: Iterable[str] = override.sweep_string_iterator()
        else:
            values = [override.get_value_element_as_str()]
        valid = all_group_options(group, extra_dirs, config_dir)
        for value in values:
            if value not in valid:
                # Hydra ends group=null in a traceback: a group is left out with ~group
                hint = f" (a group is left out with ~{group}, not null)" if value == "null" else ""
                raise ConfigError(
                    f"{group}={value} is not a known {group}; choose one of: {', '.join(valid)}"
                    f"{hint}"
                )


PATH_MAX = 4095
"""The most bytes of a whole path the kernel takes (``PATH_MAX``, less its ending zero)."""
PATH_KEYS = ("dir", "path", "dirpath", "filename")
"""The last words of the settings that name a file or folder (``hydra.run.dir``,
``ckpt_path``, ``data.data_dir``, ``callbacks.last_checkpoint.dirpath``), besides ``paths.*``."""


def check_path_names(arguments: Sequence[str]) -> None:
    """Refuse in one line a path given on the command line that no file system takes: a name in
    it longer than :data:`NAME_MAX` bytes, or the whole longer than :data:`PATH_MAX` (the checks
    that look at it, and Hydra's, ended in a traceback of ``File name too long``)."""
    for key, value in given_values(arguments).items():
        last = key.rsplit(".", 1)[-1]
        if not isinstance(value, str) or not (key.startswith("paths.") or last.endswith(PATH_KEYS)):
            continue
        encoded = os.fsencode(value)
        longest = max(encoded.split(b"/"), key=len)
        if len(longest) > NAME_MAX or len(encoded) > PATH_MAX:
            shown = cut_apart(one_line(value), 120)
            what = (
                f"a name in it is {len(longest)} bytes, more than the {NAME_MAX}"
                if len(longest) > NAME_MAX
                else f"it is {len(encoded)} bytes, more than the {PATH_MAX}"
            )
            raise ConfigError(f"{key}={shown}: {what} a file system takes; choose a shorter path")


RUN_DIRECTORY = "${hydra:runtime.output_dir}"
"""``paths.output_dir``'s value in ``configs/paths/default.yaml``: the directory Hydra makes."""


def check_output_dir_not_set(arguments: Sequence[str]) -> None:
    """Refuse ``paths.output_dir`` set on the command line: it is the run directory Hydra makes
    (``hydra.run.dir``), where the run's lock, ``.hydra`` and log are. Set apart from it, the
    files a run writes by it (``metrics.json``, events, checkpoints, figures) went elsewhere,
    the folder unlocked, and a figure's write into a folder nothing made ended a finished
    evaluation as failed (until 2026-12-02; eval audit)."""
    from hydra.errors import HydraException

    for text in overrides_of(arguments):
        if key_of(text) != "paths.output_dir":
            continue  # only its own override is read with Hydra's grammar
        try:
            override = parsed(text)
        except HydraException:
            continue
        if override.is_delete():
            continue
        if not override.is_sweep_override() and value_of(override) == RUN_DIRECTORY:
            continue
        shown = cut_apart(one_line(text.lstrip("+")), 120)
        value = cut_apart(one_line(text.split("=", 1)[-1]), 120)
        instead = (
            "choose the sweep's folder with hydra.sweep.dir=<dir>"
            if override.is_sweep_override()
            else f"choose it with hydra.run.dir={value}"
        )
        raise ConfigError(
            f"{shown} is not valid: paths.output_dir is the run directory Hydra makes; {instead}"
        )


def check_output_dirs(arguments: Sequence[str], default: Path = PROJECT_ROOT / "outputs") -> None:
    """Reject, before Hydra creates anything, an output location that cannot be written.

    Looks at ``hydra.run.dir``, ``hydra.sweep.dir`` and ``paths.log_dir`` when given (else the
    default ``outputs/``): the nearest existing folder on the path must be a writable directory
    on a device with at least :data:`~vitattn.runs.lock.RESERVE_BYTES` free (what a run sets
    aside for its last word). Paths with interpolations (``${...}``) are left to Hydra.
    """
    given = {
        key: value
        for key, value in given_values(arguments).items()
        if key in OUTPUT_SETTINGS and isinstance(value, str)
    }
    if not given:
        given = {"paths.log_dir": str(default)}
    for setting, value in given.items():
        if not value.strip():  # Hydra would write the run into the working directory
            raise ConfigError(
                f"{setting} is empty; give a directory ({setting}=<dir>), or leave it out for "
                f"the default under {default}"
            )
        if "${" in value:
            continue
        path = Path(value).expanduser().absolute()
        existing = next((p for p in (path, *path.parents) if p.exists()), None)
        if existing is None:
            continue
        if not existing.is_dir():
            raise ConfigError(
                f"{setting}={value} is not writable: {existing} is a file, not a directory; "
                "choose another location"
            )
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ConfigError(
                f"{setting}={value} is not writable (no write permission in {existing}); "
                "choose a directory you can write to"
            )
        if short_of_space(existing, RESERVE_BYTES):  # not even a run's last word fits
            raise ConfigError(
                f"{setting}={value} cannot be written: no space left on its device "
                f"({space_left(existing)}); free space or choose another location"
            )


ALONE = ("seed",)
"""Settings no object is built from, checked by their range alone: a sweep's values of one are
not combined with the other settings' values (:func:`single_runs`)."""


def single_runs(arguments: Sequence[str]) -> list[list[str]]:
    """The override lists of the jobs to check, the first job first: one for a single run; for
    a sweep (``-m``), every job where it has at most :data:`MAX_COMPOSITIONS` (settings that
    are valid one by one may not be together: ``model.embed_dim=32,20 model.heads=2,8``), else
    every value of each swept setting at least once, the i-th values of each together, the
    first :data:`MAX_COMPOSITIONS` of them checked. A setting of :data:`ALONE` is left out of
    the combinations: the i-th job takes its i-th value, and its values past the jobs each
    come with the first job's others (``attention=a,b,c,d seed=1,...,16``: 16 compositions,
    not 64)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = overrides_of(arguments)
    if not multirun(arguments):
        return [overrides]
    parsed = OverridesParser.create().parse_overrides(overrides)
    choices: list[list[str]] = []
    for text, override in zip(overrides, parsed, strict=True):
        if override.is_sweep_override():  # no more values than are checked: a range's may
            key = text.split("=", 1)[0]  # be 10**8 (a search's, whose jobs are not counted)
            values = itertools.islice(override.sweep_string_iterator(), MAX_SWEEP_JOBS)
            choices.append([f"{key}={value}" for value in values])
        else:
            choices.append([text])
    alone = {at for at, text in enumerate(overrides) if key_of(text) in ALONE}
    combined = [options[:1] if at in alone else options for at, options in enumerate(choices)]
    if math.prod(len(options) for options in combined) <= MAX_COMPOSITIONS:
        jobs = [list(job) for job in itertools.product(*combined)]
    else:
        longest = max(len(options) for options in combined)
        jobs = [[options[at % len(options)] for options in combined] for at in range(longest)]
    for at in sorted(alone):  # the i-th job takes the i-th value: each within the first checked
        options = choices[at]
        for index, job in enumerate(jobs):
            job[at] = options[index % len(options)]
        first = jobs[0]
        jobs += [[*first[:at], option, *first[at + 1 :]] for option in options[len(jobs) :]]
    return jobs


def check_composition(
    config_name: str,
    arguments: Sequence[str],
    validate: Validator | None = None,
    config_dir: Path = CONFIG_DIR,
    extra_dirs: Sequence[Path] = (),
) -> None:
    """Compose ``configs/<config_name>.yaml`` with the command line as the app will, turning a
    rejected value into one :class:`ConfigError` line, run ``validate`` on the result, then
    refuse an addition (``+key=value``) of a key nothing reads (:func:`check_additions`). An
    override that sets a key inside an interpolation (``model.attention.landmarks=3``) is
    refused first, naming the key to set (:func:`vitattn.cli.interpolated.crossing`), and an
    addition nothing reads before the app's refusal of what it did to the config."""
    from hydra.errors import HydraException

    try:
        jobs = single_runs(arguments)
    except HydraException:
        return  # a syntax error: check_syntax reports it in one line

    def composed(overrides: list[str]) -> DictConfig:
        return composed_run(config_name, overrides, extra_dirs, config_dir)

    looked_up: dict[tuple[str, ...], DictConfig] = {}

    def composed_once(overrides: list[str]) -> DictConfig:
        """:func:`composed`, once for each list: the checks of a sweep's jobs compose the same
        config without their swept values (read, never changed)."""
        if tuple(overrides) not in looked_up:
            looked_up[tuple(overrides)] = composed(overrides)
        return looked_up[tuple(overrides)]

    def check_job(overrides: list[str], typed: Sequence[str], first: bool) -> None:
        """The checks of one job's ``overrides`` (``typed``: as the command line gives them)."""
        try:
            cfg = composed(overrides)
        except AssertionError as error:  # Hydra's, adding a key under a null (+attentions.x=1)
            added = [
                cut_apart(one_line(typed[at]), MAX_SHOWN)
                for at, text in enumerate(overrides)
                if text[:1] == "+"
            ]
            raise ConfigError(
                f"{', '.join(added[:8]) or 'the overrides'} cannot be added "
                f"({composition_message(error)}): no key can be added under a setting that is null"
            ) from error
        except composition_refusals() as error:
            line = crossing(overrides, composed_once, typed=typed)  # key=value through one
            line = line or deletion_refusal(error, overrides, composed_once, typed)
            as_added = added_instead(error, overrides)
            if line is None and as_added is not None:  # the addition's checks name the key
                check_job(as_added, typed, first=False)
            raise ConfigError(line or composition_message(error)) from error
        line = crossing(overrides, composed_once, additions_only=True, typed=typed)
        # the app's own checks would name what replaced the interpolation, or the node
        line = line or unresolved(cfg, overrides, typed)
        if line is not None:
            raise ConfigError(line)
        if multirun(arguments):  # as Hydra sets it for the app: a sweep's checks read it
            cfg.hydra.mode = "MULTIRUN"
        check_task_name(cfg)
        # an unread key says more than the app's refusal, and is known before the app's checks
        # import what the config's targets need (Lightning, seconds on a small machine)
        check_additions(cfg, overrides, composed_once, typed)
        if validate is not None:
            validate(for_another_machine(cfg) if jobs_run_elsewhere(cfg) else cfg)
        if first:
            check_search(cfg)
            if multirun(arguments):
                check_launcher(cfg)
            else:
                with contextlib.suppress(Exception):  # a folder it cannot name: none recorded
                    remember_missing_parents(Path(str(cfg.hydra.run.dir)))

    given = overrides_of(arguments)  # as the command line gives them, one for each job's
    for index, overrides in enumerate(itertools.islice(jobs, MAX_COMPOSITIONS)):
        typed = given if len(given) == len(overrides) else overrides
        check_job(overrides, typed, first=index == 0)


def composed_run(
    config_name: str,
    overrides: Sequence[str],
    extra_dirs: Sequence[Path] = (),
    config_dir: Path = CONFIG_DIR,
) -> DictConfig:
    """``configs/<config_name>.yaml`` composed with one run's ``overrides`` as the app composes
    it, Hydra's own settings included."""
    from hydra import compose

    with hydra_configs(extra_dirs, config_dir):
        return compose(config_name, overrides=list(overrides), return_hydra_config=True)


def composes(config_name: str, overrides: Sequence[str], config_dir: Path = CONFIG_DIR) -> bool:
    """Whether Hydra composes ``configs/<config_name>.yaml`` with one run's ``overrides`` at all
    (:func:`composed_run`), the first of :func:`check_composition`'s checks, without the
    compositions that word its refusal: for a caller that needs to know only that they are
    refused (the check's overrides with its second and later attentions, once the first was
    refused in a line)."""
    try:
        composed_run(config_name, overrides, config_dir=config_dir)
    except composition_refusals():
        return False  # what check_composition's check_job refuses in a line
    return True


def composition_refusals() -> tuple[type[BaseException], ...]:
    """What Hydra raises for a composition it refuses: its own and OmegaConf's errors, a
    ``ValueError`` (its defaults list refusing ``~group=[1]``) and an ``AssertionError`` (a key
    added under a setting that is null: ``+attentions.x=1``)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return (HydraException, OmegaConfBaseException, ValueError, AssertionError)


def added_instead(error: BaseException, overrides: Sequence[str]) -> list[str] | None:
    """``overrides`` with the one Hydra refused for setting a key the config does not have
    (``seeed=3``: "Could not override 'seeed'. To append to your config use +seeed=3") made the
    addition Hydra suggests, whose checks (:func:`check_additions`, the app's own of a target's
    settings) then name the key and what is valid; ``None`` where ``error`` is another refusal.
    """
    from hydra.errors import ConfigCompositionException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    if not isinstance(error, ConfigCompositionException):
        return None
    if not isinstance(error.__cause__, ConfigAttributeError | ConfigKeyError):
        return None
    for at, text in enumerate(overrides):
        override = parsed(text)
        plain = not (override.is_add() or override.is_force_add() or override.is_delete())
        if plain and str(error).startswith(f"Could not override '{override.key_or_group}'."):
            return [*overrides[:at], f"+{text}", *overrides[at + 1 :]]
    return None


def composition_message(error: BaseException) -> str:
    """Hydra's and OmegaConf's multi-line account of a rejected override, as one line."""
    lines: list[str] = []
    seen: BaseException | None = error
    while seen is not None:
        for line in str(seen).splitlines():
            line = line.strip().rstrip(".")
            noise = line.startswith(("full_key:", "object_type=", "reference_type="))
            if line and not noise and line not in lines:
                lines.append(line)
        seen = seen.__cause__
    text = "; ".join(lines)
    prefix = "Error merging override "
    if text.startswith(prefix):  # "<override>: <why>"
        override, _, why = text.removeprefix(prefix).partition("; ")
        return f"{override}: {why}" if why else override
    return text
