"""The names of the figures a run logs as it trains, and of those its ``metrics.json`` holds: what
a callback's ``monitor`` (``ModelCheckpoint``, ``EarlyStopping``,
:class:`~vitattn.training.callbacks.OptunaPruning`) and a search's ``optimized_metric`` may name.

Each of vitattn's objects that logs says what (``logged``: names, where ``<i>`` stands for a
number and another ``<word>`` for any text: ``val/fidelity/layer_<i>``), beside the code that
logs them: the LightningModule's class and each callback built from the config. Lightning's
callbacks are known by name. A config with a callback that is neither (a user's own, which may
log any name) is not checked: its names are known only once the run logs them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

SUMMARY_FIGURES = (
    "val/acc_best",
    "train/loss",
    "train/images_per_sec",
    "train/compile_seconds",
    "steady_steps",
    "load_avg_start",
    "load_avg_end",
    "cpu_count",
    "steps",
    "epochs",
    "seconds",
    "attempts",
    "insight/seconds",
    "insight/validation_seconds",
    "insight/share_of_validation",
    "peak_memory_gb",
    "params",
    "gflop_per_image",
)
"""The numbers ``metrics.json`` holds beyond the ``val/`` and ``test/`` figures logged
(:func:`vitattn.training.fitting.fit_summary` and ``vitattn.train``'s figures); some only in some
runs (``train/compile_seconds`` compiled, ``peak_memory_gb`` on a GPU)."""

LIGHTNING_LOGGED: dict[str, tuple[str, ...]] = {
    "LearningRateMonitor": (
        "train/lr",
        "train/lr/<group>",
        "lr-<optimizer>",
        "lr-<optimizer>/<group>",
    ),
    "ModelCheckpoint": (),
    "EarlyStopping": (),
    "TQDMProgressBar": (),
    "RichProgressBar": (),
    "ModelSummary": (),
    "RichModelSummary": (),
    "Timer": (),
    "StochasticWeightAveraging": (),
    "GradientAccumulationScheduler": (),
}
"""Lightning's callbacks whose logged names are known: the learning rate's (the schedule's name,
``train/lr``, with each parameter group's; ``lr-<optimizer>`` without a schedule); none for the
others."""


def logged_by(module_class: type, callbacks: Iterable[object]) -> tuple[str, ...] | None:
    """The names a fit of ``module_class`` with ``callbacks`` logs, or ``None``
    if the module or a callback is neither vitattn's nor a Lightning callback of
    :data:`LIGHTNING_LOGGED`."""
    if not module_class.__module__.startswith("vitattn."):
        return None
    patterns = list(getattr(module_class, "logged", ()))
    for callback in callbacks:
        kind = type(callback)
        if kind.__module__.startswith("vitattn."):
            patterns += getattr(callback, "logged", ())
        elif kind.__module__.startswith("lightning.") and kind.__name__ in LIGHTNING_LOGGED:
            patterns += LIGHTNING_LOGGED[kind.__name__]
        else:
            return None
    return tuple(patterns)


def in_results(module_class: type, logged: tuple[str, ...], tested: bool) -> tuple[str, ...]:
    """The names of the numbers a run's ``metrics.json`` holds: the logged ``val/`` figures, the
    module's ``test/`` ones where the run tests, and :data:`SUMMARY_FIGURES`."""
    validation = tuple(name for name in logged if name.startswith("val/"))
    test = tuple(getattr(module_class, "tested", ())) if tested else ()
    return tuple(dict.fromkeys(validation + test + SUMMARY_FIGURES))


def matches(name: str, names: Iterable[str]) -> bool:
    """Whether ``name`` is one of ``names`` (``<i>`` a number, another ``<word>`` any text)."""
    return any(re.fullmatch(_pattern(known), name) for known in names)


def _pattern(known: str) -> str:
    parts = re.split(r"(<\w+>)", known)
    return "".join(
        r"\d+" if part == "<i>" else ".+" if part.startswith("<") else re.escape(part)
        for part in parts
    )
