"""``impl=flex`` of the sparse kernels (local, bigbird, sparse): FlexAttention with each pattern's
``mask_mod`` against ``impl=gather`` and against the dense reference, the explicit n x n mask
written from each pattern's definition in ``test_sparse_family``; ``impl=auto``; and what
happens where FlexAttention cannot run (no backward on a CPU, float64, a failed compilation,
a torch without it).

The quick tests run FlexAttention uncompiled (``eager_flex``: each pattern's mask_mod, the
padding and the dtypes, with the dense math, which applies mask_mod to every pair and ignores
the BlockMask's blocks); the BlockMasks themselves are compared with torch's
``create_block_mask``. The compiled kernel, which skips blocks by the BlockMask, costs seconds
of C++ compilation per pattern and shape on a CPU: its tests are ``slow``. Gradients of flex
exist on CUDA only; their tests run where a GPU is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest
import torch

from tests.attention.test_sparse_family import (
    bigbird_mask,
    local_mask,
    masked_softmax,
    qkv,
    sparse_mask,
)
from vitattn.attention.bigbird import BigBirdAttention
from vitattn.attention.common import autotune, flex
from vitattn.attention.local import LocalAttention
from vitattn.attention.sparse import SparseAttention
from vitattn.bench.kernels import build_kernel
from vitattn.errors import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

on_gpu = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="FlexAttention's backward runs on CUDA only"
)

TOL = {"rtol": 1e-5, "atol": 1e-5}
KERNELS = [LocalAttention, BigBirdAttention, SparseAttention]


def local(n: int, window: int, shape: str, global_tokens: int | None = None) -> LocalAttention:
    return LocalAttention(
        seq_len=n, heads=2, head_dim=16, window=window, window_shape=shape,
        global_tokens=global_tokens,
    )  # fmt: skip


def bigbird(n: int, block: int, window_blocks: int, num_random: int, global_blocks: int):
    torch.manual_seed(3)
    return BigBirdAttention(
        seq_len=n, heads=3, head_dim=16, block=block, window_blocks=window_blocks,
        num_random=num_random, global_blocks=global_blocks,
    )  # fmt: skip


def sparse(n: int, pattern: str, combine: str) -> SparseAttention:
    return SparseAttention(
        seq_len=n, heads=4, head_dim=16, pattern=pattern, stride=8, summary=2, combine=combine
    )


Case = tuple[Callable[[], torch.nn.Module], Callable[[torch.nn.Module, int], torch.Tensor]]
CASES: dict[str, Case] = {
    "local-1d": (lambda: local(50, 7, "1d", 0), local_mask),
    "local-1d-global": (lambda: local(50, 8, "1d", 3), local_mask),
    "local-2d": (lambda: local(64, 3, "2d", 0), local_mask),
    "local-2d-cls": (lambda: local(65, 3, "2d"), local_mask),  # the class token is global
    "local-2d-global": (lambda: local(100, 4, "2d", 5), local_mask),
    "bigbird": (lambda: bigbird(64, 8, 1, 2, 0), bigbird_mask),
    "bigbird-padded": (lambda: bigbird(50, 8, 3, 1, 1), bigbird_mask),
    "bigbird-cls": (lambda: bigbird(65, 4, 3, 2, 1), bigbird_mask),
    **{
        f"sparse-{pattern}-{combine}{'-cls' if n == 65 else ''}": (
            lambda n=n, pattern=pattern, combine=combine: sparse(n, pattern, combine),
            sparse_mask,
        )
        for n in (64, 65)
        for pattern in ("strided", "fixed")
        for combine in ("heads", "merged")
    },
}
COMPILED = ["local-1d-global", "local-2d-cls", "bigbird-cls", "sparse-strided-merged-cls",
            "sparse-fixed-heads-cls"]  # fmt: skip
"""One case per pattern's code for the compiled kernel (each compiles for seconds)."""


def build(case: str) -> tuple[torch.nn.Module, torch.Tensor]:
    """The kernel of a case and its dense mask: (n, n), or (heads, n, n) per head."""
    make, mask = CASES[case]
    kernel = make()
    return kernel, mask(kernel, kernel.seq_len)


def attend(kernel: torch.nn.Module, impl: str, *inputs: torch.Tensor) -> torch.Tensor:
    kernel.impl = impl
    return kernel(*inputs)


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    autotune.choices.cache_clear()
    flex.failures.cache_clear()
    yield
    autotune.choices.cache_clear()
    flex.failures.cache_clear()


