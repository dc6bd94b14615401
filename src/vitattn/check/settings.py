"""The settings of ``vitattn-check``: a typed schema in Hydra's ConfigStore (``check_schema``,
first in ``configs/check.yaml``'s defaults) and the checks composing cannot make. Every refusal is
one :class:`~vitattn.errors.ConfigError` line, raised before the run directory exists."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from vitattn.bench.settings import (
    Checked,
    DType,
    at_least,
    check_variants,
    known_option,
    positive,
    sizes,
    typed_settings,
    with_compiled_variants,
)
from vitattn.cli.additions import did_you_mean
from vitattn.cli.validation import MAX_SEED, check_types
from vitattn.errors import ConfigError
from vitattn.utils.config import CONFIG_DIR, MatmulPrecision, gpu_precision

if TYPE_CHECKING:
    import torch

# torch and the attention registry are imported where a check needs them (as in
# vitattn.bench.settings): the schema alone imports neither.

SCHEMA = "check_schema"
NOT_OURS = ("data", "paths", "hydra")


class Section(Enum):
    numerics = "numerics"
    training = "training"
    reference = "reference"
    kernels = "kernels"


class Device(Enum):
    gpu = "gpu"
    cpu = "cpu"


@dataclass
class NumericsSettings(Checked):
    """``numerics``: the q, k, v every attention gets, and the dtypes compared with fp32 on CPU."""

    section: ClassVar[str] = "numerics."
    batch_size: int = at_least(1)
    heads: int = at_least(1)
    seq_len: int = at_least(1)
    head_dim: int = at_least(1)
    stress_scale: float = positive()
    dtypes: list[DType] = MISSING

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.dtypes:  # it compared nothing and said no problem
            raise ConfigError(
                "numerics.dtypes=[] is not valid; choose one or more of "
                f"{', '.join(d.value for d in DType)}"
            )


@dataclass
class TrainingSettings(Checked):
    """``training``: the short training of every attention."""

    section: ClassVar[str] = "training."
    model: str = MISSING
    batch_size: int = at_least(1)
    steps: int = at_least(4)
    precision: str = MISSING  # auto or Lightning's (32-true, bf16-mixed, 16-mixed)
    compile: bool = MISSING  # also train each attention compiled, beside its eager row
    overrides: list[str] = MISSING

    def __post_init__(self) -> None:
        super().__post_init__()
        known_option("training.model", "model", self.model)


@dataclass
class ReferenceSettings(Checked):
    """``reference``: the steps of ours and timm's ViT, timed as ``vitattn-bench mode=train``."""

    section: ClassVar[str] = "reference."
    warmup: int = at_least(0)
    steps: int = at_least(1)
    repeats: int = at_least(1)
    compile: bool = MISSING  # ours and timm's also compiled, beside their eager rows


@dataclass
class KernelSettings(Checked):
    """``kernels``: the sequence lengths and sizes of the forward+backward timings."""

    section: ClassVar[str] = "kernels."
    seq_lens: list[int] = MISSING
    dtype: DType = MISSING
    batch_size: int = at_least(1)
    heads: int = at_least(1)
    head_dim: int = at_least(1)
    repeats: int = at_least(1)
    max_call_seconds: float | None = positive()
    variants: dict[str, Any] = MISSING  # {name: {attention: <registered>, <knob>: value}}
    compiled: list[str] | None = MISSING  # also timed compiled, as <name>_compiled; null: each

    def __post_init__(self) -> None:
        super().__post_init__()
        self.seq_lens = sizes("kernels.seq_lens", self.seq_lens)
        from vitattn.bench.kernels import compiled_variants

        compiled = compiled_variants(self.compiled, "kernels.compiled")
        variants = with_compiled_variants(
            self.variants, compiled, "kernels.variants", "kernels.compiled"
        )
        self.variants = check_variants(variants, "kernels.variants")


