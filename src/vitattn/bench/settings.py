"""The settings of ``vitattn-bench``: a typed schema, and every check they get.

:class:`BenchSettings` is stored in Hydra's ConfigStore as ``bench_schema``, the first entry of
``configs/bench.yaml``'s defaults list, so composing already refuses a wrong type, choice or key.
:func:`load_settings` builds the typed settings; their ``__post_init__`` checks the ranges and,
against the attention registry, the attentions, variants, knobs and budgets. Every refusal is one
:class:`ConfigError` line (``vitattn-bench`` runs :func:`load_settings` before Hydra starts).
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from vitattn.cli.console import composition_message
from vitattn.cli.overrides import overrides_of
from vitattn.cli.validation import MAX_SEED, check_types
from vitattn.errors import ConfigError
from vitattn.utils import checks
from vitattn.utils.config import MatmulPrecision, group_options

if TYPE_CHECKING:
    import torch

# torch, the attention registry and the checkpoint reader are imported where a check needs them:
# the schema alone (what `vitattn-bench --help` and composition need) imports none of them.

SCHEMA = "bench_schema"
NOT_OURS = ("data", "paths", "hydra")
"""Nodes of the composed config that belong to the data, the paths and Hydra."""

IMPLEMENTATIONS = ("vitattn", "plain_loop", "timm", "report_style")
"""What ``mode=train`` can time (``train.implementations``)."""


class Mode(Enum):
    scaling = "scaling"
    approx = "approx"
    spectrum = "spectrum"
    train = "train"


CHECKPOINT_MODES = (Mode.approx, Mode.spectrum)
"""The modes that read ``ckpt_path``; any other refuses one rather than ignore it."""


class Level(Enum):
    kernel = "kernel"
    block = "block"


class DType(Enum):
    float32 = "float32"
    float64 = "float64"
    float16 = "float16"
    bfloat16 = "bfloat16"

    @property
    def torch(self) -> torch.dtype:
        import torch

        return getattr(torch, self.value)


# The schema. The values are in configs/bench.yaml (MISSING here: one place holds the defaults);
# a field's range is in its declaration.


MAX_THREADS = 1024
"""The most threads ``torch.set_num_threads`` is given (10**12 overflowed it after the run
directory was made)."""


def at_least(minimum: int = 1, maximum: int | None = None) -> Any:
    """An integer >= ``minimum`` (and <= ``maximum``), or null where the type allows it."""
    return field(default=MISSING, metadata={"at_least": minimum, "at_most": maximum})


def positive() -> Any:
    """A number > 0, or null where the type allows it."""
    return field(default=MISSING, metadata={"positive": True})


class Checked:
    """Checks the ranges declared by :func:`at_least` and :func:`positive`."""

    section: ClassVar[str] = ""  # the settings' prefix in configs/bench.yaml

    def __post_init__(self) -> None:
        for spec in fields(self):  # type: ignore[arg-type]
            name, value = self.section + spec.name, getattr(self, spec.name)
            if value is None:  # where the type allows it (composing refuses it elsewhere)
                continue
            if "at_least" in spec.metadata:
                checks.integer(name, value, spec.metadata["at_least"], spec.metadata["at_most"])
            if "positive" in spec.metadata:
                optional = "None" in str(spec.type)  # the annotation, as a string
                checks.positive(name, value, hint=" or null" if optional else "")


def known_option(setting: str, group: str, value: str) -> None:
    """Refuse ``value`` for ``setting`` unless it names a file of ``configs/<group>/``."""
    options = group_options(group)
    if value not in options:
        raise ConfigError(
            f"{setting}={value} is not a known {group}; choose one of: {', '.join(options)}"
        )


def sizes(setting: str, values: list[int], example: str = "[256,1024]") -> list[int]:
    """A non-empty list of integers >= 1, sorted, without repeats; ``example`` is one the
    refusal gives."""
    if not values:
        raise ConfigError(f"{setting}={values} is not valid; give a list such as {example}")
    bad = [v for v in values if v < 1]
    if bad:
        raise ConfigError(
            f"{setting} has {bad[0]!r}, which is not valid; choose integers >= 1, e.g. {example}"
        )
    return sorted(dict.fromkeys(values))


@dataclass
class GuardSettings(Checked):
    """``guard``: limits that keep ``mode=scaling`` from thrashing a shared or small machine."""

    section: ClassVar[str] = "guard."
    max_memory_bytes: Any = MISSING  # auto, a positive number or null
    max_call_seconds: float | None = positive()
    free_below: int = at_least(0)
    max_measure_seconds: float | None = positive()

    def __post_init__(self) -> None:
        super().__post_init__()
        memory = self.max_memory_bytes
        number = isinstance(memory, int | float) and not isinstance(memory, bool)
        if memory not in ("auto", None) and not (number and memory > 0):
            raise ConfigError(
                f"guard.max_memory_bytes={memory} is not valid; "
                "choose auto, a positive number or null"
            )


@dataclass
class ApproxSettings(Checked):
    """``approx``: inputs, trials and budget knobs of ``mode=approx``."""

    section: ClassVar[str] = "approx."
    seq_len: int = at_least(1)
    head_dim: int = at_least(1)
    qk_std: float = positive()
    trials: int = at_least(1)
    images: int = at_least(1)
    pixels: bool = MISSING  # also on CIFAR-10 pixel tokens (n = 1024) under random projections
    packages: bool = MISSING  # also other packages' implementations (vitattn.bench.packages)
    budgets: dict[str, Any] = MISSING  # {attention: {knob: <its setting>, values: [...]}}


@dataclass
class SpectrumSettings(Checked):
    """``spectrum``: the images and the energy of ``mode=spectrum``."""

    section: ClassVar[str] = "spectrum."
    images: int = at_least(1)
    energy: float = MISSING

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.energy <= 1:
            raise checks.invalid("spectrum.energy", self.energy, "0 < energy <= 1")


@dataclass
class TrainSettings(Checked):
    """``train``: what ``mode=train`` times, on which model, batch and precision."""

    section: ClassVar[str] = "train."
    implementations: list[str] = MISSING  # some of IMPLEMENTATIONS (vitattn always runs)
    model: str = MISSING  # a file of configs/model/
    attention: str = MISSING  # a file of configs/attention/
    batch_size: int = at_least(1)
    precision: str = MISSING  # Lightning's, e.g. 32-true or bf16-mixed
    compile: bool = MISSING
    warmup: int = at_least(0)
    steps: int = at_least(1)
    repeats: int = at_least(1)
    overrides: list[str] = MISSING  # vitattn-train overrides

    def __post_init__(self) -> None:
        unknown = [i for i in self.implementations if i not in IMPLEMENTATIONS]
        if unknown or not self.implementations:
            valid = f"from {', '.join(IMPLEMENTATIONS)}"
            raise checks.invalid("train.implementations", self.implementations, valid)
        super().__post_init__()
        known_option("train.model", "model", self.model)
        known_option("train.attention", "attention", self.attention)

    @property
    def total_steps(self) -> int:
        """Every step an implementation trains: the warm-up, then the measured windows."""
        return self.warmup + self.steps * self.repeats


@dataclass
class BenchSettings(Checked):
    """Everything ``configs/bench.yaml`` sets for the benchmark itself."""

    task_name: str = MISSING
    mode: Mode = MISSING
    attentions: list[str] | None = MISSING  # null: every registered one (approx: but reference)
    seq_lens: list[int] = MISSING  # >= 1 each
    head_dims: list[int] = MISSING
    batch_size: int = at_least(1)
    heads: int = at_least(1)
    dtype: DType = MISSING
    device: str = MISSING  # auto is resolved to cpu or cuda
    level: Level = MISSING
    mlp_ratio: float = positive()
    warmup: int = at_least(0)
    warmup_max: int = at_least(0)  # >= warmup
    settle: float = positive()
    repeats: int = at_least(1)
    steady_heap: bool = MISSING
    threads: int | None = at_least(1, MAX_THREADS)
    matmul_precision: MatmulPrecision = MISSING
    seed: int = at_least(0, MAX_SEED)  # 10**21 overflowed in every row, the check's too
    reference: str | None = MISSING
    knobs: dict[str, Any] = MISSING  # {attention or variant: {its setting: value}}
    variants: dict[str, Any] = MISSING  # {new name: {attention: <registered>, setting: value}}
    compiled: list[str] | None = MISSING  # also timed compiled, as <name>_compiled; null: each
    ckpt_path: str | None = MISSING
    guard: GuardSettings = MISSING
    approx: ApproxSettings = MISSING
    train: TrainSettings = MISSING
    spectrum: SpectrumSettings = MISSING
    # Not the bench's own: the data module's config (real images for ckpt_path) and the paths.
    # Hydra's node is not declared at all: Hydra builds it before this schema is merged, and a
    # declared ``hydra`` would replace it.
    data: Any = None
    paths: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.warmup_max < self.warmup:
            raise checks.invalid(
                "warmup_max", self.warmup_max, f"an integer >= warmup={self.warmup}"
            )
        self.seq_lens = sizes("seq_lens", self.seq_lens)
        self.head_dims = sizes("head_dims", self.head_dims, example="[32,64]")
        if self.mode is Mode.scaling and self.level is Level.block:
            self.check_mlp_width()
        # The checks against the device and the attention registry import torch: after the rest.
        from vitattn.bench.environment import resolve_device
        from vitattn.bench.kernels import compiled_variants, registered, resolve_attentions

        self.device = str(resolve_device(self.device))
        compiled = compiled_variants(self.compiled, "compiled")
        if self.compiled != [] and self.mode is not Mode.scaling:
            shown = "null" if self.compiled is None else f"[{','.join(self.compiled)}]"
            raise ConfigError(
                f"compiled={shown} times kernels compiled in mode=scaling, not "
                f"mode={self.mode.value} (mode=train compiles with train.compile)"
            )
        if self.ckpt_path not in (None, "") and self.mode not in CHECKPOINT_MODES:
            raise ConfigError(
                f"ckpt_path={self.ckpt_path} is read by mode=approx and mode=spectrum, not "
                f"mode={self.mode.value}; drop it, or choose one of those modes"
            )
        self.variants = check_variants(with_compiled_variants(self.variants, compiled))
        self.knobs = check_knobs(self.knobs, self.variants)
        if self.reference is not None:
            resolve_attentions(str(self.reference), "reference", self.variants)
        if self.attentions is None and self.mode is Mode.approx:
            self.attentions = [n for n in registered() if n != self.reference]
        else:
            self.attentions = resolve_attentions(self.attentions, variants=self.variants)
        self.attentions = with_compiled_rows(self.attentions, compiled, every=self.compiled is None)
        if self.mode is Mode.scaling:
            check_rows_build(self)
        if self.mode is Mode.approx:
            self.approx.budgets = check_budgets(self.approx.budgets, self.attentions, self.variants)
            if not self.ckpt_path:
                check_budget_rows_build(self)
        if self.mode is Mode.spectrum or (self.mode is Mode.approx and self.ckpt_path):
            images = self.approx.images if self.mode is Mode.approx else self.spectrum.images
            setting = f"{self.mode.value}.images"
            self.ckpt_path = require_checkpoint(self.ckpt_path, self.mode, {setting: images})
        if self.mode is Mode.train and "timm" in self.train.implementations:
            require_timm()

    def check_mlp_width(self) -> None:
        """``level=block``: an MLP of at least one unit at every head size (``mlp_ratio=1e-9``
        measured blocks without one, reported ``ok``)."""
        width = self.heads * min(self.head_dims)
        if width * self.mlp_ratio < 1:
            raise checks.invalid(
                "mlp_ratio",
                self.mlp_ratio,
                f"a number >= {checks.rounded_up(1 / width)}",
                f" (level=block's MLP is heads={self.heads} x head_dim={min(self.head_dims)} "
                "times it wide)",
            )

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device(self.device)


ConfigStore.instance().store(name=SCHEMA, node=BenchSettings)


def typed_settings(cfg: DictConfig, schema: type[Any], not_ours: Sequence[str] = NOT_OURS) -> Any:
    """The composed ``cfg`` as its ``schema`` dataclass, checked (its ``__post_init__``), without
    the nodes ``not_ours`` (data, paths, Hydra: interpolations only a running Hydra app
    resolves); a wrong type or value is one :class:`ConfigError` line."""
    own = cfg.copy()
    with open_dict(own):
        for key in not_ours:
            own.pop(key, None)
    try:
        settings = OmegaConf.to_object(own)
    except OmegaConfBaseException as error:
        raise ConfigError(composition_message(error)) from error
    assert isinstance(settings, schema)
    return settings


def load_settings(cfg: DictConfig) -> BenchSettings:
    """The checked settings of a composed ``bench`` config; its data settings are checked as
    ``vitattn-train`` checks them (:func:`vitattn.cli.validation.check_types`), not first where
    ``mode=approx`` or ``mode=spectrum`` builds them (a ``null`` one: as the checkpoint's run)."""
    check_data_settings(cfg)
    return typed_settings(cfg, BenchSettings)


def check_data_settings(cfg: DictConfig) -> None:
    """The data settings of ``cfg`` checked as ``vitattn-train`` checks them, but for the input
    settings left ``null`` (the bench's default of ``grayscale``, ``normalize`` and ``shift``),
    which stand for the checkpoint's run's values and are left out of the check."""
    from vitattn.data.as_trained import INPUT_SETTINGS

    data = cfg.get("data")
    if not isinstance(data, DictConfig):
        return
    given = copy.deepcopy(cfg)
    with open_dict(given):
        for key in INPUT_SETTINGS:
            if key in data and as_null(data, key):
                del given.data[key]
    check_types(given, groups=("data",))


def as_null(node: DictConfig, key: str) -> bool:
    """Whether ``node.key`` is ``null``, as given or as its interpolation resolves
    (``${oc.env:GRAYSCALE,null}``); not where it cannot be resolved (it is left in the check,
    and refused where the data is built)."""
    try:
        return node[key] is None
    except OmegaConfBaseException:
        return False


def recorded(cfg: DictConfig) -> dict[str, Any]:
    """The bench's own settings as given (not Hydra's, the paths or the data), for results.json."""
    plain = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)
    assert isinstance(plain, dict)
    return {str(k): v for k, v in plain.items() if k not in NOT_OURS}


