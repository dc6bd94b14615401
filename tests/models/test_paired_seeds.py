"""Two runs of one seed under two attentions start alike wherever the attentions do not differ:
every layer both have holds the same weights, the epoch order and the augmentation are the same,
and torch's generator is in the same state once the network is built. The sweep summary pairs
settings by seed on that ground (docs/runs.md); until 2026-12-02 an attention whose kernel draws
as it is built (linformer, performer, random_feature, bigbird, reformer, nystrom with its
convolution) shifted every weight drawn after its first block's kernel, and every flip of the
augmentation (training audit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
import pytest
import torch

from tests.support.presets import compose_config
from vitattn.attention import ATTENTIONS
from vitattn.training import fitting

SETTINGS = {name: [f"attention={name}"] for name in sorted(ATTENTIONS)} | {
    "nystrom-conv": ["attention=nystrom", "attention.conv_kernel=33"]
}


def started(setting: str, tmp_path: Path) -> tuple[Any, dict[str, torch.Tensor], torch.Tensor]:
    """The data module and the network's weights of a run of ``setting`` as ``vitattn-train``
    builds them (seeded, then the data, then the network), and torch's next draw after them."""
    cfg = compose_config("train", [*SETTINGS[setting], "trainer=cpu"], tmp_path / setting)
    fitting.seed_and_precision(cfg)
    data = hydra.utils.instantiate(cfg.data)
    module = hydra.utils.instantiate(cfg.module)
    return data, dict(module.net.state_dict()), torch.rand(8)


def without_key_rows(name: str, ours: torch.Tensor, theirs: torch.Tensor) -> torch.Tensor:
    """``theirs`` (softmax's), without its key rows where ``ours`` is the ``qkv`` of an attention
    with tied keys (``reformer`` has query and value rows only)."""
    if ours.shape == theirs.shape or name.split(".")[-2] != "qkv":
        return theirs
    query, _, value = theirs.chunk(3)
    return torch.cat([query, value])


@pytest.mark.parametrize("setting", sorted(set(SETTINGS) - {"softmax"}))
def test_one_seed_starts_every_attention_alike_but_for_its_own_weights(
    setting: str, tmp_path: Path
) -> None:
    softmax_data, softmax, softmax_next = started("softmax", tmp_path)
    data, weights, next_draw = started(setting, tmp_path)
    assert (data.shuffle_seed, data.augment_seed) == (
        softmax_data.shuffle_seed,
        softmax_data.augment_seed,
    )
    cpu = torch.device("cpu")
    assert torch.equal(
        data.generator(cpu).get_state(), softmax_data.generator(cpu).get_state()
    )  # the same flips and crops
    shared = sorted(set(weights) & set(softmax))
    assert len(shared) > 20
    for name in shared:
        ours = weights[name]
        assert torch.equal(ours, without_key_rows(name, ours, softmax[name])), name
    assert torch.equal(next_draw, softmax_next)  # dropout and what follows draw alike