@pytest.fixture
def eager_flex(monkeypatch: pytest.MonkeyPatch) -> None:
    """FlexAttention uncompiled: the pattern, its BlockMask and the padding, without compiling
    (which the slow tests check). Its dense math runs as plain Python, not traced by dynamo (the
    debug switch), which would cost seconds per new mask_mod."""
    from torch.nn.attention import flex_attention as module

    monkeypatch.setattr(flex, "compiled_flex_attention", lambda: flex.flex_attention)
    monkeypatch.setattr(module, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", True)


@pytest.fixture
def timed_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(autotune, "TIMED_DEVICES", {"cpu"})


class Spy:
    """Stands for a kernel's implementation: counts its calls, or fails if called at all."""

    def __init__(self, implementation: Callable | None = None) -> None:
        self.implementation, self.calls = implementation, 0

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.implementation is None:
            raise AssertionError("this implementation must not run")
        return self.implementation(*inputs)


# ------------------------------------------------------------------- the patterns, forward


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got.float() - expected).norm() / expected.norm())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", CASES)
def test_flex_equals_gather_equals_the_dense_pattern(case: str, dtype, eager_flex) -> None:
    """Forward, fp32 to 1e-5; bf16 inputs against the fp32 reference on the same rounded
    inputs, loosely (the uncompiled kernel's own arithmetic; the compiled one's is checked to a
    unit of bf16 below), and the output in bf16."""
    kernel, allowed = build(case)
    q, k, v = (x.to(dtype) for x in qkv(kernel.seq_len, heads=kernel.heads))
    expected = masked_softmax(q.float(), k.float(), v.float(), allowed)
    with torch.no_grad():
        for impl in ("gather", "flex"):
            got = attend(kernel, impl, q, k, v)
            assert got.dtype == dtype
            if dtype == torch.float32:
                torch.testing.assert_close(got, expected, **TOL)
            else:
                assert relative_error(got, expected) < 2e-2, impl


@pytest.mark.slow
@pytest.mark.parametrize("case", COMPILED)
def test_compiled_flex_equals_the_dense_pattern(case: str) -> None:
    kernel, allowed = build(case)
    q, k, v = qkv(kernel.seq_len, heads=kernel.heads)
    with torch.no_grad():
        got = attend(kernel, "flex", q, k, v)
    torch.testing.assert_close(got, masked_softmax(q, k, v, allowed), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["bigbird-cls", "sparse-fixed-heads-cls"])
def test_compiled_flex_in_bf16_is_the_fp32_pattern_rounded(case: str) -> None:
    """FlexAttention keeps scores and sums in fp32 whatever its inputs: in bf16 its output is the
    fp32 reference on the same (rounded) inputs to within one unit of bf16, logits large or not
    (the tolerance of test_half_precision for kernels computing in fp32)."""
    kernel, allowed = build(case)
    eps = torch.finfo(torch.bfloat16).eps
    for logit_scale in (1.0, 3.0):
        q, k, v = qkv(kernel.seq_len, heads=kernel.heads)
        q, k, v = (x.bfloat16() for x in (q * logit_scale, k * logit_scale, v))
        expected = masked_softmax(q.float(), k.float(), v.float(), allowed)
        with torch.no_grad():
            got = attend(kernel, "flex", q, k, v)
        assert got.dtype == torch.bfloat16
        mean = v.float().mean(-2, keepdim=True).expand_as(expected)
        assert relative_error(mean, expected) > 10 * eps  # returning the mean of v would fail
        assert relative_error(got, expected) < eps, logit_scale


# --------------------------------------------------------------------------- gradients


