"""linformer, nystrom, random_feature, performer: exact limits, convergence, knobs and errors."""

from __future__ import annotations

import itertools

import pytest
import torch
from scipy import stats

from vitattn.attention.common.tiling import tiles
from vitattn.attention.feature_maps.chunked import chunked_attention
from vitattn.attention.feature_maps.favor import Favor, orthogonal_gaussian_rows, positive_features
from vitattn.attention.feature_maps.fourier import RandomFourier
from vitattn.attention.linformer import LinformerAttention
from vitattn.attention.nystrom import NystromAttention, iterative_pinv, segment_means
from vitattn.attention.performer import PerformerAttention
from vitattn.attention.random_feature import RandomFeatureAttention
from vitattn.attention.softmax import SoftmaxAttention
from vitattn.bench.memory import measure_memory
from vitattn.errors import ConfigError
from vitattn.models.vit import VisionTransformer


def qkv(tokens: int, head_dim: int = 16, heads: int = 2, scale: float = 1.0, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    shape = (2, heads, tokens, head_dim)
    q, k = (scale * torch.randn(shape, generator=generator) for _ in range(2))
    return q, k, torch.randn(shape, generator=generator)


def softmax_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    sizes = {"seq_len": q.shape[-2], "heads": q.shape[1], "head_dim": q.shape[-1]}
    return SoftmaxAttention(**sizes, impl="naive")(q, k, v)


def relative_error(output: torch.Tensor, reference: torch.Tensor) -> float:
    return ((output - reference).norm() / reference.norm()).item()


# --- linformer ---------------------------------------------------------------------------------


def test_linformer_with_identity_projections_equals_softmax() -> None:
    q, k, v = qkv(40)
    kernel = LinformerAttention(seq_len=40, heads=2, head_dim=16, k=40)
    with torch.no_grad():
        kernel.key_projection.copy_(torch.eye(40))
        kernel.value_projection.copy_(torch.eye(40))
    torch.testing.assert_close(kernel(q, k, v), softmax_reference(q, k, v), rtol=1e-5, atol=1e-5)


def test_linformer_projects_keys_and_values_separately_unless_shared() -> None:
    separate = LinformerAttention(seq_len=64, heads=2, head_dim=16)
    shared = LinformerAttention(seq_len=64, heads=2, head_dim=16, share_kv=True)
    assert separate.k == 8  # seq_len // 8, the report's choice
    assert separate.value_projection is not None and separate.key_projection.shape == (8, 64)
    assert shared.value_projection is None
    assert sum(p.numel() for p in shared.parameters()) == 8 * 64
    # Shared with identity: values are projected with E too, so the output equals softmax.
    with torch.no_grad():
        shared_full = LinformerAttention(seq_len=24, heads=2, head_dim=16, k=24, share_kv=True)
        shared_full.key_projection.copy_(torch.eye(24))
    q, k, v = qkv(24)
    torch.testing.assert_close(shared_full(q, k, v), softmax_reference(q, k, v))


def test_linformer_rejects_k_above_token_count() -> None:
    with pytest.raises(ConfigError, match=r"attention.k=100 is larger than the 64 tokens"):
        LinformerAttention(seq_len=64, heads=2, head_dim=16, k=100)
    with pytest.raises(ConfigError, match=r"attention.k=0 is not valid"):
        LinformerAttention(seq_len=64, heads=2, head_dim=16, k=0)


def test_linformer_rejects_other_sequence_lengths() -> None:
    kernel = LinformerAttention(seq_len=64, heads=2, head_dim=16)
    with pytest.raises(ConfigError, match=r"built for 64 tokens but got 65"):
        kernel(*qkv(65))


def test_linformer_checkpoint_from_another_sequence_length_is_refused() -> None:
    def vit(patch_size: int) -> VisionTransformer:
        return VisionTransformer(
            attention=lambda **sizes: LinformerAttention(**sizes, k=4),
            patch_size=patch_size,
            embed_dim=32,
            depth=1,
            heads=2,
        )

    trained = vit(patch_size=4).state_dict()  # 64 tokens
    with pytest.raises(ConfigError, match=r"k=4, seq_len=64 tokens, but the model has k=4, seq"):
        vit(patch_size=8).load_state_dict(trained)  # 16 tokens
    vit(patch_size=4).load_state_dict(trained)  # the matching model loads


# --- nystrom -----------------------------------------------------------------------------------


def test_nystrom_with_all_landmarks_and_exact_pinv_equals_softmax() -> None:
    q, k, v = qkv(32)
    kernel = NystromAttention(seq_len=32, heads=2, head_dim=16, landmarks=32, pinv="exact")
    torch.testing.assert_close(kernel(q, k, v), softmax_reference(q, k, v), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("tokens", "segments"), [(64, 16), (65, 64), (50, 7), (10, 10)])
def test_segment_means_cover_every_token_once(tokens: int, segments: int) -> None:
    x = torch.randn(3, tokens, 5, dtype=torch.float64)
    means = segment_means(x, segments)
    assert means.shape == (3, segments, 5)
    # Every segment is non-empty and sizes differ by at most one: rebuild the means by hand.
    bounds = [i * tokens // segments for i in range(segments + 1)]
    sizes = [b - a for a, b in itertools.pairwise(bounds)]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
    segment_of_token = torch.arange(tokens) * segments // tokens
    expected = torch.stack(
        [x[:, segment_of_token == s].mean(dim=1) for s in range(segments)], dim=1
    )
    torch.testing.assert_close(means, expected)


def test_iterative_pinv_is_initialised_per_matrix() -> None:
    # Two well-conditioned matrices of very different scale in one batch: a batch-wide
    # initialisation would leave the small one far from converged after a few iterations.
    generator = torch.Generator().manual_seed(0)
    base = torch.eye(8, dtype=torch.float64) + 0.1 * torch.randn(8, 8, generator=generator)
    batch = torch.stack([base, 1000 * base])
    inverse = iterative_pinv(batch, iterations=8)
    torch.testing.assert_close(inverse, torch.linalg.inv(batch), rtol=1e-6, atol=1e-9)


def test_nystrom_iterative_pinv_converges_to_exact_on_a_softmax_kernel() -> None:
    q, k, v = qkv(64, scale=0.5)
    exact = NystromAttention(seq_len=64, heads=2, head_dim=16, landmarks=8, pinv="exact")
    errors = [
        relative_error(
            NystromAttention(seq_len=64, heads=2, head_dim=16, landmarks=8, pinv_iters=n)(q, k, v),
            exact(q, k, v),
        )
        for n in (1, 3, 6, 20)
    ]
    assert errors == sorted(errors, reverse=True) and errors[-1] < 1e-3  # fp32 round-off


def test_nystrom_convolution_adds_a_depthwise_skip_on_values() -> None:
    kernel = NystromAttention(seq_len=32, heads=2, head_dim=16, landmarks=8, conv_kernel=3)
    assert kernel.conv is not None and kernel.conv.weight.shape == (2, 1, 3, 1)
    q, k, v = qkv(32)
    plain = NystromAttention(seq_len=32, heads=2, head_dim=16, landmarks=8)
    with torch.no_grad():
        kernel.conv.weight.zero_()
        kernel.conv.weight[:, :, 1] = 1.0  # identity convolution
    torch.testing.assert_close(kernel(q, k, v), plain(q, k, v) + v)


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"landmarks": 0}, r"attention.landmarks=0 is not valid; choose an integer >= 1"),
        ({"landmarks": 65}, r"attention.landmarks=65 is more than the 64 tokens"),
        ({"pinv": "svd"}, r"attention.pinv='svd' is not valid; choose one of"),
        ({"pinv_iters": 0}, r"attention.pinv_iters=0 is not valid"),
        ({"conv_kernel": 4}, r"attention.conv_kernel=4 is not valid; choose an odd integer"),
    ],
)
def test_nystrom_rejects_bad_knobs(knobs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        NystromAttention(seq_len=64, heads=2, head_dim=16, **knobs)


# --- random features ---------------------------------------------------------------------------

FEATURE_KERNELS = [RandomFeatureAttention, PerformerAttention]


def mean_error(kernel_class, num_features: int, q, k, v, draws: int = 4) -> float:
    """Mean relative error against exact softmax over ``draws`` seeded draws of the features."""
    reference = softmax_reference(q, k, v)
    errors = []
    for seed in range(draws):
        torch.manual_seed(seed)
        # RFA's exact-softmax estimator (normalize=false) is the one whose limit is softmax.
        extra = {"normalize": False} if kernel_class is RandomFeatureAttention else {}
        kernel = kernel_class(
            seq_len=q.shape[-2],
            heads=q.shape[1],
            head_dim=q.shape[-1],
            num_features=num_features,
            **extra,
        ).eval()
        errors.append(relative_error(kernel(q, k, v), reference))
    return sum(errors) / draws


def test_random_feature_errors_fall_with_more_features_and_performer_beats_rfa() -> None:
    # Inputs like a trained ViT's: unit-variance components, so q.k / sqrt(d) has unit spread.
    q, k, v = qkv(128, head_dim=32)
    errors = {
        cls.name: [mean_error(cls, features, q, k, v) for features in (64, 256, 1024)]
        for cls in FEATURE_KERNELS
    }
    for name, by_features in errors.items():
        assert by_features[0] > by_features[1] > by_features[2], (name, by_features)
    assert all(
        performer < rfa
        for performer, rfa in zip(errors["performer"], errors["random_feature"], strict=True)
    ), errors


def test_random_features_converge_to_softmax_on_small_logits() -> None:
    q, k, v = qkv(64, head_dim=16, scale=0.3)
    for cls in FEATURE_KERNELS:
        assert mean_error(cls, 8192, q, k, v, draws=2) < 0.1, cls.name


def test_orthogonal_rows_are_orthogonal_within_a_block() -> None:
    rows = orthogonal_gaussian_rows(40, 16, torch.device("cpu"))
    block = rows[:16] / rows[:16].norm(dim=1, keepdim=True)
    torch.testing.assert_close(block @ block.T, torch.eye(16), atol=1e-5, rtol=0)
    assert rows.shape == (40, 16)


def test_every_entry_of_the_random_rows_is_a_standard_normal_over_draws() -> None:
    """FAVOR+ is unbiased only where each row is marginally N(0, I) (Choromanski et al. 2021,
    section 2.4): QR's sign convention alone tilts row i towards a negative i-th coordinate, and
    rows of a fixed length are not Gaussian vectors."""
    generator = torch.Generator().manual_seed(0)
    dim, draws = 8, 400
    samples = torch.stack(
        [orthogonal_gaussian_rows(dim, dim, torch.device("cpu"), generator) for _ in range(draws)]
    ).double()
    tests = dim * dim + 1
    for row, column in itertools.product(range(dim), repeat=2):
        entries = samples[:, row, column].numpy()
        assert stats.kstest(entries, stats.norm.cdf).pvalue > 1e-3 / tests, (row, column)
    lengths = samples.norm(dim=-1).flatten().numpy()
    assert stats.kstest(lengths, stats.chi(dim).cdf).pvalue > 1e-3 / tests


def test_rfa_redraws_every_training_step_only_when_asked() -> None:
    q, k, v = qkv(16)
    kernel = RandomFeatureAttention(seq_len=16, heads=2, head_dim=16, num_features=8)
    first = kernel.frequencies.clone()
    kernel.train()(q, k, v)
    assert not torch.equal(kernel.frequencies, first)
    redrawn = kernel.frequencies.clone()
    kernel.eval()(q, k, v)
    assert torch.equal(kernel.frequencies, redrawn)  # evaluation uses the last draw
    fixed = RandomFeatureAttention(seq_len=16, heads=2, head_dim=16, num_features=8, redraw=False)
    before = fixed.frequencies.clone()
    fixed.train()(q, k, v)
    assert torch.equal(fixed.frequencies, before)


def test_performer_redraws_on_its_interval_in_training_only() -> None:
    q, k, v = qkv(16)
    kernel = PerformerAttention(seq_len=16, heads=2, head_dim=16, redraw_interval=2).train()
    projections = []
    for _ in range(5):
        kernel(q, k, v)
        projections.append(kernel.projection.clone())
    changed = [not torch.equal(a, b) for a, b in itertools.pairwise(projections)]
    assert changed == [False, True, False, True]  # redrawn before the 3rd and 5th forward
    kernel.eval()
    for _ in range(3):
        kernel(q, k, v)
    assert torch.equal(kernel.projection, projections[-1])
    # The counter travels with the checkpoint, so a resumed run redraws on schedule.
    restored = PerformerAttention(seq_len=16, heads=2, head_dim=16, redraw_interval=2)
    restored.load_state_dict(kernel.state_dict())
    assert restored.forwards_since_redraw == kernel.forwards_since_redraw == 1
    assert torch.equal(restored.projection, kernel.projection)


def float64_inputs(
    shape: tuple[int, ...], generator: torch.Generator, scale: float = 1.0
) -> tuple[torch.Tensor, ...]:
    """q, k, v of ``shape``: float64 normal draws times ``scale``, requiring gradients."""
    return tuple(
        (scale * torch.randn(shape, generator=generator, dtype=torch.float64)).requires_grad_()
        for _ in range(3)
    )


def assert_same_value_and_gradients(ours, reference, inputs, tolerance: float) -> None:
    """``ours`` equals ``reference``, and so do their gradients with respect to ``inputs``."""
    torch.testing.assert_close(ours, reference, rtol=tolerance, atol=tolerance)
    grad = torch.randn(ours.shape, generator=torch.Generator().manual_seed(9), dtype=ours.dtype)
    our_grads = torch.autograd.grad(ours, inputs, grad)
    reference_grads = torch.autograd.grad(reference, inputs, grad)
    for name, a, b in zip("qkv", our_grads, reference_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=100 * tolerance, atol=100 * tolerance, msg=name)


def favor_reference(q, k, v, projection, eps: float, stabilizer: str = "unbiased") -> torch.Tensor:
    """FAVOR+ written with autograd (``impl=autograd``), on pre-scaled q and k."""
    phi_q = positive_features(q, projection, is_query=True, eps=eps, stabilizer=stabilizer)
    phi_k = positive_features(k, projection, is_query=False, eps=eps, stabilizer=stabilizer)
    return (phi_q @ (phi_k.transpose(-2, -1) @ v)) / (phi_q @ phi_k.sum(dim=-2).unsqueeze(-1))


@pytest.mark.parametrize("stabilizer", ["unbiased", "authors"])
@pytest.mark.parametrize(
    ("budget", "scale"),
    [
        (10**6, 1.0),  # one tile: every head whole
        (37 * 12 * 2, 1.0),  # groups of two heads, the last group short
        (5 * 12, 1.0),  # row tiles of 5: the keys' maximum is found online
        (5 * 12, 4.0),  # ... on large norms, where a wrong running maximum overflows
    ],
)
def test_chunked_performer_matches_the_autograd_reference_in_value_and_gradient(
    budget, scale, stabilizer
) -> None:
    generator = torch.Generator().manual_seed(0)
    q, k, v = float64_inputs((2, 3, 37, 8), generator)
    projection = torch.randn(3, 12, 8, generator=generator, dtype=torch.float64)
    s = 8**-0.25 * scale
    settings = {"eps": 1e-3, "stabilizer": stabilizer}
    chunked = chunked_attention(q, k, v, projection, Favor(scale=s, **settings), budget=budget)
    reference = favor_reference(q * s, k * s, v, projection, **settings)
    assert_same_value_and_gradients(chunked, reference, (q, k, v), tolerance=1e-11)


def authors_softmax_kernel(x, projection, *, is_query: bool, eps: float = 1e-4) -> torch.Tensor:
    """phi of the FAVOR+ reference code (``softmax_kernel`` in google-research/performer's
    fast_attention and in performer-pytorch), for x already scaled by d^(-1/4): ratio *
    (exp(w.x - |x|^2/2 - max w.x) + eps), the max per query over its features, per head over all
    keys' features, detached."""
    ratio = projection.shape[-2] ** -0.5
    data_dash = torch.einsum("...nd,...md->...nm", x, projection)
    diag_data = (x**2).sum(dim=-1, keepdim=True) / 2.0
    over = (-1,) if is_query else (-1, -2)
    stabiliser = torch.amax(data_dash, dim=over, keepdim=True).detach()
    return ratio * (torch.exp(data_dash - diag_data - stabiliser) + eps)


@pytest.mark.parametrize("impl", ["chunked", "autograd"])
def test_authors_stabilizer_is_the_reference_codes_favor(impl: str) -> None:
    torch.manual_seed(3)
    kernel = PerformerAttention(
        seq_len=40, heads=2, head_dim=16, num_features=32, stabilizer="authors", impl=impl
    )
    generator = torch.Generator().manual_seed(4)
    q, k, v = (
        (2 * torch.randn(1, 2, 40, 16, generator=generator)).requires_grad_() for _ in range(3)
    )
    s = 16**-0.25
    projection = kernel.projection
    phi_q = authors_softmax_kernel(q * s, projection, is_query=True)
    phi_k = authors_softmax_kernel(k * s, projection, is_query=False)
    numerator = phi_q @ (phi_k.transpose(-2, -1) @ v)
    expected = numerator / (phi_q @ phi_k.sum(dim=-2, keepdim=True).transpose(-2, -1))
    assert_same_value_and_gradients(kernel(q, k, v), expected, (q, k, v), tolerance=2e-5)
    # With these norms eps matters: the other stabilizer computes another function.
    unbiased = PerformerAttention(
        seq_len=40, heads=2, head_dim=16, num_features=32, stabilizer="unbiased", impl=impl
    )
    unbiased.projection = projection
    assert (unbiased(q, k, v) - expected).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("feature_map", "budget"),
    [
        (Favor(scale=0.7, eps=1e-12, stabilizer="unbiased"), 4 * 6),
        (Favor(scale=0.7, eps=1e-12, stabilizer="authors"), 4 * 6),
        (RandomFourier(scale=0.7, sigma=1.0, eps=0.3), 4 * 12),
    ],
    ids=["performer-unbiased", "performer-authors", "rfa"],
)
def test_chunked_feature_kernels_give_the_true_gradient(feature_map, budget: int) -> None:
    # Performer: with a negligible eps the max shifts cancel exactly, so treating them as
    # constants gives the true gradient, which finite differences check.
    generator = torch.Generator().manual_seed(1)
    q, k, v = float64_inputs((1, 2, 9, 4), generator)
    weights = torch.randn(2, 6, 4, generator=generator, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda q, k, v: chunked_attention(q, k, v, weights, feature_map, budget=budget), (q, k, v)
    )


