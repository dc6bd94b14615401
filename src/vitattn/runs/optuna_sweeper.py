"""vitattn's Optuna search: a Hydra sweeper on Optuna >= 4's ask-and-tell interface.

Hydra's launcher runs the trials (``hydra/launcher=joblib|slurm`` work as for any sweep); this
module asks Optuna for each trial's values (:mod:`vitattn.runs.optuna_space` turns
``hydra.sweeper.params`` into Optuna's distributions), launches its job and tells Optuna what
the job returned: the value of each metric ``optimized_metric`` names (one, or a list for a
multi-objective search), ``PRUNED`` for a job that Optuna's pruner stopped
(:class:`vitattn.training.callbacks.OptunaPruning`, which reports each validation's value to
the trial, pruner or not: its learning curve), ``FAIL`` for one that failed.

The same command run again into the same ``hydra.sweep.dir`` continues the stored study
(``sqlite:///<sweep>/optuna.db`` unless ``hydra.sweeper.storage`` says otherwise):

* ``n_trials`` counts the study's finished trials (complete or pruned): a re-run runs the rest;
  a grid search runs the points of its failed trials first (:func:`retry_failed_grid_points`);
* each job is numbered by its trial (its directory ``<number>_<values>``), so no job directory
  is written again, and two searches on one shared storage never name two trials alike;
* a sampler with a seed is seeded again from that seed and the number of trials stored (Optuna
  does not store its random state: built afresh from its seed, it would draw the first trials'
  points again), but a grid's, whose seed orders the grid its trials record places in;
* a trial left running by a killed process of this sweep directory is marked failed (the sweep
  directory's lock rules out a live one), and its directory is kept as it is; one a search of
  another directory started (its ``sweep_dir`` attribute), on a storage both share, or one
  that records no directory in a storage outside the sweep directory, is left running: another
  process may still tell its end;
* a trial the storage holds for later (``WAITING``, e.g. ``study.enqueue_trial``) runs only if
  its values belong to the search space; otherwise it is refused in one line and marked failed;
* a storage file that is not an Optuna study, or is one larger than a search reads, whose trials
  Optuna would not write, or that stores a parameter as another kind than the space now asks for,
  is one line naming it, and is left as it is (:mod:`vitattn.runs.optuna_study`).

The study is Optuna's own: ``optuna.load_study(study_name=..., storage=...)`` and
``optuna-dashboard`` read it. The best trial, or a multi-objective search's Pareto trials
(``study.best_trials``), go to ``optimization_results.yaml`` in the sweep directory, written
through :mod:`vitattn.runs.files` (never through a link).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitattn.errors import ConfigError, FailedJob, VitattnError, first_line, refusing
from vitattn.runs.files import one_line, write_text
from vitattn.runs.layout import sweep_command_overrides
from vitattn.runs.optuna_space import (
    SAMPLERS,
    SPACE_SETTING,
    grid_of,
    outside_space,
    parse_space,
)
from vitattn.runs.optuna_study import (
    MAX_SHOWN,
    STUDY_BOUNDS,
    check_storage_file,
    check_storage_text,
    check_stored_trials,
    storage_file,
    storage_named,
)
from vitattn.utils import checks, metric_names
from vitattn.utils.checks import is_number

log = logging.getLogger(__name__)

SWEEPER_TARGET = "hydra_plugins.vitattn_optuna.optuna_search.OptunaSearch"
"""``hydra.sweeper._target_`` of an Optuna search (``configs/hparams_search/``)."""
TRIAL_ENV = "VITATTN_OPTUNA_TRIAL"
"""The environment variable (``hydra.job.env_set``) that tells a job its trial's number."""
RESULTS_FILE = "optimization_results.yaml"
SWEEP_ATTR = "sweep_dir"
"""The trial user attribute naming the sweep directory (absolute) whose search started it: a
trial left running is settled only by a search of that directory, whose lock rules out a live
process there; one of another directory on a shared storage may be running."""
DIRECTIONS = ("maximize", "minimize")
BETTER = {"maximize": "higher (an accuracy: val/acc)", "minimize": "lower (a loss: val/loss)"}
"""What a metric of each direction is, as a refusal says it."""


@dataclass(frozen=True)
class SearchSettings:
    """``hydra.sweeper``'s settings (``OptunaSearchConf``)."""

    sampler: Any
    direction: Any
    directions: Any
    storage: str | None
    study_name: str | None
    n_trials: int
    n_jobs: int
    params: Mapping[str, str] | None
    pruner: Any = None


def directions_of(settings: SearchSettings) -> list[str]:
    """The study's directions: ``hydra.sweeper.directions`` (a list), else ``direction`` (one,
    or a list as Hydra's Optuna sweeper took it)."""
    given = settings.directions if settings.directions is not None else settings.direction
    listed = [given] if isinstance(given, str) else list(given or [])
    key = "directions" if settings.directions is not None else "direction"
    if not listed or any(str(d) not in DIRECTIONS for d in listed):
        raise ConfigError(
            f"hydra.sweeper.{key}={given} is not valid; choose maximize or minimize (a list of "
            "them for several objectives)"
        )
    return [str(d) for d in listed]


def objectives_of(config: Any, count: int) -> list[str]:
    """The metrics the search optimises: ``optimized_metric``, one per direction."""
    from omegaconf import OmegaConf

    given = OmegaConf.select(config, "optimized_metric", default=None)
    names = [given] if isinstance(given, str) else list(given or [])
    if len(names) != count or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(
            f"optimized_metric={given} is not valid; name {count} metric(s) of metrics.json "
            f"(e.g. val/acc_best), one per direction of hydra.sweeper.direction(s)"
        )
    return names


