"""``mode=scaling`` (:mod:`vitattn.bench.scaling`): exponents, crossover, the guard, the sweep."""

from __future__ import annotations

import dataclasses
import functools
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.support.compiling import counting_into
from tests.support.presets import compose_config
from vitattn.bench import scaling
from vitattn.bench.app import benchmark
from vitattn.bench.environment import half_the_memory
from vitattn.bench.grid import Guard, Sweep
from vitattn.bench.kernels import as_given
from vitattn.bench.scaling import Runner, predict
from vitattn.bench.scaling_table import Row, crossover, fit_exponent
from vitattn.bench.settings import load_settings

CPU = torch.device("cpu")
# A grid small enough for a test: two attentions, two sizes, one quick repeat.
SMALL = ["attentions=[softmax,linear]", "seq_lens=[32,64]", "head_dims=[16]", "batch_size=2"]
SMALL += ["heads=2", "warmup=0", "repeats=2", "device=cpu"]


def small_sweep(**changes: object) -> Sweep:
    settings: dict[str, object] = {
        "attentions": ["softmax", "linear"],
        "seq_lens": [32, 64],
        "head_dims": [8],
        "batch_size": 1,
        "heads": 2,
        "dtype": torch.float32,
        "device": CPU,
        "warmup": 0,
        "repeats": 1,
    }
    return Sweep(**{**settings, **changes})  # type: ignore[arg-type]


def test_fit_prediction_and_crossover() -> None:
    assert fit_exponent([(n, 3.0 * n**2) for n in (64, 128, 256)]) == pytest.approx(2.0)
    assert predict([(64, 1.0), (128, 4.0)], 512) == pytest.approx(64.0)
    rows = [Row("softmax", n, 64, fwd_bwd_ms=float(n)) for n in (64, 128, 256)]
    rows += [Row("linear", n, 64, fwd_bwd_ms=100.0) for n in (64, 128, 256)]
    rows.append(Row("softmax", 512, 64, status="oom"))
    rows.append(Row("linear", 512, 64, fwd_bwd_ms=100.0))
    assert crossover(rows, "linear", 64, "softmax") == 128


def test_a_prediction_grows_at_most_as_n_squared() -> None:
    """No mechanism here does more than quadratic work or memory in the tokens: two small noisy
    probes (one call each, dispatch-bound, on a loaded machine) once read as an exponent of 6.6
    predicted 11,265 s for Nystrom at 256 tokens and skipped it (user review). The exponent a
    prediction takes is at most 2."""
    assert predict([(16, 1e-4), (32, 1e-2)], 256) == pytest.approx(1e-2 * 8**2)
    assert predict([(16, 1.0), (32, 8.0)], 64) == pytest.approx(32.0)


def timed(attention: str, n: int, q25: float, median: float, q75: float) -> Row:
    return Row(attention, n, 64, fwd_bwd_ms=median, fwd_bwd_q25_ms=q25, fwd_bwd_q75_ms=q75)


def test_an_attention_beats_the_reference_only_beyond_the_spread_of_both() -> None:
    """The crossover compares quartiles, not medians: at n = 256 the medians favour linear
    (0.95 against 1.0 ms) but the two spreads overlap, as sub-millisecond times on a shared CPU
    do, and which median was lower changed from run to run; from 1024 on linear's slowest
    quarter is faster than softmax's fastest."""
    rows = [
        timed("softmax", 256, 0.9, 1.0, 1.1),
        timed("linear", 256, 0.85, 0.95, 1.05),
        timed("softmax", 1024, 3.8, 4.0, 4.2),
        timed("linear", 1024, 2.0, 2.1, 2.2),
        timed("softmax", 4096, 15.0, 16.0, 17.0),
        timed("linear", 4096, 8.0, 8.2, 8.4),
    ]
    assert crossover(rows, "linear", 64, "softmax") == 1024
    rows[3] = timed("linear", 1024, 3.0, 3.5, 3.9)  # its slowest quarter past softmax's fastest
    assert crossover(rows, "linear", 64, "softmax") == 4096


