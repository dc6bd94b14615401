"""The ViT: token counts, shapes and the checks on its settings."""

from __future__ import annotations

import functools

import pytest
import torch

from vitattn.attention.softmax import SoftmaxAttention
from vitattn.errors import ConfigError
from vitattn.models.vit import PatchEmbedding, VisionTransformer

softmax = functools.partial(SoftmaxAttention, impl="sdpa")


@pytest.mark.parametrize("patch_size", [1, 2, 4, 8])
@pytest.mark.parametrize("pool", ["mean", "cls"])
def test_shapes_for_every_patch_size(patch_size: int, pool: str) -> None:
    model = VisionTransformer(
        softmax, patch_size=patch_size, embed_dim=32, depth=2, heads=4, pool=pool
    )
    tokens = (32 // patch_size) ** 2
    assert model.num_patches == tokens
    assert model.seq_len == tokens + (pool == "cls")
    assert all(block.attn.kernel.seq_len == model.seq_len for block in model.blocks)
    images = torch.randn(2, 3, 32, 32)
    assert model.forward_features(images).shape == (2, model.seq_len, 32)
    logits = model(images)
    assert logits.shape == (2, 10)
    logits.sum().backward()
    assert model.patch_embed.proj.weight.grad is not None


def test_kernel_gets_head_dim_and_heads() -> None:
    model = VisionTransformer(softmax, embed_dim=48, heads=3, depth=1)
    kernel = model.blocks[0].attn.kernel
    assert (kernel.heads, kernel.head_dim) == (3, 16)


def test_mlp_dim_wins_over_ratio() -> None:
    model = VisionTransformer(softmax, embed_dim=32, heads=2, depth=1, mlp_ratio=4, mlp_dim=40)
    assert model.blocks[0].mlp.fc1.out_features == 40
    model = VisionTransformer(softmax, embed_dim=32, heads=2, depth=1, mlp_ratio=3)
    assert model.blocks[0].mlp.fc1.out_features == 96


def test_pixel_model_has_1024_tokens() -> None:
    model = VisionTransformer(softmax, patch_size=1, embed_dim=256, depth=4, heads=8, mlp_dim=512)
    assert model.seq_len == 1024


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"patch_size": 3},
            r"model.patch_size=3 does not divide model.image_size=32; .*\[1, 2, 4, 8, 16, 32\]",
        ),
        ({"embed_dim": 100, "heads": 8}, r"model.embed_dim=100 is not divisible by model.heads=8"),
        ({"pool": "max"}, r"^model.pool='max' is not valid; choose one of mean \| cls$"),
        ({"depth": 0}, r"^model.depth=0 is not valid; choose an integer >= 1$"),
        ({"depth": 1.5}, r"^model.depth=1.5 is not valid; choose an integer >= 1$"),
        ({"dropout": 1.0}, r"^model.dropout=1.0 is not valid; choose 0 <= model.dropout < 1$"),
        ({"drop_path": -0.1}, r"^model.drop_path=-0.1 is not valid; choose 0 <= model.drop_"),
        ({"drop_path": "x"}, r"^model.drop_path='x' is not valid; choose 0 <= model.drop_"),
        ({"embedding": "conv"}, r"^model.embedding='conv' is not valid; choose one of patch \|"),
        ({"mlp_ratio": 0.001}, r"^model.mlp_ratio=0.001 is not valid; choose a number >= 0.0039"),
        ({"mlp_ratio": -1}, r"^model.mlp_ratio=-1 is not valid; .* model.embed_dim=256 times it"),
        ({"mlp_dim": 0}, r"^model.mlp_dim=0 is not valid; choose an integer >= 1$"),
        # each named itself, where another setting or torch's own error was named
        ({"embed_dim": 0}, r"^model.embed_dim=0 is not valid; choose an integer >= 1$"),
        ({"image_size": 0}, r"^model.image_size=0 is not valid; choose an integer >= 1$"),
        ({"image_size": -1}, r"^model.image_size=-1 is not valid; choose an integer >= 1$"),
        ({"in_channels": -1}, r"^model.in_channels=-1 is not valid; choose an integer >= 1$"),
        ({"num_classes": 1}, r"^model.num_classes=1 is not valid; choose an integer >= 2 \(a "),
        ({"num_classes": -1}, r"^model.num_classes=-1 is not valid; choose an integer >= 2"),
        ({"pos_embed_init": "zeros"}, r"^model.pos_embed_init='zeros' is not valid; choose one"),
    ],
)
def test_bad_settings_name_the_setting(settings: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        VisionTransformer(softmax, **settings)
    assert "\n" not in str(info.value)


def test_an_attention_size_its_checkpoint_would_be_refused_for_is_refused_as_it_builds() -> None:
    """``attention.redraw_interval=100000`` trained, and its best checkpoint was then refused
    by the reader's bound; ``num_features=10^9`` hung the build (red team). The lower bounds
    stay the mechanism's own."""
    from vitattn.attention.performer import PerformerAttention

    for name, value in (("redraw_interval", 100_000), ("num_features", 10**9)):
        huge = functools.partial(PerformerAttention, **{name: value})
        said = rf"^attention.{name}={value} is not valid; choose an integer -1 <= {name} <= 65536"
        with pytest.raises(ConfigError, match=said):
            VisionTransformer(huge, embed_dim=32, heads=2, depth=1)
    VisionTransformer(functools.partial(PerformerAttention, num_features=65_536 // 256), depth=1)


def test_the_least_mlp_ratio_a_refusal_names_builds() -> None:
    """The bound was shown to three digits rounded down (``0.0312`` for 1/32), which was then
    refused in turn (review)."""
    with pytest.raises(ConfigError, match=r"choose a number >= 0.0313 \(the MLP's width"):
        VisionTransformer(softmax, embed_dim=32, heads=2, depth=1, mlp_ratio=0.0312)
    VisionTransformer(softmax, embed_dim=32, heads=2, depth=1, mlp_ratio=0.0313)


def test_sincos_position_codes() -> None:
    from vitattn.models.vit import sincos_2d_position_embedding

    codes = sincos_2d_position_embedding(grid=8, dim=32)
    assert codes.shape == (64, 32)
    assert torch.unique(codes, dim=0).shape[0] == 64  # every position has its own code
    # Same row -> same row half; same column -> same column half.
    torch.testing.assert_close(codes[0, 16:], codes[7, 16:])
    torch.testing.assert_close(codes[0, :16], codes[8, :16])


@pytest.mark.parametrize("pool", ["mean", "cls"])
def test_position_embedding_is_learned_from_either_start(pool: str) -> None:
    from vitattn.models.vit import sincos_2d_position_embedding

    model = VisionTransformer(softmax, embed_dim=32, heads=2, depth=1, pool=pool)
    assert model.pos_embed.requires_grad
    patches = model.pos_embed[0, -model.num_patches :]
    torch.testing.assert_close(patches.detach(), sincos_2d_position_embedding(8, 32))
    if pool == "cls":
        assert model.pos_embed[0, 0].abs().sum() == 0
    random = VisionTransformer(softmax, embed_dim=32, heads=2, depth=1, pos_embed_init="random")
    assert random.pos_embed.std() < 0.05
    with pytest.raises(ConfigError, match=r"model.pos_embed_init='zeros'"):
        VisionTransformer(softmax, pos_embed_init="zeros")


@pytest.mark.parametrize("patch_size", [1, 2, 4, 8])
def test_patch_embedding_is_its_convolution(patch_size: int) -> None:
    # The forward is a matrix product over cut-out patches; it must equal the strided Conv2d
    # whose weights it holds, in value and in the weights' gradients.
    embedding = PatchEmbedding(3, 16, patch_size)
    images = torch.randn(2, 3, 32, 32, requires_grad=True)
    reference = embedding.proj(images).flatten(2).transpose(1, 2)
    torch.testing.assert_close(embedding(images), reference, rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(reference)
    ours = torch.autograd.grad(embedding(images), (images, embedding.proj.weight), grad)
    theirs = torch.autograd.grad(reference, (images, embedding.proj.weight), grad)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_drop_path_rises_to_its_rate_and_drops_whole_branches_in_training_only() -> None:
    """Stochastic depth (Huang et al. 2016): block i drops its residual branches with rate
    drop_path * i / (depth - 1), per sample, in training; in evaluation the model is the same
    function as without it, and in training each sample draws its own."""
    torch.manual_seed(0)
    model = VisionTransformer(softmax, patch_size=8, embed_dim=32, depth=3, heads=4, drop_path=0.5)
    rates = [getattr(block.drop_path, "p", 0.0) for block in model.blocks]
    assert rates == [0.0, 0.25, 0.5]
    plain = VisionTransformer(softmax, patch_size=8, embed_dim=32, depth=3, heads=4)
    plain.load_state_dict(model.state_dict())
    images = torch.randn(64, 3, 32, 32)
    model.eval()
    plain.eval()
    torch.testing.assert_close(model(images), plain(images))
    model.train()
    plain.train()
    torch.testing.assert_close(plain(images), plain(images))  # no dropout: deterministic
    first, second = model(images), model(images)
    differs = (first - second).abs().amax(dim=1) > 1e-6  # per sample: its own draws
    assert 0 < int(differs.sum()) < 64