def make_sampler(sampler: Any, distributions: Mapping[str, Any]) -> tuple[Any, int | None]:
    """The sampler of ``hydra.sweeper.sampler`` (Hydra builds it with the sweeper), and the grid's
    size for a ``GridSampler`` (a partial, given the space's values here)."""
    import functools

    import optuna

    if isinstance(sampler, functools.partial) and sampler.func is optuna.samplers.GridSampler:
        values = grid_of(distributions)
        return sampler(search_space=values), math.prod(map(len, values.values()))
    if sampler is not None and not isinstance(sampler, optuna.samplers.BaseSampler):
        raise ConfigError(
            f"hydra.sweeper.sampler is {type(sampler).__name__}; choose a sampler of "
            "optuna.samplers (hydra/sweeper/sampler=tpe|random|grid|cmaes|nsgaii|gp)"
        )
    return sampler, None


def storage_url(given: Any) -> str | None:
    """``hydra.sweeper.storage`` as the search takes it: a storage URL, or ``None`` (in memory);
    anything else (a ``_target_`` such as ``optuna.storages.JournalStorage``, a number) is
    refused in one line: the search, its checks of a sqlite file and its jobs, each reaching
    the study from its own process, take a URL."""
    from omegaconf import OmegaConf

    if given is None or isinstance(given, str):
        check_storage_text(given)
        return given
    shown = OmegaConf.to_container(given, resolve=False) if OmegaConf.is_config(given) else given
    raise ConfigError(
        f"hydra.sweeper.storage={one_line(shown)[:MAX_SHOWN]} is not valid; choose a storage URL "
        "(e.g. sqlite:///${hydra.sweep.dir}/optuna.db, the presets' own) or null (in memory)"
    )


def continued_sampler(
    config: Any, sampler: Any, distributions: Mapping[str, Any], stored: int
) -> Any:
    """The sampler of a search continued into a study of ``stored`` trials: Optuna stores the
    trials but not the sampler's random state, so the sampler ``hydra.sweeper.sampler`` builds
    from its ``seed`` would draw the points of the first trials again. With a seed and trials
    stored, it is built again from a seed derived from both (the same continuation draws the
    same points); a fresh search, or one without a seed, keeps ``sampler`` as it is, and so
    does a grid search: ``GridSampler``'s seed shuffles the grid, whose points the study's
    trials record by their index in it (``grid_id``), and it draws only points no trial
    visited."""
    import optuna
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    node = OmegaConf.select(config, "hydra.sweeper.sampler", default=None)
    seed = node.get("seed") if OmegaConf.is_dict(node) else None
    if stored == 0 or seed is None or isinstance(sampler, optuna.samplers.GridSampler):
        return sampler
    derived = derived_seed(seed, stored)
    log.info("sampler seeded with %d: seed %s and %d trials stored", derived, seed, stored)
    return make_sampler(instantiate(node, seed=derived), distributions)[0]


def derived_seed(seed: Any, stored: int) -> int:
    """A sampler's seed (0 to 2**32 - 1) from its configured ``seed`` (an integer, or the list of
    integers NumPy also takes) and the number of trials the study holds."""
    import numpy as np

    words = list(seed) if isinstance(seed, Sequence) and not isinstance(seed, str) else [seed]
    entropy = [*(int(word) for word in words), stored]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def check_pruner(settings: SearchSettings, directions: Sequence[str], config: Any) -> Any:
    """The pruner of ``hydra.sweeper.pruner`` (``None``: no pruning), once the search can use
    it: a storage, one objective, and the callback that reports to it in the jobs' config."""
    import optuna
    from omegaconf import OmegaConf

    pruner = settings.pruner
    if pruner is None:
        return None
    if not isinstance(pruner, optuna.pruners.BasePruner):
        raise ConfigError(
            f"hydra.sweeper.pruner is {type(pruner).__name__}; choose a pruner of optuna.pruners "
            "(e.g. {_target_: optuna.pruners.MedianPruner})"
        )
    if not settings.storage:
        raise ConfigError(
            "hydra.sweeper.pruner needs hydra.sweeper.storage: each job reports to the study "
            "from its own process (e.g. sqlite:///${hydra.sweep.dir}/optuna.db)"
        )
    if len(directions) > 1:
        raise ConfigError(
            "hydra.sweeper.pruner prunes searches of one objective; set hydra.sweeper.pruner=null "
            "for several directions"
        )
    callbacks = OmegaConf.select(config, "callbacks", default=None) or {}
    reporting = {
        str(key): node
        for key, node in callbacks.items()
        if hasattr(node, "get") and str(node.get("_target_", "")).endswith(".OptunaPruning")
    }
    if not reporting:
        raise ConfigError(
            "hydra.sweeper.pruner needs the callback that reports val/acc to each trial: add "
            "callbacks.optuna_pruning with _target_: vitattn.training.callbacks.OptunaPruning "
            "(as configs/hparams_search/optuna.yaml does)"
        )
    for key, node in reporting.items():
        check_pruning_monitor(f"callbacks.{key}.monitor", node, directions[0])
    return pruner


