"""An Optuna search's space in Hydra's override grammar, the check a stored trial's values must
pass before it may run, the samplers of ``hydra/sweeper/sampler``, and when a pruner is
refused."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from tests.support.presets import compose_config
from vitattn.errors import ConfigError
from vitattn.runs.optuna_space import SAMPLERS, grid_of, outside_space, parse_space
from vitattn.runs.optuna_sweeper import SearchSettings, check_pruner, make_sampler

SPACE = [
    "optimizer.lr=tag(log, interval(1e-4, 3e-3))",
    "optimizer.weight_decay=interval(0.0, 0.1)",
    "attention.k=choice(4, 8, 16)",
    "model.depth=range(1, 8, 3)",
    "seed=7",
]


def test_each_sweep_is_the_distribution_hydra_means() -> None:
    distributions, fixed = parse_space(SPACE)
    assert distributions == {
        "optimizer.lr": FloatDistribution(1e-4, 3e-3, log=True),
        "optimizer.weight_decay": FloatDistribution(0.0, 0.1),
        "attention.k": CategoricalDistribution([4, 8, 16]),
        "model.depth": IntDistribution(1, 7, step=3),  # range's stop is left out, as Hydra's
    }
    assert fixed == {"seed": "7"}
    assert parse_space([*SPACE, "attention.k=8"])[0].keys() == {
        "optimizer.lr",
        "optimizer.weight_decay",
        "model.depth",
    }  # a value given on its own fixes a searched setting
    grid = grid_of({k: v for k, v in distributions.items() if "optimizer" not in k})
    assert grid == {"attention.k": [4, 8, 16], "model.depth": [1, 4, 7]}
    with pytest.raises(ConfigError, match=r"^hydra.sweeper.params.optimizer.lr: a grid search"):
        grid_of(distributions)
    with pytest.raises(ConfigError, match=r"interval\(0.1, 0.0\) needs low < high"):
        parse_space(["optimizer.weight_decay=interval(0.1, 0.0)"])


def test_a_range_is_a_distribution_without_listing_its_values() -> None:
    """``seed: range(0, 10**8)`` was listed, value by value, to find its last (a search's
    checks held past a minute and a half); what must be listed is bounded."""
    distributions, _ = parse_space(["seed=range(0,100000000,3)", "x=range(0.5,3.7,0.7)"])
    assert distributions == {
        "seed": IntDistribution(0, 99999999, step=3),
        "x": FloatDistribution(0.5, 3.3, step=0.7),
    }
    with pytest.raises(ConfigError, match=r"^hydra.sweeper.params.seed: a choice of 100000 "):
        parse_space(["seed=shuffle(range(0,100000))"])
    with pytest.raises(ConfigError, match=r"^hydra.sweeper.params.x: a range of 100000 floats"):
        parse_space(["x=range(0,10000,0.1)"])
    with pytest.raises(ConfigError, match=r"a grid search lists each of a range's 33333334 "):
        grid_of(parse_space(["seed=range(0,100000000,3)"])[0])


@pytest.mark.parametrize("start", [0.0, 0.1, 0.3, 1.7])
@pytest.mark.parametrize("step", ["0.1", "0.05", "0.3", "0.25", "-0.1"])
def test_a_range_is_counted_as_hydra_steps_it(start: float, step: str) -> None:
    """Hydra steps a range of floats in rounded decimals, which may take one step more than
    division says (``range(0.0,0.1,0.1)`` gives 0.0 and 0.1)."""
    from vitattn.utils.hydra_grammar import parsed, values_count

    for stop in (start + 0.1 * k for k in range(-5, 30)):
        override = parsed(f"x=range({start},{round(stop, 4)},{step})")
        assert values_count(override) == len(list(override.sweep_iterator()))


def test_a_stored_trial_runs_only_with_values_of_the_space() -> None:
    distributions, _ = parse_space(SPACE)
    assert outside_space({"optimizer.lr": 1e-3, "attention.k": 8}, distributions) is None
    assert outside_space({}, distributions) is None  # the sampler chooses them all
    assert outside_space({"optimizer.lr": 12345}, distributions) == (
        "optimizer.lr=12345 is outside hydra.sweeper.params.optimizer.lr "
        "(from 0.0001 to 0.003, log)"
    )
    assert "attention.k=5 is outside" in outside_space({"attention.k": 5}, distributions)
    assert "model.depth=2 is outside" in outside_space({"model.depth": 2}, distributions)
    assert outside_space({"optimizer.lr": "${oc.env:HOME}"}, distributions).startswith(
        "optimizer.lr='${oc.env:HOME}' is outside"
    )
    assert outside_space({"trainer.max_steps": 10**9}, distributions) == (
        "trainer.max_steps=1000000000 is not a setting this search varies"
    )
    # values equal to one of the space, or that float() reads, yet of another type (found by a
    # red-team pass): '٠' reached Hydra's grammar as an override (a traceback, a trial left
    # running), 8.0 failed the job's build, false trained with a bool
    assert outside_space({"optimizer.weight_decay": 0, "model.depth": 4}, distributions) is None
    for planted in (
        {"optimizer.weight_decay": "٠"},
        {"optimizer.weight_decay": False},
        {"attention.k": 8.0},
        {"attention.k": True},
        {"model.depth": 4.0},
    ):
        (name,) = planted
        assert f"{name}={planted[name]!r} is outside" in outside_space(planted, distributions)


@pytest.mark.parametrize("option", ["tpe", "random", "grid", "cmaes", "nsgaii", "gp"])
def test_each_sampler_of_the_group_is_optunas(option: str, tmp_path: Path) -> None:
    from hydra.utils import instantiate

    cfg = compose_config(
        "train", ["hydra/sweeper=vitattn_optuna", f"hydra/sweeper/sampler={option}"], tmp_path
    )
    space = {"attention.k": CategoricalDistribution([4, 8]), "seed": IntDistribution(1, 3)}
    sampler, grid_size = make_sampler(instantiate(cfg.hydra.sweeper.sampler), space)
    assert isinstance(sampler, optuna.samplers.BaseSampler)
    assert type(sampler).__name__ == SAMPLERS[option]
    assert grid_size == (6 if option == "grid" else None)


def test_a_pruner_is_refused_where_no_trial_could_report_to_it() -> None:
    from omegaconf import OmegaConf

    def settings(**changed: object) -> SearchSettings:
        given = {
            "sampler": None,
            "direction": "maximize",
            "directions": None,
            "storage": "sqlite:///optuna.db",
            "study_name": None,
            "n_trials": 5,
            "n_jobs": 1,
            "params": None,
            "pruner": optuna.pruners.MedianPruner(),
        }
        return SearchSettings(**{**given, **changed})

    reporting = OmegaConf.create(
        {"callbacks": {"optuna_pruning": {"_target_": "vitattn.training.callbacks.OptunaPruning"}}}
    )
    pruner = check_pruner(settings(), ["maximize"], reporting)
    assert isinstance(pruner, optuna.pruners.MedianPruner)
    assert check_pruner(settings(pruner=None), ["maximize"], OmegaConf.create({})) is None
    refusals = [
        (settings(), ["maximize"], OmegaConf.create({"callbacks": {}}), "needs the callback"),
        (settings(storage=None), ["maximize"], reporting, "needs hydra.sweeper.storage"),
        (settings(), ["maximize", "maximize"], reporting, "prunes searches of one objective"),
    ]
    for given, directions, config, message in refusals:
        with pytest.raises(ConfigError, match=f"^hydra.sweeper.pruner {message}"):
            check_pruner(given, directions, config)


@pytest.mark.parametrize(
    ("monitor", "direction", "objective", "valid"),
    [
        ("val/acc", "minimize", "val/loss", "lower (a loss: val/loss)"),
        ("val/loss", "maximize", "val/acc_best", "higher (an accuracy: val/acc)"),
        (None, "minimize", "val/loss", "lower (a loss: val/loss)"),  # the callback's own
    ],
)
def test_a_pruner_judging_a_metric_better_the_other_way_than_the_study_is_refused(
    monitor: str | None, direction: str, objective: str, valid: str
) -> None:
    """``OptunaPruning`` reports its ``monitor`` (``val/acc`` in the preset) whatever the
    study's direction: with ``optimized_metric=val/loss hydra.sweeper.direction=minimize`` and
    ``MedianPruner``, a 3-trial run pruned its best trial (val/acc 0.142, val/loss 2.289) and
    kept the worst, and the pruned trial's stored value was a val/acc in a study of val/loss."""
    from omegaconf import OmegaConf

    settings = SearchSettings(
        sampler=None,
        direction=direction,
        directions=None,
        storage="sqlite:///optuna.db",
        study_name="vitattn",
        n_trials=5,
        n_jobs=1,
        params=None,
        pruner=optuna.pruners.MedianPruner(),
    )
    callback = {"_target_": "vitattn.training.callbacks.OptunaPruning"}
    config = OmegaConf.create(
        {
            "optimized_metric": objective,
            "callbacks": {"pruning": {**callback, **({"monitor": monitor} if monitor else {})}},
        }
    )
    with pytest.raises(ConfigError) as refused:
        check_pruner(settings, [direction], config)
    assert str(refused.value) == (
        f"callbacks.pruning.monitor='{monitor or 'val/acc'}' is not valid; choose a metric that "
        f"is better {valid} for hydra.sweeper.direction={direction}: the pruner judges each "
        "report in the study's direction"
    )
    agreeing = {"maximize": "val/acc", "minimize": "val/loss"}[direction]
    config.callbacks.pruning.monitor = agreeing
    assert check_pruner(settings, [direction], config) is settings.pruner
    config.callbacks.pruning.monitor = "val/fidelity"  # no direction of its own: the user's
    assert check_pruner(settings, [direction], config) is settings.pruner


