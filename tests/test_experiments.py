"""The experiment presets: what they compose to, and that each trains on the CPU."""

from __future__ import annotations

from pathlib import Path

import hydra
import pytest
import torch

from tests.support.in_process import run_in_process
from tests.support.presets import TINY, compose_config
from vitattn.errors import ConfigError
from vitattn.models.vit import VisionTransformer

# --- presets -----------------------------------------------------------------------------------


def test_report_preset_composes_to_the_report_setup(tmp_path: Path) -> None:
    cfg = compose_config("train", ["experiment=report", "attention=linformer"], tmp_path)
    assert cfg.hydra.runtime.choices["model"] == "vit_pixel"
    model = cfg.model
    assert (model.patch_size, model.embed_dim, model.depth, model.heads, model.mlp_dim) == (
        1,
        256,
        4,
        8,
        512,
    )
    assert cfg.data.batch_size == 256
    assert cfg.optimizer._target_ == "torch.optim.Adam" and cfg.optimizer.lr == 5e-4
    assert cfg.scheduler.warmup_fraction == 0.0 and cfg.scheduler.min_lr_ratio == 0.0
    assert (cfg.trainer.max_epochs, cfg.trainer.val_check_interval) == (50, 200)
    assert cfg.trainer.accelerator == "gpu" and cfg.trainer.precision == "bf16-mixed"
    kernel = hydra.utils.instantiate(cfg.attention)(seq_len=1024, heads=8, head_dim=32)
    assert kernel.k == 128  # n / 8
    nystrom = compose_config("train", ["experiment=report", "attention=nystrom"], tmp_path)
    kernel = hydra.utils.instantiate(nystrom.attention)(seq_len=1024, heads=8, head_dim=32)
    assert kernel.landmarks == 64  # the default, min(64, n / 4)


def test_lra_image_preset_composes_to_lra_numbers(tmp_path: Path) -> None:
    cfg = compose_config("train", ["experiment=lra_image"], tmp_path)
    model, data = cfg.model, cfg.data
    assert (model.embed_dim, model.depth, model.heads, model.mlp_dim) == (32, 1, 1, 64)
    assert (model.embedding, model.in_channels, model.patch_size, model.pool) == (
        "intensity",
        1,
        1,
        "cls",
    )
    assert model.dropout == 0.3
    assert (data.grayscale, data.normalize, data.crop_padding, data.hflip) == (
        True,
        False,
        0,
        False,
    )
    assert data.batch_size == 256 and cfg.optimizer.lr == 5e-4
    assert list(cfg.optimizer.betas) == [0.9, 0.98] and cfg.optimizer.weight_decay == 0.0
    assert cfg.scheduler.warmup_steps == 175 and cfg.trainer.max_epochs == 200


@pytest.mark.slow
@pytest.mark.parametrize(
    ("experiment", "overrides"),
    [
        ("lra_image", ["data.batch_size=16", "data.eval_batch_size=64"]),
        ("vit_best", [*TINY, "model.depth=2"]),
    ],
)
def test_presets_train_on_cpu(
    experiment: str, overrides: list[str], tmp_path: Path, data_dir: Path
) -> None:
    result = run_in_process(
        "vitattn-train",
        f"experiment={experiment}",
        "trainer=cpu",
        "trainer.precision=32-true",
        "debug=fdr",
        *overrides,
        f"hydra.run.dir={tmp_path}",
        data_dir=data_dir,
    )
    assert "fast_dev_run" in result.stdout + result.stderr


def test_intensity_embedding_needs_raw_pixels_and_single_pixel_tokens() -> None:
    from vitattn.attention.softmax import SoftmaxAttention

    vit = VisionTransformer(
        attention=SoftmaxAttention,
        in_channels=1,
        patch_size=1,
        embed_dim=8,
        depth=1,
        heads=1,
        embedding="intensity",
    )
    pixels = torch.randint(0, 256, (2, 1, 32, 32), dtype=torch.uint8)
    assert vit(pixels).shape == (2, 10)
    with pytest.raises(ConfigError, match=r"model.embedding=intensity needs the 8-bit"):
        vit(pixels.float() / 255)
    with pytest.raises(ConfigError, match=r"set model.patch_size=1 \(got 4\)"):
        VisionTransformer(attention=SoftmaxAttention, patch_size=4, embedding="intensity")