def check_pruning_monitor(setting: str, node: Any, direction: str) -> None:
    """Refuse in one line an ``OptunaPruning`` callback (its config ``node``) whose ``monitor``
    is better the other way than the study's ``direction`` (``val/acc`` in a study that
    minimizes ``val/loss``): the pruner, judging its reports in the study's direction, would
    prune the best trials and keep the worst."""
    monitor = str(node.get("monitor", metric_names.PRUNING_MONITORED))
    better = metric_names.better_direction(monitor)
    if better is None or better == direction:
        return
    raise checks.invalid(
        setting,
        monitor,
        f"a metric that is better {BETTER[direction]} for hydra.sweeper.direction={direction}: "
        "the pruner judges each report in the study's direction",
    )


def open_study(
    settings: SearchSettings, directions: list[str], sampler: Any, pruner: Any
) -> tuple[Any, Any]:
    """The study ``hydra.sweeper.study_name`` in ``hydra.sweeper.storage``, made if new, with the
    directions the search asks for, and its storage; a storage that cannot be read is one
    line."""
    import optuna

    url = settings.storage or None
    check_storage_file(url)
    try:
        storage = optuna.storages.get_storage(url)
        study = optuna.create_study(
            storage=storage,
            study_name=settings.study_name,
            sampler=sampler,
            pruner=pruner,
            directions=directions,
            load_if_exists=True,
        )
    except Exception as error:  # whatever the file makes Optuna, SQLAlchemy or alembic raise
        raise ConfigError(
            f"hydra.sweeper.storage={url}: {one_line(first_line(error))[:MAX_SHOWN]}"
        ) from None
    stored = [d.name.lower() for d in study.directions]
    if stored != directions:
        raise ConfigError(
            f"hydra.sweeper.direction(s)={directions}, but study "
            f"{one_line(study.study_name)[:MAX_SHOWN]} in {url} was made with "
            f"{one_line(stored)[:MAX_SHOWN]}; choose another hydra.sweeper.study_name"
        )
    return study, storage


@contextlib.contextmanager
def going_on_with(url: str | None) -> Iterator[None]:
    """Whatever Optuna raises as the search asks for a trial, tells one's end or reads the
    study (a file changed under the search since it was checked: swapped for another, a
    constraint Optuna never makes), as one line naming the storage."""
    try:
        yield
    except (VitattnError, OSError):  # vitattn's own line; a file of the sweep it could not write
        raise
    except Exception as error:
        raise ConfigError(
            f"hydra.sweeper.storage={url}: Optuna could not go on with the study "
            f"({type(error).__name__}: {one_line(first_line(error))[:MAX_SHOWN]}); the study "
            "keeps what the search told it, and the jobs run so far their directories: check "
            "the file (changed outside Optuna?) and run the search again to go on"
        ) from None


def unnamed_metrics(study: Any, objectives: Sequence[str], url: str | None) -> bool:
    """Whether the study still has to be told its values' names (``optimized_metric``, by
    Optuna's ``set_metric_names``, which optuna-dashboard and ``trials_dataframe`` show): a new
    study, or one of an earlier vitattn. A study that names other metrics is refused in one
    line: its trials hold those metrics' values, which a search for another would mix with its
    own."""
    try:
        stored = study.metric_names
    except Exception as error:  # the study's attributes: JSON Optuna cannot parse, or too deep
        raise ConfigError(
            f"study {one_line(study.study_name)[:MAX_SHOWN]} in {storage_named(url)} holds study "
            f"attributes Optuna cannot read ({type(error).__name__}: "
            f"{one_line(first_line(error))[:MAX_SHOWN]}): it is "
            "kept as it is; choose another hydra.sweeper.study_name or hydra.sweep.dir"
        ) from None
    if stored is None or stored == list(objectives):
        return stored is None
    given = objectives[0] if len(objectives) == 1 else list(objectives)
    what = "names its values " + (
        one_line(stored)[:MAX_SHOWN]
        if isinstance(stored, list) and all(isinstance(name, str) for name in stored)
        else "otherwise than Optuna writes them"
    )
    raise ConfigError(
        f"optimized_metric={given}, but study {one_line(study.study_name)[:MAX_SHOWN]} in {url} "
        f"{what} (its trials hold those values, which a search for another metric would mix "
        "with its own); choose another hydra.sweeper.study_name or hydra.sweep.dir"
    )


def name_metrics(study: Any, objectives: Sequence[str]) -> None:
    """Tell ``study`` its values' names (see :func:`unnamed_metrics`)."""
    import warnings

    from optuna.exceptions import ExperimentalWarning

    with warnings.catch_warnings():  # experimental since Optuna 3.2, unchanged through 5.0
        warnings.simplefilter("ignore", ExperimentalWarning)
        study.set_metric_names(list(objectives))


def settle_stored_trials(
    study: Any,
    storage: Any,
    distributions: Mapping[str, Any],
    trials: Sequence[Any],
    sweep_dir: Path,
    own_storage: bool = False,
) -> set[int]:
    """Mark failed the trials (of ``trials``, the study's as read) a killed process of
    ``sweep_dir`` (absolute) left running (:func:`settle_running`; ``own_storage``: the study
    is a file inside it), and the waiting trials whose values do not belong to the space (each
    refused in one line: never launched); a trial running for another directory is left as it
    is. The numbers of the trials marked failed as cut off."""
    from optuna.trial import TrialState

    study_id = storage.get_study_id_from_name(study.study_name)
    cut_off = set()
    for trial in (t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)):
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
        if trial.state == TrialState.RUNNING:
            if settle_running(storage, trial, trial_id, sweep_dir, own_storage):
                cut_off.add(trial.number)
            continue
        fixed = trial.system_attrs.get("fixed_params", {})
        if isinstance(fixed, Mapping):
            why = outside_space({**fixed, **trial.params}, distributions)
        else:
            why = "its fixed_params are not a mapping"
        if why is not None:
            storage.set_trial_state_values(trial_id, TrialState.FAIL)
            log.warning(
                "trial %d of study %s is refused, marked failed and not launched: %s",
                trial.number,
                study.study_name,
                one_line(why)[:MAX_SHOWN],
            )
    return cut_off