def test_a_waiting_trial_whose_fixed_params_are_no_mapping_is_refused_not_a_traceback() -> None:
    """A study file whose waiting trial keeps ``fixed_params`` as text ended the search in
    ``TypeError: 'str' object is not a mapping``; it is refused and marked failed as a trial
    outside the space is."""
    from vitattn.runs.optuna_sweeper import settle_stored_trials

    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="planted")
    study.enqueue_trial({"optimizer.lr": 0.001})
    (trial,) = study.get_trials(deepcopy=False)
    storage.set_trial_system_attr(trial._trial_id, "fixed_params", "abc")
    space = {"optimizer.lr": FloatDistribution(1e-4, 1e-2, log=True)}
    settle_stored_trials(study, storage, space, study.get_trials(deepcopy=False), Path("/sweep"))
    assert [t.state.name for t in study.get_trials(deepcopy=False)] == ["FAIL"]


@pytest.mark.parametrize(
    ("recorded", "own_storage", "settled"),
    [
        ("/sweep", False, "FAIL"),  # this directory's, cut off
        ("other", True, "RUNNING"),  # another search's, on a storage both share
        ("gone", True, "FAIL"),  # this directory's before it was moved: its old place is gone
        ("gone", False, "RUNNING"),  # ... in a storage elsewhere: another machine's place
        (None, True, "FAIL"),  # a study of an earlier vitattn, in this directory's own file
        (None, False, "RUNNING"),  # ... in a storage elsewhere, which others may share
    ],
)
def test_a_running_trial_is_settled_only_by_the_search_that_started_it(
    recorded: str | None, own_storage: bool, settled: str, tmp_path: Path
) -> None:
    """A running trial is marked failed by a search of the directory it records, or, in a
    study that is a file inside the search's own directory, where it records none (a study of
    a vitattn before its trials recorded one) or a directory that is no more (the sweep moved:
    its cut trial stayed running for ever, audit); any other is left running."""
    from vitattn.runs.optuna_sweeper import SWEEP_ATTR, settle_stored_trials

    (tmp_path / "other").mkdir()
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="shared")
    trial = study.ask()
    if recorded is not None:
        place = recorded if recorded.startswith("/") else str(tmp_path / recorded)
        trial.set_user_attr(SWEEP_ATTR, place)
    trials = study.get_trials(deepcopy=False)
    settle_stored_trials(study, storage, {}, trials, Path("/sweep"), own_storage)
    assert [t.state.name for t in study.get_trials(deepcopy=False)] == [settled]