def refuse_moved_settings(arguments: list[str]) -> list[str]:
    """``console_main``'s ``prepare`` hook: a setting that moved ends in one line saying where."""
    for override in overrides_of(arguments):
        key, _, value = override.partition("=")  # ~seed has no value
        if key.lstrip("+~") == "level" and "train" in value.split(","):
            raise ConfigError("level=train is now mode=train (its settings stay under train:)")
    return arguments


# Checks against the attention registry and configs/attention/<name>.yaml.


def check_knob_names(setting: str, attention: str, knobs: Any) -> None:
    """``knobs`` must map settings of ``configs/attention/<attention>.yaml`` to values."""
    from vitattn.bench.kernels import require_knob

    if not isinstance(knobs, dict):
        example = f"{setting}.<knob>=..."
        raise ConfigError(f"{setting}={knobs} is not valid; give settings, e.g. {example}")
    for key in knobs:
        require_knob(f"{setting}.{key}", attention, key)


def check_variants(variants: dict[str, Any], prefix: str = "variants") -> dict[str, dict[str, Any]]:
    """``variants`` (the setting ``prefix``) as ``{name: {attention: <registered>, <knob>:
    value, ...}}``, all real; ``compile: true`` times the mechanism compiled, in
    ``compile_mode`` (``reduce-overhead``: CUDA graphs) where given."""
    from vitattn.attention import ATTENTIONS
    from vitattn.bench.kernels import COMPILE, COMPILE_MODE, COMPILE_MODES, resolve_attentions

    for name, entry in variants.items():
        setting = f"{prefix}.{name}"
        if name in ATTENTIONS:
            raise ConfigError(f"{setting}: {name} is a registered attention; choose another name")
        if not isinstance(entry, dict) or "attention" not in entry:
            raise ConfigError(f"{setting} must be {{attention: <registered name>, <knob>: ...}}")
        attention = resolve_attentions([entry["attention"]], f"{setting}.attention")[0]
        compiled = COMPILE in entry and checks.flag(f"{setting}.{COMPILE}", entry[COMPILE])
        if COMPILE_MODE in entry:
            checks.one_of(f"{setting}.{COMPILE_MODE}", entry[COMPILE_MODE], COMPILE_MODES)
            if not compiled:
                raise ConfigError(
                    f"{setting}.{COMPILE_MODE}={entry[COMPILE_MODE]} needs "
                    f"{setting}.{COMPILE}=true: only a compiled variant has a mode"
                )
        knobs = {k: v for k, v in entry.items() if k not in ("attention", COMPILE, COMPILE_MODE)}
        check_knob_names(setting, attention, knobs)
    return variants


