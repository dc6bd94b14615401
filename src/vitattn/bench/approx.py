"""How far each approximation is from exact softmax attention (``vitattn-bench mode=approx``).

For each mechanism and each value of its *budget knob* (Linformer's ``k``, Nyström's
``landmarks``, the random features' ``num_features``, a window...: the table
``approx.budgets`` in ``configs/bench.yaml``), the kernel is built from its config with that
value and run in evaluation mode on the same q, k, v as the reference

    A = softmax(Q K^T / sqrt(d)),  O = A V     (computed in float64).

Two relative Frobenius errors are reported, over all batch items and heads together:

* ``output_rel_error`` = |O~ - O| / |O|, for every mechanism;
* ``matrix_rel_error`` = |A~ - A| / |A|, where the mechanism has an n x n matrix A~. A kernel
  with an ``attention_matrix(q, k)`` method gives it directly. Otherwise the matrix its forward
  *implies* is probed: every attention mechanism is linear in V (O~ = A~ V), so feeding the
  columns of the identity matrix as values, ``head_dim`` at a time, returns A~ column by column
  (n / head_dim forward calls). The probe is kept only if A~ V reproduces the kernel's own output
  on the real V (relative difference below 1e-3); a kernel not linear in V gets no matrix error.

Randomised kernels (random features) are rebuilt ``approx.trials`` times with different seeds and
the errors averaged (the standard deviation is reported too). Learned parameters (Linformer's
E and F) keep their initialisation: the error of an untrained projection, also on q, k, v taken
from a trained checkpoint. :func:`run_approx` measures what the settings select: random inputs,
and with ``ckpt_path`` every layer's q, k, v on real images.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from vitattn.attention.common.base import AttentionKernel
from vitattn.attention.common.probe import implied_matrix, relative_error, softmax_reference
from vitattn.bench.capture import QKV, checkpoint_qkv, pixel_qkv
from vitattn.bench.environment import environment
from vitattn.bench.kernels import as_budgeted, build_kernel, failure_status, split_variant
from vitattn.bench.packages import PACKAGES
from vitattn.bench.settings import BenchSettings
from vitattn.errors import ConfigError
from vitattn.runs.results import number

log = logging.getLogger(__name__)


@dataclass
class ApproxRow:
    """One line of ``approx.csv``."""

    attention: str
    implementation: str  # "vitattn", or the package of vitattn.bench.packages.PACKAGES
    knob: str
    budget: Any
    source: str  # "random" or "checkpoint"
    seq_len: int
    head_dim: int
    output_rel_error: float | None = None  # mean over the trials
    output_rel_error_std: float | None = None
    matrix_rel_error: float | None = None  # None: no n x n matrix to compare
    matrix_rel_error_std: float | None = None
    matrix_method: str = ""  # attention_matrix, probe, or why there is none
    trials: int = 0
    status: str = "ok"


@dataclass(frozen=True)
class Budget:
    """The knob that sets a mechanism's budget and the values to try (knob "" = defaults)."""

    knob: str
    values: tuple[Any, ...]


def budget_of(name: str, budgets: Mapping[str, Mapping[str, Any]]) -> Budget:
    """The budget entry of ``name`` in ``approx.budgets``; a mechanism without one runs once."""
    entry = budgets.get(name)
    if not entry:
        return Budget("", (None,))
    return Budget(str(entry["knob"]), tuple(entry["values"]))