def test_a_storage_inside_the_sweep_is_its_own(tmp_path: Path) -> None:
    from vitattn.runs.optuna_sweeper import storage_inside

    assert storage_inside(f"sqlite:///{tmp_path}/optuna.db", tmp_path)
    assert not storage_inside(f"sqlite:///{tmp_path.parent}/optuna.db", tmp_path)
    assert not storage_inside(None, tmp_path)


@pytest.mark.parametrize("option", sorted(set(SAMPLERS) - {"grid"}))  # grid: choice and range
def test_a_presets_sampler_is_the_group_choice_seeded_by_the_preset(
    option: str, tmp_path: Path
) -> None:
    """``hparams_search=optuna hydra/sweeper/sampler=random`` ran the preset's TPE without a
    word, its ``sampler:`` block overriding the group; the presets now take the group's sampler
    and seed it (1234)."""
    from hydra.utils import instantiate

    from vitattn.runs.optuna_sweeper import check_search

    cfg = compose_config(
        "train", ["hparams_search=optuna", f"hydra/sweeper/sampler={option}"], tmp_path
    )
    if option == "cmaes" and importlib.util.find_spec("cmaes") is None:  # Optuna's extra
        with pytest.raises(ConfigError, match="needs the cmaes package, not installed here"):
            check_search(cfg)
    else:
        check_search(cfg)
    assert cfg.hydra.sweeper.sampler.seed == 1234
    sampler, _ = make_sampler(instantiate(cfg.hydra.sweeper.sampler), {})
    assert type(sampler).__name__ == SAMPLERS[option]