def settle_running(
    storage: Any, trial: Any, trial_id: int, sweep_dir: Path, own_storage: bool
) -> bool:
    """Mark failed a running ``trial`` this sweep directory started (cut off: the directory's
    lock rules out a live process in it), or, in a storage of this directory's own
    (``own_storage``: its sqlite file inside it), one that records no directory (a study of a
    vitattn before 2026-11-30) or a directory that is no more (this one, moved or copied from
    there: its trial was left running for ever, and TPE's constant liar weighed it at every
    ask); leave any other running (a process on a shared storage may still tell its end);
    whether it was marked failed."""
    from optuna.trial import TrialState

    started_in = trial.user_attrs.get(SWEEP_ATTR)
    gone = isinstance(started_in, str) and not os.path.lexists(started_in)
    if started_in == str(sweep_dir) or (own_storage and (started_in is None or gone)):
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
        log.info("trial %d was cut off: marked failed, its directory kept", trial.number)
        return True
    where = one_line(started_in)[:MAX_SHOWN] if isinstance(started_in, str) else "no directory"
    log.info("trial %d is running for another search (%s): left as it is", trial.number, where)
    return False


def retry_failed_grid_points(
    study: Any,
    trials: Sequence[Any],
    cut_off: Collection[int],
    distributions: Mapping[str, Any],
    to_go: int,
) -> list[int]:
    """Hold for the next asks (``WAITING``, as Optuna's ``RetryFailedTrialCallback`` holds a
    failed trial) the grid point of each failed trial of ``trials`` (the study's as read; those
    of ``cut_off`` were running, and are failed since) that no other trial holds (complete,
    pruned, running or waiting), each point once and at most ``to_go``: Optuna's
    ``GridSampler`` counts a failed trial's point as visited, so a grid search continued after
    a failed trial ran a point again that had its result, and never the failed one. The
    retried trial keeps the failed one's ``grid_id`` (the sampler's own record of the point).
    The numbers of the failed trials retried."""
    from optuna.trial import TrialState, create_trial

    grid = grid_of(distributions)
    failed = [t for t in trials if t.state == TrialState.FAIL or t.number in cut_off]
    held = {point_of(t) for t in trials if t.state != TrialState.FAIL and t.number not in cut_off}
    retried = []
    for trial in failed:
        if len(retried) == to_go or point_of(trial) in held or not of_grid(trial, grid):
            continue
        held.add(point_of(trial))
        attrs = {key: trial.system_attrs[key] for key in ("grid_id", "search_space")}
        attrs["failed_trial"] = trial.system_attrs.get("failed_trial", trial.number)
        study.add_trial(
            create_trial(
                state=TrialState.WAITING,
                params=dict(trial.params),
                distributions={name: distributions[name] for name in trial.params},
                system_attrs=attrs,
            )
        )
        retried.append(trial.number)
    if retried:
        log.info("the grid points of failed trials %s run again first", retried)
    return retried


def point_of(trial: Any) -> tuple[tuple[str, str], ...]:
    """The values ``trial`` holds (a waiting trial's ``fixed_params`` too), as comparable text:
    a study's file may hold values of any kind."""
    fixed = trial.system_attrs.get("fixed_params")
    values = {**(fixed if isinstance(fixed, Mapping) else {}), **trial.params}
    return tuple(sorted((str(name), repr(value)) for name, value in values.items()))


def of_grid(trial: Any, grid: Mapping[str, Sequence[Any]]) -> bool:
    """Whether ``trial`` holds a point ``GridSampler`` drew from ``grid`` (its ``grid_id`` and
    ``search_space`` system attributes, that space ``grid``), with a value for each setting."""
    attrs = trial.system_attrs
    return (
        "grid_id" in attrs
        and attrs.get("search_space") == grid
        and set(trial.params) == set(grid)
        and all(value in grid[name] for name, value in trial.params.items())
    )


def storage_inside(url: str | None, sweep_dir: Path) -> bool:
    """Whether the storage ``url`` is a sqlite file inside ``sweep_dir`` (absolute)."""
    path = storage_file(url)
    return path is not None and Path(os.path.abspath(path)).is_relative_to(sweep_dir)


def trial_overrides(trial: Any, distributions: Mapping[str, Any], fixed: Mapping[str, str]):
    """The job's overrides: the values Optuna suggests (a waiting trial's own, checked), the
    fixed ones, and its trial's number in the job's environment."""
    chosen = {name: trial._suggest(name, d) for name, d in distributions.items()}
    values = [f"{name}={override_value(value)}" for name, value in chosen.items()]
    fixed_overrides = [f"{name}={value}" for name, value in fixed.items()]
    return [*values, *fixed_overrides, f"++hydra.job.env_set.{TRIAL_ENV}={trial.number}"]


def override_value(value: Any) -> str:
    """``value`` as Hydra's override grammar reads it back: floats in full, ``None`` as null."""
    if value is None:
        return "null"
    return repr(value) if isinstance(value, float) else str(value)