def test_out_of_memory_is_a_status_and_skips_larger_sizes(monkeypatch) -> None:
    original = scaling.Workload.forward_backward

    def running_out(self: scaling.Workload) -> None:
        if self.inputs[0].shape[-2] >= 64:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64 GiB")
        original(self)

    monkeypatch.setattr(scaling.Workload, "forward_backward", running_out)
    rows = Runner(small_sweep(attentions=["linear"], seq_lens=[32, 64, 128])).run()
    assert [r.status for r in rows] == ["ok", "oom", "skipped: n=64 was oom"]


def test_guard_skips_a_size_predicted_too_large() -> None:
    sweep = small_sweep(
        attentions=["softmax"],
        seq_lens=[32, 64, 512],
        guard=Guard(max_memory_bytes=1e6, free_below=64),  # above 512's inputs, below its matrix
        knobs={"softmax": {"impl": "naive"}},
    )
    rows = Runner(sweep).run()
    assert [r.ok for r in rows] == [True, True, False]
    assert rows[2].status.startswith("skipped: predicted") and "max_memory_bytes" in rows[2].status


def test_kernel_errors_are_recorded_not_raised() -> None:
    rows = Runner(small_sweep(attentions=["softmax"], knobs={"softmax": {"impl": "bad"}})).run()
    assert all(r.status.startswith("unsupported: knobs.softmax.impl='bad'") for r in rows)


def test_a_size_that_refuses_a_setting_names_it_as_given() -> None:
    """``knobs.linformer.k=40`` is too many for 32 tokens and fine for 64: the row at n=32 says
    why, naming the setting as the command line gave it (a variant's own under ``variants``)."""
    variants = {"lf": {"attention": "linformer", "k": 40}}
    sweep = small_sweep(
        attentions=["linformer", "lf"], knobs={"linformer": {"k": 40}}, variants=variants
    )
    rows = Runner(sweep).run()
    assert [r.status.split(" is ")[0] for r in rows] == [
        "unsupported: knobs.linformer.k=40", "ok", "unsupported: variants.lf.k=40", "ok"
    ]  # fmt: skip
    assert "choose 1 <= knobs.linformer.k <= 32" in rows[0].status


@pytest.mark.parametrize(
    ("knobs", "variants", "named"),
    [
        ({"local": {"window": 9}}, {}, "knobs.local.window=9 is not valid"),
        ({}, {"local": {"attention": "local", "window": 9}}, "variants.local.window=9 is not"),
        ({"local": {"block": 4}}, {}, "attention.window=9 is not valid"),  # not given: a default
        ({}, {}, "attention.window=9 is not valid"),
    ],
)
def test_a_refusal_names_a_setting_as_given_and_a_default_in_the_mechanisms_words(
    knobs: dict, variants: dict, named: str
) -> None:
    message = "attention.window=9 is not valid; choose an even integer"
    assert as_given(message, "local", knobs, variants).startswith(named)


def test_variants_measure_a_registered_attention_with_other_settings() -> None:
    variants = {"softmax_naive": {"attention": "softmax", "impl": "naive"}}
    sweep = small_sweep(attentions=["softmax", "softmax_naive"], seq_lens=[128], variants=variants)
    sdpa, naive = Runner(sweep).run()
    assert (sdpa.attention, naive.attention) == ("softmax", "softmax_naive")
    assert naive.peak_tensor_bytes == 1 * 2 * 128 * 128 * 4  # the explicit matrix
    assert sdpa.peak_tensor_bytes < naive.peak_tensor_bytes  # fused: no n x n tensor


def test_a_compiled_variant_is_compiled_whole_in_its_mode(monkeypatch) -> None:
    """``compile_mode: reduce-overhead`` (CUDA graphs: one launch per call on a GPU) reaches
    ``torch.compile``, with ``fullgraph``; a plain compiled variant gets the default mode."""
    calls: list[dict[str, object]] = []

    def recording(module: torch.nn.Module, **options: object) -> torch.nn.Module:
        calls.append(options)
        return module  # run eager: what is tested is what was asked of the compiler

    monkeypatch.setattr(torch, "compile", recording)
    variants = {
        "linear_graphed": {
            "attention": "linear",
            "compile": True,
            "compile_mode": "reduce-overhead",
        },
        "linear_compiled": {"attention": "linear", "compile": True},
    }
    sweep = small_sweep(attentions=list(variants), seq_lens=[32], variants=variants)
    rows = Runner(sweep).run()
    assert [(r.attention, r.compiled, r.status) for r in rows] == [
        ("linear_graphed", True, "ok"), ("linear_compiled", True, "ok")
    ]  # fmt: skip
    assert calls == [
        {"fullgraph": True, "mode": "reduce-overhead", "dynamic": False},
        {"fullgraph": True, "mode": "default", "dynamic": False},
    ]


