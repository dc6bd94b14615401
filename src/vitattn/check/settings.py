"""The settings of ``vitattn-check``: a typed schema in Hydra's ConfigStore (``check_schema``,
first in ``configs/check.yaml``'s defaults) and the checks composing cannot make. Every refusal is
one :class:`~vitattn.errors.ConfigError` line, raised before the run directory exists."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig

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
from vitattn.cli.validation import check_types
from vitattn.errors import ConfigError
from vitattn.utils.config import MatmulPrecision, gpu_precision

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
    seed: int = MISSING
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
        if self.device == Device.gpu.value and not torch.cuda.is_available():
            raise ConfigError(
                "device=gpu: no CUDA GPU is visible here; vitattn-check device=cpu is the dry run"
            )
        if self.training.precision == "auto":
            gpu = self.device == Device.gpu.value
            self.training.precision = gpu_precision() if gpu else "32-true"

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
    return typed_settings(cfg, CheckSettings, NOT_OURS)