@torch.no_grad()
def errors_of(
    kernel: torch.nn.Module,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    reference: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[float, float | None, str]:
    """``(output error, matrix error or None, matrix method)`` of one kernel on q, k, v."""
    kernel.eval()
    exact_matrix, exact_out = reference if reference is not None else softmax_reference(q, k, v)
    out = kernel(q, k, v)
    matrix, method = implied_matrix(kernel, q, k, v, out)
    matrix_error = None if matrix is None else relative_error(matrix, exact_matrix)
    return relative_error(out, exact_out), matrix_error, method


def _mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None, None
    return statistics.fmean(finite), statistics.pstdev(finite) if len(finite) > 1 else 0.0


def measure_row(
    row: ApproxRow,
    build: Builder,
    qkv: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    reference: tuple[torch.Tensor, torch.Tensor],
    *,
    trials: int,
    seed: int,
    named: Callable[[str], str] = str,
) -> None:
    """Fill ``row``: errors of the kernels ``build`` returns, one per seed of ``trials``,
    averaged; a setting the kernel refuses is ``named`` as given in the row's status."""
    q, k, v = qkv
    outputs: list[float] = []
    matrices: list[float] = []
    for trial in range(trials):
        torch.manual_seed(seed + trial)
        try:
            kernel = build().to(device=q.device, dtype=q.dtype)
            output, matrix, row.matrix_method = errors_of(kernel, q, k, v, reference)
        except Exception as error:
            row.status = failure_status(error, named)
            return
        outputs.append(output)
        if matrix is not None:
            matrices.append(matrix)
    row.trials = trials
    row.output_rel_error, row.output_rel_error_std = _mean_std(outputs)
    row.matrix_rel_error, row.matrix_rel_error_std = _mean_std(matrices)


Builder = Callable[[], torch.nn.Module]


def builders(
    attention: str, settings: Mapping[str, Any], shape: tuple[int, int, int], packages: bool
) -> list[tuple[str, Builder | str]]:
    """``[("vitattn", build ours), (package, build the package's or why it cannot run)]`` for
    ``attention`` with ``settings`` on ``(heads, tokens, head_dim)`` inputs; the package only with
    ``packages`` and where :data:`~vitattn.bench.packages.PACKAGES` has one."""
    heads, tokens, head_dim = shape
    knobs = dict(settings)

    def ours() -> AttentionKernel:
        return build_kernel(attention, seq_len=tokens, heads=heads, head_dim=head_dim, knobs=knobs)

    found: list[tuple[str, Builder | str]] = [("vitattn", ours)]
    package = PACKAGES.get(attention) if packages else None
    if package is not None and package.installed:
        found.append((package.name, lambda: package.build(ours())))
    elif package is not None:
        found.append((package.name, f"missing: pip install {package.name} (or vitattn[bench])"))
    return found


def approximation_errors(
    attentions: Sequence[str],
    budgets: Mapping[str, Mapping[str, Any]],
    inputs: Mapping[str, QKV],
    *,
    trials: int = 1,
    seed: int = 0,
    knobs: Mapping[str, Mapping[str, Any]] | None = None,
    variants: Mapping[str, Mapping[str, Any]] | None = None,
    packages: bool = False,
) -> list[ApproxRow]:
    """Every attention x budget value x input source (``{"random": (q, k, v), ...}``); with
    ``packages``, each followed by the same settings in the package that implements it
    (:data:`~vitattn.bench.packages.PACKAGES`), on the same inputs and seeds."""
    rows: list[ApproxRow] = []
    for source, qkv in inputs.items():
        reference = softmax_reference(*qkv)
        heads, tokens, head_dim = qkv[0].shape[1:]
        for name in attentions:
            attention, settings = split_variant(name, variants, knobs)
            budget = budget_of(name, budgets)

            def named(message: str, name: str = name, knob: str = budget.knob) -> str:
                return as_budgeted(message, name, knob, knobs, variants)

            for value in budget.values:
                if budget.knob:
                    settings[budget.knob] = value
                shape = (heads, tokens, head_dim)
                for implementation, build in builders(attention, settings, shape, packages):
                    row = ApproxRow(
                        name, implementation, budget.knob, value, source, tokens, head_dim
                    )
                    if isinstance(build, str):
                        row.status = build
                    else:
                        measure_row(
                            row, build, qkv, reference, trials=trials, seed=seed, named=named
                        )
                    rows.append(row)
                    log.info(
                        "%s (%s) %s=%s on %s: output error %s, matrix error %s (%s)",
                        name, implementation, budget.knob or "default", value, source,
                        number(row.output_rel_error), number(row.matrix_rel_error),
                        row.status if row.status != "ok" else row.matrix_method,
                    )  # fmt: skip
    return rows


def random_qkv(
    batch: int,
    heads: int,
    seq_len: int,
    head_dim: int,
    *,
    std: float = 1.0,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gaussian q, k, v; with the 1/sqrt(d) scale the logits have standard deviation std^2."""
    generator = torch.Generator().manual_seed(seed)
    shape = (batch, heads, seq_len, head_dim)
    q, k, v = (torch.randn(shape, generator=generator) for _ in range(3))
    return tuple(t.to(device=device, dtype=dtype) * s for t, s in ((q, std), (k, std), (v, 1.0)))  # type: ignore[return-value]


@dataclass
class ApproxRun:
    """What ``mode=approx`` measured, and on what."""

    attentions: list[str]
    rows: list[ApproxRow]
    environment: dict[str, Any]


PIXEL_TOKENS = 32 * 32
"""The tokens of one CIFAR-10 image taken pixel by pixel (``approx.pixels``)."""


def exact_bytes(batch: int, heads: int, tokens: int, head_dim: int) -> int:
    """What the exact attention of ``batch`` inputs holds at once, in float64: its scores and
    its weights (``tokens`` squared each), and q, k, v and the output."""
    return 8 * batch * heads * (2 * tokens * tokens + 4 * tokens * head_dim)


def check_approx_size(settings: BenchSettings) -> None:
    """Refuse in one line a ``mode=approx`` whose exact attention alone would pass the memory
    guard (``guard.max_memory_bytes``; ``auto``: half the RAM on a CPU, the device's memory on
    a GPU): ``approx.images=10**12`` with ``approx.pixels`` filled the RAM until the kernel
    killed the bench, with no line, and a huge ``approx.seq_len`` ended in ``unexpected
    RuntimeError`` once the run directory was made (red team). The inputs of a checkpoint are
    sized by it, and not checked here."""
    from vitattn.bench.environment import memory_limit
    from vitattn.bench.scaling import size

    limit = settings.guard.max_memory_bytes
    if limit == "auto":
        limit = memory_limit(settings.torch_device)
    if limit is None:
        return
    approx, heads = settings.approx, settings.heads
    inputs = [("approx.seq_len", settings.batch_size, approx.seq_len)]
    if approx.pixels:
        inputs.append(("approx.images", approx.images, PIXEL_TOKENS))
    for setting, batch, tokens in inputs:
        need = exact_bytes(batch, heads, tokens, approx.head_dim)
        if need > limit:
            raise ConfigError(
                f"{setting}: the exact attention of {batch} inputs x {heads} heads x {tokens} "
                f"tokens (approx.head_dim={approx.head_dim}) alone holds {size(need)}, more than "
                f"the memory guard's {size(limit)} (guard.max_memory_bytes); lower it"
            )


def run_approx(settings: BenchSettings, data_cfg: DictConfig) -> ApproxRun:
    """``mode=approx``: every selected attention x budget on random inputs, with ``ckpt_path``
    on the checkpoint's q, k, v of real images (``data_cfg``), with ``approx.pixels`` on pixel
    tokens of real images (:func:`~vitattn.bench.capture.pixel_qkv`)."""
    device, dtype, approx = settings.torch_device, settings.dtype.torch, settings.approx
    shape = (settings.batch_size, settings.heads, approx.seq_len, approx.head_dim)
    random = random_qkv(*shape, std=approx.qk_std, seed=settings.seed, dtype=dtype, device=device)
    inputs = {"random": random}
    if settings.ckpt_path:
        layers = checkpoint_qkv(settings.ckpt_path, data_cfg, approx.images)
        # All layers' q, k, v as one batch: the error over the whole model's attention.
        q, k, v = (torch.cat([layer[i] for layer in layers]) for i in range(3))
        inputs["checkpoint"] = (q.to(device, dtype), k.to(device, dtype), v.to(device, dtype))
    if approx.pixels:
        data = OmegaConf.create(
            {key: value for key, value in data_cfg.items() if value is not None}
        )  # no checkpoint to fill the nulls from: the data module's defaults
        qkv = pixel_qkv(data, approx.images, settings.heads, approx.head_dim, seed=settings.seed)
        inputs["pixels"] = tuple(t.to(device, dtype) for t in qkv)  # type: ignore[assignment]
    attentions = settings.attentions or []
    rows = approximation_errors(
        attentions, approx.budgets, inputs, trials=approx.trials, seed=settings.seed,
        knobs=settings.knobs, variants=settings.variants, packages=approx.packages,
    )  # fmt: skip
    return ApproxRun(attentions, rows, environment(device))