def symbolic(graph: torch.fx.GraphModule) -> bool:
    """Whether a graph Dynamo captured takes a size as a symbol (dynamic shapes)."""
    for node in graph.graph.nodes:
        value = node.meta.get("example_value")
        if node.op == "placeholder" and (
            isinstance(value, torch.SymInt)
            or (
                isinstance(value, torch.Tensor)
                and any(isinstance(s, torch.SymInt) for s in value.shape)
            )
        ):
            return True
    return False


def test_each_size_of_a_compiled_variant_is_compiled_for_that_size(monkeypatch) -> None:
    """Every size is timed on a graph of its own shapes, as a run of one shape compiles. From the
    second size on, Dynamo's automatic dynamic shapes compiled the sweep's graphs with n as a
    symbol: on the project's CPU performer_compiled at n = 1024 took 375 ms forward+backward
    against eager's 138 (static, 106), its time against n nearly quadratic. The guard's probes
    (here n = 16, before 128) run the mechanism eager: compiled, each would be a build."""
    graphs: list[torch.fx.GraphModule] = []
    counting = counting_into(graphs)
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=counting))
    torch._dynamo.reset()
    variants = {"linear_compiled": {"attention": "linear", "compile": True}}
    sweep = small_sweep(
        attentions=["linear_compiled"],
        seq_lens=[32, 64, 128],
        variants=variants,
        guard=Guard(free_below=64),
    )
    rows = Runner(sweep).run()
    assert [r.status for r in rows] == ["ok"] * 3
    assert not any(symbolic(graph) for graph in graphs)
    assert sorted(tokens(graph) for graph in graphs) == [32, 32, 64, 64, 128, 128]


def tokens(graph: torch.fx.GraphModule) -> int:
    """The sequence length of a kernel's graph: its first input's third dimension."""
    first = next(node for node in graph.graph.nodes if node.op == "placeholder")
    return int(first.meta["example_value"].shape[2])


@pytest.mark.slow  # Inductor compiles a graph per size and gradient mode on a CPU
def test_a_compiled_mechanism_sized_by_n_runs_at_every_size() -> None:
    """Issue 42, on a GPU: linformer_compiled failed from its third size of four
    (``FailOnRecompileLimitHit``): its projections are sized by n, so each size, with and
    without gradients (and at the check's sizes, at the guard's probe), is a recompile of its
    ``forward``, and Dynamo's default limit is 8 graphs; here the fifth size passed it."""
    variants = {"linformer_compiled": {"attention": "linformer", "compile": True}}
    sweep = small_sweep(
        attentions=["linformer_compiled"], seq_lens=[32, 64, 128, 256, 512], variants=variants
    )
    rows = Runner(sweep).run()
    assert [(r.seq_len, r.status) for r in rows] == [(n, "ok") for n in (32, 64, 128, 256, 512)]


def test_the_sweep_of_the_settings(tmp_path: Path) -> None:
    overrides = [*SMALL, "seq_lens=[64,32,64]", "dtype=float64", "+knobs.softmax.impl=naive"]
    sweep = scaling.sweep_of(load_settings(compose_config("bench", overrides, tmp_path)))
    assert (sweep.attentions, sweep.seq_lens, sweep.head_dims) == (
        ["softmax", "linear"],
        [32, 64],
        [16],
    )
    assert (sweep.dtype, sweep.device, sweep.level) == (torch.float64, CPU, "kernel")
    assert sweep.knobs == {"softmax": {"impl": "naive"}}
    assert sweep.guard.max_memory_bytes == half_the_memory()  # auto on a CPU
    assert (sweep.guard.max_call_seconds, sweep.guard.free_below) == (60, 1024)
    assert (sweep.warmup, sweep.warmup_max, sweep.settle, sweep.steady_heap) == (0, 20, 0.1, True)


