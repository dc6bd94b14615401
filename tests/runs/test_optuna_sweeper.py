"""vitattn's Optuna search (:class:`vitattn.runs.optuna_sweeper.Search`) in this process, with a
launcher of its own that trains nothing: each "job" returns its metrics at once, or fails.
Through the console, with training: ``tests/test_optuna_search.py``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import optuna
import pytest
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from tests.support.studies import edit, made_study
from vitattn.errors import ConfigError
from vitattn.runs.optuna_sweeper import RESULTS_FILE, Search, SearchSettings

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = {
    "optimizer.lr": "tag(log, interval(1e-4, 3e-3))",
    "optimizer.weight_decay": "interval(0.0, 0.1)",
    "attention.k": "choice(4, 8, 16, 32, 64)",
}
RANDOM = {"_target_": "optuna.samplers.RandomSampler", "seed": 1234}
"""``hydra.sweeper.sampler`` of a random search, seeded."""


class Launcher:
    """Hydra's launcher as the search calls it; ``result(params, job_index)`` is the job's
    metrics, or an exception for a job that failed. ``launched``: each job's parameters."""

    def __init__(self, sweep: Path, result: Callable[[dict[str, str], int], Any]) -> None:
        self.sweep, self.result = sweep, result
        self.launched: list[dict[str, str]] = []

    def launch(self, overrides: list[list[str]], initial_job_idx: int) -> list[JobReturn]:
        jobs = []
        for index, job_overrides in enumerate(overrides, start=initial_job_idx):
            params = dict(o.split("=", 1) for o in job_overrides if not o.startswith("++"))
            self.launched.append(params)
            job = JobReturn(overrides=job_overrides)
            output = {"hydra": {"runtime": {"output_dir": str(self.sweep / str(index))}}}
            job.hydra_cfg = OmegaConf.create(output)
            value = self.result(params, index)
            job.status = JobStatus.FAILED if isinstance(value, Exception) else JobStatus.COMPLETED
            job._return_value = value
            jobs.append(job)
        return jobs


def search(
    sweep: Path,
    launcher: Launcher,
    n_trials: int,
    sampler_node: Mapping[str, Any] = RANDOM,
    params: Mapping[str, str] = SPACE,
    **changed: Any,
) -> list:
    """Run the search of ``hydra.sweeper.sampler=sampler_node`` (built as Hydra builds it) into
    ``sweep``, with the presets' storage and ``changed`` settings; its failed jobs."""
    from hydra.utils import instantiate

    given = {
        "sampler": instantiate(dict(sampler_node)),
        "direction": "maximize",
        "directions": None,
        "storage": f"sqlite:///{sweep}/optuna.db",
        "study_name": "vitattn",
        "n_trials": n_trials,
        "n_jobs": 1,
        "params": dict(params),
        "pruner": None,
    }
    config = OmegaConf.create(
        {
            "optimized_metric": "val/acc_best",
            "hydra": {
                "sweep": {"dir": str(sweep)},
                "sweeper": {"sampler": dict(sampler_node)},
                "overrides": {"hydra": [], "task": []},
            },
        }
    )
    return Search(SearchSettings(**{**given, **changed}), config, launcher).run([])


def accuracy(params: dict[str, str], index: int) -> dict[str, float]:
    """A job's metrics: its ``attention.k`` as its accuracy."""
    return {"val/acc_best": 0.01 * int(params.get("attention.k", "1"))}


def test_a_search_writes_its_results_where_it_said(tmp_path: Path) -> None:
    """Control: the launcher here drives a plain search to its study and results file."""
    sweep = tmp_path / "plain"
    launcher = Launcher(sweep, accuracy)
    assert search(sweep, launcher, 2) == []
    assert len(launcher.launched) == 2
    assert (sweep / RESULTS_FILE).is_file() and (sweep / "optuna.db").is_file()