def with_compiled_variants(
    variants: dict[str, Any],
    compiled: dict[str, dict[str, Any]],
    variants_setting: str = "variants",
    compiled_setting: str = "compiled",
) -> dict[str, Any]:
    """``variants`` and the variants ``compiled`` makes (:func:`compiled_variants`), one line
    where a variant of ``variants`` has the name of one of them but other settings (it would be
    replaced without a word)."""
    for name, spec in compiled.items():
        mine = variants.get(name)
        if mine is not None and mine != spec:
            raise ConfigError(
                f"{variants_setting}.{name} and {compiled_setting}=[{spec['attention']}] both "
                f"name the row {name}; rename the variant or drop {spec['attention']} from "
                f"{compiled_setting}"
            )
    return {**variants, **compiled}


def with_compiled_rows(
    attentions: list[str], compiled: dict[str, dict[str, Any]], every: bool = False
) -> list[str]:
    """``attentions`` with each compiled variant (``compiled``, by :func:`compiled_variants`) of
    an attention measured right after its eager row; unless ``every`` (``compiled=null``), an
    attention asked compiled but not measured is one line."""
    by_attention = {spec["attention"]: name for name, spec in compiled.items()}
    missing = [attention for attention in by_attention if attention not in attentions]
    if missing and not every:
        raise ConfigError(
            f"compiled=[{','.join(missing)}] names attentions not measured "
            f"(attentions=[{','.join(attentions)}]); add them there or drop them here"
        )
    rows: list[str] = []
    for attention in attentions:
        rows.append(attention)
        if attention in by_attention and by_attention[attention] not in attentions:
            rows.append(by_attention[attention])
    return rows


