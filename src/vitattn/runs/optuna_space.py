"""An Optuna search's space, written in Hydra's override grammar (``hydra.sweeper.params``):
``choice(...)`` is a categorical distribution, ``range(start, stop, step)`` an integer (or
stepped float) one over exactly the values Hydra's ``range`` yields, ``interval(low, high)`` a
uniform one, ``tag(log, interval(...))`` a log-uniform one; a plain value is fixed. Adapted
from hydra-optuna-sweeper 1.3 (MIT), written for Optuna >= 4's distributions.

:func:`outside_space` checks values a stored trial brings (an enqueued ``WAITING`` trial)
against the space before it may run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vitattn.errors import ConfigError
from vitattn.utils.hydra_grammar import values_count

SAMPLERS = {
    "tpe": "TPESampler",
    "random": "RandomSampler",
    "grid": "GridSampler",  # given the space's values: choice(...) and range(...) only
    "cmaes": "CmaEsSampler",
    "nsgaii": "NSGAIISampler",
    "gp": "GPSampler",
}
"""``hydra/sweeper/sampler`` options: the classes of ``optuna.samplers`` they name. The plugin
(``hydra_plugins.vitattn_optuna``), which Hydra loads at every start, registers them from here:
this module imports no Optuna, and the search checks a group's choice against them."""

SPACE_SETTING = "hydra.sweeper.params"

MAX_LISTED = 10_000
"""The most values a setting of the space may list: a choice (a shuffled range is one), or a
grid search's steps of a range. A range is otherwise a distribution from its first value to its
last, however many it steps through (``seed: range(0, 10**8)``)."""


def parse_space(arguments: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """``(distributions, fixed)`` of ``key=value`` overrides: each sweep (``choice``,
    ``range``, ``interval``) an Optuna distribution, each plain value fixed (as text)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(list(arguments))
    except HydraException as error:
        first = next(iter(str(error).strip().splitlines()), "")
        raise ConfigError(f"{SPACE_SETTING}: {first}") from None
    distributions: dict[str, Any] = {}
    fixed: dict[str, str] = {}
    for override in parsed:
        name = override.get_key_element()
        if override.is_sweep_override():
            distributions[name] = distribution_of(override)
        else:
            fixed[name] = override.get_value_element_as_str()
    for name in fixed:
        distributions.pop(name, None)  # a value on the command line fixes a searched setting
    return distributions, fixed


def distribution_of(override: Any) -> Any:
    """The Optuna distribution of one sweep override."""
    from hydra.core.override_parser.types import Transformer
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    name, value = override.get_key_element(), override.value()
    count = values_count(override)
    if override.is_range_sweep() and (not count or value.step <= 0):
        raise ConfigError(f"{SPACE_SETTING}.{name}: a range with an increasing step, please")
    if override.is_choice_sweep() or (override.is_range_sweep() and value.shuffle):
        if count is not None and count > MAX_LISTED:
            raise ConfigError(
                f"{SPACE_SETTING}.{name}: a choice of {count} values; at most {MAX_LISTED} (a "
                "range(start, stop, step) without shuffle, or an interval, is not listed)"
            )
        choices = list(override.sweep_iterator(transformer=Transformer.encode))
        if not all(isinstance(c, str | int | float | bool | type(None)) for c in choices):
            raise ConfigError(f"{SPACE_SETTING}.{name}: choose among numbers, words or null")
        return CategoricalDistribution(choices)
    if override.is_range_sweep():
        if all(isinstance(v, int) for v in (value.start, value.stop, value.step)):
            steps = range(value.start, value.stop, value.step)  # its last value, not listed
            return IntDistribution(steps[0], steps[-1], step=value.step)
        if count > MAX_LISTED:  # a float's steps are Hydra's sums of rounded decimals
            raise ConfigError(
                f"{SPACE_SETTING}.{name}: a range of {count} floats; at most {MAX_LISTED} (an "
                "interval(low, high) takes any value between)"
            )
        values = list(override.sweep_iterator())
        return FloatDistribution(values[0], values[-1], step=value.step)
    if override.is_interval_sweep():
        log = "log" in value.tags
        low, high = value.start, value.end
        if not low < high or (log and low <= 0):
            raise ConfigError(
                f"{SPACE_SETTING}.{name}: interval({low}, {high}) needs low < high"
                + (" and low > 0 (log)" if log else "")
            )
        if isinstance(low, int) and isinstance(high, int):
            return IntDistribution(low, high, log=log)
        return FloatDistribution(float(low), float(high), log=log)
    raise ConfigError(f"{SPACE_SETTING}.{name}: use choice, range, interval or tag(log, interval)")


def grid_of(distributions: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The values each setting takes in a grid search (``GridSampler``): its choices, or the
    steps of a ``range``."""
    from optuna.distributions import CategoricalDistribution

    grid: dict[str, list[Any]] = {}
    for name, distribution in distributions.items():
        if isinstance(distribution, CategoricalDistribution):
            grid[name] = list(distribution.choices)
        elif getattr(distribution, "step", None) is not None and not distribution.log:
            low, step = distribution.low, distribution.step
            count = round((distribution.high - low) / step) + 1
            if count > MAX_LISTED:
                raise ConfigError(
                    f"{SPACE_SETTING}.{name}: a grid search lists each of a range's {count} "
                    f"values; at most {MAX_LISTED}"
                )
            grid[name] = [low + i * step for i in range(count)]
        else:
            raise ConfigError(
                f"{SPACE_SETTING}.{name}: a grid search (GridSampler) takes choice(...) or "
                "range(...), not an interval"
            )
    return grid


def outside_space(values: Mapping[str, Any], distributions: Mapping[str, Any]) -> str | None:
    """Why ``values`` (a stored trial's parameters) do not belong to the space, or ``None``: a
    setting the search does not vary, or a value its distribution does not hold."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    for name, value in values.items():
        distribution = distributions.get(name)
        if distribution is None:
            return f"{name}={value!r} is not a setting this search varies"
        if isinstance(distribution, CategoricalDistribution):  # 8.0 == 8, True == 1: not alike
            inside = any(type(c) is type(value) and c == value for c in distribution.choices)
        elif isinstance(distribution, IntDistribution):
            inside = isinstance(value, int) and not isinstance(value, bool)
        else:  # float('٠') is 0.0: a number, not text that reads as one
            inside = isinstance(value, int | float) and not isinstance(value, bool)
        try:
            inside = inside and distribution._contains(distribution.to_internal_repr(value))
        except (ValueError, TypeError, OverflowError):
            inside = False
        if not inside:
            return f"{name}={value!r} is outside {SPACE_SETTING}.{name} ({describe(distribution)})"
    return None


def describe(distribution: Any) -> str:
    """A distribution in words: ``choice(4, 8)``, ``interval(0.0001, 0.003), log``."""
    from optuna.distributions import CategoricalDistribution

    if isinstance(distribution, CategoricalDistribution):
        return "choice(" + ", ".join(map(str, distribution.choices)) + ")"
    step = f", step {distribution.step}" if distribution.step is not None else ""
    log = ", log" if distribution.log else ""
    return f"from {distribution.low} to {distribution.high}{step}{log}"