@pytest.mark.parametrize(("name", "opened"), [("run?1", "run"), ("run%41", "runA")])
def test_a_sweep_directory_whose_storage_url_opens_another_file_is_one_line(
    name: str, opened: str, tmp_path: Path
) -> None:
    """The presets' storage is ``sqlite:///${hydra.sweep.dir}/optuna.db``, a URL built from a
    path without quoting: SQLAlchemy reads ``?`` as the start of the query and decodes ``%xx``,
    so the sweep ``<tmp>/run?1`` stored its study in the file ``<tmp>/run`` (``<tmp>/run%41``
    in ``<tmp>/runA/optuna.db``), outside the sweep directory, while each check of the study
    file named ``<tmp>/run?1/optuna.db``: a file planted there was opened unchecked. Refused
    in one line before anything is made."""
    sweep, beside = tmp_path / name, tmp_path / "runA"
    beside.mkdir()  # where %41 leads
    with pytest.raises(ConfigError) as refused:
        search(sweep, Launcher(sweep, accuracy), 1)
    assert str(refused.value) == (
        f"hydra.sweeper.storage='sqlite:///{sweep}/optuna.db' is not valid; choose a sqlite URL "
        "whose file path holds no '?' or '%' (SQLAlchemy reads ?... as the URL's query and "
        f"decodes %xx: this one opens {tmp_path / opened}{'' if '?' in name else '/optuna.db'}"
        "), e.g. a hydra.sweep.dir without them"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runA"]
    assert list(beside.iterdir()) == []


def test_a_study_trial_whose_constraints_optuna_cannot_read_is_refused_before_any_trial(
    tmp_path: Path,
) -> None:
    """A planted ``"constraints": "oops"`` passed ``check_stored_trials``; the search then ran
    every trial and only at the end failed (``TypeError: '>' not supported between instances
    of 'str' and 'float'`` in ``best_trial``), with no ``optimization_results.yaml``, and each
    re-run failed the same way. Refused in one line before the first job."""
    sweep = tmp_path / "planted"
    path = made_study(sweep, trials=3)
    edit(
        path,
        """insert into trial_system_attributes(trial_id, key, value_json)
        select trial_id, 'constraints', '"oops"' from trials where number = 2""",
    )
    launcher = Launcher(sweep, lambda params, index: {"val/acc_best": 0.05})  # planted: best
    with pytest.raises(ConfigError) as refused:
        search(sweep, launcher, 5)
    assert str(refused.value) == (
        f"study vitattn in {path} (hydra.sweeper.storage): trial 2 holds constraints ['o', 'o', "
        "'p', 's'], which are not all finite numbers; the study is kept as it is: choose another "
        "hydra.sweeper.study_name or hydra.sweep.dir"
    )
    assert launcher.launched == []


def test_a_stored_search_without_a_study_name_is_one_line_before_anything_is_made(
    tmp_path: Path,
) -> None:
    """``hydra.sweeper.study_name`` is ``None`` unless a config sets it (``OptunaSearchConf``).
    Optuna then named each new study ``no-name-<uuid>``, so the same command run again into the
    sweep directory made a second study instead of continuing the first: it ran all of
    ``n_trials`` again, numbered its jobs from 0 again, and each job's ``job_trial``
    (``optuna.load_study(study_name=None)``) failed with "Could not determine the study name".
    In memory, where nothing is continued, no name is needed."""
    sweep = tmp_path / "unnamed"
    launcher = Launcher(sweep, accuracy)
    with pytest.raises(ConfigError) as refused:
        search(sweep, launcher, 2, study_name=None)
    assert str(refused.value) == (
        "hydra.sweeper.study_name=None is not valid; choose a name for the study in "
        "hydra.sweeper.storage (the presets': vitattn, vitattn_pareto), or "
        "hydra.sweeper.storage=null (in memory, nothing to continue)"
    )
    assert launcher.launched == [] and not sweep.exists()
    assert search(sweep, launcher, 2, study_name=None, storage=None) == []
    assert len(launcher.launched) == 2


GRID = {"attention.k": "choice(4, 8, 16, 32)"}
GRID_SAMPLER = {"_target_": "optuna.samplers.GridSampler", "_partial_": True, "seed": 1234}
"""``hydra.sweeper.sampler`` of ``hydra/sweeper/sampler=grid`` (a partial: the search gives it
the grid), seeded as the presets seed it."""


def test_a_grid_search_continued_runs_each_point_of_the_grid_once(tmp_path: Path) -> None:
    """``GridSampler``'s seed shuffles the grid, and each trial records its point as an index
    into the shuffled grid (``grid_id``). The continuation seeded the sampler anew (from the
    seed and the trials stored, as for a random sampler), so the same index meant another
    point: a grid of 6 run for 2 trials (16, 8) and continued to 6 ran 4, 8, 32, 128, k=8
    twice and never 64."""
    sweep = tmp_path / "grid"
    grid = {"attention.k": "choice(4, 8, 16, 32, 64, 128)"}
    first, continued = Launcher(sweep, accuracy), Launcher(sweep, accuracy)
    search(sweep, first, 2, GRID_SAMPLER, grid)
    search(sweep, continued, 6, GRID_SAMPLER, grid)
    points = [int(p["attention.k"]) for p in [*first.launched, *continued.launched]]
    assert sorted(points) == [4, 8, 16, 32, 64, 128]


class Cut(BaseException):
    """A kill of the search's process as its job runs: the trial is left running."""


@pytest.mark.parametrize(
    ("first_trials", "end", "again"),
    [
        (4, RuntimeError("failed"), ["8"]),  # the job failed; the rest of the grid ran
        (3, RuntimeError("failed"), ["8", "32"]),  # and the grid's last point is still to go
        (4, Cut(), ["8", "16", "32"]),  # killed: the continuation marks the trial failed
    ],
)
def test_a_grid_search_continued_after_a_failed_trial_runs_the_failed_point(
    first_trials: int, end: BaseException, again: list[str], tmp_path: Path
) -> None:
    """A grid of 4 whose trial 1 (k=8) failed, or was cut off by a kill, continued to 4: Optuna
    5's ``GridSampler`` counts a failed trial's point as visited, so the continuation warned
    "`GridSampler` is re-evaluating a configuration because the grid has been exhausted" and
    ran a point that already had its result (k=32), and k=8 was never evaluated."""
    sweep = tmp_path / "grid"

    def failing(params: dict[str, str], index: int) -> Any:
        if index != 1:
            return accuracy(params, index)
        if isinstance(end, Exception):
            return end
        raise end

    first = Launcher(sweep, failing)
    with pytest.raises(Cut) if isinstance(end, Cut) else contextlib.nullcontext():
        search(sweep, first, first_trials, GRID_SAMPLER, GRID)
    launched = ["4", "8", "16", "32"][: first_trials if isinstance(end, Exception) else 2]
    assert [p["attention.k"] for p in first.launched] == launched

    continued = Launcher(sweep, accuracy)
    assert search(sweep, continued, 4, GRID_SAMPLER, GRID) == []
    assert [p["attention.k"] for p in continued.launched][:1] == ["8"]  # the failed point first
    assert sorted(p["attention.k"] for p in continued.launched) == sorted(again)
    study = optuna.load_study(study_name="vitattn", storage=f"sqlite:///{sweep}/optuna.db")
    complete = [t.params["attention.k"] for t in study.trials if t.state.name == "COMPLETE"]
    assert sorted(complete) == [4, 8, 16, 32]
    (retried,) = (t for t in study.trials if t.params["attention.k"] == 8 and t.values)
    assert retried.system_attrs["failed_trial"] == 1


def test_a_batch_whose_trials_another_search_split_numbers_each_job_by_its_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hydra's launchers number a batch from ``initial_job_idx`` one by one. Another search of
    the same study (its own sweep directory, as on a shared storage) asks for trial 1 and
    completes it between this search's two asks of a batch of ``n_jobs=2``: this search's
    trials are 0 and 2, and each job is numbered by its trial (its directory ``2``, not
    ``1``). ``optimization_results.yaml`` names the sweep directory of the other's trial."""
    import yaml

    sweep, other = tmp_path / "A", str(tmp_path / "B")
    storage = f"sqlite:///{sweep}/optuna.db"
    asked = optuna.Study.ask

    def ask(study: optuna.Study, *args: Any, **kwargs: Any) -> Any:
        trial = asked(study, *args, **kwargs)
        if trial.number == 0:  # the other search asks between this one's two asks
            theirs = optuna.load_study(study_name="vitattn", storage=storage)
            between = asked(theirs)
            between.set_user_attr("sweep_dir", other)
            between.set_user_attr("run", "1_theirs")
            theirs.tell(between, 0.99)
        return trial

    monkeypatch.setattr(optuna.Study, "ask", ask)
    launcher = Launcher(sweep, accuracy)
    assert search(sweep, launcher, 2, n_jobs=2) == []
    study = optuna.load_study(study_name="vitattn", storage=storage)
    runs = {t.number: t.user_attrs["run"] for t in study.trials}
    assert runs == {0: "0", 1: "1_theirs", 2: "2"}
    results = yaml.safe_load((sweep / RESULTS_FILE).read_text())
    listed = {t["trial"]: (t["run"], t.get("sweep_dir")) for t in results["trials"]}
    assert listed == {0: ("0", None), 1: ("1_theirs", other), 2: ("2", None)}
