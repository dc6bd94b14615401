"""``mode=approx`` (:mod:`vitattn.bench.approx`): how far each approximation is from softmax."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import pytest
import torch

from tests.support.presets import compose_config
from tests.support.written import assert_the_closing_line_names_every_file
from vitattn.attention import ATTENTIONS
from vitattn.bench.app import benchmark
from vitattn.bench.approx import approximation_errors, random_qkv
from vitattn.bench.kernels import as_budgeted
from vitattn.bench.packages import PACKAGES


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


def test_a_refused_budget_value_is_named_as_given_in_its_row() -> None:
    """A budget value the mechanism refuses is a row ``unsupported`` naming the list it came
    from (``approx.budgets.<row>.values``, over ``knobs.<row>`` of the same knob), and the other
    values are measured; a refused knob outside the budget is named as the command line gave it."""
    budgets = {"linformer": {"knob": "k", "values": [-3, 8]}}
    inputs = {"random": random_qkv(1, 2, 32, 16, seed=3)}
    knobs = {"linformer": {"k": 4}}
    rows = approximation_errors(["linformer"], budgets, inputs, knobs=knobs)
    assert [r.budget for r in rows] == [-3, 8]
    assert rows[0].status == (
        "unsupported: approx.budgets.linformer.values: k=-3 is not valid; choose an integer >= 1"
    )
    assert rows[1].status == "ok" and rows[1].output_rel_error is not None
    assert as_budgeted("attention.k=-3 is not valid", "linformer", "", knobs, None) == (
        "knobs.linformer.k=-3 is not valid"
    )
    variants = {"lf": {"attention": "linformer", "share_kv": 2}}
    message = "attention.share_kv=2 is not valid"
    assert as_budgeted(message, "lf", "k", None, variants) == "variants.lf.share_kv=2 is not valid"


@pytest.mark.slow
def test_approx_mode_on_random_inputs_and_a_checkpoint(
    tiny_checkpoint: Path, tmp_path: Path, data_dir: Path, caplog: pytest.LogCaptureFixture
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
    with caplog.at_level(logging.INFO, logger="vitattn.bench"):
        benchmark(compose_config("bench", overrides, tmp_path))
    # its last line names every file it wrote (approx.md was left out)
    assert_the_closing_line_names_every_file(caplog.text, tmp_path)
    with (tmp_path / "approx.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {r["source"] for r in rows} == {"random", "checkpoint"}
    assert {(r["seq_len"], r["head_dim"]) for r in rows if r["source"] == "checkpoint"} == {
        ("64", "16")
    }
    assert all(r["status"] == "ok" and float(r["output_rel_error"]) > 0 for r in rows)
    assert all(float(r["matrix_rel_error"]) > 0 for r in rows)
    for name in names:
        assert (tmp_path / f"approx_{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "results.json").read_text())["mode"] == "approx"
    report = (tmp_path / "approx.md").read_text()
    assert "| linear" in report
    if PACKAGES["performer"].installed:  # the bench extra: performer-pytorch next to ours
        packaged = [r for r in rows if r["implementation"] == "performer-pytorch"]
        assert len(packaged) == 4  # 2 budgets x (random, checkpoint)
        assert "Output error next to the published packages'" in report


def test_pixel_inputs_have_unit_scale_and_the_smoothness_of_images(data_dir: Path) -> None:
    from omegaconf import OmegaConf

    from vitattn.bench.capture import pixel_qkv

    data = OmegaConf.create(
        {"_target_": "vitattn.data.cifar10.CIFAR10DataModule", "data_dir": str(data_dir)}
    )
    q, k, v = pixel_qkv(data, 2, heads=2, head_dim=16, seed=0)
    assert q.shape == k.shape == v.shape == (2, 2, 1024, 16)
    assert 0.7 < float(q.std()) < 1.3
    assert not torch.equal(q, k)  # one projection each
    # Neighbouring pixels' queries are far more alike than those of pixels far apart.
    near = torch.nn.functional.cosine_similarity(q[..., :-1, :], q[..., 1:, :], dim=-1)
    far = torch.nn.functional.cosine_similarity(q[..., :512, :], q[..., 512:, :], dim=-1)
    assert float(near.mean()) > float(far.mean()) + 0.2
    again, _, _ = pixel_qkv(data, 2, heads=2, head_dim=16, seed=0)
    assert torch.equal(q, again)  # seeded
