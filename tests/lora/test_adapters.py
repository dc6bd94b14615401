"""LoRA adapters (PEFT) on the ViT: what they add, what trains, merging, loading, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from tests.support.presets import TINY, compose_config
from tests.support.runners import last_line, run_cli
from vitattn.errors import ConfigError
from vitattn.lora.adapters import DEFAULT_TARGETS, is_lora_parameter, resolve_targets
from vitattn.lora.module import LoRAClassifier, save_plain_checkpoint
from vitattn.models.module import ViTClassifier


def tiny_classifier(lora: dict[str, Any] | None, tmp_path: Path) -> LoRAClassifier:
    """A LoRAClassifier over the tiny model of the training tests (no training)."""
    cfg = compose_config("train", TINY, tmp_path)
    module = OmegaConf.to_container(cfg.module, resolve=True)
    del module["_target_"], module["_recursive_"]
    torch.manual_seed(0)
    return LoRAClassifier(**module, lora=lora)


def randomize_adapters(module: LoRAClassifier) -> None:
    """B starts at zero (a no-op update); give every adapter weight a random value."""
    with torch.no_grad():
        for name, param in module.named_parameters():
            if is_lora_parameter(name):
                param.normal_(std=0.2)


@pytest.mark.parametrize("rank", [1, 4])
def test_adapter_counts_are_rank_times_in_plus_out(rank: int, tmp_path: Path) -> None:
    module = tiny_classifier({"rank": rank}, tmp_path)
    net = module.net.get_base_model()
    plain = tiny_classifier({"rank": 0}, tmp_path)
    targeted = resolve_targets(plain.net, list(DEFAULT_TARGETS))
    assert targeted == [
        "blocks.0.attn.qkv",
        "blocks.0.attn.proj",
        "blocks.0.mlp.fc1",
        "blocks.0.mlp.fc2",
    ]
    expected_total = 0
    for name in targeted:
        layer = net.get_submodule(name)
        base = layer.get_base_layer()
        adapter = sum(p.numel() for n, p in layer.named_parameters() if is_lora_parameter(n))
        assert adapter == rank * (base.in_features + base.out_features), name
        expected_total += adapter
    counts = module.parameter_counts()
    assert counts.lora == expected_total
    head = net.head.weight.numel() + net.head.bias.numel()
    assert counts.trainable == expected_total + head  # lora.train_head defaults to true
    assert counts.total == sum(p.numel() for p in plain.net.parameters())


@pytest.mark.parametrize("train_head", [True, False])
def test_only_adapters_and_head_get_gradients(train_head: bool, tmp_path: Path) -> None:
    module = tiny_classifier({"rank": 2, "train_head": train_head}, tmp_path)
    randomize_adapters(module)  # with B = 0, A's gradient would be zero (though present)
    loss = module(torch.randn(4, 3, 32, 32)).logsumexp(-1).sum()
    loss.backward()
    with_grad = {n for n, p in module.named_parameters() if p.grad is not None}
    lora = {n for n, _ in module.named_parameters() if is_lora_parameter(n)}
    head = {n for n, _ in module.named_parameters() if ".head." in n}
    assert lora and len(head) == 2
    assert with_grad == (lora | head if train_head else lora)
    assert all(module.get_parameter(n).grad.abs().sum() > 0 for n in lora)
    optimized = {id(p) for group in module.parameter_groups() for p in group["params"]}
    assert optimized == {id(module.get_parameter(n)) for n in with_grad}


def test_rank_zero_is_full_finetuning(tmp_path: Path) -> None:
    module = tiny_classifier({"rank": 0}, tmp_path)
    counts = module.parameter_counts()
    assert counts.lora == 0 and counts.trainable == counts.total
    assert not any("base_layer" in key for key in module.state_dict())  # plain names


def test_rank_zero_stores_the_settings_it_trains_with(tmp_path: Path) -> None:
    """Rank 0 adapts no layer and trains the head with every other weight: its stored settings
    say so, whatever targets were given (a checkpoint of one written before, saying
    ``train_head: false``, still loads)."""
    given = {"rank": 0, "target_modules": ["attn.qkv"], "train_head": False, "dropout": 0.1}
    module = tiny_classifier(given, tmp_path)
    assert module.hparams.lora == {
        "rank": 0,
        "alpha": 16.0,
        "dropout": 0.0,
        "target_modules": [],
        "train_head": True,
    }
    assert module.parameter_counts().trainable == module.parameter_counts().total


def test_merged_and_unmerged_give_the_same_logits(tmp_path: Path) -> None:
    module = tiny_classifier({"rank": 4, "alpha": 8}, tmp_path).eval()
    randomize_adapters(module)
    images = torch.randn(8, 3, 32, 32)
    plain = tiny_classifier({"rank": 0}, tmp_path).eval()
    plain.load_state_dict(
        {
            k.replace("base_model.model.", "").replace("base_layer.", ""): v
            for k, v in module.state_dict().items()
            if not is_lora_parameter(k)
        }
    )
    with torch.no_grad():
        unmerged, without_adapters = module(images), plain(images)
        merged = module.merged_classifier().eval()(images)
    assert not torch.allclose(unmerged, without_adapters, atol=1e-3)  # the adapters do something
    torch.testing.assert_close(merged, unmerged, atol=1e-5, rtol=1e-5)
    # ... and through a saved plain checkpoint, read as vitattn-eval reads it
    path = save_plain_checkpoint(module.merged_classifier(), tmp_path / "merged.ckpt")
    loaded = ViTClassifier.load_from_checkpoint(path, map_location="cpu").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(images), unmerged, atol=1e-5, rtol=1e-5)
    # the unmerged module round-trips through its own checkpoint format too
    state = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}
    torch.save({**state, "pytorch-lightning_version": "2.6.0"}, tmp_path / "lora.ckpt")
    again = LoRAClassifier.load_from_checkpoint(tmp_path / "lora.ckpt", map_location="cpu")
    with torch.no_grad():
        torch.testing.assert_close(again.eval()(images), unmerged)


def test_a_performer_base_merges_and_loads_back_with_its_extra_state(tmp_path: Path) -> None:
    """Performer keeps its redraw counter as ``_extra_state``, a dict in its state dict: the
    merge called ``.detach()`` on it (every fine-tune of a Performer base ended "failed" after
    it had trained and tested), and the size check of a LoRA checkpoint counted its bytes
    (``vitattn-eval`` on the fine-tune's own checkpoints ended in a traceback; eval audit,
    2026-12-02)."""
    from vitattn.loading import load_classifier

    cfg = compose_config("train", [*TINY, "attention=performer"], tmp_path)
    settings = OmegaConf.to_container(cfg.module, resolve=True)
    del settings["_target_"], settings["_recursive_"]
    torch.manual_seed(0)
    module = LoRAClassifier(**settings, lora={"rank": 4}).eval()
    randomize_adapters(module)
    assert any(key.endswith("_extra_state") for key in module.state_dict())
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        adapted = module(images)
    merged = save_plain_checkpoint(module.merged_classifier(), tmp_path / "merged.ckpt")
    adapters = tmp_path / "adapters.ckpt"
    state = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}
    torch.save({**state, "pytorch-lightning_version": "2.6.0", "global_step": 0}, adapters)
    for path in (merged, adapters):
        with torch.no_grad():
            logits = load_classifier(path).eval()(images)
        torch.testing.assert_close(logits, adapted, atol=1e-5, rtol=1e-5)


def test_base_weights_load_under_the_adapters(tmp_path: Path) -> None:
    base = tiny_classifier({"rank": 0}, tmp_path).eval()
    module = tiny_classifier({"rank": 4}, tmp_path)
    with torch.no_grad():  # make the base differ from the freshly built network
        for param in base.parameters():
            param.add_(0.1)
    module.load_base_weights(base.state_dict())
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():  # B = 0: the adapted model is the base model
        torch.testing.assert_close(module.eval()(images), base(images))


def test_target_modules_regex_and_conv(tmp_path: Path) -> None:
    module = tiny_classifier(
        {"rank": 2, "target_modules": r"blocks\.0\.attn\.qkv", "train_head": False}, tmp_path
    )
    lora = [n for n, _ in module.named_parameters() if is_lora_parameter(n)]
    assert len(lora) == 2 and all(".attn.qkv." in n for n in lora)
    conv = tiny_classifier({"rank": 2, "target_modules": ["patch_embed.proj"]}, tmp_path)
    assert any("patch_embed.proj.lora_A" in n for n, _ in conv.named_parameters())
    assert not any(".attn.proj.lora_" in n for n, _ in conv.named_parameters())


@pytest.mark.parametrize(
    ("lora", "message"),
    [
        (
            {"rank": -1},
            r"lora\.rank=-1 is not valid; choose an integer 0 <= lora\.rank <= 4096 \(0 = full",
        ),
        ({"rank": 2.0}, r"^lora\.rank=2.0 is not valid; choose an integer$"),
        ({"dropout": 1}, r"^lora\.dropout=1 is not valid; choose 0 <= lora\.dropout < 1$"),
        ({"target_modules": ["attn.qkv", "mlp.fc3"]}, r"'mlp\.fc3' matches no layer; .*mlp\.fc1"),
        ({"target_modules": ["attn"]}, r"'attn' matches no layer; choose among: .*attn\.qkv"),
        ({"target_modules": "blocks\\.9\\..*"}, r"matches no layer"),
        ({"target_modules": ["head"]}, r"lora\.train_head=true trains the head fully"),
        ({"rnak": 4}, r"lora\.rnak is not a setting"),
        ({"alpha": 0}, r"lora\.alpha=0 is not valid"),
        ({"train_head": 1}, r"^lora\.train_head=1 is not valid; choose true or false$"),
    ],
)
def test_bad_lora_settings_are_one_line_errors(
    lora: dict[str, Any], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        tiny_classifier(lora, tmp_path)
    assert "\n" not in str(info.value)


BLOCK_PEFT = """
import sys


class BlockPeft:
    def find_spec(self, name, path=None, target=None):
        if name == "peft" or name.startswith("peft."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, BlockPeft())
"""


@pytest.mark.slow
def test_finetune_without_peft_names_the_extra(tmp_path: Path, data_dir: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCK_PEFT)  # an environment without peft
    run_dir = tmp_path / "run"
    result = run_cli(
        "vitattn-finetune",
        "ckpt_path=base.ckpt",
        f"hydra.run.dir={run_dir}",
        data_dir=data_dir,
        check=False,
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 1
    assert last_line(result).startswith("vitattn-finetune: error: LoRA adapters need the peft")
    assert 'pip install -e ".[lora]"' in last_line(result)
    assert not run_dir.exists()
