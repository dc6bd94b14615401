"""The names of the figures a run logs as it trains, and of the numbers its ``metrics.json``
holds: what a callback's ``monitor`` (``ModelCheckpoint``, ``EarlyStopping``,
:class:`~vitattn.training.callbacks.OptunaPruning`) and a search's ``optimized_metric`` may name.

The names are those Lightning's ``callback_metrics`` holds, which a monitor reads (not
TensorBoard's, where :mod:`vitattn.training.logger` merges the learning rate's groups into one
``train/lr``). Each of vitattn's objects that logs or summarizes points at its names here
(``logged``, ``summarized``: names, where ``<i>`` stands for a number as Python writes it,
``3`` and never ``03``, and another ``<word>`` for any text: ``val/fidelity/layer_<i>``);
Lightning's callbacks are known by name. A config with a callback that is neither (a user's
own, which may log any name) is not checked: its names are known only once the run logs them.
This module imports nothing of vitattn's, so that a search (:mod:`vitattn.runs.optuna_sweeper`)
can tell a name vitattn writes in some runs from one it never writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

KNOB_PREFIX = "~attention/"
"""How an attention's knob is named among a run's hyperparameters (TensorBoard's HPARAMS,
``hparams.yaml``), with the value the run used: ``~attention/landmarks``. TensorBoard orders the
HPARAMS columns by name after those that differ and shows the first five when the view opens: a
knob that only some runs have (another attention's) must come after the settings that every run
has, or those runs drop out of the parallel-coordinates view. ``~`` sorts after every letter, as
in the ``~summary`` tags."""

MODULE_LOGGED = ("train/loss", "train/acc", "val/loss", "val/acc")
"""What :class:`~vitattn.models.module.ViTClassifier` logs as it trains."""
MODULE_TESTED = ("test/loss", "test/acc")
"""What it logs as it tests."""
INSIGHT_LOGGED = (
    "val/fidelity",
    "val/fidelity/layer_<i>",
    "val/entropy_gap",
    "val/entropy_gap/layer_<i>",
)
"""What :class:`~vitattn.training.callbacks.AttentionInsight` logs at validation: means over the
layers, and with more than one layer each layer's (the entropy gap where the kernel's weights
can be read)."""
INSIGHT_SUMMARIZED = (
    "insight/seconds",
    "insight/validation_seconds",
    "insight/share_of_validation",
)
"""What it adds to ``metrics.json``: what looking cost."""
THROUGHPUT_LOGGED = ("train/images_per_sec",)
"""What :class:`~vitattn.training.callbacks.ImagesPerSecond` logs."""
THROUGHPUT_SUMMARIZED = (
    "train/images_per_sec",
    "steady_steps",
    "load_avg_start",
    "train/compile_seconds",
)
"""What it adds to ``metrics.json`` (``train/compile_seconds`` in a compiled run)."""
BEST_VALIDATION = "val/acc_best"
"""The best ``val/acc``, in ``metrics.json`` where a ``ModelCheckpoint`` monitors ``val/acc``
(:func:`vitattn.training.fitting.best_validation_accuracy`)."""
SUMMARY_FIGURES = (
    "train/loss",
    "load_avg_end",
    "cpu_count",
    "steps",
    "epochs",
    "seconds",
    "attempts",
    "peak_memory_gb",
    "params",
    "gflop_per_image",
)
"""The numbers every run's ``metrics.json`` holds beyond those of its callbacks
(:func:`vitattn.training.fitting.fit_summary` and ``vitattn.train``'s figures;
``peak_memory_gb`` on a GPU)."""

LIGHTNING_LOGGED: dict[str, tuple[str, ...]] = {
    "LearningRateMonitor": ("train/lr/<group>", "lr-<optimizer>/<group>"),
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
"""Lightning's callbacks whose logged names are known: the learning rate's, one name for each of
the module's parameter groups (``decay`` and ``no_decay``), under the schedule's name
(``train/lr``) or ``lr-<optimizer>`` without one; none for the others."""
PRUNING_MONITORED = "val/acc"
"""What :class:`~vitattn.training.callbacks.OptunaPruning` reports to a trial unless its
``monitor`` says otherwise."""
CHECKPOINT_MONITORED = ("epoch", "step")
"""What a ``ModelCheckpoint`` may monitor beyond the logged figures (``monitor=step mode=max``
keeps the latest checkpoints)."""


def logged_by(module_class: type, callbacks: Iterable[object]) -> tuple[str, ...] | None:
    """The names a fit of ``module_class`` with ``callbacks`` logs, or ``None`` if the module or
    a callback is neither vitattn's nor a Lightning callback of :data:`LIGHTNING_LOGGED` (a
    ``LearningRateMonitor`` logging momentum or weight decay too is not)."""
    if not module_class.__module__.startswith("vitattn."):
        return None
    names = list(getattr(module_class, "logged", ()))
    for callback in callbacks:
        kind = type(callback)
        if kind.__module__.startswith("vitattn."):
            names += getattr(callback, "logged", ())
        elif kind.__module__.startswith("lightning.") and kind.__name__ in LIGHTNING_LOGGED:
            if getattr(callback, "log_momentum", False) or getattr(
                callback, "log_weight_decay", False
            ):
                return None
            names += LIGHTNING_LOGGED[kind.__name__]
        else:
            return None
    return tuple(names)


def monitorable(callback: object, logged: tuple[str, ...]) -> tuple[str, ...]:
    """The names ``callback``'s ``monitor`` may take: the logged ones, and a
    ``ModelCheckpoint``'s :data:`CHECKPOINT_MONITORED`."""
    if type(callback).__name__ == "ModelCheckpoint":
        return logged + CHECKPOINT_MONITORED
    return logged


