"""``mode=train`` (:mod:`vitattn.bench.train_speed`): ours, a plain loop, timm and a report-style
loop; and ``model.compile``, which ``train.compile`` times."""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from tests.support.compiling import compile_stood_down
from tests.support.runners import run_cli
from tests.support.written import assert_the_closing_line_names_every_file
from vitattn.bench.settings import IMPLEMENTATIONS, TrainSettings
from vitattn.bench.train_speed import (
    StepClock,
    TrainRun,
    TrainSpeed,
    measure_train_speed,
    ratios,
    time_loop,
)
from vitattn.bench.writers import write_train
from vitattn.errors import ConfigError
from vitattn.models.module import ViTClassifier
from vitattn.utils.config import CONFIG_DIR, PROJECT_ROOT

TINY_NET = ["model.embed_dim=32", "model.depth=1", "model.heads=2"]
CPU = torch.device("cpu")


def tiny_train(**changes: object) -> TrainSettings:
    settings: dict[str, object] = {
        "implementations": list(IMPLEMENTATIONS),
        "model": "vit",
        "attention": "softmax",
        "batch_size": 16,
        "precision": "32-true",
        "compile": False,
        "warmup": 1,
        "steps": 2,
        "repeats": 2,
        "overrides": TINY_NET,
    }
    return TrainSettings(**{**settings, **changes})  # type: ignore[arg-type]


def test_every_loop_is_timed_the_same_way(monkeypatch) -> None:
    clock = iter(float(t) for t in range(100))
    monkeypatch.setattr("vitattn.bench.train_speed.time.perf_counter", lambda: next(clock))
    calls = []
    clock = time_loop(lambda: calls.append(1), CPU, tiny_train(warmup=2, steps=3, repeats=2))
    assert len(calls) == 2 + 3 * 2  # warm-up steps, then the windows
    assert clock.windows(2, 3, 2) == [1.0, 1.0]
    # Lightning's clock ticks at the start and at each step's end: the same windows.
    lightning = StepClock(CPU)
    lightning.ticks = [0.0, 5.0, 7.0, 9.0, 11.0, 13.0]  # a slow first step, then 2 s per step
    assert lightning.windows(warmup=1, steps=2, repeats=2) == [2.0, 2.0]


def test_the_clock_synchronises_the_device_only_where_a_window_starts_or_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a GPU a sync at every step's end added the host's work between steps (the loop, the
    next batch, the launches) to every step, which a real run overlaps with the device's work:
    the clock syncs at the start, at the warm-up's end and at each window's end only, and
    refuses to read a tick it did not sync. (The device is only named here: no GPU needed.)"""
    steps: list[int] = []
    synced: list[int] = []  # the steps done at each sync: the tick's index
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(len(steps)))
    clock = time_loop(
        lambda: steps.append(1), torch.device("cuda"), tiny_train(warmup=2, steps=3, repeats=2)
    )
    assert len(steps) == 8 and len(clock.ticks) == 9
    assert synced == [0, 2, 5, 8]
    assert len(clock.windows(2, 3, 2)) == 2 and clock.warmup_extra(2, 1.0) is not None
    with pytest.raises(ValueError, match="tick 1 was not synchronised"):
        clock.seconds(0, 1)


def test_the_checks_training_clock_synchronises_at_the_start_half_way_and_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vitattn.check.training import _Recorder

    recorder = _Recorder(torch.device("cuda"), steps=9)
    synced: list[int] = []
    monkeypatch.setattr(
        torch.cuda, "synchronize", lambda device=None: synced.append(len(recorder.clock.ticks))
    )
    for _ in range(10):  # Lightning's on_train_start, then each step's end
        recorder.clock.tick()
    assert synced == [0, 5, 9]


def test_a_compiled_rows_compile_seconds_are_its_warm_up_beyond_the_steady_step() -> None:
    clock = StepClock(CPU)
    clock.ticks = [0.0, 30.0, 32.0, 34.0, 36.0, 38.0, 40.0]  # compiling in the first steps
    steady = statistics.median(clock.windows(warmup=2, steps=2, repeats=2))
    assert steady == 2.0
    assert clock.warmup_extra(2, steady) == pytest.approx(32.0 - 2 * 2.0)
    assert clock.warmup_extra(0, steady) is None  # no warm-up: nothing apart from the steady


def test_a_batch_larger_than_the_training_images_names_the_benchs_setting(
    data_dir: Path, monkeypatch
) -> None:
    """The data module's refusal named ``data.batch_size``, which the bench does not take."""
    monkeypatch.setenv("VITATTN_DATA_DIR", str(data_dir))
    said = r"^train\.batch_size=100000 is larger than the \d+ training images; choose a smaller"
    with pytest.raises(ConfigError, match=said):
        measure_train_speed(tiny_train(batch_size=100_000), CPU)