def outcome(job: Any, objectives: Sequence[str]) -> tuple[Any, list[float] | None, str | None]:
    """``(state, values, why)`` to tell Optuna of a job's return: complete with the objectives'
    values, pruned, or failed (with the reason)."""
    from hydra.core.utils import JobStatus
    from optuna.trial import TrialState

    if job.status != JobStatus.COMPLETED:
        error = job._return_value
        if isinstance(error, FailedJob):  # its line: what it raised, or the refusal
            return TrialState.FAIL, None, one_line(error.message)
        return TrialState.FAIL, None, f"{type(error).__name__}: {one_line(error)}"
    metrics = job.return_value if isinstance(job.return_value, Mapping) else {}
    if metrics.get("status") == "pruned":
        return TrialState.PRUNED, None, None
    values = []
    for name in objectives:
        try:
            value = float(metrics[name])
        except (KeyError, TypeError, ValueError):
            return TrialState.FAIL, None, f"its run recorded no {name}"
        if not math.isfinite(value):
            return TrialState.FAIL, None, f"its run recorded {name}={value}"
        values.append(value)
    return TrialState.COMPLETE, values, None


def missing_objective(job: Any, objectives: Sequence[str]) -> str | None:
    """The first of ``objectives`` that a job which ran to its end (not pruned) left out of its
    metrics, or recorded as null, and that vitattn writes in no run (a name of the user's own
    callbacks, mistyped): no trial of the search will record it. One that vitattn writes in
    some runs only (``val/fidelity/layer_1`` of a deeper network) fails this trial alone."""
    from hydra.core.utils import JobStatus

    if job.status != JobStatus.COMPLETED:
        return None
    metrics = job.return_value if isinstance(job.return_value, Mapping) else {}
    if metrics.get("status") == "pruned":
        return None
    missing = (name for name in objectives if metrics.get(name) is None)
    return next((name for name in missing if not metric_names.written_by_vitattn(name)), None)


def is_scalar(value: Any) -> bool:
    """Whether ``value`` is a tensor of one number (a logged figure, as the job returns it)."""
    return getattr(value, "ndim", None) == 0 and not isinstance(value, str | bytes)


def no_objective(number: int, missing: str, metrics: Mapping[str, Any]) -> str:
    """Why a search stops at trial ``number``, whose run finished without the objective
    ``missing``: the numbers its metrics hold instead."""
    numbers = [one_line(str(k)) for k, v in metrics.items() if is_number(v) or is_scalar(v)]
    shown = ", ".join(numbers)[:MAX_SHOWN]
    return (
        f"its run recorded no {missing}, which optimized_metric names, and no trial would: the "
        f"search stops here; choose among its numbers: {shown}"
    )


def tell(
    study: Any, trial: Any, job: Any, objectives: Sequence[str], sweep_dir: Path
) -> str | None:
    """Tell ``study`` the outcome of ``trial``'s ``job``; why the trial failed, if it did."""
    from omegaconf import OmegaConf
    from optuna.trial import TrialState

    state, values, why = outcome(job, objectives)
    output_dir = OmegaConf.select(job.hydra_cfg or {}, "hydra.runtime.output_dir")
    if output_dir:  # the job's run directory, for the dashboard and the summary
        trial.set_user_attr("run", os.path.relpath(str(output_dir), sweep_dir))
    try:
        study.tell(trial, values=values, state=state)
    except RuntimeError as error:  # GridSampler stops the study once its grid is done
        if "Study.stop" not in str(error):
            raise
    if why:
        log.warning("trial %d failed: %s", trial.number, why)
    return (why or "failed") if state == TrialState.FAIL else None


def finished(trials: Sequence[Any]) -> int:
    """How many of ``trials`` finished (complete or pruned): what ``n_trials`` counts."""
    from optuna.trial import TrialState

    return sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)


@dataclass(frozen=True)
class Plan:
    """What a search asks of Optuna, checked before its first trial (:func:`plan_search`)."""

    distributions: dict[str, Any]
    fixed: dict[str, str]
    directions: list[str]
    objectives: list[str]
    sampler: Any
    grid_size: int | None
    pruner: Any


def plan_search(settings: SearchSettings, config: Any, arguments: Sequence[str]) -> Plan:
    """The search's space (``hydra.sweeper.params`` and the command line's ``arguments``), its
    trial counts, directions, objectives, sampler and pruner, each refused in one line naming
    its setting; nothing is opened or written."""
    params = [f"{key}={value}" for key, value in (settings.params or {}).items()]
    storage_url(settings.storage)
    check_study_name(settings)
    distributions, fixed = parse_space([*params, *arguments])
    if not distributions:
        raise ConfigError(f"{SPACE_SETTING} is empty: give the search a space to search")
    checks.integer("hydra.sweeper.n_trials", settings.n_trials, 1, STUDY_BOUNDS.trials)
    checks.integer("hydra.sweeper.n_jobs", settings.n_jobs, 1)
    directions = directions_of(settings)
    objectives = objectives_of(config, len(directions))
    sampler, grid_size = make_sampler(settings.sampler, distributions)
    check_sampler_size(sampler, settings.n_trials)
    pruner = check_pruner(settings, directions, config)
    return Plan(distributions, fixed, directions, objectives, sampler, grid_size, pruner)