@dataclass
class CheckSettings(Checked):
    """Everything ``configs/check.yaml`` sets; the sizes follow ``device`` (``profiles``)."""

    task_name: str = MISSING
    device: str = MISSING  # a Device's value; a string, as the sizes' interpolations need one
    attentions: list[str] | None = MISSING
    seed: int = at_least(0, MAX_SEED)
    matmul_precision: MatmulPrecision = MISSING
    sections: list[Section] = MISSING
    numerics: NumericsSettings = MISSING
    training: TrainingSettings = MISSING
    reference: ReferenceSettings = MISSING
    kernels: KernelSettings = MISSING
    profiles: dict[str, Any] = MISSING  # the sizes per device, read by the sections' defaults
    data: Any = None
    paths: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        import torch

        from vitattn.bench.kernels import resolve_attentions

        self.attentions = resolve_attentions(self.attentions)
        if not self.sections:  # it checked nothing and exited 0
            every = ", ".join(section.value for section in Section)
            raise ConfigError(f"sections=[] is not valid; choose one or more of {every}")
        if self.device == Device.gpu.value and not torch.cuda.is_available():
            raise ConfigError(
                "device=gpu: no CUDA GPU is visible here; vitattn-check device=cpu is the dry run"
            )
        if Section.numerics in self.sections:
            self.check_numerics_size()
        if self.training.precision == "auto":
            gpu = self.device == Device.gpu.value
            self.training.precision = gpu_precision() if gpu else "32-true"

    def check_numerics_size(self) -> None:
        """Refuse in one line numerics whose exact attention alone would hold more than half
        the RAM (a CPU) or the device's memory (a GPU): ``numerics.seq_len=10**12`` ended in
        ``unexpected RuntimeError`` once the run directory was made (red team)."""
        from vitattn.bench.approx import exact_bytes
        from vitattn.bench.environment import memory_limit
        from vitattn.bench.scaling import size

        limit = memory_limit(self.torch_device)
        numerics = self.numerics
        need = exact_bytes(numerics.batch_size, numerics.heads, numerics.seq_len, numerics.head_dim)
        if limit is not None and need > limit:
            raise ConfigError(
                f"numerics.seq_len={numerics.seq_len}: the exact attention of "
                f"{numerics.batch_size} inputs x {numerics.heads} heads (numerics.head_dim="
                f"{numerics.head_dim}) alone holds {size(need)}, more than {size(limit)} (half "
                "the RAM, or the GPU's memory); lower it"
            )

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device("cuda" if self.device == Device.gpu.value else "cpu")


ConfigStore.instance().store(name=SCHEMA, node=CheckSettings)


def load_settings(cfg: DictConfig) -> CheckSettings:
    """The checked settings of a composed ``check`` config (without the data, paths and Hydra
    nodes, whose interpolations only a running Hydra app resolves); its data settings are
    checked as ``vitattn-train`` checks them (:func:`vitattn.cli.validation.check_types`), not
    first when the training section builds them."""
    devices = [d.value for d in Device]
    if cfg.get("device") not in devices:
        raise ConfigError(f"device={cfg.get('device')} is not valid; choose {' or '.join(devices)}")
    check_types(cfg, groups=("data",))
    check_profiles(cfg)
    return typed_settings(cfg, CheckSettings, NOT_OURS)


def check_profiles(cfg: DictConfig) -> None:
    """Every key of ``profiles`` is one a section reads: a device's name, a section's, and a
    setting the section takes from its device's profile (``numerics.seq_len`` is
    ``${profiles.${device}.numerics.seq_len}``); else one line naming it and what is read
    (``+profiles.cpu.numerics.seq_lens=[64]`` was taken and nothing read it)."""
    profiles = cfg.get("profiles")
    if not isinstance(profiles, DictConfig):
        return  # the schema refuses a profiles that is not a mapping
    devices = [d.value for d in Device]
    for device in profiles:
        if device not in devices:
            raise ConfigError(
                f"profiles.{device} is not read; a profile is a device's: {' or '.join(devices)}"
            )
        profile = profiles._get_node(device)
        if not isinstance(profile, DictConfig) or profile._is_interpolation():
            continue  # the sections' interpolations refuse it when they read it
        for section in profile:
            read = profile_keys(str(section))
            where = f"profiles.{device}.{section}"
            if not read:
                sections = [s.value for s in Section]
                raise ConfigError(
                    f"{where} is not read; {did_you_mean(str(section), sections)}a profile gives "
                    f"{', '.join(sections)}"
                )
            sizes = profile._get_node(section)
            if not isinstance(sizes, DictConfig) or sizes._is_interpolation():
                continue
            unread = [str(key) for key in sizes if key not in read]
            if unread:
                raise ConfigError(
                    f"{where}.{unread[0]} is not read; {did_you_mean(unread[0], read)}a "
                    f"profile's {section} gives {', '.join(read)}"
                )


@functools.cache
def profile_keys(section: str) -> list[str]:
    """The settings of ``section`` (``numerics``) that ``configs/check.yaml`` takes from the
    device's profile, those whose value there is ``${profiles.${device}.<section>.<setting>}``
    (a command line may set one instead: ``numerics.seq_len=2048``)."""
    written = OmegaConf.load(CONFIG_DIR / "check.yaml")
    node = written.get(section) if section in [s.value for s in Section] else None
    if not isinstance(node, DictConfig):
        return []
    return [
        str(key)
        for key in node
        if node._get_node(key)._is_interpolation()
        and node._get_node(key)._value() == f"${{profiles.${{device}}.{section}.{key}}}"
    ]
