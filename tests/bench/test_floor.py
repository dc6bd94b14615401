"""The floor of a call (:mod:`vitattn.bench.floor`) and the device figures it is taken against
(:mod:`vitattn.bench.devices`): known answers worked out by hand, the datasheet lookup by the
names CUDA gives, the formulas against ``torch.utils.flop_counter``, the dispatch counter."""

from __future__ import annotations

import shutil

import pytest
import torch

from vitattn.bench import devices
from vitattn.bench.devices import DeviceSpec, device_spec, from_datasheet
from vitattn.bench.floor import (
    FORWARD_FLOPS,
    DispatchCounter,
    GeneratedKernelCounter,
    count_dispatches,
    floor_line,
    floor_of,
    formula_flops,
    least_bytes,
    share_of_floor,
)
from vitattn.bench.kernels import build_kernel, registered
from vitattn.models.flops import count_gflop

CPU = torch.device("cpu")


def test_the_floor_is_the_larger_of_compute_and_memory_time() -> None:
    spec = DeviceSpec("test", {"float32": 1e12, "bfloat16": 4e12}, bandwidth=1e11)
    # 2 TFLOP at 1 TFLOP/s: 2 s; 1 GB at 100 GB/s: 10 ms.
    floor = floor_of(2e12, 1e9, spec, torch.float32, "counted")
    assert (floor.compute_ms, floor.memory_ms) == pytest.approx((2000.0, 10.0))
    assert floor.ms == pytest.approx(2000.0) and floor.bound == "compute"
    assert floor.share(4000.0) == pytest.approx(50.0)
    # In bf16 the same work takes a quarter of the time; 4 GB make it memory-bound.
    half = floor_of(2e12, 1e11, spec, torch.bfloat16, "formula")
    assert (half.compute_ms, half.memory_ms, half.bound) == pytest.approx((500.0, 1000.0, "memory"))
    assert spec.peak(torch.float16) == 1e12  # no figure of its own: the fp32 one
    assert share_of_floor(1.0, None) is None and share_of_floor(None, 2.0) is None


def test_least_bytes_of_softmax_are_its_inputs_output_and_their_gradients() -> None:
    kernel = build_kernel("softmax", seq_len=64, heads=2, head_dim=16)
    q, k, v = (torch.randn(3, 2, 64, 16) for _ in range(3))
    one = 3 * 2 * 64 * 16 * 4  # one (batch, heads, n, d) tensor of fp32
    out = torch.empty_like(q)
    assert least_bytes(kernel, [q, k, v], out, training=False) == 4 * one  # q, k, v read, out
    assert least_bytes(kernel, [q, k, v], out, training=True) == 8 * one  # + grad out, dq, dk, dv


def test_least_bytes_of_linformer_add_its_projections_and_their_gradients() -> None:
    n, k_proj = 64, 8
    kernel = build_kernel("linformer", seq_len=n, heads=2, head_dim=16, knobs={"k": k_proj})
    q, k, v = (torch.randn(1, 2, n, 16) for _ in range(3))
    one, projections = 2 * n * 16 * 4, 2 * k_proj * n * 4  # E and F, (k x n) each, learned
    out = torch.empty_like(q)
    assert least_bytes(kernel, [q, k, v], out, training=False) == 4 * one + projections
    assert least_bytes(kernel, [q, k, v], out, training=True) == 8 * one + 2 * projections


def test_least_bytes_leave_out_what_a_kernel_derives_from_its_knobs() -> None:
    """Local attention's gather layout is buffers it does not save (what its window and token
    count give): no part of the mechanism's floor. BigBird's random blocks, drawn and saved, are."""
    q, k, v = (torch.randn(1, 2, 65, 16) for _ in range(3))
    one = 2 * 65 * 16 * 4
    out = torch.empty_like(q)
    local = build_kernel("local", seq_len=65, heads=2, head_dim=16, knobs={"impl": "gather"})
    assert sum(b.numel() for b in local.buffers()) > 0
    assert least_bytes(local, [q, k, v], out, training=True) == 8 * one
    bigbird = build_kernel("bigbird", seq_len=65, heads=2, head_dim=16)
    table = bigbird.key_blocks.numel() * bigbird.key_blocks.element_size()
    assert least_bytes(bigbird, [q, k, v], out, training=True) == 8 * one + table