def check_study_name(settings: SearchSettings) -> None:
    """Refuse in one line a search with a storage and no study name: Optuna names each new
    study ``no-name-<uuid>``, so the same command run again would make a second study rather
    than continue the first, and each job, loading the study by no name from a storage of two,
    would fail."""
    name = settings.study_name
    if settings.storage and not (isinstance(name, str) and name):
        raise checks.invalid(
            "hydra.sweeper.study_name",
            name,
            "a name for the study in hydra.sweeper.storage (the presets': vitattn, "
            "vitattn_pareto), or hydra.sweeper.storage=null (in memory, nothing to continue)",
        )


GP_MAX_TRIALS = 1_000
"""The most trials a search with Optuna's ``GPSampler`` holds: the Gaussian process is fitted to
every trial at each ask, in time cubic and memory square in their number (docs/runs.md: 2,000
trials took 33 s and 1.5 GB for one ask on the 2-core machine, 4,000 took 233 s and 2.9 GB; the
study's own bound, 10,000, would take about an hour and 18 GB per ask by the same growth)."""


def check_sampler_size(sampler: Any, n_trials: int) -> None:
    """Refuse in one line a search of ``n_trials`` its sampler cannot take: a Gaussian process
    past :data:`GP_MAX_TRIALS`. The study holds fewer finished trials than ``n_trials`` at each
    ask (a stored study of more finished ones asks for none); the running trials a continued
    study holds are bounded by :func:`check_fitted_trials`."""
    import optuna

    if isinstance(sampler, optuna.samplers.GPSampler) and n_trials > GP_MAX_TRIALS:
        raise checks.invalid(
            "hydra.sweeper.n_trials",
            n_trials,
            f"at most {GP_MAX_TRIALS} with hydra/sweeper/sampler=gp (its Gaussian process is "
            "fitted to every trial at each ask, in time cubic in their number), or another "
            "sampler (hydra/sweeper/sampler=tpe)",
        )


def check_fitted_trials(
    study: Any, storage: str | None, sampler: Any, trials: Sequence[Any], n_trials: int
) -> None:
    """Refuse in one line, before anything of the study is settled, a study whose trials a
    Gaussian process would be fitted to at the asks still to come, with those asks' trials,
    past :data:`GP_MAX_TRIALS`: Optuna's ``GPSampler`` fits the complete trials and the running
    ones (a running trial of another search is left running: a study could hold thousands)."""
    import optuna
    from optuna.trial import TrialState

    to_go = max(0, n_trials - finished(trials))
    if not isinstance(sampler, optuna.samplers.GPSampler) or to_go == 0:
        return
    fitted = sum(t.state in (TrialState.COMPLETE, TrialState.RUNNING) for t in trials)
    if fitted + to_go > GP_MAX_TRIALS:
        name = one_line(study.study_name)[:MAX_SHOWN]
        raise ConfigError(
            f"study {name} in {storage_named(storage)} holds {fitted} complete or running "
            f"trials, which hydra/sweeper/sampler=gp fits with the {to_go} to go, more than the "
            f"{GP_MAX_TRIALS} it takes: it is kept as it is; choose another "
            "hydra.sweeper.study_name or hydra.sweep.dir, or another sampler"
        )


def check_sampler_choice(config: Any) -> None:
    """Refuse in one line a sampler chosen by its group on the command line
    (``hydra/sweeper/sampler=random``) that the search's config overrides with a sampler named
    by its ``_target_`` (a search config of one's own, or ``hydra.sweeper.sampler._target_=``
    given too): Hydra would run the named sampler without a word. The presets take the group's
    sampler."""
    from omegaconf import OmegaConf

    overrides = OmegaConf.select(config, "hydra.overrides.hydra", default=None) or []
    key = "hydra/sweeper/sampler"
    chosen = [
        o.split("=", 1)[1] for o in map(str, overrides) if o.lstrip("+").startswith(key + "=")
    ]
    if not chosen or chosen[-1] not in SAMPLERS:
        return
    target = OmegaConf.select(config, "hydra.sweeper.sampler._target_", default=None)
    if target != f"optuna.samplers.{SAMPLERS[chosen[-1]]}":
        raise ConfigError(
            f"{key}={chosen[-1]} is ignored: the search's config sets hydra.sweeper.sampler "
            f"to {one_line(target)[:MAX_SHOWN]}; choose the sampler one way: the group "
            f"({key}=<name>) or hydra.sweeper.sampler._target_=optuna.samplers.<Class>"
        )


SAMPLER_PACKAGES = {"optuna.samplers.CmaEsSampler": "cmaes"}
"""Samplers whose package Optuna imports only at their first ask, after a trial has trained,
and does not install itself: the sampler's ``_target_`` and the package."""


def check_sampler_package(config: Any) -> None:
    """Refuse in one line a sampler whose package is not installed (:data:`SAMPLER_PACKAGES`):
    the search trained its first trial, then ended in a line that blamed the study's file."""
    import importlib.util

    from omegaconf import OmegaConf

    target = OmegaConf.select(config, "hydra.sweeper.sampler._target_", default=None)
    package = SAMPLER_PACKAGES.get(str(target))
    if package is not None and importlib.util.find_spec(package) is None:
        raise ConfigError(
            f"hydra.sweeper.sampler is {target}, which needs the {package} package, not "
            f"installed here: pip install {package}, or choose another sampler "
            "(hydra/sweeper/sampler=tpe)"
        )