def check_knobs(
    knobs: dict[str, Any], variants: dict[str, dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """``knobs`` as ``{attention or variant: {knob: value}}``, each name and knob real."""
    from vitattn.bench.kernels import resolve_attentions, split_variant

    for name, settings in knobs.items():
        resolve_attentions([name], f"knobs.{name}", variants)
        check_knob_names(f"knobs.{name}", split_variant(name, variants)[0], settings)
    return knobs


def check_rows_build(grid: BenchSettings) -> None:
    """Refuse in one line the settings of a row that its mechanism refuses at every size of the
    grid (``knobs.linformer.k=-3``): measured, the row would only be ``unsupported`` at each
    size. A row refused at some sizes only (``knobs.linformer.k=512`` with ``seq_lens=[256,
    1024]``) is measured, and its status says where it was refused."""
    from vitattn.bench.kernels import as_given, refused_at_every_size, split_variant

    assert grid.attentions is not None
    for row in grid.attentions:
        attention, settings = split_variant(row, grid.variants, grid.knobs)
        if not settings:
            continue  # the config's defaults: every mechanism builds at every size
        refusal = refused_at_every_size(
            attention, settings, grid.seq_lens, grid.head_dims, grid.heads
        )
        if refusal is not None:
            named = as_given(str(refusal), row, grid.knobs, grid.variants)
            sizes = f"seq_lens={list(grid.seq_lens)}, head_dims={list(grid.head_dims)}"
            raise refused_row(row, refusal, named, f"every size: {sizes}")


def refused_row(row: str, refusal: ConfigError, named: str, where: str) -> ConfigError:
    """The one line refusing row ``row`` before the bench runs: its mechanism's ``refusal``
    with the setting ``named`` as given (after the row's name where it names a default of the
    mechanism's config), and ``where`` it was refused."""
    shown = named if named != str(refusal) else f"{row}: {named}"
    return ConfigError(f"{shown} (refused at {where})")


PIXEL_TOKENS = 1024
"""Tokens of ``approx.pixels``' inputs: one per pixel of a CIFAR-10 image."""


def check_budget_rows_build(grid: BenchSettings) -> None:
    """``mode=approx``: refuse in one line the settings of a row that its mechanism refuses at
    every value of its budget (``approx.budgets.linformer.values=[-3]``, or ``knobs.<row>`` it
    refuses whatever the budget), at the inputs' sizes: measured, the row would only be
    ``unsupported`` at each value. A row refused at some values only is measured, and their
    statuses say why. Not with ``ckpt_path``: the checkpoint's inputs have their own n and d,
    known once it is read, and its rows say what they refuse."""
    from vitattn.bench.kernels import as_budgeted, refused_at_every_size, split_variant

    assert grid.attentions is not None
    approx = grid.approx
    seq_lens = [approx.seq_len] + ([PIXEL_TOKENS] if approx.pixels else [])
    for row in grid.attentions:
        attention, settings = split_variant(row, grid.variants, grid.knobs)
        entry = approx.budgets.get(row) or {"knob": "", "values": [None]}
        if not settings and not entry["knob"]:
            continue  # the config's defaults
        first: ConfigError | None = None
        for value in entry["values"]:
            if entry["knob"]:
                settings[entry["knob"]] = value
            refusal = refused_at_every_size(
                attention, settings, seq_lens, [approx.head_dim], grid.heads
            )
            if refusal is None:
                break  # measured: the refused values' rows say why
            first = first or refusal
        else:
            assert first is not None
            named = as_budgeted(str(first), row, entry["knob"], grid.knobs, grid.variants)
            values = f"each of approx.budgets.{row}.values={entry['values']}, at "
            sizes = f"approx.seq_len={approx.seq_len}"
            sizes += f" (and {PIXEL_TOKENS}: approx.pixels)" if approx.pixels else ""
            where = f"{values if entry['knob'] else ''}{sizes}, approx.head_dim={approx.head_dim}"
            raise refused_row(row, first, named, where)


def check_budgets(
    budgets: dict[str, Any],
    attentions: Sequence[str],
    variants: dict[str, dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """``approx.budgets`` entries of the selected attentions: a real knob and a list of values.

    Entries of mechanisms that are not selected (or not built yet) are ignored.
    """
    from vitattn.bench.kernels import attention_config_path, require_knob, split_variant

    checked: dict[str, dict[str, Any]] = {}
    for name in attentions:
        entry = budgets.get(name)
        if not entry:
            continue
        setting = f"approx.budgets.{name}"
        attention = split_variant(name, variants)[0]
        if not attention_config_path(attention).is_file():
            checked[name] = entry  # building it will fail and say so in its row
            continue
        if not isinstance(entry, dict) or "knob" not in entry or "values" not in entry:
            raise ConfigError(f"{setting} must be {{knob: <setting>, values: [...]}}")
        require_knob(f"{setting}.knob={entry['knob']}", attention, entry["knob"])
        values = entry["values"]
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{setting}.values={values} is not valid; give a list of values")
        checked[name] = {"knob": entry["knob"], "values": values}
    return checked


def require_checkpoint(path: str | None, mode: Mode, batches: dict[str, int] | None = None) -> str:
    """``path``, a checkpoint refused in one line where it may carry code, or where its network
    does not build, or builds a tensor larger than the process can use over the images of
    ``batches`` (``{"approx.images": 8}``; :func:`vitattn.loading.checked_checkpoint`)."""
    from vitattn.loading import checked_checkpoint

    if path in (None, "", "???"):
        raise ConfigError(
            f"ckpt_path is required for mode={mode.value}: "
            f"vitattn-bench mode={mode.value} ckpt_path=<run>/checkpoints/last.ckpt"
        )
    if not Path(str(path)).expanduser().is_file():
        raise ConfigError(f"ckpt_path={path} is not a file; pass a .ckpt saved by vitattn-train")
    # refuses, before anything runs, a file that may carry code, and a forward that cannot fit
    # (the bench captures q, k, v on the CPU: vitattn.bench.capture.checkpoint_qkv)
    checked_checkpoint(str(path), "vitattn-bench", batches=batches)
    return str(path)


def require_timm() -> None:
    if importlib.util.find_spec("timm") is None:
        raise ConfigError(
            "train.implementations includes timm, which is not installed; "
            'pip install -e ".[bench]" or drop timm from the list'
        )
