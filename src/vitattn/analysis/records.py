"""The runs of a summary: what it reads from each run directory (:class:`Run`), their labels and
one row per run.

A *run directory* is what ``vitattn-train`` writes: ``.hydra/`` (config and overrides),
TensorBoard event files (in the directory itself, or in ``tensorboard/`` for older runs; read
with TensorBoard's own ``EventAccumulator`` once they are checked within bounds), ``metrics.json``
and, with the attention-maps callback, ``attention/maps.npz``. A multirun directory holds one run
directory per job.

A run whose ``.hydra/`` files or ``metrics.json`` cannot be read is left out of a summary
(:func:`load_run` raises). A run whose event files are refused
(:mod:`vitattn.runs.event_files`: a link, a FIFO, too large, not framed as events) keeps its row
from ``metrics.json``, without curves, and one warning line names the file (:func:`curves`), as
a refused ``attention/maps.npz`` leaves out the maps alone.

Runs are labelled by the overrides that differ between the runs shown (``attention=linear``),
never by those they share; runs that differ only by ``seed`` share a label, hence a line, and so
do a run resumed and one trained straight through (``resume`` and the ``ckpt_path`` of its own
``last.ckpt`` say how a run was continued, not what it trained).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vitattn.analysis.events import read_curves
from vitattn.analysis.seed_runs import TAGS, Events
from vitattn.runs.files import UnreadableFileError, kind_of, one_line, read_yaml
from vitattn.runs.layout import RunDir, RunState, read_metrics, refuse_links_read, run_state
from vitattn.runs.lock import held_elsewhere
from vitattn.runs.recorded import says_where
from vitattn.utils.config import MAX_LABEL, cut_apart
from vitattn.utils.decimals import shown
from vitattn.utils.hydra_grammar import parsed
from vitattn.utils.metric_names import KNOB_PREFIX

SUMMARY_COLUMNS = (
    "run",
    "status",
    "label",
    "attention",
    "knobs",
    "model",
    "seed",
    "params",
    "best_val_acc",
    "final_val_acc",
    "test_acc",
    "images_per_sec",
    "seconds",
    "attempts",
    "peak_memory_gb",
    "gflop_per_image",
    "test_images",
    "degenerate",
    "load_avg_start",
    "load_avg_end",
    "cpu_count",
    "error",
)


SEED_KEY = "seed"

RESUME_KEY = "resume"
CHECKPOINT_KEY = "ckpt_path"

NOT_SETTINGS = (SEED_KEY, RESUME_KEY)
"""Overrides a label leaves out: the seed (runs that differ by it are one setting's seeds) and
``resume``, which a resume records in the run's ``.hydra/overrides.yaml`` beside the
``ckpt_path`` it continues from (:meth:`Run.setting_of_what_it_trained`)."""

CURVE_TAGS = TAGS
"""The curves a summary reads of each run, each thinned to at most
:data:`vitattn.analysis.events.MAX_CURVE_POINTS` points: those its figures draw
(:data:`vitattn.analysis.figures.CURVES`, a test checks) and the TensorBoard runs of its seed
means hold (:data:`vitattn.analysis.seed_runs.TAGS`)."""
UNFINISHED = (RunState.INTERRUPTED, RunState.CUT)
"""The states a run still training shows by its files alone."""

log = logging.getLogger(__name__)


@dataclass
class Run:
    """One run directory with what the summary needs from it."""

    path: Path
    overrides: list[str]
    config: dict[str, Any]
    metrics: dict[str, Any]
    events: Events = field(default_factory=dict)
    """Its curves of :data:`CURVE_TAGS` as ``{tag: [(step, wall_time, value), ...]}``."""
    label: str = ""
    choices: dict[str, str] = field(default_factory=dict)
    running: bool = False
    """Whether a live process held its lock when it was read (:func:`load_run`)."""
    used_knobs: dict[str, Any] = field(default_factory=dict)
    """The attention's knobs with the values the run used, where ``hparams.yaml`` records them
    (``~attention/landmarks: 16`` for a config's ``landmarks: null``): :func:`used_knobs`."""

    @property
    def scalars(self) -> dict[str, list[tuple[int, float]]]:
        """Its curves as ``{tag: [(step, value), ...]}``."""
        return {
            tag: [(step, value) for step, _, value in points] for tag, points in self.events.items()
        }

    @property
    def attention(self) -> str:
        if self.choices.get("attention"):
            return bounded(self.choices["attention"])
        if "attention" in self.settings:
            return bounded(self.settings["attention"])
        attention = self.metrics.get("attention") or _target_name(self.config.get("attention"))
        return bounded(str(attention))

    @property
    def model(self) -> str:
        return bounded(
            str(
                self.metrics.get("model")
                or self.choices.get("model")
                or self.settings.get("model")
                or _target_name(self.config.get("model"))
            )
        )

    @property
    def seed(self) -> int | None:
        """The seed the run was trained with: a whole number, from its config, else from its
        overrides; ``None`` for an unseeded run (or files that hold something else there)."""
        for seed in (self.config.get(SEED_KEY), self.settings.get(SEED_KEY)):
            if isinstance(seed, str) and len(seed) <= 20 and seed.removeprefix("-").isdecimal():
                seed = int(seed)  # an override's text
            if isinstance(seed, int) and not isinstance(seed, bool):
                return seed
        return None

    @property
    def steps(self) -> int | None:
        """The steps the run took (``metrics.json``), else those it was set to take."""
        steps = self.metrics.get("steps")
        if steps is None:
            steps = (self.config.get("trainer") or {}).get("max_steps")
        finite = isinstance(steps, int | float) and math.isfinite(steps)
        return int(steps) if finite and steps > 0 else None

    @property
    def state(self) -> RunState:
        """The run's state (:func:`vitattn.runs.layout.run_state`), or running where its files
        say interrupted or cut and a live process held its lock when it was read."""
        state = run_state(self.metrics, self.path)
        return RunState.RUNNING if self.running and state in UNFINISHED else state

    @property
    def status(self) -> str:
        """The run's state as its row shows it."""
        return str(self.state)

    @property
    def settings(self) -> dict[str, str]:
        """The command-line overrides as ``{key: value}`` (Hydra's own left out)."""
        pairs: dict[str, str] = {}
        for override in self.overrides:
            key, equals, value = override.partition("=")
            key = key.lstrip("+~")
            if equals and key != "hydra" and not key.startswith(("hydra.", "hydra/")):
                pairs[key] = value
        return pairs

    def setting_of_what_it_trained(self, key: str) -> str | None:
        """:meth:`setting`, but ``None`` for a ``ckpt_path`` inside the run's own folder: a
        resume's (``<run>/checkpoints/last.ckpt``) says how the run was continued, not what it
        trained, so a run resumed is the same setting as one trained straight through. A
        ``ckpt_path`` elsewhere (what a fine-tune or an evaluation started from) is a setting."""
        value = self.setting(key)
        if key == CHECKPOINT_KEY and value is not None:
            value = as_hydra_reads_it(key, value)  # a sweep job's folder is quoted
            own = self.path.absolute()
            if own == Path(value).absolute() or own in Path(value).absolute().parents:
                return None
        return value

    def setting(self, key: str) -> str | None:
        """``key``'s value in this run: its override, else the config group's choice or the
        config's value (so that a run that left ``key`` at its default still compares)."""
        if key in self.settings:
            return self.settings[key]
        if key in self.choices:
            return self.choices[key]
        node: Any = self.config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return None if node is None or isinstance(node, dict | list) else str(node)

    def knobs(self) -> dict[str, Any]:
        """The attention's knobs: the config's values, a ``null`` one (computed from the token
        count: Nyström's landmarks, BigBird's block, Reformer's chunk) as the run used it, as
        TensorBoard's HPARAMS shows it."""
        attention = self.config.get("attention") or {}
        return {
            k: self.used_knobs.get(k) if v is None else v
            for k, v in attention.items()
            if not k.startswith("_")
        }


def as_hydra_reads_it(key: str, value: str) -> str:
    """A recorded override's text value as Hydra's grammar reads it (``"<job>/a=1,b/x.ckpt"``
    without its quotes); the text itself where the grammar reads no string there."""
    from hydra.errors import HydraException

    try:
        read = parsed(f"{key}={value}").value()
    except HydraException:
        return value
    return read if isinstance(read, str) else value


def _target_name(config: Any) -> str:
    if isinstance(config, dict) and "_target_" in config:
        return str(config["_target_"]).rsplit(".", 1)[-1]
    return "unknown"


def load_run(path: Path) -> Run:
    """The run in ``path``; a file of it that cannot be read is one line
    (:class:`vitattn.runs.files.UnreadableFileError`)."""
    run = RunDir(path)
    refuse_links_read(path)
    config = checked_config(run.config_file, read_yaml(run.config_file, dict))
    overrides = [str(o) for o in _optional(run.overrides_file, read_yaml, list)]
    metrics = _optional(run.metrics_file, lambda path, _: read_metrics(path), dict)
    hydra = _optional(run.hydra_file, read_yaml, dict).get("hydra")
    choices = ((hydra if isinstance(hydra, dict) else {}).get("runtime") or {}).get("choices")
    choices = {k: str(v) for k, v in choices.items()} if isinstance(choices, dict) else {}
    found = Run(path, overrides, config, metrics, curves(path), choices=choices)
    try:
        hparams = _optional(run.hparams_file, read_yaml, dict)
    except UnreadableFileError as error:  # only the knobs' values come from it: the run stays
        log.warning("%s; %s's knobs as its config gives them", one_line(error), one_line(path))
        hparams = {}
    found.used_knobs = used_knobs(hparams)
    found.running = found.state in UNFINISHED and held_elsewhere(path)
    return found


MAPPINGS = ("attention", "model", "trainer")
"""The nodes of a run's ``.hydra/config.yaml`` a summary reads settings of (the attention's
knobs, the model's name, the trainer's steps): each a mapping where there is one."""


def checked_config(path: Path, config: dict[Any, Any]) -> dict[str, Any]:
    """``config`` read from ``path`` where it has the shape Hydra writes: every key a name (a
    string) at every level, and :data:`MAPPINGS` mappings; anything else is one line
    (:class:`UnreadableFileError`), the run left out of the summary rather than ending it."""
    stack: list[tuple[str, Any]] = [("", config)]
    while stack:  # bounded: the loader took at most MAX_NODES nodes
        where, node = stack.pop()
        children = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in children:
            if isinstance(node, dict) and not isinstance(key, str):
                inside = f" under {where}" if where else ""
                raise UnreadableFileError(
                    path, f"holds the key {one_line(repr(key))[:40]}{inside}, which is no name"
                )
            if isinstance(child, dict | list):
                stack.append((f"{where}.{key}" if where else str(key), child))
    for name in MAPPINGS:
        if config.get(name) is not None and not isinstance(config[name], dict):
            raise UnreadableFileError(
                path, f"{name} holds {kind_of(config[name])} where a mapping of settings belongs"
            )
    return config


def curves(path: Path) -> Events:
    """The curves of the run in ``path`` (:data:`CURVE_TAGS`, read by
    :func:`vitattn.analysis.events.read_curves`); none, with a warning line naming the file,
    where its event files are refused."""
    try:
        return read_curves(path, CURVE_TAGS)
    except UnreadableFileError as error:
        log.warning("skipping %s", error)
        return {}


def used_knobs(hparams: dict[str, Any]) -> dict[str, Any]:
    """The attention's knobs in a run's ``hparams.yaml`` (``~attention/<knob>``), each a number,
    a word (cut to :data:`vitattn.utils.config.MAX_LABEL` characters) or a truth value; any
    other value, a file's, is left out."""
    found: dict[str, Any] = {}
    for key, value in hparams.items():
        if not isinstance(key, str) or not key.startswith(KNOB_PREFIX):
            continue
        if isinstance(value, str):
            value = cut_apart(value, MAX_LABEL)
        elif not isinstance(value, bool | int | float):
            continue
        found[cut_apart(key.removeprefix(KNOB_PREFIX), MAX_LABEL)] = value
    return found


def _optional(path: Path, read: Any, expected: type) -> Any:
    """``read(path, expected)``, or an empty ``expected`` where there is no such file."""
    return read(path, expected) if path.exists() or path.is_symlink() else expected()


def common_root(paths: Sequence[Path]) -> Path:
    """The folder the ``run`` column is relative to: the common folder of ``paths``, or its
    parent when that is one of them (a single run is named by its directory)."""
    resolved = [Path(p).resolve() for p in paths]
    root = Path(os.path.commonpath(resolved))
    return root.parent if root in resolved else root


def relative_name(run: Run, root: Path) -> str:
    """The run's folder relative to ``root``, control characters escaped (:func:`one_line`)."""
    try:
        return one_line(run.path.resolve().relative_to(root)) or "."
    except ValueError:
        return one_line(run.path.resolve())


def is_a_setting(key: str) -> bool:
    """Whether an override ``key`` says what a run trained: not one of :data:`NOT_SETTINGS`, nor
    a place (``paths.log_dir``, ``data.data_dir``: where the same run was written or read,
    :func:`vitattn.runs.recorded.says_where`), but for a ``ckpt_path`` (what a fine-tune started
    from; a resume's own is left out by :meth:`Run.setting_of_what_it_trained`)."""
    return key not in NOT_SETTINGS and (key == CHECKPOINT_KEY or not says_where(key))


def label_runs(runs: Sequence[Run], root: Path | None = None) -> None:
    """Name each run by the overrides whose values differ between ``runs`` other than
    :data:`NOT_SETTINGS` and a resume's own checkpoint (:meth:`Run.setting_of_what_it_trained`):
    ``attention=linear, model.depth=2``. Runs that differ only by seed share a label
    (the name of their common folder), hence a line; if nothing differs at all, each run is
    named by its directory (relative to ``root``, default :func:`common_root`). Decimals a
    program wrote in full (an Optuna search's) are shown to four digits where no two settings
    are then named alike (:mod:`vitattn.utils.decimals`)."""
    if not runs:
        return
    root = root if root is not None else common_root([run.path for run in runs])
    keys = list(dict.fromkeys(k for run in runs for k in run.settings if is_a_setting(k)))
    values = [{key: run.setting_of_what_it_trained(key) for key in keys} for run in runs]
    differing = [key for key in keys if len({v[key] for v in values}) > 1]
    if differing:
        labels = [label_of(value, differing, lambda text: text) for value in values]
        short = [label_of(value, differing, shown) for value in values]
        if len(set(short)) == len(set(labels)):  # no two settings shown alike
            labels = short
        for run, label in zip(runs, labels, strict=True):
            run.label = label
    elif len({str(run.seed) for run in runs}) > 1:
        for run in runs:
            run.label = one_line(root.name or root)
    else:
        for run in runs:
            run.label = relative_name(run, root)


def label_of(values: dict[str, str | None], keys: Sequence[str], show: Callable[[str], str]) -> str:
    """``key=value, ...`` of ``keys``, each value as ``show`` writes it, within
    :data:`~vitattn.utils.config.MAX_LABEL` characters (:func:`bounded`)."""
    return bounded(", ".join(f"{key}={show(values[key] or '(unset)')}" for key in keys))


def bounded(text: str) -> str:
    """Text read from a run, as a label shows it: control characters escaped, and cut to
    :data:`~vitattn.utils.config.MAX_LABEL` characters ending with a hash where longer (every
    table row, legend entry and title that shows it stays short)."""
    return cut_apart(one_line(text), MAX_LABEL)


def describe(runs: Sequence[Run], steps: bool = True) -> str:
    """What the runs share, for a title: ``model vit, attention softmax, 350 steps`` (the
    attention only when all runs share it, ``steps`` as a range when they differ)."""
    parts = []
    models = list(dict.fromkeys(run.model for run in runs if run.model != "unknown"))
    if models:
        parts.append(("model " if len(models) == 1 else "models ") + " / ".join(models))
    attentions = {run.attention for run in runs}
    if len(attentions) == 1 and "unknown" not in attentions:
        parts.append(f"attention {attentions.pop()}")
    counts = sorted({s for run in runs if (s := run.steps) is not None}) if steps else []
    if counts:
        parts.append(
            f"{counts[0]} steps"
            if len(counts) == 1
            else f"{counts[0]}\N{EN DASH}{counts[-1]} steps"
        )
    return ", ".join(parts)


def summary_row(run: Run, root: Path) -> dict[str, Any]:
    val_acc = [value for _, value in run.scalars.get("val/acc", [])]
    metrics = run.metrics
    return {
        "run": relative_name(run, root),
        "status": run.status,
        "label": run.label,
        "attention": one_line(run.attention),
        "knobs": json.dumps(run.knobs(), sort_keys=True),
        "model": one_line(run.model),
        "seed": run.seed,
        "params": metrics.get("params"),
        "best_val_acc": max(val_acc) if val_acc else None,
        "final_val_acc": val_acc[-1] if val_acc else metrics.get("val/acc"),
        "test_acc": metrics.get("test/acc"),
        "images_per_sec": metrics.get("train/images_per_sec"),
        "seconds": metrics.get("seconds"),
        "attempts": metrics.get("attempts"),
        "peak_memory_gb": metrics.get("peak_memory_gb"),
        "gflop_per_image": metrics.get("gflop_per_image"),
        "test_images": tested_images(metrics),
        "degenerate": metrics.get("degenerate"),
        "load_avg_start": metrics.get("load_avg_start"),
        "load_avg_end": metrics.get("load_avg_end"),
        "cpu_count": metrics.get("cpu_count"),
        "error": None if metrics.get("error") is None else one_line(metrics["error"]),
    }


def tested_images(metrics: dict[str, Any]) -> int | None:
    """How many images the run was tested on: the sum of its confusion matrix."""
    matrix = metrics.get("test/confusion_matrix")
    if not isinstance(matrix, list) or not matrix:
        return None
    try:
        return int(sum(sum(row) for row in matrix)) or None
    except (TypeError, ValueError, OverflowError):
        return None


def map_labels(runs: Sequence[Run], root: Path) -> list[str]:
    """Row names for the attention maps: the runs' labels, with the seed (or else the run's
    directory) added where runs share a label, since each run has a row of its own."""
    counts = Counter(run.label for run in runs)
    seeds = Counter((run.label, str(run.seed)) for run in runs)
    names = []
    for run in runs:
        if counts[run.label] == 1:
            names.append(run.label)
        elif run.seed is not None and seeds[(run.label, str(run.seed))] == 1:
            names.append(f"{run.label}, seed={run.seed}")
        else:
            names.append(relative_name(run, root))
    return names