def test_a_setting_the_chosen_sampler_does_not_take_is_one_line(tmp_path: Path) -> None:
    """The Pareto preset's NSGA-II ``population_size`` under another sampler: Hydra's build
    would fail in a ``TypeError`` about an unexpected keyword argument."""
    from vitattn.runs.optuna_sweeper import check_search

    cfg = compose_config(
        "train", ["hparams_search=optuna_pareto", "hydra/sweeper/sampler=tpe"], tmp_path
    )
    with pytest.raises(ConfigError) as refused:
        check_search(cfg)
    assert str(refused.value) == (
        "hydra.sweeper.sampler.population_size=8 is not a setting of TPESampler; drop it with "
        "~hydra.sweeper.sampler.population_size, or choose a sampler that takes it"
    )
    check_search(
        compose_config(
            "train",
            [
                "hparams_search=optuna_pareto",
                "hydra/sweeper/sampler=tpe",
                "~hydra.sweeper.sampler.population_size",
            ],
            tmp_path,
        )
    )


def test_a_sampler_whose_package_is_missing_is_one_line_before_the_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Optuna imports ``cmaes`` at CMA-ES's first ask: the search trained its first trial, then
    ended in a line that blamed the study's file (audit)."""
    import importlib.util

    from vitattn.runs.optuna_sweeper import check_search

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "cmaes" else found(name, *a)
    )
    chosen = ["hparams_search=optuna", "hydra/sweeper/sampler=cmaes"]
    cfg = compose_config("train", chosen, tmp_path)
    with pytest.raises(ConfigError) as refused:
        check_search(cfg)
    assert str(refused.value) == (
        "hydra.sweeper.sampler is optuna.samplers.CmaEsSampler, which needs the cmaes package, "
        "not installed here: pip install cmaes, or choose another sampler "
        "(hydra/sweeper/sampler=tpe)"
    )
    check_search(compose_config("train", ["hparams_search=optuna"], tmp_path))


def test_a_sampler_group_that_a_sampler_set_by_name_overrides_is_refused(tmp_path: Path) -> None:
    """A sampler named by its ``_target_`` wins over the group's choice: the choice is refused
    in one line rather than ignored without a word."""
    from vitattn.runs.optuna_sweeper import check_search

    ignored = compose_config(
        "train",
        [
            "hparams_search=optuna",
            "hydra/sweeper/sampler=random",
            "hydra.sweeper.sampler._target_=optuna.samplers.TPESampler",
        ],
        tmp_path,
    )
    with pytest.raises(ConfigError, match=r"^hydra/sweeper/sampler=random is ignored: .* to "
                       r"optuna\.samplers\.TPESampler; choose"):  # fmt: skip
        check_search(ignored)