@on_gpu
@pytest.mark.slow  # compiles forward and backward kernels per case
@pytest.mark.parametrize(
    ("case", "dtype"),
    [(case, torch.float32) for case in CASES] + [(case, torch.bfloat16) for case in COMPILED],
)
def test_flex_and_gather_gradients_equal_the_dense_pattern_on_a_gpu(case, dtype) -> None:
    kernel, allowed = build(case)
    kernel, allowed = kernel.cuda(), allowed.cuda()
    inputs = [x.to("cuda", dtype) for x in qkv(kernel.seq_len, heads=kernel.heads)]
    weights = torch.randn(inputs[0].shape, device="cuda")
    loose = dtype != torch.float32

    def outputs(function) -> list[torch.Tensor]:
        leaves = [x.detach().clone().requires_grad_() for x in inputs]
        out = function(*leaves)
        (out.float() * weights).sum().backward()
        return [out.float(), *(x.grad.float() for x in leaves)]

    expected = outputs(lambda q, k, v: masked_softmax(q.float(), k.float(), v.float(), allowed))
    for impl in ("gather", "flex"):
        got_all = outputs(lambda *x, impl=impl: attend(kernel, impl, *x))
        for got, want in zip(got_all, expected, strict=True):
            if loose:  # bf16 products in the backward: a few units of bf16
                assert relative_error(got, want) < 5e-2, impl
            else:
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel_class", KERNELS)
def test_flex_refuses_gradients_on_a_cpu_in_one_line(kernel_class) -> None:
    kernel = kernel_class(seq_len=64, heads=2, head_dim=16, impl="flex")
    q, k, v = qkv(64, grad=True)
    with pytest.raises(flex.FlexUnavailableError, match="no backward on a cpu") as refused:
        kernel(q, k, v)
    assert isinstance(refused.value, ConfigError) and "\n" not in str(refused.value)
    assert str(refused.value).startswith(f"attention.impl=flex ({kernel.name}) cannot run here")


def test_flex_without_gradients_takes_inputs_that_require_them(eager_flex) -> None:
    """Evaluation of a model whose inputs require grad (the bench's forward) runs flex."""
    kernel, allowed = build("local-2d-cls")
    q, k, v = qkv(kernel.seq_len, heads=kernel.heads, grad=True)
    with torch.no_grad():
        got = attend(kernel, "flex", q, k, v)
    torch.testing.assert_close(got, masked_softmax(q, k, v, allowed), **TOL)


@pytest.mark.parametrize("kernel_class", KERNELS)
def test_auto_with_gradients_on_a_cpu_is_gather_even_where_timed(kernel_class, timed_cpu):
    torch.manual_seed(0)
    kernel = kernel_class(seq_len=64, heads=2, head_dim=16)
    assert kernel.impl == "auto"
    results = []
    for impl in ("auto", "gather"):
        q, k, v = qkv(64, grad=True)
        out = attend(kernel, impl, q, k, v)
        out.sum().backward()
        results.append([out, q.grad, k.grad, v.grad])
    for got, want in zip(*results, strict=True):
        assert torch.equal(got, want)
    assert not autotune.choices().chosen  # flex cannot run here: nothing to time


# -------------------------------------------------------------------------------- auto


@pytest.mark.parametrize("kernel_class", KERNELS)
def test_auto_on_a_cpu_is_gather_untimed(kernel_class, monkeypatch) -> None:
    torch.manual_seed(0)
    kernel = kernel_class(seq_len=64, heads=2, head_dim=16)
    monkeypatch.setattr(kernel, "flex", Spy())
    q, k, v = qkv(64)
    with torch.no_grad():
        assert torch.equal(attend(kernel, "auto", q, k, v), attend(kernel, "gather", q, k, v))
    assert not autotune.choices().chosen


def test_timed_auto_chooses_once_per_shape_and_logs_once(
    timed_cpu, eager_flex, monkeypatch, caplog
) -> None:
    kernel = LocalAttention(seq_len=64, heads=2, head_dim=16)
    spies = {name: Spy(getattr(kernel, name)) for name in ("gather", "flex")}
    for name, spy in spies.items():
        monkeypatch.setattr(kernel, name, spy)
    q, k, v = qkv(64)
    with caplog.at_level(logging.INFO, logger="vitattn.attention"), torch.no_grad():
        outputs = [kernel(q, k, v) for _ in range(3)]
        [chosen] = autotune.choices().chosen.values()
        timed = 1 + autotune.REPEATS  # a warm-up and the repeats
        assert {name: spy.calls for name, spy in spies.items()} == {
            name: timed + (3 if name == chosen else 0) for name in spies
        }
        assert torch.equal(outputs[0], getattr(kernel, chosen).implementation(q, k, v))
        lines = [r.getMessage() for r in caplog.records if "impl=auto" in r.getMessage()]
        assert len(lines) == 1
        assert f"local on cpu, q (2, 2, 64, 16): impl=auto takes {chosen}" in lines[0]
        assert "(forward: gather" in lines[0] and "flex" in lines[0]
        kernel(*qkv(64, seed=1))  # the same shape: no timing
        assert len(autotune.choices().chosen) == 1
        kernel(*(x[:1] for x in (q, k, v)))  # another batch size: timed anew
    assert len(autotune.choices().chosen) == 2
    assert len([r for r in caplog.records if "impl=auto" in r.getMessage()]) == 2


