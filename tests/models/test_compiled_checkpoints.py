"""A compiled run (``model.compile=true``) and an eager one share their checkpoints (issue 42).

The network compiles a bound method (``VisionTransformer._forward``), not a wrapped module, so
its ``state_dict`` has no ``_orig_mod.`` prefix: a compiled run's checkpoint loads into an eager
network and the other way round, and a compiled run resumes from an eager ``last.ckpt``. A
compiled run reports its compile seconds (the first steps' seconds beyond the steady rate)
apart from its steady images/s. Each compiled run costs a minute or more of Inductor's C++
compilation on a CPU: ``slow``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.support.in_process import run_in_process
from tests.support.presets import FEW_STEPS, steps
from vitattn.loading import load_classifier

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> dict[str, Path]:
    """Eight steps of the tiny model, eager and compiled."""
    root = tmp_path_factory.mktemp("compiled")
    made = {}
    for name, compile in (("eager", "false"), ("compiled", "true")):
        made[name] = root / name
        run_in_process(
            "vitattn-train",
            *FEW_STEPS,
            f"model.compile={compile}",
            f"hydra.run.dir={made[name]}",
            data_dir=data_dir,
        )
    return made


def metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def last_checkpoint(run: Path) -> Path:
    return run / "checkpoints" / "last.ckpt"


def test_a_compiled_run_reports_its_compile_seconds_apart_from_its_steady_speed(
    runs: dict[str, Path],
) -> None:
    compiled, eager = metrics(runs["compiled"]), metrics(runs["eager"])
    assert compiled["status"] == eager["status"] == "completed"
    assert 0 < compiled["train/compile_seconds"] <= compiled["seconds"]
    assert compiled["train/images_per_sec"] > 0 and compiled["steady_steps"] >= 1
    assert "train/compile_seconds" not in eager


def test_compiled_and_eager_checkpoints_hold_the_same_keys(runs: dict[str, Path]) -> None:
    states = {
        name: torch.load(last_checkpoint(run), weights_only=False)["state_dict"]
        for name, run in runs.items()
    }
    assert states["compiled"].keys() == states["eager"].keys()
    assert not [key for key in states["compiled"] if "_orig_mod" in key]


def test_a_compiled_checkpoint_loads_eager_and_the_other_way_round(
    runs: dict[str, Path],
) -> None:
    compiled = load_classifier(last_checkpoint(runs["compiled"])).eval()
    eager = load_classifier(last_checkpoint(runs["eager"])).eval()
    assert compiled.net._compiled_forward is not None and eager.net._compiled_forward is None
    images = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        compiled_weights = dict(compiled.state_dict())
        eager_weights = dict(eager.state_dict())
        eager.load_state_dict(compiled_weights, strict=True)  # compiled -> eager
        expected = compiled.net.forward_eager(images)
        assert torch.allclose(eager(images), expected, atol=1e-5)
        assert torch.allclose(compiled(images), expected, atol=1e-4)
        compiled.load_state_dict(eager_weights, strict=True)  # eager -> compiled
        eager.load_state_dict(eager_weights, strict=True)
        assert torch.allclose(compiled(images), eager(images), atol=1e-4)


def test_a_compiled_run_resumes_from_an_eager_last_checkpoint(
    runs: dict[str, Path], tmp_path: Path, data_dir: Path
) -> None:
    resumed = tmp_path / "resumed"
    run_in_process(
        "vitattn-train",
        *FEW_STEPS,
        *steps(10, 5),
        "model.compile=true",
        f"ckpt_path={last_checkpoint(runs['eager'])}",
        f"hydra.run.dir={resumed}",
        data_dir=data_dir,
    )
    result = metrics(resumed)
    assert result["status"] == "completed" and result["steps"] == 10
    assert result["attempts"] == 2
    state = torch.load(last_checkpoint(resumed), weights_only=False)
    assert state["global_step"] == 10