def in_results(
    module_class: type, logged: tuple[str, ...], callbacks: Iterable[object], tested: bool
) -> tuple[str, ...]:
    """The names of the numbers a run's ``metrics.json`` holds: the logged ``val/`` figures, the
    module's ``test/`` ones where the run tests, what each callback summarizes (and
    :data:`BEST_VALIDATION` with a ``ModelCheckpoint`` of ``val/acc``), and
    :data:`SUMMARY_FIGURES`."""
    names = [name for name in logged if name.startswith("val/")]
    names += getattr(module_class, "tested", ()) if tested else ()
    for callback in callbacks:
        names += getattr(callback, "summarized", ())
        if type(callback).__name__ == "ModelCheckpoint" and callback.monitor == "val/acc":
            names.append(BEST_VALIDATION)
    return tuple(dict.fromkeys([*names, *SUMMARY_FIGURES]))


EVERY_NAME = (
    *MODULE_LOGGED,
    *MODULE_TESTED,
    *INSIGHT_LOGGED,
    *INSIGHT_SUMMARIZED,
    *THROUGHPUT_SUMMARIZED,
    BEST_VALIDATION,
    *SUMMARY_FIGURES,
)
"""Every number vitattn's objects may write to a run's ``metrics.json``, in some run or other."""


def written_by_vitattn(name: str) -> bool:
    """Whether ``name`` is a number vitattn writes to ``metrics.json`` in some runs: a run of
    another search trial may hold it where this one did not (a deeper network's
    ``val/fidelity/layer_1``, ``train/compile_seconds`` of a run that compiled)."""
    return matches(name, EVERY_NAME)


def better_direction(name: str) -> str | None:
    """The direction an Optuna study takes to better ``name``, where its last part says:
    ``maximize`` for an accuracy (``val/acc``, ``val/acc_best``), ``minimize`` for a loss
    (``val/loss``); ``None`` for any other figure."""
    last = name.rsplit("/", 1)[-1]
    if last.startswith("acc"):
        return "maximize"
    return "minimize" if last.startswith("loss") else None


def layer_of(name: str, names: Iterable[str]) -> int | None:
    """The layer that ``name``, one of the per-layer ``names`` (``val/fidelity/layer_<i>``),
    names (``val/fidelity/layer_3``: 3); else ``None``."""
    per_layer = [known for known in names if known.endswith("/layer_<i>")]
    if not matches(name, per_layer):
        return None
    return int(name.rsplit("/layer_", 1)[1])


def matches(name: str, names: Iterable[str]) -> bool:
    """Whether ``name`` is one of ``names`` (``<i>`` a number, another ``<word>`` any text)."""
    return any(re.fullmatch(_pattern(known), name) for known in names)


def _pattern(known: str) -> str:
    parts = re.split(r"(<\w+>)", known)
    return "".join(
        r"(?:0|[1-9]\d*)" if part == "<i>" else ".+" if part.startswith("<") else re.escape(part)
        for part in parts
    )