@pytest.mark.parametrize(("batch", "n", "budget"), [(6, 10, 10**6), (6, 10, 25 * 8), (3, 50, 80)])
def test_tiles_cover_every_head_and_row_once(batch, n, budget) -> None:
    covered = torch.zeros(batch, n, dtype=torch.int64)
    for heads, rows in tiles(batch, n, 8, budget):
        assert (heads.stop - heads.start) * (rows.stop - rows.start) * 8 <= max(budget, n * 8)
        covered[heads, rows] += 1
    assert torch.equal(covered, torch.ones_like(covered))


@pytest.mark.parametrize(
    ("cls", "width"), [(PerformerAttention, 256), (RandomFeatureAttention, 512)]
)
def test_chunked_feature_kernels_save_no_feature_matrix_for_backward(cls, width) -> None:
    def saved_bytes(impl: str, n: int) -> int:
        q, k, v = (t.requires_grad_() for t in qkv(n, head_dim=16))
        kernel = cls(seq_len=n, heads=2, head_dim=16, num_features=256, impl=impl)
        return measure_memory(
            lambda: kernel(q, k, v).sum().backward(), torch.device("cpu")
        ).saved_bytes

    # autograd keeps (n x features) matrices; the chunked kernels keep O(n d): inputs, output
    # and a few numbers per token.
    n = 512
    features_bytes = 2 * 2 * n * width * 4
    assert saved_bytes("autograd", n) > features_bytes
    assert saved_bytes("chunked", n) < features_bytes / 2
    assert saved_bytes("chunked", 4 * n) < 4.5 * saved_bytes("chunked", n)