@pytest.mark.parametrize("kernel_class", KERNELS)
def test_nothing_is_timed_under_torch_compile(kernel_class, timed_cpu, monkeypatch) -> None:
    torch.manual_seed(0)
    kernel = kernel_class(seq_len=64, heads=2, head_dim=16)
    gathered = attend(kernel, "gather", *qkv(64)).detach()
    kernel.impl = "auto"
    monkeypatch.setattr(kernel, "flex", Spy())
    compiled = torch.compile(kernel, backend="eager", fullgraph=False)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*qkv(64)), gathered, rtol=0, atol=0)
    assert not autotune.choices().chosen


# ------------------------------------------------------------- where flex cannot run


def test_float64_flex_refuses_and_auto_gathers(timed_cpu) -> None:
    kernel = BigBirdAttention(seq_len=64, heads=2, head_dim=16, block=8, impl="flex")
    q, k, v = (x.double() for x in qkv(64))
    with pytest.raises(flex.FlexUnavailableError, match=r"not torch\.float64"):
        kernel(q, k, v)
    with torch.no_grad():
        assert torch.equal(attend(kernel, "auto", q, k, v), attend(kernel, "gather", q, k, v))
    assert not autotune.choices().chosen


def failing_compiler(*args, **kwargs) -> torch.Tensor:
    from torch._inductor.exc import CppCompileError

    raise CppCompileError(["g++", "kernel.cpp"], "kernel.cpp:1: error: the compiler failed")


def test_a_failed_compilation_refuses_flex_and_auto_gathers(monkeypatch, timed_cpu, caplog):
    monkeypatch.setattr(flex, "compiled_flex_attention", lambda: failing_compiler)
    kernel = LocalAttention(seq_len=64, heads=2, head_dim=16, impl="flex")
    q, k, v = qkv(64)
    with (
        caplog.at_level(logging.WARNING, logger="vitattn.attention"),
        torch.no_grad(),
        pytest.raises(flex.FlexUnavailableError, match=r"failed to compile on cpu \(CppCompile"),
    ):
        kernel(q, k, v)
    assert len([r for r in caplog.records if "failed to compile" in r.getMessage()]) == 1
    # From now on auto takes gather without trying (nor timing) flex again.
    monkeypatch.setattr(kernel, "flex", Spy())
    with torch.no_grad():
        assert torch.equal(attend(kernel, "auto", q, k, v), attend(kernel, "gather", q, k, v))
    assert not autotune.choices().chosen


def test_auto_falls_back_to_gather_when_timing_finds_flex_broken(monkeypatch, timed_cpu):
    monkeypatch.setattr(flex, "compiled_flex_attention", lambda: failing_compiler)
    kernel = BigBirdAttention(seq_len=64, heads=2, head_dim=16, block=8)
    q, k, v = qkv(64)
    with torch.no_grad():
        assert torch.equal(attend(kernel, "auto", q, k, v), attend(kernel, "gather", q, k, v))
    assert not autotune.choices().chosen and "cpu" in flex.failures()


@pytest.mark.slow
def test_no_cxx_compiler_refuses_flex_in_one_line(monkeypatch, tmp_path) -> None:
    """A real failed compilation: no C++ compiler, and no cached kernel to fall back on."""
    import torch._inductor.config as inductor_config

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(inductor_config.cpp, "cxx", (str(tmp_path / "no-such-g++"),))
    kernel = LocalAttention(seq_len=36, heads=2, head_dim=24, impl="flex")  # a fresh graph
    q, k, v = (torch.randn(1, 2, 36, 24) for _ in range(3))
    with torch.no_grad(), pytest.raises(flex.FlexUnavailableError) as refused:
        kernel(q, k, v)
    message = str(refused.value)
    assert "\n" not in message and "failed to compile on cpu" in message
    assert "No working C++ compiler" in message and "attention.impl=gather" in message