def speed(implementation: str, compile: bool, images_per_sec: float) -> TrainSpeed:
    return TrainSpeed(
        implementation, "vit", "softmax", 16, "32-true", compile, "cpu", 1, images_per_sec,
        0.0, 1.0,
    )  # fmt: skip


def test_ratios_compare_eager_with_eager_and_compiled_with_compiled() -> None:
    results = [
        speed("vitattn", False, 100.0),
        speed("vitattn", True, 150.0),
        speed("timm", False, 50.0),
        speed("timm", True, 100.0),
        speed("report_style", False, 20.0),
    ]
    assert ratios(results) == {
        "vitattn/timm": 2.0,
        "vitattn/report_style": 5.0,
        "vitattn compiled/timm compiled": 1.5,
        "vitattn compiled/vitattn": 1.5,
    }


@pytest.mark.slow
def test_every_implementation_runs_training_steps(data_dir: Path, monkeypatch) -> None:
    pytest.importorskip("timm")
    monkeypatch.setenv("VITATTN_DATA_DIR", str(data_dir))
    results = measure_train_speed(tiny_train(), CPU)
    assert [r.implementation for r in results] == list(IMPLEMENTATIONS)
    for result in results:
        assert result.status == "ok" and result.images_per_sec > 0 and result.step_ms > 0
    # timm's ViT, configured to our sizes, has exactly our layers; the plain loop trains ours.
    params = {r.implementation: r.params for r in results}
    assert params["timm"] == params["vitattn"] == params["plain_loop"]
    assert set(ratios(results)) == {"vitattn/plain_loop", "vitattn/timm", "vitattn/report_style"}


def net_config(compile_net: bool) -> dict:
    net = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "model" / "vit.yaml"))
    net["attention"] = OmegaConf.to_container(
        OmegaConf.load(CONFIG_DIR / "attention" / "softmax.yaml")
    )
    net.update(embed_dim=32, depth=1, heads=2, compile=compile_net)
    return net


OPTIMIZER = {"_target_": "torch.optim.AdamW", "_partial_": True}


def test_a_compiled_row_of_ours_that_ran_eager_says_so(data_dir: Path, monkeypatch) -> None:
    """As in ``vitattn-check``'s training section: a compile asked for that Dynamo never made
    (here a stance standing ``torch.compile`` down) is the row's status, not a compiled speed."""
    monkeypatch.setenv("VITATTN_DATA_DIR", str(data_dir))
    with compile_stood_down():
        eager, compiled = measure_train_speed(
            tiny_train(implementations=["vitattn"], compile=True), CPU
        )
    assert (eager.compile, eager.status) == (False, "ok")
    assert (compiled.compile, compiled.status) == (
        True, "ran eager: torch.compile compiled no graph of the network"
    )  # fmt: skip


def test_compile_keeps_checkpoint_names() -> None:
    compiled = ViTClassifier(net=net_config(True), optimizer=OPTIMIZER)
    plain = ViTClassifier(net=net_config(False), optimizer=OPTIMIZER)
    assert compiled.net._compiled_forward is not None
    assert compiled.state_dict().keys() == plain.state_dict().keys()