@pytest.mark.parametrize(
    ("budget", "scale", "eps"),
    [
        (10**6, 1.0, 1e-3),  # one tile
        (37 * 24 * 2, 1.0, 1e-3),  # groups of two heads
        (5 * 24, 3.0, 1e-3),  # row tiles: the key weights' maximum is found online
        (5 * 24, 1.0, 0.5),  # a high floor: many normalisers are clamped, and get its gradient
    ],
)
def test_chunked_rfa_matches_the_autograd_reference_in_value_and_gradient(
    budget, scale, eps
) -> None:
    generator = torch.Generator().manual_seed(0)
    q, k, v = float64_inputs((2, 3, 37, 8), generator, scale)
    frequencies = 0.9 * torch.randn(3, 12, 8, generator=generator, dtype=torch.float64)
    feature_map = RandomFourier(scale=8**-0.25, sigma=0.9, eps=eps)
    chunked = chunked_attention(q, k, v, frequencies, feature_map, budget=budget)
    reference = feature_map.attention(q, k, v, frequencies)
    assert_same_value_and_gradients(chunked, reference, (q, k, v), tolerance=1e-9)


@pytest.mark.parametrize("cls", FEATURE_KERNELS)
def test_feature_kernel_impl_must_be_known(cls) -> None:
    with pytest.raises(ConfigError, match=r"attention.impl='fast' is not valid; choose one of"):
        cls(seq_len=16, heads=2, head_dim=16, impl="fast")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_performer_stays_finite_on_large_norms_in_half_precision(dtype) -> None:
    # exp(w.x - |x|^2/2) overflows without the max shift; fp16 overflows without fp32 inside.
    q, k, v = qkv(1024, head_dim=16, scale=10.0)
    kernel = PerformerAttention(seq_len=1024, heads=2, head_dim=16)
    with torch.autocast("cpu", dtype=dtype):
        out = kernel(q.to(dtype), k.to(dtype), v.to(dtype))
    assert out.dtype == dtype and torch.isfinite(out).all()