def test_the_softmax_formula_by_hand() -> None:
    kernel = build_kernel("softmax", seq_len=128, heads=4, head_dim=32)
    # q k^T and weights x v: 2 n^2 d each, per batch element and head; backward twice that.
    forward = 2 * 4 * (2 * 128 * 128 * 32) * 2
    assert formula_flops("softmax", kernel, (2, 4, 128, 32), training=False) == forward
    assert formula_flops("softmax", kernel, (2, 4, 128, 32), training=True) == 3 * forward


# The gather implementation of local attention computes every pair of a tile's span of keys (4
# times the 7 x 7 window's pairs here); SDPA's backward recomputes q k^T; Nystrom's
# pseudoinverse and the projections' gradients do a little more than the formulas count.
AT_LEAST = {"local": (1.0, 5.0)}


@pytest.mark.parametrize("name", registered())
def test_each_formula_agrees_with_the_flop_counter(name: str) -> None:
    assert set(FORWARD_FLOPS) == set(registered())
    n = 256
    kernel = build_kernel(name, seq_len=n, heads=2, head_dim=16)
    q, k, v = (torch.randn(1, 2, n, 16, requires_grad=True) for _ in range(3))

    def forward() -> None:
        with torch.no_grad():
            kernel(q, k, v)

    counted = count_gflop(forward)
    trained = count_gflop(lambda: kernel(q, k, v).sum().backward())
    assert counted is not None and trained is not None
    low, high = AT_LEAST.get(name, (0.9, 1.35))
    assert low <= counted * 1e9 / formula_flops(name, kernel, q.shape, False) <= high
    assert low <= trained * 1e9 / formula_flops(name, kernel, q.shape, True) <= high


@pytest.mark.parametrize(
    ("cuda_name", "sheet", "fp32", "tf32", "bf16", "fp16", "tb_per_s"),
    [
        ("NVIDIA H200", "NVIDIA H200 SXM", 67.0, 494.5, 989.5, 989.5, 4.8),
        ("NVIDIA H200 NVL", "NVIDIA H200 NVL", 60.0, 417.5, 835.5, 835.5, 4.8),
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", 67.0, 494.5, 989.5, 989.5, 3.35),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", 51.0, 378.0, 756.5, 756.5, 2.0),
        ("NVIDIA H100 NVL", "NVIDIA H100 NVL", 60.0, 417.5, 835.5, 835.5, 3.9),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB SXM", 19.5, 156.0, 312.0, 312.0, 2.039),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 40GB", 19.5, 156.0, 312.0, 312.0, 1.555),
        ("NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe", 19.5, 156.0, 312.0, 312.0, 1.935),
        ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 40GB", 19.5, 156.0, 312.0, 312.0, 1.555),
        ("NVIDIA A10", "NVIDIA A10", 31.2, 62.5, 125.0, 125.0, 0.6),
        ("NVIDIA L40S", "NVIDIA L40S", 91.6, 183.0, 362.05, 362.05, 0.864),
        ("NVIDIA L4", "NVIDIA L4", 30.3, 60.0, 121.0, 121.0, 0.3),
        # No bf16 or TF32 path on Volta or Turing: fp16 on the tensor cores.
        ("Tesla V100-SXM2-16GB", "NVIDIA V100 SXM2", 15.7, None, None, 125.0, 0.9),
        ("Tesla V100-PCIE-32GB", "NVIDIA V100 PCIe", 14.0, None, None, 112.0, 0.9),
        ("Tesla T4", "NVIDIA T4", 8.1, None, None, 65.0, 0.32),
    ],
)
def test_the_datasheet_of_a_gpu_by_the_name_cuda_gives(
    cuda_name: str,
    sheet: str,
    fp32: float,
    tf32: float | None,
    bf16: float | None,
    fp16: float,
    tb_per_s: float,
) -> None:
    spec = from_datasheet(cuda_name)
    assert spec is not None and spec.name == sheet and not spec.measured
    tera = {dtype: flops / 1e12 for dtype, flops in spec.peak_flops.items()}
    expected = {"float32": fp32, "float16": fp16} | ({} if bf16 is None else {"bfloat16": bf16})
    expected |= {} if tf32 is None else {"tensorfloat32": tf32}
    assert tera == pytest.approx(expected)
    assert spec.bandwidth == pytest.approx(tb_per_s * 1e12)
    assert "datasheet" in spec.source and "https://" in spec.source