def test_compile_unavailable_runs_eager_and_says_so(monkeypatch, caplog) -> None:
    def unavailable(*args, **kwargs):
        raise RuntimeError("Windows not yet supported for torch.compile")

    monkeypatch.setattr(torch, "compile", unavailable)
    with caplog.at_level("WARNING"):
        module = ViTClassifier(net=net_config(True), optimizer=OPTIMIZER)
    assert module.net._compiled_forward.compiled is False
    assert "model.compile=true: torch.compile is unavailable here (RuntimeError" in caplog.text
    assert "continues eager, not compiled" in caplog.text
    assert module(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_a_compile_failing_at_the_first_call_runs_eager_and_says_so(monkeypatch, caplog) -> None:
    from torch._dynamo.exc import TorchDynamoException

    calls = []

    def failing_compile(function, *args, **kwargs):
        def compiled(*inputs):
            calls.append(1)
            raise TorchDynamoException("backend='inductor' raised: no C++ compiler")

        return compiled

    monkeypatch.setattr(torch, "compile", failing_compile)
    torch.manual_seed(0)
    module = ViTClassifier(net=net_config(True), optimizer=OPTIMIZER).eval()
    images = torch.zeros(2, 3, 32, 32)
    with caplog.at_level("WARNING"):
        first, second = module(images), module(images)
    eager = module.net._forward(images)
    assert torch.equal(first, eager) and torch.equal(second, eager)
    assert calls == [1]  # tried once, then eager for good
    assert module.net._compiled_forward.compiled is False
    assert caplog.text.count("torch.compile failed (TorchDynamoException") == 1


def test_a_model_error_is_not_taken_for_a_compile_failure(monkeypatch) -> None:
    def compile_that_passes_errors(function, *args, **kwargs):
        return function

    monkeypatch.setattr(torch, "compile", compile_that_passes_errors)
    module = ViTClassifier(net=net_config(True), optimizer=OPTIMIZER)
    with pytest.raises(RuntimeError):
        module(torch.zeros(2, 5, 32, 32))  # 5 channels: the patch embedding's own error
    assert module.net._compiled_forward.compiled is True


def test_a_row_that_did_not_run_as_asked_enters_no_ratio() -> None:
    """timm's compiled row that ran eager gave ``vitattn compiled/timm compiled``, a compiled
    speed over an eager one; each ratio is of rows that ran as they were asked."""
    timm_compiled = speed("timm", True, 60.0)
    timm_compiled.status = "ran eager: torch.compile compiled no graph of the network"
    results = [
        speed("vitattn", False, 100.0),
        speed("vitattn", True, 150.0),
        speed("timm", False, 50.0),
        timm_compiled,
    ]
    assert ratios(results) == {"vitattn/timm": 2.0, "vitattn compiled/vitattn": 1.5}


def test_a_row_without_a_measurement_shows_dashes_and_its_status(tmp_path: Path, caplog) -> None:
    """A row that measured nothing read as ``0.0 img/s``, and a compiled row that ran eager did
    not say so."""
    unmeasured = speed("timm", False, 0.0)
    unmeasured.images_per_sec = unmeasured.spread = unmeasured.step_ms = None
    unmeasured.status = "no measurement"
    measured = speed("vitattn", False, 100.0)
    run = TrainRun(results=[measured, unmeasured], ratios={}, environment={})
    caplog.set_level("INFO")

    write_train(run, tmp_path)

    mine, theirs = (tmp_path / "train_speed.md").read_text().splitlines()
    assert "100.0 img/s" in mine and mine.endswith("GFLOP/image")
    assert "       - img/s  (spread -)         - ms/step" in theirs, theirs
    assert theirs.endswith("  (no measurement)") and "0.0" not in theirs
    assert_the_closing_line_names_every_file(caplog.text, tmp_path)


@pytest.mark.slow
def test_bench_mode_train_writes_its_files(tmp_path: Path, data_dir: Path) -> None:
    result = run_cli(
        "vitattn-bench",
        "mode=train",
        "train.batch_size=16",
        "train.warmup=1",
        "train.steps=1",
        "train.repeats=2",
        'train.overrides=["model.embed_dim=32","model.depth=1","model.heads=2"]',
        f"hydra.run.dir={tmp_path}",
        data_dir=data_dir,
    )
    for name in ("plain_loop", "timm", "report_style"):
        assert f"vitattn/{name}:" in result.stdout
    for name in ("plain_loop compiled", "timm compiled", "vitattn"):
        assert f"vitattn compiled/{name}:" in result.stdout
    rows = json.loads((tmp_path / "train_speed.json").read_text())["results"]
    # train.compile (the default): each but report_style eager, then compiled beside it
    assert [(r["implementation"], r["compile"]) for r in rows] == [
        ("vitattn", False),
        ("vitattn", True),
        ("plain_loop", False),
        ("plain_loop", True),
        ("timm", False),
        ("timm", True),
        ("report_style", False),
    ]
    assert all(r["status"] == "ok" and r["images_per_sec"] > 0 for r in rows)
    assert all((r["compile_seconds"] is not None) == r["compile"] for r in rows)
    assert all(r["compile_seconds"] >= 0 for r in rows if r["compile"])
    assert rows[2]["params"] == rows[0]["params"]  # the plain loop trains our network
    assert (tmp_path / "train_speed.csv").is_file()
    assert (tmp_path / "train_speed.md").read_text().count("img/s") == 7
    assert_the_closing_line_names_every_file(result.stdout + result.stderr, tmp_path)


@pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None,
    reason="torch.compile's CPU backend needs a C compiler, and there is none here",
)
@pytest.mark.slow
def test_compiled_network_gives_the_eager_logits() -> None:
    compiled = ViTClassifier(net=net_config(True), optimizer=OPTIMIZER).eval()
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        eager = compiled.net._forward(images)
        torch.testing.assert_close(compiled(images), eager, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_bench_mode_train_in_bf16(data_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("VITATTN_DATA_DIR", str(data_dir))
    train = tiny_train(
        implementations=["vitattn", "plain_loop", "report_style"],
        attention="linear",
        precision="bf16-mixed",
        steps=1,
        repeats=1,
    )
    results = measure_train_speed(train, CPU)
    assert all(r.images_per_sec > 0 and r.precision == "bf16-mixed" for r in results)


@pytest.mark.slow
def test_report_style_breakdown_script(data_dir: Path) -> None:
    result = run_cli(
        "python",
        str(PROJECT_ROOT / "scripts" / "report_style_breakdown.py"),
        *("--batch-size", "8", "--threads", "1", "--repeats", "1"),
        data_dir=data_dir,
        timeout=300,
    )
    loader, step = (
        float(re.search(rf"{name}\s+([\d.]+) ms", result.stdout).group(1))
        for name in ("per-image DataLoader", "network step")
    )
    assert loader > 0 and step > 0
    assert re.search(r"explicit attention .* [\d.]+ ms", result.stdout)
    assert re.search(r"would be [\d.]+x faster", result.stdout)


class RecordingScaler(torch.amp.GradScaler):
    scaled = 0

    def scale(self, outputs):  # type: ignore[override]
        RecordingScaler.scaled += 1
        return super().scale(outputs)


def test_reference_loops_train_as_lightning_does_for_the_precision(monkeypatch) -> None:
    """16-mixed with a gradient scaler (as Lightning), compiled when ours is: both sides of the
    comparison timed the same way."""
    from vitattn.bench import references

    monkeypatch.setattr(references.torch.amp, "GradScaler", RecordingScaler)
    compiled: list[object] = []
    monkeypatch.setattr(torch, "compile", lambda f, *a, **k: compiled.append(f) or f)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    batch = (torch.randn(4, 3, 2, 2), torch.tensor([0, 1, 2, 0]))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    cpu = torch.device("cpu")
    for precision, compile_net, scaled in [("32-true", False, 0), ("16-mixed", True, 2)]:
        RecordingScaler.scaled = 0
        step = references.loop_step(
            net, lambda: batch, optimizer, device=cpu, precision=precision, compile=compile_net
        )
        step()
        step()
        assert RecordingScaler.scaled == scaled
    (forward,) = compiled  # its forward method, whose graphs Dynamo counts, with code its own
    assert forward.__self__ is net and forward.__name__ == "forward"
    assert net._compiled_forward.function is forward  # where eager_status looks
