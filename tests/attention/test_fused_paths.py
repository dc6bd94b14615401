"""``impl=triton`` of linear, Taylor, efficient, Performer and random feature attention (the
fused kernels of :mod:`vitattn.attention.fused`) against each mechanism's plain path
(``impl=torch``; the feature maps' ``impl=autograd``): outputs and gradients, odd shapes,
strides, half precision, large logits, zero vectors, a binding floor, FLOPs, one compiled graph,
and the refusal where it cannot run.

Where a GPU is, the kernels run on it. Without one they run in Triton's interpreter on the CPU
(the same kernel code), which needs ``TRITON_INTERPRET=1`` before Triton is imported: here the
tests that need the kernels skip, and :func:`test_every_fused_test_passes_in_tritons_interpreter`
runs this file again in a child process started with it, where they run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from vitattn.attention.common.base import AttentionKernel
from vitattn.attention.efficient import EfficientAttention
from vitattn.attention.linear import LinearAttention
from vitattn.attention.performer import PerformerAttention
from vitattn.attention.random_feature import RandomFeatureAttention
from vitattn.attention.taylor import TaylorAttention
from vitattn.errors import ConfigError

triton = pytest.importorskip("triton")
tl = triton.language

from triton.runtime.autotuner import Autotuner  # noqa: E402 (needs Triton)

from vitattn.attention.fused.fourier_kernels import _sin_cos  # noqa: E402 (needs Triton)


@pytest.fixture(autouse=True)
def full_float32_products() -> Iterator[None]:
    """Both paths' float32 products at full precision (an in-process training run before may
    have left TF32 on), so that they agree to float32's tolerance."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


def interpreted() -> bool:
    from vitattn.attention.fused import tiles

    return tiles.INTERPRETED


def tuned_kernels(mechanism: str) -> list[Autotuner]:
    """The kernels ``tiles.tuned`` tunes of a feature map's fused path (``performer``,
    ``performer_authors`` or ``random_feature``)."""
    from vitattn.attention.fused import favor_kernels, fourier_kernels

    module = fourier_kernels if mechanism == "random_feature" else favor_kernels
    return [value for value in vars(module).values() if isinstance(value, Autotuner)]