@pytest.mark.slow
def test_block_level_run(tmp_path: Path) -> None:
    cfg = compose_config("bench", [*SMALL, "level=block", "attentions=[linear]"], tmp_path)
    out = benchmark(cfg)
    assert [r["status"] for r in out["results"]] == ["ok", "ok"]
    assert all(r["level"] == "block" and r["memory_bytes"] > 0 for r in out["results"])
    # A whole block has no formula: its floor is from the counted FLOPs.
    assert all(r["flops_source"] == "counted" and r["fwd_bwd_floor_ms"] > 0 for r in out["results"])


def test_each_row_has_its_floor_its_share_and_its_operators() -> None:
    rows = Runner(small_sweep(seq_lens=[32])).run()
    for row in rows:
        assert row.ok and row.flops_source == "counted"
        assert row.fwd_gflop is not None and row.gflop is not None
        assert row.fwd_gflop < row.gflop  # a backward costs more than nothing
        assert row.fwd_floor_ms is not None and row.fwd_bwd_floor_ms is not None
        assert row.fwd_floor_ms < row.fwd_bwd_floor_ms
        assert row.fwd_bwd_floor_pct == pytest.approx(100 * row.fwd_bwd_floor_ms / row.fwd_bwd_ms)
        assert row.fwd_dispatches is not None and row.fwd_bwd_dispatches is not None
        assert 0 < row.fwd_dispatches < row.fwd_bwd_dispatches
        assert row.fwd_bwd_least_bytes == 8 * 1 * 2 * 32 * 8 * 4  # q, k, v, out and gradients


def test_the_forward_floor_says_what_bounds_it_too() -> None:
    """``floor_bound`` is the forward+backward's; results.csv had no bound for ``fwd_floor_ms``,
    which a forward can be bound by the other term of: a backward doubles the bytes and more
    than doubles the FLOPs (vitattn-check's dry run: bigbird at n = 64, its forward
    memory-bound, the row's bound ``compute``). Softmax here does 8 FLOPs a byte forward and
    about 14 with its backward: at 10 FLOP/s per byte/s the forward is memory-bound."""
    from vitattn.bench.devices import DeviceSpec

    runner = Runner(small_sweep(attentions=["softmax"], seq_lens=[32]))
    runner.spec = DeviceSpec("test", {"float32": 1e10}, bandwidth=1e9)
    (row,) = runner.run()
    assert row.ok and row.fwd_gflop is not None and row.fwd_least_bytes is not None
    memory_ms = 1e3 * row.fwd_least_bytes / 1e9
    assert memory_ms > 1e3 * row.fwd_gflop * 1e9 / 1e10  # the forward: memory-bound
    assert row.fwd_floor_ms == pytest.approx(memory_ms)
    assert row.floor_bound == "compute"  # the forward+backward's
    assert row.fwd_floor_bound == "memory"


def test_a_call_faster_than_its_floor_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """A device whose figures are far too low (1 MFLOP/s, 1 MB/s, as a peak measured in a slow
    moment is, less so): every call runs past its floor, and the bench says what that means."""
    from vitattn.bench.devices import DeviceSpec

    runner = Runner(small_sweep(attentions=["softmax"], seq_lens=[32]))
    runner.spec = DeviceSpec("slow moment", {"float32": 1e6}, bandwidth=1e6)
    with caplog.at_level("WARNING", logger="vitattn.bench.scaling"):
        (row,) = runner.run()
    assert row.ok and row.fwd_bwd_floor_pct is not None and row.fwd_bwd_floor_pct > 110
    (said,) = [r.getMessage() for r in caplog.records if "of its floor" in r.getMessage()]
    assert said.startswith("softmax at n=32 ran at ")
    assert "the floors of this run are too high" in said


