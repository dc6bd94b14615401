"""``vitattn-bench``: measurements with known answers, and each mode end to end on tiny grids."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from tests.helpers import TINY, compose_config, run_cli
from vitattn.attention import ATTENTIONS
from vitattn.bench.app import benchmark, check_budgets
from vitattn.bench.approx import (
    approximation_errors,
    errors_of,
    probe_matrix,
    random_qkv,
    softmax_reference,
)
from vitattn.bench.kernels import build_kernel
from vitattn.bench.memory import measure_memory
from vitattn.bench.scaling import Guard, Row, Runner, Sweep, crossover, fit_exponent, predict
from vitattn.bench.spectrum import cumulative_energy, head_spectra, rank_at_energy, singular_values
from vitattn.bench.timing import summarize
from vitattn.utils.config import CONFIG_DIR
from vitattn.utils.errors import ConfigError

CPU = torch.device("cpu")
# A grid small enough for a test: two attentions, two sizes, one quick repeat.
SMALL = ["attentions=[softmax,linear]", "seq_lens=[32,64]", "head_dims=[16]", "batch_size=2"]
SMALL += ["heads=2", "warmup=0", "repeats=2", "device=cpu"]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


# --- measurements with known answers ---------------------------------------------------------


def test_memory_of_a_matmul_is_its_saved_inputs_plus_its_output() -> None:
    n, d = 96, 16
    x = torch.randn(n, d, requires_grad=True)
    y = torch.randn(n, d, requires_grad=True)

    def step() -> None:
        (x @ y.T).backward(torch.ones(n, n))

    report = measure_memory(step, CPU)
    assert report.saved_bytes == 2 * n * d * 4  # x and y (y.T is a view of y's storage)
    assert report.peak_tensor_bytes == n * n * 4  # the n x n product
    assert report.memory_bytes == report.saved_bytes + report.peak_tensor_bytes
    assert report.method == "saved+largest"


def test_saved_memory_counts_a_shared_storage_once() -> None:
    x = torch.randn(40, 8, requires_grad=True)
    report = measure_memory(lambda: (x @ x.T).sum().backward(), CPU)
    assert report.saved_bytes == 40 * 8 * 4


def test_naive_softmax_memory_is_quadratic_and_linear_attention_linear() -> None:
    def memory(name: str, n: int, **knobs: str) -> int:
        kernel = build_kernel(name, seq_len=n, heads=1, head_dim=8, knobs=knobs)
        q, k, v = (torch.randn(1, 1, n, 8, requires_grad=True) for _ in range(3))
        return measure_memory(lambda: kernel(q, k, v).sum().backward(), CPU).memory_bytes

    naive = fit_exponent([(n, memory("softmax", n, impl="naive")) for n in (128, 256, 512)])
    linear = fit_exponent([(n, memory("linear", n)) for n in (128, 256, 512)])
    assert naive is not None and naive > 1.7
    assert linear is not None and 0.9 < linear < 1.1


def test_timing_summary() -> None:
    timing = summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (timing.median_ms, timing.q25_ms, timing.q75_ms) == (3.0, 2.0, 4.0)
    assert (timing.min_ms, timing.max_ms, timing.repeats) == (1.0, 5.0, 5)


def test_fit_prediction_and_crossover() -> None:
    assert fit_exponent([(n, 3.0 * n**2) for n in (64, 128, 256)]) == pytest.approx(2.0)
    assert predict([(64, 1.0), (128, 4.0)], 512) == pytest.approx(64.0)
    rows = [Row("softmax", n, 64, fwd_bwd_ms=float(n)) for n in (64, 128, 256)]
    rows += [Row("linear", n, 64, fwd_bwd_ms=100.0) for n in (64, 128, 256)]
    rows.append(Row("softmax", 512, 64, status="oom"))
    rows.append(Row("linear", 512, 64, fwd_bwd_ms=100.0))
    assert crossover(rows, "linear", 64, "softmax") == 128


def test_spectrum_recovers_the_rank_of_a_low_rank_matrix() -> None:
    generator = torch.Generator().manual_seed(0)
    for rank in (1, 5, 17):
        matrix = torch.randn(64, rank, generator=generator) @ torch.randn(rank, 64)
        values = singular_values(matrix)
        assert int(rank_at_energy(values, 1.0)) == rank
        assert int(rank_at_energy(values, 0.9)) <= rank
    # Known spectrum 3, 2, 1: energies 9, 4, 1 of 14, E = 0.64, 0.93, 1.
    values = torch.tensor([3.0, 2.0, 1.0, 0.0])
    assert cumulative_energy(values).tolist()[:3] == pytest.approx([9 / 14, 13 / 14, 1.0])
    assert int(rank_at_energy(values, 0.9)) == 2


def test_head_spectra_of_rank_one_attention() -> None:
    # Keys all equal: every row of softmax(QK^T) is uniform, a rank-one matrix.
    q = torch.randn(3, 2, 16, 8)
    k = torch.ones(3, 2, 16, 8)
    spectra = head_spectra([(q, k), (q, k)], energy=0.9)
    assert [(s.layer, s.head) for s in spectra] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(s.rank == 1 and s.rank_max == 1 and s.seq_len == 16 for s in spectra)


# --- approximation error ---------------------------------------------------------------------


def test_probe_recovers_the_softmax_matrix_and_softmax_has_no_error() -> None:
    q, k, v = random_qkv(2, 2, 40, 16, seed=1)
    kernel = build_kernel("softmax", seq_len=40, heads=2, head_dim=16).eval()
    exact, _ = softmax_reference(q, k, v)
    # 40 tokens with head_dim 16: three probes, the last one partly padded.
    assert torch.allclose(probe_matrix(kernel, q, k).double(), exact, atol=1e-6)
    output_error, matrix_error, method = errors_of(kernel, q, k, v)
    assert output_error < 1e-5 and matrix_error is not None and matrix_error < 1e-5
    assert method == "attention_matrix"


def test_probed_matrix_reproduces_the_kernel_output() -> None:
    q, k, v = random_qkv(1, 2, 32, 16, seed=2)
    kernel = build_kernel("linear", seq_len=32, heads=2, head_dim=16).eval()
    matrix = probe_matrix(kernel, q, k)
    assert torch.allclose(matrix @ v, kernel(q, k, v), atol=1e-5)
    assert torch.allclose(matrix.sum(dim=-1), torch.ones(1, 2, 32), atol=1e-5)  # rows sum to 1
    _, matrix_error, method = errors_of(kernel, q, k, v)
    assert method == "probe" and matrix_error is not None and matrix_error > 0


def test_error_falls_with_the_budget_on_random_inputs() -> None:
    names = [n for n in ("performer", "nystrom") if n in ATTENTIONS]
    budgets = {
        "performer": {"knob": "num_features", "values": [4, 256]},
        "nystrom": {"knob": "landmarks", "values": [2, 32]},
    }
    inputs = {"random": random_qkv(1, 2, 32, 16, seed=3)}
    rows = approximation_errors(names, budgets, inputs, trials=2)
    assert [r.status for r in rows] == ["ok"] * len(rows)
    for name in names:
        small, large = (r for r in rows if r.attention == name)
        assert large.output_rel_error < small.output_rel_error
        assert large.matrix_rel_error is not None and small.matrix_rel_error is not None
    nystrom_full = [r for r in rows if r.attention == "nystrom" and r.budget == 32]
    if nystrom_full:  # landmarks = n is exact up to the iterative pseudoinverse
        assert nystrom_full[0].output_rel_error < 0.05


def test_budget_knobs_of_the_config_are_settings_of_the_attentions(tmp_path: Path) -> None:
    cfg = compose_config("bench", [], tmp_path)
    configured = [
        n for n in sorted(ATTENTIONS) if (CONFIG_DIR / "attention" / f"{n}.yaml").is_file()
    ]
    checked = check_budgets(cfg.approx.budgets, configured)
    assert set(checked) <= set(ATTENTIONS)
    assert {"linformer", "nystrom", "performer"} & set(ATTENTIONS) <= set(checked)


# --- the sweep -------------------------------------------------------------------------------


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


def test_out_of_memory_is_a_status_and_skips_larger_sizes(monkeypatch) -> None:
    from vitattn.bench import scaling

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
        guard=Guard(max_memory_bytes=2e5, free_below=64),
        knobs={"softmax": {"impl": "naive"}},
    )
    rows = Runner(sweep).run()
    assert [r.ok for r in rows] == [True, True, False]
    assert rows[2].status.startswith("skipped: predicted") and "max_memory_bytes" in rows[2].status


def test_kernel_errors_are_recorded_not_raised() -> None:
    rows = Runner(small_sweep(attentions=["softmax"], knobs={"softmax": {"impl": "bad"}})).run()
    assert all(r.status.startswith("unsupported: attention.impl='bad'") for r in rows)


def test_variants_measure_a_registered_attention_with_other_settings() -> None:
    variants = {"softmax_naive": {"attention": "softmax", "impl": "naive"}}
    sweep = small_sweep(attentions=["softmax", "softmax_naive"], seq_lens=[128], variants=variants)
    sdpa, naive = Runner(sweep).run()
    assert (sdpa.attention, naive.attention) == ("softmax", "softmax_naive")
    assert naive.peak_tensor_bytes == 1 * 2 * 128 * 128 * 4  # the explicit matrix
    assert sdpa.peak_tensor_bytes < naive.peak_tensor_bytes  # fused: no n x n tensor


def test_block_level_run(tmp_path: Path) -> None:
    cfg = compose_config("bench", [*SMALL, "level=block", "attentions=[linear]"], tmp_path)
    out = benchmark(cfg)
    assert [r["status"] for r in out["results"]] == ["ok", "ok"]
    assert all(r["level"] == "block" and r["memory_bytes"] > 0 for r in out["results"])


# --- end to end ------------------------------------------------------------------------------


def test_cli_writes_every_file(tmp_path: Path, data_dir: Path) -> None:
    run_dir = tmp_path / "run"
    result = run_cli("vitattn-bench", *SMALL, f"hydra.run.dir={run_dir}", data_dir=data_dir)
    for name in ("results.csv", "results.json", "scaling.csv", "results.md", "bench.log"):
        assert (run_dir / name).is_file(), name
    for name in ("time_vs_seq_len.png", "memory_vs_seq_len.png"):
        assert (run_dir / name).read_bytes()[:4] == b"\x89PNG"
    rows = read_csv(run_dir / "results.csv")
    assert [(r["attention"], r["seq_len"], r["head_dim"]) for r in rows] == [
        ("softmax", "32", "16"),
        ("softmax", "64", "16"),
        ("linear", "32", "16"),
        ("linear", "64", "16"),
    ]
    for row in rows:
        assert row["status"] == "ok"
        assert float(row["fwd_ms"]) > 0 and float(row["fwd_bwd_ms"]) > 0
        assert int(row["memory_bytes"]) > 0 and int(row["saved_bytes"]) > 0
        assert (row["batch_size"], row["heads"], row["dtype"]) == ("2", "2", "float32")
    scaling = read_csv(run_dir / "scaling.csv")
    assert [s["attention"] for s in scaling] == ["softmax", "linear"]
    assert all(s["fwd_bwd_ms_exponent"] and s["memory_bytes_exponent"] for s in scaling)
    content = json.loads((run_dir / "results.json").read_text())
    assert content["mode"] == "scaling" and len(content["results"]) == 4
    assert "| softmax" in result.stdout and "Scaling exponents" in result.stdout


BAD_INPUTS = [
    (["attentions=[softmax,nope]"], r"attentions=\[nope\] names no registered attention; .*linear"),
    (["mode=fast"], r"mode=fast is not valid; choose one of: scaling, approx, spectrum"),
    (["dtype=float8"], r"dtype=float8 is not valid; choose one of: float32, float64, float16"),
    (["level=model"], r"level=model is not valid; choose one of: kernel, block"),
    (["seq_lens=[0,64]"], r"seq_lens has 0, which is not valid"),
    (["+knobs.linear.k=4"], r"knobs.linear.k is not a setting of configs/attention/linear.yaml"),
    (["mode=spectrum"], r"ckpt_path is required for mode=spectrum"),
    (["+variants.fast.attention=nope"], r"variants.fast.attention=\[nope\] names no registered"),
    (
        ["+variants.fast.attention=linear", "+variants.fast.k=3"],
        r"variants.fast.k is not a setting",
    ),
    (
        ["mode=approx", "attentions=[nystrom]", "approx.budgets.nystrom.knob=m"],
        r"approx.budgets.nystrom.knob=m is not a setting of configs/attention/nystrom.yaml",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_INPUTS)
def test_bad_input_raises_one_config_error(
    overrides: list[str], message: str, tmp_path: Path
) -> None:
    cfg = compose_config("bench", [*SMALL, *overrides], tmp_path / "run")
    with pytest.raises(ConfigError, match=message):
        benchmark(cfg)
    assert not (tmp_path / "run").exists()


def test_cli_bad_input_ends_in_one_line(tmp_path: Path, data_dir: Path) -> None:
    run_dir = tmp_path / "run"
    result = run_cli(
        "vitattn-bench",
        "attentions=[softmax,nope]",
        f"hydra.run.dir={run_dir}",
        data_dir=data_dir,
        check=False,
    )
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("vitattn-bench: error: attentions=[nope] names no registered")
    assert not run_dir.exists()


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """Two training steps of a tiny softmax ViT (64 tokens, 2 heads of 16)."""
    from hydra.core.global_hydra import GlobalHydra

    from vitattn.train import train

    GlobalHydra.instance().clear()
    run_dir = tmp_path_factory.mktemp("tiny") / "run"
    overrides = [*TINY, f"paths.data_dir={data_dir}", "trainer.max_steps=2", "test=false"]
    overrides += ["+trainer.limit_val_batches=1", "logger=csv"]
    train(compose_config("train", overrides, run_dir))
    GlobalHydra.instance().clear()
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    assert checkpoint.is_file()
    return checkpoint


def test_approx_mode_on_random_inputs_and_a_checkpoint(
    tiny_checkpoint: Path, tmp_path: Path, data_dir: Path
) -> None:
    names = [n for n in ("linear", "performer") if n in ATTENTIONS]
    overrides = [
        "mode=approx",
        f"attentions=[{','.join(names)}]",
        f"ckpt_path={tiny_checkpoint}",
        f"paths.data_dir={data_dir}",
        "approx.seq_len=32",
        "approx.head_dim=16",
        "approx.trials=1",
        "approx.images=2",
        "approx.budgets.performer.values=[8,64]",
        "batch_size=1",
        "heads=2",
    ]
    benchmark(compose_config("bench", overrides, tmp_path))
    rows = read_csv(tmp_path / "approx.csv")
    assert {r["source"] for r in rows} == {"random", "checkpoint"}
    assert {(r["seq_len"], r["head_dim"]) for r in rows if r["source"] == "checkpoint"} == {
        ("64", "16")
    }
    assert all(r["status"] == "ok" and float(r["output_rel_error"]) > 0 for r in rows)
    assert all(float(r["matrix_rel_error"]) > 0 for r in rows)
    for name in names:
        assert (tmp_path / f"approx_{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "results.json").read_text())["mode"] == "approx"


def test_spectrum_mode_on_a_checkpoint(
    tiny_checkpoint: Path, tmp_path: Path, data_dir: Path
) -> None:
    run_dir = tmp_path / "run"
    run_cli(
        "vitattn-bench",
        "mode=spectrum",
        f"ckpt_path={tiny_checkpoint}",
        "spectrum.images=2",
        f"hydra.run.dir={run_dir}",
        data_dir=data_dir,
    )
    summary = read_csv(run_dir / "spectrum_summary.csv")
    assert [(r["layer"], r["head"]) for r in summary] == [("0", "0"), ("0", "1")]  # depth 1
    assert all(1 <= int(r["rank"]) <= 64 for r in summary)
    values = read_csv(run_dir / "spectrum.csv")
    assert len(values) == 2 * 64
    energies = [float(r["cumulative_energy"]) for r in values if r["head"] == "0"]
    assert energies == sorted(energies) and energies[-1] == pytest.approx(1.0)
    assert (run_dir / "spectrum.png").read_bytes()[:4] == b"\x89PNG"