# ----------------------------------------------------------------------- knobs, masks


@pytest.mark.parametrize("kernel_class", KERNELS)
def test_impl_must_be_known(kernel_class) -> None:
    with pytest.raises(ConfigError) as refused:
        kernel_class(seq_len=64, heads=2, head_dim=16, impl="fast")
    expected = "attention.impl='fast' is not valid; choose one of auto | gather | flex"
    assert str(refused.value) == expected


@pytest.mark.parametrize("name", ["local", "bigbird", "sparse"])
def test_configs_default_to_auto(name: str) -> None:
    kernel = build_kernel(name, seq_len=64, heads=2, head_dim=16)
    assert kernel.impl == "auto" and "impl=auto" in repr(kernel)
    assert build_kernel(name, seq_len=64, heads=2, head_dim=16, knobs={"impl": "flex"}).impl == (
        "flex"
    )


@pytest.mark.parametrize("case", ["local-2d-cls", "bigbird-cls", "sparse-fixed-heads-cls"])
def test_block_masks_are_torch_block_masks_built_in_chunks(case: str, monkeypatch) -> None:
    """flex.build_block_mask (chunks of query rows) gives the BlockMask torch's
    create_block_mask gives (the whole dense mask at once), full blocks included."""
    from torch.nn.attention.flex_attention import create_block_mask

    monkeypatch.setattr(flex, "MASK_CHUNK", 4 * 16 * 16)  # several chunks
    kernel, _ = build(case)
    tokens = kernel.seq_len
    pad = getattr(kernel, "padding", -tokens % min(getattr(kernel, "stride", 1), tokens))
    heads = kernel._block_masks.heads
    mask_mod = kernel.mask_mod(tokens, torch.device("cpu"))
    length = tokens + pad
    ours = flex.build_block_mask(mask_mod, heads, length, torch.device("cpu"), 16)
    torchs = create_block_mask(mask_mod, None, heads, length, length, device="cpu", BLOCK_SIZE=16)
    assert torch.equal(ours.to_dense(), torchs.to_dense())
    for name in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        assert torch.equal(getattr(ours, name), getattr(torchs, name)), name


@pytest.mark.parametrize(
    ("kernel", "skipped"),
    [(lambda: LocalAttention(seq_len=1025, heads=4, head_dim=16), 0.7),
     (lambda: BigBirdAttention(seq_len=1024, heads=4, head_dim=16), 0.7),
     (lambda: SparseAttention(seq_len=1024, heads=4, head_dim=16), 0.3)],
)  # fmt: skip
def test_block_masks_skip_most_blocks(kernel, skipped: float) -> None:
    """On a CPU (16-token blocks) the BlockMasks are sparse: FlexAttention skips most blocks of
    keys (a column of ``sparse`` touches them all: only its row heads skip)."""
    kernel = kernel()
    tokens = kernel.seq_len
    pad = getattr(kernel, "padding", -tokens % min(getattr(kernel, "stride", 1), tokens))
    block_mask = kernel._block_masks.get(tokens, pad, torch.device("cpu"))
    assert block_mask.BLOCK_SIZE == (flex.CPU_BLOCK, flex.CPU_BLOCK)
    assert block_mask.sparsity() / 100 > skipped


def test_block_mask_built_once_per_token_count(eager_flex) -> None:
    kernel = local(50, 7, "1d", 0)
    for n in (50, 50, 40, 50, 40):
        with torch.no_grad():
            attend(kernel, "flex", *qkv(n))
    assert sorted(key[0] for key in kernel._block_masks._masks) == [40, 50]


def test_bigbird_flex_follows_loaded_random_blocks(eager_flex) -> None:
    """Loading a checkpoint replaces a layer's random blocks: flex must not keep the old ones."""
    first = bigbird(64, 8, 1, 2, 0)
    torch.manual_seed(4)
    second = BigBirdAttention(
        seq_len=64, heads=3, head_dim=16, block=8, window_blocks=1, num_random=2, global_blocks=0
    )
    assert not torch.equal(first.key_blocks, second.key_blocks)
    q, k, v = qkv(64, heads=3)
    with torch.no_grad():
        attend(first, "flex", q, k, v)
        first.load_state_dict(second.state_dict())
        torch.testing.assert_close(attend(first, "flex", q, k, v), second.gather(q, k, v), **TOL)