def test_results_md_carries_what_a_busy_machine_may_have_moved(tmp_path: Path) -> None:
    """The warning above was a log line alone: ``results.md`` showed a share past 100% and a
    busy machine's timings without a word (audit). Against figures measured in this process
    both are a caution under the tables; against a datasheet's, a share past the floor is not
    (``vitattn-check`` lists it as a problem)."""
    from vitattn.bench.devices import DeviceSpec
    from vitattn.bench.scaling import ScalingRun, describe
    from vitattn.bench.writers import write_scaling

    sweep = small_sweep(attentions=["softmax"], seq_lens=[32])
    runner = Runner(sweep)
    runner.spec = DeviceSpec("slow moment", {"float32": 1e6}, bandwidth=1e6, measured=True)
    rows = runner.run()
    floor = describe(runner.spec, sweep.dtype)
    environment = {"cpus": 2, "load_average": 4.5, "floor_device": floor}
    write_scaling(ScalingRun(sweep, rows, [], environment), tmp_path, {})
    said = (tmp_path / "results.md").read_text()
    cautions = [line for line in said.splitlines() if line.startswith("Caution: ")]
    assert cautions[0] == (
        "Caution: the machine was busy (load 4.5 at the start, on 2 CPUs): its timings include "
        "waiting for a CPU"
    )
    assert cautions[1].startswith("Caution: softmax at n=32 ran at ") and len(cautions) == 2

    environment.update(load_average=0.5, floor_device={**floor, "measured": False})
    write_scaling(ScalingRun(sweep, rows, [], environment), tmp_path, {})
    assert "Caution" not in (tmp_path / "results.md").read_text()


def test_a_call_the_counter_cannot_count_takes_its_formula(monkeypatch) -> None:
    """Where ``torch.utils.flop_counter`` fails (FlexAttention's operator, say), the floor comes
    from the mechanism's formula, and says so."""
    from vitattn.bench.floor import formula_flops
    from vitattn.bench.kernels import build_kernel

    monkeypatch.setattr(scaling, "count_gflop", lambda call, quiet=False: None)
    (row,) = Runner(small_sweep(attentions=["softmax"], seq_lens=[32])).run()
    assert row.ok and row.flops_source == "formula"
    kernel = build_kernel("softmax", seq_len=32, heads=2, head_dim=8)
    forward = formula_flops("softmax", kernel, (1, 2, 32, 8), False)
    assert (row.fwd_gflop, row.gflop) == pytest.approx((forward / 1e9, 3 * forward / 1e9))
    assert row.fwd_bwd_floor_ms is not None and row.fwd_bwd_floor_pct is not None


def test_an_impossible_size_is_skipped_without_allocating(monkeypatch) -> None:
    built: list[int] = []
    real = scaling.Workload

    def recording(sweep: Sweep, attention: str, seq_len: int, head_dim: int) -> object:
        built.append(seq_len)
        return real(sweep, attention, seq_len, head_dim)

    monkeypatch.setattr(scaling, "Workload", recording)
    sweep = small_sweep(
        attentions=["linear"], seq_lens=[32, 10**9], guard=Guard(max_memory_bytes=2**30)
    )
    rows = Runner(sweep).run()
    assert rows[0].ok
    assert rows[1].status.startswith("skipped: its inputs, output and gradients alone take")
    assert max(built) == 32  # no probe and no attempt at a billion tokens


def test_a_huge_size_is_skipped_by_probes_that_stay_within_the_guard() -> None:
    """Each probe the runner measured was one that the probes before it predicted to fit the
    guard, and the million tokens were never built: what the runner decides, not how long it
    took."""
    guard = Guard(max_memory_bytes=2**31, max_call_seconds=0.5, free_below=64)
    sweep = small_sweep(
        attentions=["softmax"],
        seq_lens=[32, 2**20],  # a million tokens: the n x n matrix alone would be 4 TiB
        knobs={"softmax": {"impl": "naive"}},
        guard=guard,
    )
    runner = Runner(sweep)
    rows = runner.run()
    assert rows[0].ok and rows[1].status.startswith("skipped: predicted")
    memory = runner.memory_history[("softmax", 8)]
    seconds = runner.time_history[("softmax", 8)]
    probed = [n for n, _ in memory]
    assert probed and max(probed) <= 2**20 // 8
    for i, n in enumerate(probed):
        predicted_memory = predict(memory[:i], n)
        predicted_seconds = predict(seconds[:i], n)
        assert predicted_memory is None or predicted_memory <= guard.max_memory_bytes
        assert predicted_seconds is None or predicted_seconds <= guard.max_call_seconds
    assert rows[1].memory_bytes is None  # skipped, never measured


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread: on a busy machine a second thread that is not scheduled stalls
    every parallel operator, and that noise would swamp what is compared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
