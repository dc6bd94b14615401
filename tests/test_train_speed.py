"""The training-speed benchmark against timm and a report-style loop, and model.compile."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from vitattn.bench.train_speed import IMPLEMENTATIONS, measure_train_speed, ratios
from vitattn.models.module import ViTClassifier
from vitattn.utils.config import CONFIG_DIR

TINY_NET = ["model.embed_dim=32", "model.depth=1", "model.heads=2"]


def test_every_implementation_runs_training_steps(data_dir: Path, monkeypatch) -> None:
    pytest.importorskip("timm")
    monkeypatch.setenv("VITATTN_DATA_DIR", str(data_dir))
    results = measure_train_speed(
        implementations=list(IMPLEMENTATIONS),
        model="vit",
        attention="softmax",
        batch_size=16,
        precision="32-true",
        compile=False,
        device=torch.device("cpu"),
        warmup=1,
        steps=2,
        repeats=2,
        overrides=TINY_NET,
    )
    assert [r.implementation for r in results] == list(IMPLEMENTATIONS)
    for result in results:
        assert result.status == "ok" and result.images_per_sec > 0 and result.step_ms > 0
    # timm's ViT, configured to our sizes, has exactly our layers.
    params = {r.implementation: r.params for r in results}
    assert params["timm"] == params["vitattn"]
    assert set(ratios(results)) == {"vitattn/timm", "vitattn/report_style"}


def net_config(compile_net: bool) -> dict:
    net = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "model" / "vit.yaml"))
    net["attention"] = OmegaConf.to_container(
        OmegaConf.load(CONFIG_DIR / "attention" / "softmax.yaml")
    )
    net.update(embed_dim=32, depth=1, heads=2, compile=compile_net)
    return net


OPTIMIZER = {"_target_": "torch.optim.AdamW", "_partial_": True}


def test_compile_keeps_checkpoint_names() -> None:
    compiled = ViTClassifier(net=net_config(True), optimizer=OPTIMIZER)
    plain = ViTClassifier(net=net_config(False), optimizer=OPTIMIZER)
    assert compiled.net._compiled_forward is not None
    assert compiled.state_dict().keys() == plain.state_dict().keys()


def test_compile_falls_back_to_eager_with_a_warning(monkeypatch, caplog) -> None:
    def unavailable(*args, **kwargs):
        raise RuntimeError("Windows not yet supported for torch.compile")

    monkeypatch.setattr(torch, "compile", unavailable)
    with caplog.at_level(logging.WARNING):
        module = ViTClassifier(net=net_config(True), optimizer=OPTIMIZER)
    assert module.net._compiled_forward is None
    assert "model.compile=true ignored: torch.compile is unavailable here" in caplog.text
    assert module(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_bench_level_train_writes_its_files(tmp_path: Path, data_dir: Path) -> None:
    from tests.helpers import run_cli

    result = run_cli(
        "vitattn-bench",
        "level=train",
        "train.batch_size=16",
        "train.warmup=1",
        "train.steps=1",
        "train.repeats=2",
        'train.overrides=["model.embed_dim=32","model.depth=1","model.heads=2"]',
        f"hydra.run.dir={tmp_path}",
        data_dir=data_dir,
    )
    assert "vitattn/report_style:" in result.stdout
    rows = json.loads((tmp_path / "train_speed.json").read_text())["results"]
    assert [r["implementation"] for r in rows] == ["vitattn", "timm", "report_style"]
    assert (tmp_path / "train_speed.csv").is_file()


def test_bench_level_train_rejects_unknown_implementations(tmp_path: Path, data_dir: Path):
    from tests.helpers import run_cli

    result = run_cli(
        "vitattn-bench",
        "level=train",
        "train.implementations=[vitattn,keras]",
        f"hydra.run.dir={tmp_path / 'run'}",
        data_dir=data_dir,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "vitattn-bench: error: train.implementations=['vitattn', 'keras'] is not valid; "
        "choose from vitattn, timm, report_style"
    )


@pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None,
    reason="torch.compile's CPU backend needs a C compiler, and there is none here",
)
def test_compiled_network_gives_the_eager_logits() -> None:
    compiled = ViTClassifier(net=net_config(True), optimizer=OPTIMIZER).eval()
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        eager = compiled.net._forward(images)
        torch.testing.assert_close(compiled(images), eager, rtol=1e-4, atol=1e-5)


def test_bench_level_train_in_bf16(data_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("VITATTN_DATA_DIR", str(data_dir))
    results = measure_train_speed(
        implementations=["vitattn", "report_style"],
        model="vit",
        attention="linear",
        batch_size=16,
        precision="bf16-mixed",
        compile=False,
        device=torch.device("cpu"),
        warmup=1,
        steps=1,
        repeats=1,
        overrides=TINY_NET,
    )
    assert all(r.images_per_sec > 0 and r.precision == "bf16-mixed" for r in results)


def test_report_style_breakdown_script(data_dir: Path) -> None:
    import os
    import re
    import subprocess
    import sys

    from vitattn.utils.config import PROJECT_ROOT

    result = subprocess.run(
        [
            sys.executable,
            str(PROJECT_ROOT / "scripts" / "report_style_breakdown.py"),
            *("--batch-size", "8", "--threads", "1", "--repeats", "1"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "VITATTN_DATA_DIR": str(data_dir)},
        timeout=300,
        check=True,
    )
    loader, step = (
        float(re.search(rf"{name}\s+([\d.]+) ms", result.stdout).group(1))
        for name in ("per-image DataLoader", "network step")
    )
    assert loader > 0 and step > 0
    assert re.search(r"explicit attention .* [\d.]+ ms", result.stdout)
    assert re.search(r"would be [\d.]+x faster", result.stdout)