def test_a_t4_floors_fp16_on_its_tensor_cores_and_bf16_at_its_fp32_rate() -> None:
    """Issue: the T4 had no 16-bit figure, so an fp16 call's floor took the fp32 8.1 TFLOP/s
    (eight times too slow a floor). fp16 is 65 now; bf16, which Turing has no path for, keeps
    the fp32 rate."""
    t4 = from_datasheet("Tesla T4")
    assert t4 is not None
    assert t4.peak(torch.float16) == pytest.approx(65e12)
    assert t4.peak(torch.bfloat16) == t4.peak(torch.float32) == pytest.approx(8.1e12)
    # 6.5 TFLOP and few bytes: 100 ms in fp16, 802 ms in bf16.
    assert floor_of(6.5e12, 1.0, t4, torch.float16, "formula").ms == pytest.approx(100.0)
    assert floor_of(6.5e12, 1.0, t4, torch.bfloat16, "formula").ms == pytest.approx(6500 / 8.1)
    assert t4.summary(torch.float16)["peak_tflops"] == pytest.approx(65.0)


def test_an_unlisted_gpu_is_not_matched() -> None:
    # Whole words only: an L40 is neither an L4 nor an L40S, an A10G not an A10, a V100S not a
    # V100, a GH200 not an H200; their figures differ, so they are measured.
    for name in (
        "NVIDIA L40",
        "NVIDIA A10G",
        "Tesla V100S-PCIE-32GB",
        "NVIDIA GH200 480GB",
        "NVIDIA GeForce RTX 4090",
        "Some Future GPU",
    ):
        assert from_datasheet(name) is None, name


def test_a_cpu_is_measured_once_per_process() -> None:
    devices.measured.cache_clear()
    spec = device_spec(CPU, torch.float32)
    assert spec.measured and spec.source.startswith("measured")
    assert spec.peak(torch.float32) > 1e8 and spec.bandwidth > 1e8  # FLOP/s, bytes/s
    assert device_spec(CPU, torch.float32) is spec  # cached: not measured again


class SlowMomentClock:
    """A clock read by :func:`devices.best_seconds` whose calls take 20 ms each for the first
    ``slow_calls`` (a slow moment of a shared machine), 7 ms after."""

    def __init__(self, slow_calls: int) -> None:
        self.now, self.calls, self.slow_calls = 0.0, 0, slow_calls

    def perf_counter(self) -> float:
        return self.now

    def call(self) -> None:
        self.calls += 1
        self.now += 0.020 if self.calls <= self.slow_calls else 0.007


def test_a_slow_moment_shorter_than_the_measurement_does_not_set_the_peak(monkeypatch) -> None:
    """Five timed products took 35 ms on the 2-core machine: a slow moment over them set the
    CPU's peak at 0.19 TFLOP/s where it reaches 0.32 (softmax at 112% of its floor). The peak is
    now the best of calls repeated for at least a quarter of a second."""
    clock = SlowMomentClock(slow_calls=6)
    monkeypatch.setattr(devices, "time", clock)
    best = devices.best_seconds(clock.call, torch.device("cpu"))
    assert best == pytest.approx(0.007)
    assert clock.now >= devices.MEASURED_FOR and clock.calls < 6 + devices.MEASURED_FOR / 0.007 + 2


def test_the_dispatch_counter_counts_each_operator() -> None:
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    assert count_dispatches(lambda: (a @ b).relu()) == 2  # mm, relu
    assert count_dispatches(lambda: [(a @ b).relu() for _ in range(3)]) == 6
    x = torch.randn(4, 4, requires_grad=True)
    # Forward: mul, sum. Backward: ones_like (the scalar's gradient), expand (sum's), mul
    # (mul's), detach (the leaf's gradient stored).
    assert count_dispatches(lambda: (x * 2).sum().backward()) == 6