@pytest.fixture(autouse=True)
def one_configuration_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU each tuned kernel launches its first configuration (Triton's default) untimed,
    as in the interpreter: the tuner would compile and time every configuration at each new
    shape and dtype of this file, minutes of it (it was cut by a 150 s cap on an H200 while
    Triton compiled). Every configuration runs in
    :func:`test_every_configuration_the_tuner_tries_computes_the_plain_paths_function`."""
    if not torch.cuda.is_available():
        return
    for mechanism in ("performer", "random_feature"):
        for tuner in tuned_kernels(mechanism):
            monkeypatch.setattr(tuner, "configs", tuner.configs[:1])


@pytest.fixture
def device() -> torch.device:
    """Where the fused kernels run: the GPU, or the CPU in a process that interprets them."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if interpreted():
        return torch.device("cpu")
    pytest.skip("no GPU: run in Triton's interpreter by test_every_fused_test_passes_in_...")


@dataclass(frozen=True)
class Fusable:
    """A mechanism with a fused path, the ``impl`` it is tested against, its other settings."""

    kind: type[AttentionKernel]
    reference: str = "torch"
    settings: dict[str, object] = field(default_factory=dict)
    others: str = "auto | torch | triton"
    """What its ``impl`` may be, as the refusal of another value says."""
    fallback: str = "impl=torch or impl=auto"
    """What the refusal of ``impl=triton`` where it cannot run offers instead."""


MECHANISMS = {
    "linear": Fusable(LinearAttention),
    "taylor": Fusable(TaylorAttention),
    "efficient": Fusable(EfficientAttention),
    # 80 features: a whole block of 64 and a part of one
    "performer": Fusable(
        PerformerAttention,
        reference="autograd",
        settings={"num_features": 80, "redraw_interval": 0},
        others="auto | chunked | autograd | triton",
        fallback="impl=chunked, impl=autograd or impl=auto",
    ),
    "performer_authors": Fusable(
        PerformerAttention,
        reference="autograd",
        settings={"num_features": 80, "redraw_interval": 0, "stabilizer": "authors"},
        others="auto | chunked | autograd | triton",
        fallback="impl=chunked, impl=autograd or impl=auto",
    ),
    # 40 frequencies: a whole block of 32 and a part of one; normalize=true (the default, a
    # bounded estimate; with the keys' norms kept, the estimate's outputs reach tens and its
    # gradients thousands at these inputs: the floor's test keeps them)
    "random_feature": Fusable(
        RandomFeatureAttention,
        reference="autograd",
        settings={"num_features": 40, "redraw": False},
        others="auto | chunked | autograd | triton",
        fallback="impl=chunked, impl=autograd or impl=auto",
    ),
}


@pytest.fixture(params=sorted(MECHANISMS))
def mechanism(request: pytest.FixtureRequest) -> str:
    return request.param


def kernels(
    name: str, n: int, heads: int, d: int, device: torch.device
) -> tuple[AttentionKernel, AttentionKernel]:
    """The fused path and its reference, with the same random weights (Performer's)."""
    fusable = MECHANISMS[name]
    settings = dict(seq_len=n, heads=heads, head_dim=d, **fusable.settings)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(n * heads * d)  # the same random weights in any order of the tests
        fused = fusable.kind(**settings, impl="triton").to(device)
    reference = fusable.kind(**settings, impl=fusable.reference).to(device)
    reference.load_state_dict(fused.state_dict())
    return fused, reference


def inputs(
    shape: tuple[int, ...], device: torch.device, dtype: torch.dtype = torch.float32, scale=1.0
) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(sum(shape))
    return [
        (torch.randn(shape, generator=generator) * scale).to(device, dtype).requires_grad_()
        for _ in range(3)
    ]


def outputs_and_grads(
    kernel: AttentionKernel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> list[torch.Tensor]:
    out = kernel(q, k, v)
    grad_out = torch.linspace(-1, 1, out.numel(), device=out.device).view_as(out).to(out.dtype)
    return [out, *torch.autograd.grad(out, (q, k, v), grad_out)]


@pytest.mark.parametrize(
    "shape",
    [
        (2, 3, 70, 16),  # rows not a whole number of blocks
        (1, 2, 33, 8),  # head_dim below tl.dot's least side (16): padded
        (1, 1, 130, 24),  # head_dim no power of two
        (1, 2, 200, 64),  # the GPU profile's head_dim
        (1, 1, 100, 72),  # 128-wide feature blocks: 32 rows per block
    ],
)
def test_the_fused_kernels_compute_the_plain_paths_function(mechanism, device, shape) -> None:
    fused, plain = kernels(mechanism, shape[2], shape[1], shape[3], device)
    q, k, v = inputs(shape, device)
    for got, want in zip(
        outputs_and_grads(fused, q, k, v), outputs_and_grads(plain, q, k, v), strict=True
    ):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_strided_inputs_are_read_where_they_lie(mechanism, device) -> None:
    """q, k, v as the multi-head split leaves them: views of (batch, n, heads, d), not copies."""
    fused, plain = kernels(mechanism, 40, 4, 16, device)
    strided = [x.detach().transpose(1, 2).requires_grad_() for x in inputs((2, 40, 4, 16), device)]
    assert not strided[0].is_contiguous()
    contiguous = [x.detach().contiguous().requires_grad_() for x in strided]
    got = outputs_and_grads(fused, *strided)
    want = outputs_and_grads(plain, *contiguous)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs_give_the_plain_paths_result_in_their_dtype(
    mechanism, device, dtype
) -> None:
    """Both paths compute in fp32 and round the output and gradients to the inputs' dtype."""
    fused, plain = kernels(mechanism, 96, 2, 32, device)
    q, k, v = inputs((1, 2, 96, 32), device, dtype)
    got, want = outputs_and_grads(fused, q, k, v), outputs_and_grads(plain, q, k, v)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == dtype
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)


def test_large_logits_stay_finite_and_agree(mechanism, device) -> None:
    """q and k scaled by 10: for linear, phi(x) = exp(x) down to e^-40 on one side, x + 1 on the
    other; Taylor's unit vectors do not change, their gradients shrink tenfold; efficient's
    softmaxes saturate, the keys' maximum over the sequence moving from block to block and
    split to split (three blocks of rows, two splits on a CPU); Performer's logits reach about
    80 and its gradients hundreds, so the absolute tolerance is taken relative to the largest
    value."""
    fused, plain = kernels(mechanism, 150, 2, 16, device)
    q, k, v = inputs((1, 2, 150, 16), device, scale=10.0)
    got, want = outputs_and_grads(fused, q, k, v), outputs_and_grads(plain, q, k, v)
    for a, b in zip(got, want, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4 * max(1.0, b.abs().max().item()))


def test_zero_vectors_take_normalizes_gradient(device) -> None:
    """Taylor: a query and a key of zeros (|x| below normalize's eps) are zero unit vectors, and
    their gradients are normalize's (g / eps), not the projection's division by zero."""
    fused, plain = kernels("taylor", 24, 1, 16, device)
    q, k, v = (x.detach() for x in inputs((1, 1, 24, 16), device))
    q[0, 0, 3] = 0.0
    k[0, 0, 7] = 0.0
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    got, want = outputs_and_grads(fused, q, k, v), outputs_and_grads(plain, q, k, v)
    assert want[1][0, 0, 3].abs().max() > 1e6  # normalize's g / eps
    for a, b in zip(got, want, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("normalize", "eps"), [(False, 0.03), (True, 0.2)])
def test_random_features_floor_takes_the_gradient_where_it_binds(device, normalize, eps) -> None:
    """The normaliser, an estimate that can come out small, is below its floor (eps times the
    keys' weights' sum) at some queries (the eps chosen so: about half of them here), whose
    gradient then goes to the floor and through it to every key's weight. normalize=false keeps
    the keys' norms, so their weights differ and their maximum moves from block to block;
    normalize=true runs q and k through the learned sigma."""
    fused, plain = kernels("random_feature", 150, 2, 16, device)
    for kernel in (fused, plain):
        kernel.eps, kernel.normalize = eps, normalize
        if normalize:
            kernel.log_sigma = torch.nn.Parameter(torch.full((2,), 0.3, device=device))
    q, k, v = inputs((1, 2, 150, 16), device)
    got, want = outputs_and_grads(fused, q, k, v), outputs_and_grads(plain, q, k, v)
    x, y = q.detach(), k.detach()
    if normalize:
        x, y = (plain.normalized(t, plain.head_dim**-0.25).detach() for t in (x, y))
    phi_q, phi_k, floor = plain.feature_map().features(x, y, plain.frequencies)
    below = phi_q @ phi_k.sum(dim=-2).unsqueeze(-1) < floor
    assert below.any() and not below.all(), below.float().mean()
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@triton.jit
def _sines_and_cosines(x_ptr, w_ptr, sin_ptr, cos_ptr, precision: tl.constexpr, fast: tl.constexpr):
    """Random feature attention's sines and cosines of a (64, 16) tile's rows by 32 frequencies
    (``_sin_cos``), stored as (64, 32)."""
    rows, cols, fcols = tl.arange(0, 64), tl.arange(0, 16), tl.arange(0, 32)
    x = tl.load(x_ptr + rows[:, None] * 16 + cols[None, :])
    w = tl.load(w_ptr + fcols[:, None] * 16 + cols[None, :])
    sin, cos = _sin_cos(x, w, fcols, 32, 1.0, precision, fast)
    tl.store(sin_ptr + rows[:, None] * 32 + fcols[None, :], sin)
    tl.store(cos_ptr + rows[:, None] * 32 + fcols[None, :], cos)


# the GPU's fast sine and cosine where there is one; the interpreter has only the precise ones
TRIG_FUNCTIONS = [False, True] if torch.cuda.is_available() else [False]


@pytest.mark.parametrize("fast_trig", TRIG_FUNCTIONS)
def test_random_features_sines_hold_for_projections_of_thousands(device, fast_trig) -> None:
    """The random features' sines and cosines of projections up to 24,000 radians (a key's
    norm kept, sigma large) against float64's: the projections are reduced to [-pi, pi] by
    thousands of 2 pi, which takes 2 pi to more than fp32's 24 bits (fp32's 2 pi alone is off
    by 6e-4 at 3,800 turns); then ``__sinf`` and ``__cosf`` on a GPU, within 4e-7 there."""
    # projections x.w exact in fp32: x's first column times powers of two, 1/16 to 8
    x = torch.zeros(64, 16)
    x[:, 0] = torch.linspace(-3000.0, 3000.0, 64)
    w = torch.zeros(32, 16)
    w[:, 0] = 2.0 ** (torch.arange(32) % 8 - 4)
    sin, cos = torch.empty(64, 32, device=device), torch.empty(64, 32, device=device)
    _sines_and_cosines[(1,)](x.to(device), w.to(device), sin, cos, "ieee", fast_trig)
    projections = x[:, :1].double() * w[:, 0].double()
    assert projections.abs().max() == 24000.0
    torch.testing.assert_close(sin.cpu().double(), projections.sin(), rtol=0, atol=2e-6)
    torch.testing.assert_close(cos.cpu().double(), projections.cos(), rtol=0, atol=2e-6)


@pytest.mark.parametrize("name", ["performer", "performer_authors", "random_feature"])
def test_every_configuration_the_tuner_tries_computes_the_plain_paths_function(
    name, device, monkeypatch
) -> None:
    """Each configuration a GPU's tuner may launch (``tiles.configurations``: warps, stages and,
    for the two kernels that sum over a split of the rows, the step through them: the host's
    rows or half as many), all five kernels set to their i-th in round i: the plain path's
    function. 64 rows per block (as wide as a block of features), two splits of 128 rows, the
    last step partly past n. The interpreter runs no warps or stages: there a round per step
    (it fails when a half step skips rows)."""
    from vitattn.attention.fused import tiles

    tuners = tuned_kernels(name)
    rounds = {
        tuner: tiles.configurations(halves="HALVES" in tuner.fn.arg_names, interpreted=False)
        for tuner in tuners
    }
    if interpreted():
        rounds = {
            tuner: list({repr(c.kwargs): c for c in configs}.values())
            for tuner, configs in rounds.items()
        }
    fused, plain = kernels(name, 200, 2, 16, device)
    q, k, v = inputs((1, 2, 200, 16), device)
    want = outputs_and_grads(plain, q, k, v)
    for i in range(max(len(configs) for configs in rounds.values())):
        for tuner, configs in rounds.items():
            monkeypatch.setattr(tuner, "configs", [configs[i % len(configs)]])
        for got, wanted in zip(outputs_and_grads(fused, q, k, v), want, strict=True):
            torch.testing.assert_close(got, wanted, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("block", "halves"), [(64, [1, 2]), (32, [1, 2]), (16, [1])])
def test_the_tuner_never_steps_through_fewer_rows_than_a_product_takes(block, halves) -> None:
    """On a GPU of little shared memory (32 rows per block, or 16 for wide heads) the tuner
    drops the half step that would give ``tl.dot`` fewer than 16 rows."""
    from vitattn.attention.fused import tiles

    configs = [triton.Config({"HALVES": h}, num_warps=w) for h in (1, 2) for w in (4, 8)]
    kept = tiles.steps_of_16_rows_or_more(configs, {}, BLOCK_N=block, BLOCK_D=64)
    assert sorted({config.kwargs["HALVES"] for config in kept}) == halves
    assert len(kept) == 2 * len(halves)


@pytest.mark.parametrize("name", ["performer", "random_feature"])
def test_the_tuner_chooses_per_batch_size(name, device, monkeypatch) -> None:
    """Each kernel's configuration is chosen per batch size as well as per heads, n and d: the
    check's kernels at batch 4 and a training step at batch 256 fill a GPU differently, and a
    choice is kept on disk for later processes. Each tuner here has two configurations and a
    stand-in for Triton's timer that runs the call once; batches 1 and 2 of one shape are timed
    apart, and a second call of batch 2 is not timed again (what each configuration computes:
    :func:`test_every_configuration_the_tuner_tries_computes_the_plain_paths_function`)."""
    from vitattn.attention.fused import tiles

    timed: list[str] = []
    for tuner in tuned_kernels(name):
        configs = tiles.configurations(halves="HALVES" in tuner.fn.arg_names, interpreted=False)
        monkeypatch.setattr(tuner, "configs", configs[:2])
        monkeypatch.setattr(tuner, "cache", {})

        def timer(call, quantiles, kernel: str = tuner.fn.__name__) -> list[float]:
            call()
            timed.append(kernel)
            return [1.0] * len(quantiles)

        monkeypatch.setattr(tuner, "do_bench", timer)
    fused, _ = kernels(name, 16, 1, 16, device)
    for batch in (1, 2, 2):
        outputs_and_grads(fused, *inputs((batch, 1, 16, 16), device))
    for tuner in tuned_kernels(name):
        keys = sorted(tuner.cache, key=str)
        assert len(keys) == 2, (tuner.fn.__name__, keys)
        assert timed.count(tuner.fn.__name__) == 4  # two configurations at two batch sizes


def test_the_flop_counter_counts_the_fused_path_as_the_plain_one(mechanism, device) -> None:
    fused, plain = kernels(mechanism, 48, 2, 16, device)
    q, k, v = inputs((2, 2, 48, 16), device)
    counts = []
    for kernel in (fused, plain):
        with FlopCounterMode(display=False) as counter:
            kernel(q, k, v).sum().backward()
        counts.append(counter.get_total_flops())
    assert counts[0] == counts[1] > 0


def graph_nodes(tensor: torch.Tensor) -> set[str]:
    """The class names of the autograd nodes ``tensor`` was computed by."""
    seen, stack = set(), [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            stack.extend(following for following, _ in node.next_functions)
    return {type(node).__name__ for node in seen}


def test_unwatched_the_kernels_run_without_the_operators_dispatch(mechanism, device) -> None:
    """Eager and unwatched, the fused path runs its kernels under a plain autograd Function
    (``torch.library``'s dispatch would be a third to a half of its host time); under a
    dispatch mode (the bench's counter here; FlopCounterMode, fake tensors) the operators run,
    so that it sees them. Bit for bit the same outputs and gradients either way."""
    from vitattn.bench.floor import DispatchCounter

    fused, _ = kernels(mechanism, 40, 2, 16, device)
    q, k, v = inputs((1, 2, 40, 16), device)
    unwatched = outputs_and_grads(fused, q, k, v)
    assert "FusedPathBackward" in graph_nodes(unwatched[0])
    with DispatchCounter() as counter:
        watched = outputs_and_grads(fused, q, k, v)
    assert any(str(op).startswith("vitattn.") for op in counter.ops), counter.ops
    assert "FusedPathBackward" not in graph_nodes(watched[0])
    for a, b in zip(unwatched, watched, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_the_fused_path_compiles_in_one_graph_forward_and_backward(
    mechanism, device, layout
) -> None:
    """Strided: the multi-head split's views, as training passes them. The operators' shapes
    for the compiler (``register_fake``) give the gradients the strides the kernels write, else
    Inductor's size-and-stride assertion fails (it did on the H200, 2026-11-27)."""
    fused, plain = kernels(mechanism, 48, 2, 16, device)
    if layout == "strided":
        q, k, v = (
            x.detach().transpose(1, 2).requires_grad_() for x in inputs((1, 48, 2, 16), device)
        )
    else:
        q, k, v = inputs((1, 2, 48, 16), device)
    torch._dynamo.reset()
    compiled = torch.compile(fused, fullgraph=True)
    got, want = outputs_and_grads(compiled, q, k, v), outputs_and_grads(plain, q, k, v)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_auto_takes_the_plain_path_on_a_cpu(mechanism, device) -> None:
    """On a CPU ``auto`` never runs the interpreter (the plain path is the CPU's fast one)."""
    fusable = MECHANISMS[mechanism]
    kernel = fusable.kind(seq_len=16, heads=1, head_dim=16, **fusable.settings)
    assert kernel.impl == "auto"
    q, k, v = (x.cpu() for x in inputs((1, 1, 16, 16), device))
    with FlopCounterMode(display=False) as counter:
        kernel(q, k, v)
    ops = {str(op) for op in counter.get_flop_counts()["Global"]}
    assert not any("vitattn" in op for op in ops), ops


@pytest.mark.parametrize("name", ["linear", "random_feature"])
def test_triton_on_a_cpu_without_the_interpreter_is_refused_in_one_line(name: str) -> None:
    """A fresh process without TRITON_INTERPRET: the kernels would need a GPU. One mechanism per
    place that refuses (:class:`~vitattn.attention.common.fusable.FusedOrPlain`, the feature
    maps' :meth:`~vitattn.attention.feature_maps.kernel.FeatureMapAttention.implementations`)."""
    kind = MECHANISMS[name].kind
    mechanism = kind.__name__
    script = (
        "import torch\n"
        f"from {kind.__module__} import {mechanism}\n"
        "from vitattn.errors import ConfigError\n"
        "x = torch.randn(1, 1, 8, 16)\n"
        "try:\n"
        f"    {mechanism}(seq_len=8, heads=1, head_dim=16, impl='triton', "
        f"**{MECHANISMS[name].settings!r})(x, x, x)\n"
        "except ConfigError as error:\n"
        "    print(error)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    assert "attention.impl=triton cannot run here" in lines[0]
    assert f"choose {MECHANISMS[name].fallback}" in lines[0]


def test_an_unknown_impl_is_refused_in_one_line(mechanism) -> None:
    fusable = MECHANISMS[mechanism]
    valid = f"attention.impl='fast' is not valid; choose one of {fusable.others}"
    with pytest.raises(ConfigError, match=re.escape(valid)):
        fusable.kind(seq_len=8, heads=1, head_dim=16, impl="fast")


INTERPRETER_PROBE = """
import torch, triton, triton.language as tl

@triton.jit
def probe(X):
    for i in range(tl.program_id(0), 1):
        tl.store(X + i, 1.0)

x = torch.zeros(1)
probe[(1,)](x)
assert x.item() == 1.0
"""
"""A loop from a program's id, as the kernels' splits of a sequence run, in Triton's interpreter."""

NUMPY_REFUSAL = "only 0-dimensional arrays can be converted to Python scalars"
"""What Triton 3.6's interpreter meets under NumPy 2.4 and later (``int()`` of the one-element
array it holds a program's id in, which NumPy 2.4 no longer converts); Triton 3.8's does not."""


def interpreter_refusal(env: dict[str, str]) -> str | None:
    """Why Triton's interpreter cannot run :data:`INTERPRETER_PROBE` here (the last line it
    printed), or ``None`` where it can."""
    probe = [sys.executable, "-c", INTERPRETER_PROBE]
    result = subprocess.run(probe, env=env, capture_output=True, text=True, timeout=300)
    if result.returncode == 0:
        return None
    return (result.stderr.strip().splitlines() or ["no output"])[-1]


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU runs the kernels in this process")
def test_every_fused_test_passes_in_tritons_interpreter() -> None:
    """This file again, in a child process that interprets the kernels: every test that skipped
    here for want of a GPU passes there, none skips. Where Triton's own interpreter cannot run
    with this NumPy (Triton 3.6, the lent GPUs' image, under NumPy 2.4 or later), it skips
    saying so; any other failure of the interpreter fails."""
    if interpreted():
        pytest.skip("this process is the child")
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    refusal = interpreter_refusal(env)
    if refusal is not None and NUMPY_REFUSAL in refusal:
        import numpy

        pytest.skip(
            f"Triton {triton.__version__}'s interpreter cannot run a loop from a program's id "
            f"under NumPy {numpy.__version__} ({NUMPY_REFUSAL}): a GPU compiles the kernels, or "
            "NumPy < 2.4 or Triton >= 3.8 interprets them"
        )
    assert refusal is None, refusal
    command = [sys.executable, "-m", "pytest", __file__, "-q", "-n", "0", "-p", "no:randomly"]
    # the refusal's test starts processes of its own, without the interpreter: here is enough
    wanted = "not in_tritons_interpreter and not without_the_interpreter"
    command += ["-p", "no:cacheprovider", "-k", wanted]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", summary), summary
    assert not re.search(r"skipped|failed|error", summary), summary


@given(n=st.integers(1, 1 << 24), block=st.integers(1, 1 << 12))
def test_the_hosts_block_arithmetic_is_tritons(n: int, block: int) -> None:
    """The kernels' grids and blocks are sized on the host in plain Python (``tiles.cdiv``,
    ``tiles.next_power_of_2``: Triton's own cost microseconds a call there): the same values."""
    from vitattn.attention.fused import tiles

    assert tiles.cdiv(n, block) == triton.cdiv(n, block)
    assert tiles.next_power_of_2(n) == triton.next_power_of_2(n)
