"""Every config file composes and instantiates; the attention configs match the registry."""

from __future__ import annotations

from pathlib import Path

import hydra
import lightning as L
import pytest
import torch
import yaml
from omegaconf import OmegaConf

from tests.support.presets import compose_config
from vitattn.attention import ATTENTIONS, AttentionKernel
from vitattn.utils.config import CONFIG_DIR, group_options

INSTANTIATED_GROUPS = ("attention", "model", "optimizer", "scheduler", "data", "trainer")


def test_attention_configs_match_registry() -> None:
    assert set(group_options("attention")) == set(ATTENTIONS)
    for name, cls in ATTENTIONS.items():
        raw = yaml.safe_load((CONFIG_DIR / "attention" / f"{name}.yaml").read_text())
        assert raw["_target_"] == f"{cls.__module__}.{cls.__qualname__}"
        assert raw["_partial_"] is True
        assert "name" not in raw


@pytest.mark.parametrize("attention", sorted(ATTENTIONS))
def test_attention_config_builds_its_kernel(attention: str, tmp_path: Path) -> None:
    cfg = compose_config("train", [f"attention={attention}"], tmp_path)
    kernel = hydra.utils.instantiate(cfg.attention)(seq_len=64, heads=3, head_dim=64)
    assert isinstance(kernel, ATTENTIONS[attention])


@pytest.mark.parametrize(
    ("group", "option"),
    [(g, o) for g in INSTANTIATED_GROUPS for o in group_options(g)],
)
def test_group_option_instantiates(group: str, option: str, tmp_path: Path, data_dir: Path) -> None:
    overrides = [f"{group}={option}", f"paths.data_dir={data_dir}"]
    if group == "trainer" and option == "gpu" and not torch.cuda.is_available():
        overrides.append("trainer.accelerator=cpu")  # its other settings still go to L.Trainer
    cfg = compose_config("train", overrides, tmp_path)
    node = hydra.utils.instantiate(cfg[group])
    if group == "optimizer":
        node(params=[torch.nn.Parameter(torch.zeros(2))])
    elif group == "scheduler":
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
        node(optimizer=optimizer, total_steps=10)
    elif group == "trainer":
        assert isinstance(node, L.Trainer)


@pytest.mark.parametrize("option", group_options("callbacks"))
def test_callbacks_instantiate(option: str, tmp_path: Path) -> None:
    cfg = compose_config("train", [f"callbacks={option}"], tmp_path)
    for callback in (cfg.callbacks or {}).values():
        assert isinstance(hydra.utils.instantiate(callback), L.Callback)


@pytest.mark.parametrize("option", group_options("logger"))
def test_loggers_instantiate(option: str, tmp_path: Path) -> None:
    cfg = compose_config("train", [f"logger={option}"], tmp_path)
    loggers = [hydra.utils.instantiate(c) for c in cfg.logger.values()]
    assert loggers and all(isinstance(lg, L.pytorch.loggers.Logger) for lg in loggers)


@pytest.mark.parametrize("option", group_options("debug"))
def test_debug_presets_compose(option: str, tmp_path: Path) -> None:
    cfg = compose_config("train", [f"debug={option}"], tmp_path)
    hydra.utils.instantiate(cfg.trainer)


def test_module_config_builds_classifier(train_cfg) -> None:
    module = hydra.utils.instantiate(train_cfg.module)
    logits = module(torch.zeros(2, 3, 32, 32))
    assert logits.shape == (2, 10)


def test_paths_and_run_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VITATTN_DATA_DIR", "/some/where")
    cfg = compose_config("train", [], tmp_path)
    assert cfg.paths.data_dir == "/some/where"
    assert cfg.hydra.run.dir.startswith(f"{cfg.paths.log_dir}/train/runs/")
    assert cfg.hydra.run.dir.endswith("_softmax")  # a single run is named by its attention
    assert cfg.hydra.sweep.dir.startswith(f"{cfg.paths.log_dir}/train/multiruns/")
    linear = compose_config("train", ["attention=linear"], tmp_path)
    assert linear.hydra.run.dir.endswith("_linear")
    monkeypatch.delenv("VITATTN_DATA_DIR")
    cfg = compose_config("train", [], tmp_path)
    assert Path(cfg.paths.data_dir) == Path(cfg.paths.root_dir) / "data"


def test_heads_embed_dim_and_knobs_are_plain_overrides(tmp_path: Path) -> None:
    cfg = compose_config(
        "train", ["model.heads=4", "model.embed_dim=192", "attention.impl=naive"], tmp_path
    )
    resolved = OmegaConf.to_container(cfg.module, resolve=True)
    assert resolved["net"]["heads"] == 4
    assert resolved["net"]["embed_dim"] == 192
    assert resolved["net"]["attention"]["impl"] == "naive"


def test_eval_config_composes(tmp_path: Path) -> None:
    cfg = compose_config("eval", ["ckpt_path=x.ckpt"], tmp_path)
    assert cfg.ckpt_path == "x.ckpt"
    hydra.utils.instantiate(cfg.trainer)


def test_kernels_subclass_base() -> None:
    assert ATTENTIONS and all(issubclass(cls, AttentionKernel) for cls in ATTENTIONS.values())


def test_scheduler_can_be_removed(tmp_path: Path) -> None:
    cfg = compose_config("train", ["~scheduler"], tmp_path)
    module = hydra.utils.instantiate(cfg.module)
    assert module.hparams.scheduler is None
    assert set(module.configure_optimizers()) == {"optimizer"}
