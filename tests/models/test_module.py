"""The LightningModule's optimisation pieces: schedule, parameter groups, checkpoint rebuild."""

from __future__ import annotations

import itertools
import logging
import math

import pytest
import torch

from tests.support.presets import tiny_net
from vitattn.errors import ConfigError
from vitattn.models.module import ViTClassifier
from vitattn.models.schedulers import cosine_with_warmup

NET = tiny_net(embed_dim=16)
ADAMW = {"_target_": "torch.optim.AdamW", "_partial_": True, "lr": 1e-3, "weight_decay": 0.05}


def learning_rates(total: int, **kwargs) -> list[float]:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = cosine_with_warmup(optimizer, total_steps=total, **kwargs)
    rates = []
    for _ in range(total):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def test_warmup_then_cosine() -> None:
    rates = learning_rates(100, warmup_steps=10, min_lr_ratio=0.1)
    assert rates[:10] == pytest.approx([(i + 1) / 11 for i in range(10)])
    assert rates[10] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(rates[10:]))
    progress = 45 / 90
    assert rates[55] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
    assert rates[-1] > 0.1


def test_warmup_fraction_and_no_warmup() -> None:
    assert learning_rates(20, warmup_fraction=0.25)[:5] == pytest.approx(
        [i / 6 for i in range(1, 6)]
    )
    assert learning_rates(20)[0] == pytest.approx(1.0)


def test_a_warmup_as_long_as_the_run_says_the_rate_never_anneals(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A preset's warm-up (``experiment=lra_image``: 175 steps) on a shorter run is the whole
    run: it is kept (a short trial of a preset still runs) and said in one line, where it was
    cut to the run's length without a word."""
    with caplog.at_level(logging.WARNING, logger="vitattn.models.schedulers"):
        rates = learning_rates(20, warmup_steps=175)
    assert max(rates) < 1.0  # never the base rate
    (said,) = [record.getMessage() for record in caplog.records]
    assert said.startswith("scheduler.warmup_steps=175 is not fewer than the run's 20 steps: ")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vitattn.models.schedulers"):
        learning_rates(20, warmup_steps=19)
    assert caplog.records == []


def test_schedule_rejects_bad_settings() -> None:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    refusals = [
        ({"warmup_fraction": 2.0}, "scheduler.warmup_fraction=2.0 is not valid; choose 0 <= "),
        ({"min_lr_ratio": -1}, "scheduler.min_lr_ratio=-1 is not valid; choose 0 <= "),
        ({"min_lr_ratio": "x"}, "scheduler.min_lr_ratio='x' is not valid; choose 0 <= "),
        ({"warmup_steps": -1}, "scheduler.warmup_steps=-1 is not valid; choose an integer >= 0"),
        ({"warmup_steps": 2.5}, "scheduler.warmup_steps=2.5 is not valid; choose an integer >= 0"),
    ]
    for settings, message in refusals:
        with pytest.raises(ConfigError) as info:
            cosine_with_warmup(optimizer, 10, **settings)
        assert str(info.value).startswith(message), settings


def test_weight_decay_skips_norms_biases_and_embeddings() -> None:
    module = ViTClassifier(net=NET, optimizer=ADAMW)
    decay, no_decay = module.parameter_groups()
    decayed = {id(p) for p in decay["params"]}
    names = {name for name, p in module.net.named_parameters() if id(p) in decayed}
    assert "pos_embed" not in names
    assert all(module.net.get_parameter(n).ndim > 1 for n in names)
    assert no_decay["weight_decay"] == 0.0
    total = len(decay["params"]) + len(no_decay["params"])
    assert total == len(list(module.net.parameters()))


def test_checkpoint_rebuilds_the_model_alone(tmp_path) -> None:
    import lightning as L

    module = ViTClassifier(net=NET, optimizer=ADAMW, label_smoothing=0.1)
    trainer = L.Trainer(logger=False, enable_checkpointing=False, accelerator="cpu", max_steps=0)
    trainer.strategy.connect(module)
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)
    restored = ViTClassifier.load_from_checkpoint(path)
    images = torch.randn(2, 3, 32, 32)
    module.eval()
    torch.testing.assert_close(restored.eval()(images), module(images))
    assert restored.hparams.label_smoothing == 0.1


def test_label_smoothing_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"module\.label_smoothing=1\.0"):
        ViTClassifier(net=NET, optimizer=ADAMW, label_smoothing=1.0)