def test_a_float64_floor_on_a_listed_gpu_is_not_taken_at_its_float32_rate(monkeypatch) -> None:
    """``dtype=float64`` (a setting the bench takes) on a listed GPU took the fp32 figure, as a
    dtype without one does: a T4's 8.1 TFLOP/s, where its float64 units do about 1/32 of that
    (an L4's 1/64). Every float64 floor there was some 30-60x too low and its share as far off;
    a dtype the datasheet has no figure for, whose rate the fp32 one does not bound closely, is
    to be measured (or given its own figure)."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    monkeypatch.setattr(devices, "measured", lambda device, name, dtype: DeviceSpec(
        name, {"float64": 0.25e12, "float32": 8.1e12}, 0.32e12, "measured", measured=True
    ))  # fmt: skip
    spec = device_spec(torch.device("cuda"), torch.float64)
    assert spec.peak(torch.float64) < 8.1e12 / 4


@pytest.mark.parametrize(
    ("precision", "rate", "tflops"),
    [
        ("high", "tensorfloat32", 494.5),
        ("medium", "tensorfloat32", 494.5),
        ("highest", "float32", 67.0),
    ],
)
def test_a_float32_floor_on_a_tf32_gpu_is_taken_at_the_rate_its_products_run(
    precision: str, rate: str, tflops: float, monkeypatch
) -> None:
    """vitattn-bench and vitattn-check set ``matmul_precision: high`` by default, so on an Ampere
    or later GPU float32 products run on the tensor cores as TF32 (H100 SXM: 494.5 TFLOP/s
    dense); the floor took the CUDA cores' 67, a compute floor about 7x too high (red team). At
    ``highest`` the CUDA cores' rate it is; the line over the table says which."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    chosen = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision(precision)
        spec = device_spec(torch.device("cuda"), torch.float32)
        assert spec.rate(torch.float32) == rate
        assert spec.peak(torch.float32) == pytest.approx(tflops * 1e12)
        line = floor_line(spec.summary(torch.float32))
    finally:
        torch.set_float32_matmul_precision(chosen)
    products = "float32 as tensorfloat32" if rate == "tensorfloat32" else "float32"
    assert f"FLOPs / {tflops:.4g} TFLOP/s ({products}) " in line, line
    assert spec.rate(torch.bfloat16) == "bfloat16"  # the other dtypes keep their own


def test_a_part_without_tf32_takes_its_fp32_rate_at_any_precision() -> None:
    """A T4 (Turing) has no TF32 path: its float32 floor is the CUDA cores' rate."""
    t4 = from_datasheet("Tesla T4")
    assert t4 is not None
    chosen = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert (t4.rate(torch.float32), t4.peak(torch.float32)) == ("float32", 8.1e12)
    finally:
        torch.set_float32_matmul_precision(chosen)


@pytest.mark.parametrize(("n", "d"), [(256, 16), (1024, 64)])
def test_nystroms_formula_is_the_products_in_the_order_the_code_takes_them(n: int, d: int) -> None:
    """The formula took the pseudoinverse by (kernel_3 V), m x m by m x d (2 m^2 d), where the
    code multiplied kernel_1 (n x m) by the pseudoinverse first (2 n m^2): 1.22x off at n =
    4096, d = 64. The code now takes the cheaper order the formula states."""
    kernel = build_kernel("nystrom", seq_len=n, heads=2, head_dim=d)
    q, k, v = (torch.randn(1, 2, n, d) for _ in range(3))
    counted = count_gflop(lambda: kernel(q, k, v))
    assert counted is not None
    assert counted * 1e9 == pytest.approx(formula_flops("nystrom", kernel, q.shape, False))


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None,
    reason="torch.compile's CPU backend needs a C compiler, and there is none here",
)
def test_a_compiled_call_counts_the_kernels_inductor_generated_for_it() -> None:
    """A compiled call's count left out every kernel Inductor generated (its fused element-wise
    work, a C++ function on a CPU, a Triton launch on a GPU) and counted only the library calls
    and views left in it: a compiled chain of three element-wise operators read 0 (red team).
    It reads its one generated kernel, and with the backward the backward's too."""
    x = torch.randn(64, 64)
    fused = torch.compile(lambda t: (t * 2).relu().exp(), fullgraph=True, dynamic=False)
    fused(x)  # compiled here, not while counted
    assert count_dispatches(lambda: (x * 2).relu().exp()) == 3  # eager: mul, relu, exp
    with DispatchCounter() as operators, GeneratedKernelCounter() as generated:
        fused(x)
    assert (operators.count, generated.count) == (0, 1), generated.names
    assert count_dispatches(lambda: fused(x)) == 1
    y = torch.randn(64, 64, requires_grad=True)
    fused(y).sum().backward()
    with GeneratedKernelCounter() as generated:
        fused(y).sum().backward()
    assert generated.count == 2, generated.names  # the forward's kernel and the backward's
    assert all(name.startswith("cpp_fused_") for name in generated.names), generated.names
