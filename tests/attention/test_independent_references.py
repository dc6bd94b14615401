"""Each approximate mechanism against its paper's formula, written here from the paper and not
from the module's helpers, at settings where it is *not* exact softmax. The module lends only its
random draws (projections, frequencies, learned E and F), so that both sides use the same ones: a
defect shared by a mechanism's chunked and autograd implementations fails here.

The random estimators also face a statistical test that plain averaging and a softmax with the
wrong temperature fail. (The sparse family's masks are built independently in
``test_sparse_family.py``; the linear family's formulas in ``test_linear_family.py``.)
"""

from __future__ import annotations

import pytest
import torch

from vitattn.attention.linformer import LinformerAttention
from vitattn.attention.nystrom import NystromAttention
from vitattn.attention.performer import PerformerAttention
from vitattn.attention.random_feature import RandomFeatureAttention

N, D, HEADS = 48, 16, 2


def relative_error(output: torch.Tensor, reference: torch.Tensor) -> float:
    return float((output - reference).detach().norm() / reference.detach().norm())


def gaussian_qkv(scale: float = 1.0, seed: int = 0) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    shape = (2, HEADS, N, D)
    q, k = (scale * torch.randn(shape, generator=generator, dtype=torch.float64) for _ in range(2))
    return q, k, torch.randn(shape, generator=generator, dtype=torch.float64)