def test_a_row_does_not_depend_on_the_attentions_measured_before_it() -> None:
    """The same grid in two orders reports the same rows: everything a row holds but its times
    (FLOPs, memory, the floor, the operators dispatched, the status) is equal whichever attention
    was measured first. The times are printed, as a benchmark's ratios, not asserted: load on a
    shared machine moves them."""
    timed = {"warmup": 2, "warmup_max": 20, "settle": 0.1, "repeats": 5, "steady_heap": True}
    grid = {"seq_lens": [256], "head_dims": [32], **timed}
    first, second = (
        {(r.attention, r.seq_len): r for r in Runner(small_sweep(attentions=order, **grid)).run()}
        for order in (["efficient", "linear"], ["linear", "efficient"])
    )
    assert first.keys() == second.keys()
    untimed = [
        field.name
        for field in dataclasses.fields(Row)
        if not field.name.endswith(("_ms", "_pct", "_warmup")) and field.name != "repeats"
    ]
    for key, row in first.items():
        other = second[key]
        assert row.ok and other.ok
        assert {n: getattr(row, n) for n in untimed} == {n: getattr(other, n) for n in untimed}
        assert row.memory_bytes and row.fwd_bwd_floor_ms and row.fwd_bwd_dispatches
        for measured in (row, other):
            assert measured.fwd_ms is not None and measured.fwd_bwd_ms is not None
            assert measured.fwd_warmup is not None and 2 <= measured.fwd_warmup <= 20
            assert measured.fwd_first_ms is not None and measured.fwd_bwd_first_ms is not None
        ratio = max(row.fwd_bwd_min_ms, other.fwd_bwd_min_ms) / min(
            row.fwd_bwd_min_ms, other.fwd_bwd_min_ms
        )
        print(
            f"{key}: fastest fwd+bwd {row.fwd_bwd_min_ms:.3f} / {other.fwd_bwd_min_ms:.3f} ms "
            f"in the two orders (ratio {ratio:.2f})"
        )


@pytest.mark.slow
def test_a_compiled_variant_is_timed_in_one_graph_beside_the_eager_row() -> None:
    """``{attention: linear, compile: true}``: a row marked compiled, against the same floor as
    the eager one (the mechanism's FLOPs and least bytes), dispatching fewer operators (Inductor
    fuses them), and no graph break (``fullgraph=True`` would fail the row)."""
    variants = {"linear_compiled": {"attention": "linear", "compile": True}}
    sweep = small_sweep(attentions=["linear", "linear_compiled"], seq_lens=[64], variants=variants)
    eager, compiled = Runner(sweep).run()
    assert eager.ok and compiled.ok, compiled.status
    assert (eager.compiled, compiled.compiled) == (False, True)
    assert compiled.fwd_bwd_floor_ms == eager.fwd_bwd_floor_ms > 0
    assert compiled.fwd_floor_ms == eager.fwd_floor_ms
    assert compiled.fwd_bwd_dispatches < eager.fwd_bwd_dispatches
    assert compiled.fwd_bwd_floor_pct is not None and compiled.fwd_bwd_floor_pct > 0


def test_the_sweep_collects_garbage_without_scanning_the_objects_from_before_it() -> None:
    """Each grid point ends in a full collection (:func:`scaling.release`); with torch and
    Dynamo loaded, scanning their objects took most of a CPU check's kernel section."""
    frozen: list[int] = []
    runner = Runner(
        small_sweep(seq_lens=[32]), on_row=lambda row: frozen.append(gc.get_freeze_count())
    )
    rows = runner.run()
    assert [row.status for row in rows] == ["ok", "ok"]
    assert len(frozen) == 2 and all(count > 0 for count in frozen)
    assert gc.get_freeze_count() == 0