@pytest.mark.parametrize("cls", FEATURE_KERNELS)
def test_num_features_must_be_positive(cls) -> None:
    with pytest.raises(ConfigError, match=r"attention.num_features=0 is not valid"):
        cls(seq_len=16, heads=2, head_dim=16, num_features=0)


def test_feature_knobs_reject_bad_values() -> None:
    with pytest.raises(ConfigError, match=r"attention.sigma=0 is not valid"):
        RandomFeatureAttention(seq_len=16, heads=2, head_dim=16, sigma=0)
    with pytest.raises(ConfigError, match=r"attention.redraw_interval=-1 is not valid"):
        PerformerAttention(seq_len=16, heads=2, head_dim=16, redraw_interval=-1)


@pytest.mark.parametrize("cls", FEATURE_KERNELS)
def test_chunked_backward_stays_in_fp32_under_autocast(cls) -> None:
    # loss.backward() inside an autocast region must not drop the hand-written backward's
    # products to bf16: the gradients equal those of a plain fp32 call.
    torch.manual_seed(0)
    kernel = cls(seq_len=64, heads=2, head_dim=16).eval()
    q, k, v = (t.requires_grad_() for t in qkv(64))
    plain = torch.autograd.grad(kernel(q, k, v).sum(), (q, k, v))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = torch.autograd.grad(kernel(q, k, v).float().sum(), (q, k, v))
    for a, b in zip(autocast, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def normalized_rfa_limit(q, k, v, sigma: torch.Tensor) -> torch.Tensor:
    """softmax(sigma_h^2 cos(q, k)) v, per head h: RFA's target with L2-normalised q and k."""
    cosine = torch.nn.functional.normalize(q, dim=-1) @ torch.nn.functional.normalize(
        k, dim=-1
    ).transpose(-2, -1)
    return (sigma.view(1, -1, 1, 1) ** 2 * cosine).softmax(dim=-1) @ v


def test_normalized_rfa_converges_to_softmax_of_sigma_squared_cosine() -> None:
    q, k, v = qkv(64, head_dim=16, scale=3.0)  # norms do not matter once normalised
    errors = []
    for features in (16, 256, 4096):
        per_draw = []
        for seed in range(3):
            torch.manual_seed(seed)
            kernel = RandomFeatureAttention(
                seq_len=64, heads=2, head_dim=16, num_features=features, normalize=True
            ).eval()
            limit = normalized_rfa_limit(q, k, v, kernel.log_sigma.detach().exp())
            with torch.no_grad():
                per_draw.append(float((kernel(q, k, v) - limit).norm() / limit.norm()))
        errors.append(sum(per_draw) / len(per_draw))
    assert errors[0] > errors[1] > errors[2], errors
    assert errors[2] < 0.1, errors
    assert torch.allclose(kernel.log_sigma.exp(), torch.ones(2))  # sigma starts at `sigma`


def test_normalized_rfa_is_bounded_where_the_exact_estimator_explodes() -> None:
    q, k, v = qkv(64, head_dim=16, scale=2.0)
    reference = softmax_reference(q, k, v)
    errors = {}
    for normalize in (False, True):
        torch.manual_seed(0)
        kernel = RandomFeatureAttention(
            seq_len=64, heads=2, head_dim=16, num_features=256, normalize=normalize
        ).eval()
        with torch.no_grad():
            out = kernel(q, k, v)
            if normalize:
                target = normalized_rfa_limit(q, k, v, kernel.log_sigma.exp())
            else:
                target = reference
            errors[normalize] = float((out - target).norm() / target.norm())
    assert errors[False] > 1.0 > 0.5 > errors[True], errors


@pytest.mark.parametrize("impl", ["chunked", "autograd"])
def test_normalized_rfa_learns_sigma_and_both_implementations_agree(impl: str) -> None:
    q, k, v = (x.requires_grad_() for x in qkv(24, head_dim=8))
    outputs = {}
    for name in ("chunked", "autograd"):
        torch.manual_seed(5)
        kernel = RandomFeatureAttention(
            seq_len=24, heads=2, head_dim=8, num_features=32, normalize=True, impl=name
        )
        kernel.train()
        torch.manual_seed(6)  # the same redrawn frequencies
        out = kernel(q, k, v)
        grads = torch.autograd.grad(out.square().sum(), (q, k, v, kernel.log_sigma))
        outputs[name] = (out, *grads)
    for a, b in zip(outputs["chunked"], outputs["autograd"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)  # fp32, other summation orders
    assert outputs[impl][-1].abs().min() > 0  # every head's sigma gets a gradient


def test_a_checkpoint_from_before_normalize_loads_as_the_estimator_it_was_trained_as() -> None:
    torch.manual_seed(7)
    old = RandomFeatureAttention(seq_len=16, heads=2, head_dim=8, num_features=8, normalize=False)
    state = {f"attention.{k}": v for k, v in old.state_dict().items()}  # as inside a model
    holder = torch.nn.Module()
    holder.attention = RandomFeatureAttention(seq_len=16, heads=2, head_dim=8, num_features=8)
    assert holder.attention.normalize  # today's default, as a rebuilt old config gets it
    holder.load_state_dict(state)
    assert not holder.attention.normalize and not hasattr(holder.attention, "log_sigma")
    q, k, v = qkv(16, head_dim=8)
    torch.testing.assert_close(holder.attention.eval()(q, k, v), old.eval()(q, k, v))
    # A normalised checkpoint keeps its learned sigma.
    new = RandomFeatureAttention(seq_len=16, heads=2, head_dim=8, num_features=8)
    with torch.no_grad():
        new.log_sigma.fill_(0.3)
    again = RandomFeatureAttention(seq_len=16, heads=2, head_dim=8, num_features=8)
    again.load_state_dict(new.state_dict())
    assert again.normalize and torch.allclose(again.log_sigma, torch.full((2,), 0.3))