def attend(weights: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rows of ``weights`` (n x n, non-negative up to estimation noise) normalised, times v."""
    return (weights @ v) / weights.sum(dim=-1, keepdim=True)


def softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, temperature: float = 1.0):
    return (temperature * q @ k.transpose(-2, -1) / D**0.5).softmax(dim=-1) @ v


# --- Performer (Choromanski et al. 2021, FAVOR+, eq. for the positive random features) ---------


def favor_plus(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """phi(x) = exp(w.x - |x|^2 / 2) / sqrt(m) on x = q / d^(1/4), y = k / d^(1/4) (so that
    phi(x).phi(y) estimates exp(q.k / sqrt(d))); A = phi(Q) phi(K)^T, out = A V / A 1."""
    x, y = q / D**0.25, k / D**0.25
    w = w.to(q.dtype).unsqueeze(0)  # (1, heads, m, d)

    def phi(z: torch.Tensor) -> torch.Tensor:
        return torch.exp(z @ w.transpose(-2, -1) - 0.5 * z.square().sum(-1, keepdim=True))

    m = w.shape[-2]
    return attend(phi(x) @ phi(y).transpose(-2, -1) / m, v)


@pytest.mark.parametrize("stabilizer", ["unbiased", "authors"])
@pytest.mark.parametrize("impl", ["chunked", "autograd"])
def test_performer_is_favor_plus_with_its_projection(impl: str, stabilizer: str) -> None:
    """With a negligible eps both stabilizers compute FAVOR+ exactly, in value and gradient."""
    torch.manual_seed(0)
    kernel = PerformerAttention(
        seq_len=N, heads=HEADS, head_dim=D, num_features=32, eps=1e-12, impl=impl,
        stabilizer=stabilizer,
    ).eval()  # fmt: skip
    q, k, v = (t.requires_grad_() for t in gaussian_qkv())
    ours, reference = kernel(q, k, v), favor_plus(q, k, v, kernel.projection)
    assert relative_error(ours, reference) < 1e-6
    assert relative_error(reference, softmax_attention(q, k, v)) > 0.1  # not softmax here
    grads = torch.autograd.grad(ours.square().sum(), (q, k, v))
    expected = torch.autograd.grad(reference.square().sum(), (q, k, v))
    for got, want in zip(grads, expected, strict=True):
        assert relative_error(got, want) < 1e-5


# --- RFA (Peng et al. 2021, section 3: random Fourier features) --------------------------------


def rfa(x: torch.Tensor, y: torch.Tensor, v: torch.Tensor, w: torch.Tensor, sigma2: torch.Tensor):
    """exp(sigma^2 x.y) = exp(sigma^2 |x|^2 / 2) exp(sigma^2 |y|^2 / 2) E_w[cos(w.(x - y))] with
    w ~ N(0, sigma^2 I): the sin/cos feature product is the cosine of the difference; the query
    factor cancels in the ratio, the key factor weighs each key."""
    w = w.to(x.dtype).unsqueeze(0)
    difference = x.unsqueeze(-2) - y.unsqueeze(-3)  # (batch, heads, n, n, d)
    cosines = torch.cos(difference @ w.unsqueeze(-3).transpose(-2, -1)).mean(dim=-1)
    key_weight = torch.exp(sigma2 * y.square().sum(-1) / 2).unsqueeze(-2)
    return attend(cosines * key_weight, v)


@pytest.mark.parametrize("impl", ["chunked", "autograd"])
def test_rfa_estimates_softmax_with_its_frequencies(impl: str) -> None:
    """``normalize=false``: x = q / d^(1/4), y = k / d^(1/4), frequencies of std sigma."""
    torch.manual_seed(0)
    kernel = RandomFeatureAttention(
        seq_len=N, heads=HEADS, head_dim=D, num_features=64, sigma=0.8, normalize=False,
        eps=1e-12, impl=impl,
    ).eval()  # fmt: skip
    q, k, v = gaussian_qkv(scale=0.5)
    x, y = q / D**0.25, k / D**0.25
    reference = rfa(x, y, v, kernel.frequencies, torch.tensor(0.64, dtype=torch.float64))
    assert relative_error(kernel(q, k, v), reference) < 1e-6
    assert relative_error(reference, softmax_attention(q, k, v, 0.64)) > 0.02  # an estimate


@pytest.mark.parametrize("impl", ["chunked", "autograd"])
def test_normalized_rfa_estimates_softmax_of_sigma_squared_cosine(impl: str) -> None:
    """``normalize=true``: x = sigma_h q / |q|, y = sigma_h k / |k| (sigma per head, learned),
    frequencies of std 1: the estimate of softmax(sigma^2 cos(q, k))."""
    torch.manual_seed(0)
    kernel = RandomFeatureAttention(
        seq_len=N, heads=HEADS, head_dim=D, num_features=64, sigma=1.3, eps=1e-12, impl=impl
    ).eval()
    with torch.no_grad():
        kernel.log_sigma.copy_(torch.tensor([0.1, 0.4]))  # two heads, two temperatures
    q, k, v = gaussian_qkv(scale=3.0)
    sigma = kernel.log_sigma.detach().double().exp().view(1, HEADS, 1, 1)
    x = sigma * torch.nn.functional.normalize(q, dim=-1)
    y = sigma * torch.nn.functional.normalize(k, dim=-1)
    reference = rfa(x, y, v, kernel.frequencies, torch.tensor(1.0, dtype=torch.float64))
    assert relative_error(kernel(q, k, v), reference) < 1e-6


# --- Linformer (Wang et al. 2020, eq. 7) and Nystromformer (Xiong et al. 2021, eq. 15) ---------


@pytest.mark.parametrize("share_kv", [False, True])
def test_linformer_is_softmax_over_projected_keys_and_values(share_kv: bool) -> None:
    """softmax(Q (E K)^T / sqrt(d)) (F V) with k < n and the module's E and F (F = E shared)."""
    torch.manual_seed(0)
    kernel = LinformerAttention(seq_len=N, heads=HEADS, head_dim=D, k=12, share_kv=share_kv)
    kernel = kernel.double()
    q, k, v = gaussian_qkv()
    e = kernel.key_projection.detach()
    f = e if share_kv else kernel.value_projection.detach()
    if not share_kv:
        assert relative_error(f, e) > 0.5  # E and F differ: a swap would show
    reference = softmax_attention(q, e @ k, f @ v)
    assert relative_error(kernel(q, k, v).detach(), reference) < 1e-10
    swapped = softmax_attention(q, f @ k, e @ v)
    assert share_kv or relative_error(swapped, reference) > 0.05


def test_nystrom_is_the_three_factor_formula_with_segment_mean_landmarks() -> None:
    """softmax(Q K~^T) pinv(softmax(Q~ K~^T)) softmax(Q~ K^T) V (scale 1/sqrt(d) on Q), with
    Q~, K~ the means of m = n / 6 contiguous segments and the exact pseudoinverse."""
    kernel = NystromAttention(seq_len=N, heads=HEADS, head_dim=D, landmarks=8, pinv="exact")
    q, k, v = gaussian_qkv()
    q = q / D**0.5
    q_landmarks = torch.stack([part.mean(-2) for part in q.split(N // 8, dim=-2)], dim=-2)
    k_landmarks = torch.stack([part.mean(-2) for part in k.split(N // 8, dim=-2)], dim=-2)
    f = (q @ k_landmarks.transpose(-2, -1)).softmax(-1)
    a = (q_landmarks @ k_landmarks.transpose(-2, -1)).softmax(-1)
    b = (q_landmarks @ k.transpose(-2, -1)).softmax(-1)
    reference = f @ torch.linalg.pinv(a) @ (b @ v)
    assert relative_error(kernel(q * D**0.5, k, v), reference) < 1e-5
    assert relative_error(reference, softmax_attention(q * D**0.5, k, v)) > 0.05


# --- the random estimators against exact softmax, statistically --------------------------------


def clustered_qkv(seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Queries and keys near 4 centres of norm 2.5 (the structure of image tokens: attention
    concentrates on a cluster), values Gaussian."""
    generator = torch.Generator().manual_seed(seed)
    centres = torch.randn(4, D, generator=generator, dtype=torch.float64)
    centres = 2.5 * torch.nn.functional.normalize(centres, dim=-1)

    def near_centres() -> torch.Tensor:
        which = torch.randint(0, 4, (2, HEADS, N), generator=generator)
        noise = torch.randn(2, HEADS, N, D, generator=generator, dtype=torch.float64)
        return centres[which] + 0.2 * noise

    q, k = near_centres(), near_centres()
    return q, k, torch.randn(2, HEADS, N, D, generator=generator, dtype=torch.float64)


def mean_error(kernel_class: type, features: int, qkv: tuple[torch.Tensor, ...], **knobs) -> float:
    exact = softmax_attention(*qkv)
    errors = []
    for seed in range(3):
        torch.manual_seed(seed)
        kernel = kernel_class(
            seq_len=N, heads=HEADS, head_dim=D, num_features=features, **knobs
        ).double()
        with torch.no_grad():
            errors.append(relative_error(kernel.eval()(*qkv), exact))
    return sum(errors) / len(errors)


@pytest.mark.parametrize(
    ("kernel_class", "knobs"),
    [(PerformerAttention, {}), (RandomFeatureAttention, {"normalize": False})],
    ids=["performer", "rfa"],
)
def test_random_features_beat_averaging_and_a_wrong_temperature(kernel_class, knobs) -> None:
    """On clustered q, k, the error falls with the feature count and at 1024 features is below
    half that of plain averaging and of softmax at half or twice the temperature."""
    q, k, v = qkv = clustered_qkv()
    exact = softmax_attention(*qkv)
    baselines = {
        "averaging": relative_error(v.mean(-2, keepdim=True).expand_as(v), exact),
        "half temperature": relative_error(softmax_attention(q, k, v, 0.5), exact),
        "twice the temperature": relative_error(softmax_attention(q, k, v, 2.0), exact),
    }
    few, many = (mean_error(kernel_class, m, qkv, **knobs) for m in (64, 1024))
    assert many < 0.7 * few
    for name, error in baselines.items():
        assert many < 0.5 * error, f"{many:.3f} is not well below {name}'s {error:.3f}"