def check_sampler_settings(config: Any) -> None:
    """Refuse in one line a setting of ``hydra.sweeper.sampler`` that its Optuna class does not
    take (a preset's ``population_size``, NSGA-II's, under ``hydra/sweeper/sampler=tpe``),
    naming it and how to drop it: Hydra's build would fail in a ``TypeError`` about an
    unexpected keyword argument."""
    import inspect

    from omegaconf import OmegaConf

    node = OmegaConf.select(config, "hydra.sweeper.sampler", default=None)
    if not OmegaConf.is_dict(node):
        return
    target = str(node.get("_target_", ""))
    module, _, name = target.rpartition(".")
    if module != "optuna.samplers":
        return
    import optuna

    sampler = getattr(optuna.samplers, name, None)
    if sampler is None:
        return
    parameters = inspect.signature(sampler).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    for key in node:
        if not str(key).startswith("_") and key not in parameters:
            value = one_line(OmegaConf.select(node, str(key), default=None))[:MAX_SHOWN]
            raise ConfigError(
                f"hydra.sweeper.sampler.{key}={value} is not a setting of {name}; drop it with "
                f"~hydra.sweeper.sampler.{key}, or choose a sampler that takes it"
            )


def check_search(config: Any) -> None:
    """An Optuna search's settings (``hydra.sweeper`` of the composed ``config``, where it is
    one), checked as the search checks them (:func:`plan_search`), before Hydra starts it and
    makes its sweep directory: the sweeper built as Hydra builds it (its sampler, its pruner), a
    refusal in one line naming ``hydra.sweeper``."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    if OmegaConf.select(config, "hydra.sweeper._target_", default=None) != SWEEPER_TARGET:
        return
    check_sampler_choice(config)
    check_sampler_settings(config)
    check_sampler_package(config)
    # before Hydra builds it: a storage of a _target_ may make its file as it is built
    url = storage_url(OmegaConf.select(config, "hydra.sweeper.storage", default=None))
    # and before the console takes the sweep directory: a refused study left the lock it made
    check_storage_file(url)
    sweep_dir = OmegaConf.select(config, "hydra.sweep.dir", default=None)
    if sweep_dir:  # what each trial reads of the sweep: a search writes no multirun.yaml
        sweep_command_overrides(Path(str(sweep_dir)))
    with refusing("hydra.sweeper"):
        sweeper = instantiate(config.hydra.sweeper)
    arguments = OmegaConf.select(config, "hydra.overrides.task", default=None) or []
    plan_search(sweeper.settings, config, [str(argument) for argument in arguments])


@dataclass
class Search:
    """One invocation of a search: its settings, the sweep's config and Hydra's launcher."""

    settings: SearchSettings
    config: Any
    launcher: Any

    def run(self, arguments: Sequence[str]) -> list[tuple[Any, str]]:
        """Run the trials still missing; the failed trials' jobs, with why each failed (Hydra's
        basic sweeper, too, raises for failed jobs once all have run)."""
        plan = plan_search(self.settings, self.config, arguments)
        distributions, fixed = plan.distributions, plan.fixed
        directions, objectives = plan.directions, plan.objectives
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)  # where the sqlite file usually lives
        here = Path(os.path.abspath(sweep_dir))  # as the trials it starts record it
        study, storage = open_study(self.settings, directions, plan.sampler, plan.pruner)
        # the study's trials read once: a study of 10,000 takes seconds each time
        trials = check_stored_trials(study, self.settings.storage, distributions, directions)
        n_trials = min(self.settings.n_trials, plan.grid_size or self.settings.n_trials)
        check_fitted_trials(study, self.settings.storage, plan.sampler, trials, n_trials)
        unnamed = unnamed_metrics(study, objectives, self.settings.storage)
        own_storage = storage_inside(self.settings.storage, here)
        cut_off = settle_stored_trials(study, storage, distributions, trials, here, own_storage)
        study.sampler = continued_sampler(self.config, plan.sampler, distributions, len(trials))
        done = finished(trials)  # settling fails none that finished
        log.info(
            "study %s (%s): %d of %d trials finished, %s, each job numbered by its trial",
            study.study_name, self.settings.storage or "in memory", done, n_trials,
            " and ".join(f"{d} {o}" for d, o in zip(directions, objectives, strict=True)),
        )  # fmt: skip
        to_go, failures = max(0, n_trials - done), []
        url = self.settings.storage
        if plan.grid_size is not None:
            with going_on_with(url):
                retry_failed_grid_points(study, trials, cut_off, distributions, to_go)
        while to_go > 0:
            with going_on_with(url):
                trials = [
                    attributed(study.ask(), here)
                    for _ in range(min(to_go, max(1, self.settings.n_jobs)))
                ]
                overrides = [trial_overrides(t, distributions, fixed) for t in trials]
                if unnamed:  # with the first trial asked for: a study that took none is as it was
                    name_metrics(study, objectives)
                    unnamed = False
            jobs = launch_by_number(self.launcher, trials, overrides)
            to_go -= len(jobs)
            for trial, job in zip(trials, jobs, strict=True):
                with going_on_with(url):
                    why = tell(study, trial, job, objectives, sweep_dir)
                    missing = missing_objective(job, objectives)
                    if missing is not None:  # no trial to come would record it either
                        why, to_go = no_objective(trial.number, missing, job.return_value), 0
                    if why is not None:
                        failures.append((job, f"trial {trial.number} failed: {why}"))
        with going_on_with(url):
            write_results(study, sweep_dir / RESULTS_FILE, objectives, here)
        return failures


def attributed(trial: Any, sweep_dir: Path) -> Any:
    """``trial``, just asked for, recording ``sweep_dir`` (:data:`SWEEP_ATTR`): the search that
    settles it should its process be killed (:func:`settle_running`). Recorded as each ask
    returns, not once a batch's asks all have: a search killed between two asks left the
    trials asked before running for no search. A kill inside an ask, once Optuna has stored the
    trial and before it returns, still leaves one so (Optuna's ``ask`` takes no attribute)."""
    trial.set_user_attr(SWEEP_ATTR, str(sweep_dir))
    return trial


def launch_by_number(launcher: Any, trials: Sequence[Any], overrides: Sequence[Any]) -> list:
    """Launch the jobs of ``trials`` (their ``overrides``), each numbered by its trial (its
    ``hydra.job.num``, which starts its directory's name: ``3_attention.k=8,...``), and return
    them in the order of ``trials``. Hydra's launchers (basic, joblib, submitit) number a batch
    consecutively from ``initial_job_idx``; the trials asked for at once are consecutive unless
    a search of another sweep directory on the same storage asked for one between them, so the
    batch is launched in runs of consecutive numbers (one launch each, one after the other). A
    search numbered its jobs by its own count until 2026-12-01: on a shared storage, trial 3
    ran in ``1_...`` while trial 1 of the other search was ``1_...`` too (red team)."""
    runs: list[list[int]] = []
    for index, trial in enumerate(trials):
        if runs and trials[runs[-1][-1]].number + 1 == trial.number:
            runs[-1].append(index)
        else:
            runs.append([index])
    jobs: list = []
    for run in runs:
        batch = [overrides[index] for index in run]
        jobs.extend(launcher.launch(batch, initial_job_idx=trials[run[0]].number))
    return jobs


def trial_record(trial: Any, sweep_dir: Path | None = None) -> dict[str, Any]:
    """A complete trial as ``optimization_results.yaml`` lists it; its ``run`` (a user
    attribute the search sets, which the study file may hold as anything) only as text, and,
    for a trial another sweep directory's search ran on a shared storage (its ``sweep_dir``
    attribute is not ``sweep_dir``, this search's, absolute), that directory (``sweep_dir``):
    its ``run`` is a folder there, not here."""
    run, started_in = trial.user_attrs.get("run"), trial.user_attrs.get(SWEEP_ATTR)
    record = {
        "trial": trial.number,
        "run": run[:MAX_SHOWN] if isinstance(run, str) else None,
        "values": [float(v) for v in trial.values],
        "params": dict(trial.params),
    }
    if sweep_dir is not None and isinstance(started_in, str) and started_in != str(sweep_dir):
        record["sweep_dir"] = started_in[:MAX_SHOWN]
    return record


def write_results(
    study: Any, path: Path, objectives: Sequence[str], sweep_dir: Path | None = None
) -> None:
    """``optimization_results.yaml``: the best trial (one objective) or the Pareto trials
    (``study.best_trials``), every complete trial's values, and how many trials ended how; a
    trial another search than that of ``sweep_dir`` (absolute) ran names its sweep directory
    (:func:`trial_record`)."""
    import yaml
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    results: dict[str, Any] = {
        "name": "optuna",
        "study_name": study.study_name,
        "directions": [d.name.lower() for d in study.directions],
        "metrics": list(objectives),
        "states": {s.name: sum(t.state == s for t in trials) for s in TrialState},
    }
    if complete and len(study.directions) == 1:
        best = study.best_trial
        results.update(best_trial=best.number, best_params=dict(best.params))
        results["best_value"] = float(best.value)
        log.info("Best parameters: %s", one_line(best.params)[:MAX_SHOWN])  # from the study file
        log.info("Best value: %s (trial %d)", best.value, best.number)
    elif complete:
        results["solutions"] = [trial_record(t, sweep_dir) for t in study.best_trials]
        log.info("Pareto trials: %s", [t.number for t in study.best_trials])
    results["trials"] = [trial_record(t, sweep_dir) for t in complete]
    write_text(path, yaml.safe_dump(results, sort_keys=False))


def job_trial() -> Any:
    """The Optuna trial this job runs, for :class:`OptunaPruning` to report its learning curve
    to, and for the study's pruner (``hydra.sweeper.pruner``; none: a pruner that prunes
    nothing) to judge: the study of ``hydra.sweeper``, and the trial
    ``$VITATTN_OPTUNA_TRIAL`` numbers; ``None`` for a job of no search, of a search the job
    cannot reach (in memory), or of several objectives (Optuna takes reports for one)."""
    from hydra.core.hydra_config import HydraConfig

    number = os.environ.get(TRIAL_ENV, "")
    if not number.isdigit() or not HydraConfig.initialized():
        return None
    sweeper = HydraConfig.get().sweeper
    if not sweeper.get("storage"):
        return None
    import optuna
    from hydra.utils import instantiate

    check_storage_file(str(sweeper.storage))  # the study is read: bounded first
    storage = optuna.storages.get_storage(str(sweeper.storage))
    given = sweeper.get("pruner")
    pruner = optuna.pruners.NopPruner() if given is None else instantiate(given)
    study = optuna.load_study(study_name=sweeper.get("study_name"), storage=storage, pruner=pruner)
    if len(study.directions) > 1:
        return None
    study_id = storage.get_study_id_from_name(study.study_name)
    return optuna.trial.Trial(
        study, storage.get_trial_id_from_study_id_trial_number(study_id, int(number))
    )
