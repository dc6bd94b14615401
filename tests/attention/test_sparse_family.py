"""local, bigbird, sparse, reformer: exact limits, their patterns against explicit n x n masks,
memory that grows as their cost says (not as n^2), and one-line errors for settings that do not
fit."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from vitattn.attention.bigbird import BigBirdAttention
from vitattn.attention.local import LocalAttention
from vitattn.attention.reformer import ReformerAttention, lsh_buckets
from vitattn.attention.softmax import SoftmaxAttention
from vitattn.attention.sparse import SparseAttention
from vitattn.bench.memory import LargestTensor
from vitattn.errors import ConfigError

TOL = {"rtol": 1e-4, "atol": 1e-4}


def qkv(tokens: int, heads: int = 2, dim: int = 16, seed: int = 0, grad: bool = False):
    generator = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(2, heads, tokens, dim, generator=generator).requires_grad_(grad)
        for _ in range(3)
    )


def softmax(q, k, v):
    return SoftmaxAttention(seq_len=q.shape[2], heads=q.shape[1], head_dim=q.shape[3])(q, k, v)


def masked_softmax(q, k, v, allowed: torch.Tensor) -> torch.Tensor:
    """The dense reference: softmax over the allowed keys of an explicit n x n mask."""
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v


def assert_same_with_gradients(kernel, reference, q, k, v) -> None:
    """Same output and same q, k, v gradients as the reference function."""
    weights = torch.randn(q.shape, generator=torch.Generator().manual_seed(9))
    results = []
    for function in (kernel, reference):
        for t in (q, k, v):
            t.grad = None
        out = function(q, k, v)
        (out * weights).sum().backward()
        grads = [torch.zeros_like(t) if t.grad is None else t.grad.clone() for t in (q, k, v)]
        results.append((out.detach(), *grads))
    for got, expected in zip(*results, strict=True):
        torch.testing.assert_close(got, expected, **TOL)


# ----------------------------------------------------------------------------------- local


def local_mask(kernel: LocalAttention, n: int) -> torch.Tensor:
    g = kernel.global_tokens
    if kernel.window_shape == "1d":
        w = min(kernel.window, n)
        i = torch.arange(n)
        start = (i - w // 2).clamp(0, n - w)
        allowed = (i[None] >= start[:, None]) & (i[None] < start[:, None] + w)
    else:
        side = math.isqrt(n)
        extra, w = n - side * side, min(kernel.window, side)
        cell = torch.arange(side * side)
        r, c = cell // side, cell % side
        sr, sc = (r - w // 2).clamp(0, side - w), (c - w // 2).clamp(0, side - w)
        grid = (r[None] >= sr[:, None]) & (r[None] < sr[:, None] + w)
        grid &= (c[None] >= sc[:, None]) & (c[None] < sc[:, None] + w)
        allowed = torch.zeros(n, n, dtype=torch.bool)
        allowed[extra:, extra:] = grid
    allowed[:, :g] = True
    allowed[:g, :] = True
    return allowed


@pytest.mark.parametrize(
    ("n", "window", "shape", "global_tokens"),
    [
        (50, 50, "1d", 0),
        (50, 80, "1d", 2),
        (65, 8, "2d", None),
        (64, 8, "2d", 0),
        (64, 99, "2d", 3),
    ],
)
def test_local_window_covering_everything_is_softmax(n, window, shape, global_tokens) -> None:
    kernel = LocalAttention(
        seq_len=n, heads=2, head_dim=16, window=window, window_shape=shape,
        global_tokens=global_tokens,
    )  # fmt: skip
    q, k, v = qkv(n)
    torch.testing.assert_close(kernel(q, k, v), softmax(q, k, v), **TOL)


@pytest.mark.parametrize(
    ("n", "window", "shape", "global_tokens"),
    [(50, 7, "1d", 0), (50, 8, "1d", 3), (65, 3, "2d", None), (1025, 7, "2d", None),
     (100, 4, "2d", 5), (20, 3, "2d", None)],
)  # fmt: skip
def test_local_equals_its_window_mask(n, window, shape, global_tokens) -> None:
    kernel = LocalAttention(
        seq_len=n, heads=2, head_dim=16, window=window, window_shape=shape,
        global_tokens=global_tokens,
    )  # fmt: skip
    allowed = local_mask(kernel, n)
    q, k, v = qkv(n, grad=n < 200)
    if n < 200:
        assert_same_with_gradients(kernel, lambda *x: masked_softmax(*x, allowed), q, k, v)
    else:
        torch.testing.assert_close(kernel(q, k, v), masked_softmax(q, k, v, allowed), **TOL)
    side = math.isqrt(n)
    if shape == "2d" and kernel.global_tokens == n - side * side:
        # Every grid token sees min(window, side)^2 grid tokens: windows shift in at the edges.
        grid_counts = allowed[kernel.global_tokens :, n - side * side :].sum(dim=1)
        assert (grid_counts == min(window, side) ** 2).all()


def test_local_global_tokens_default_to_the_class_token() -> None:
    assert LocalAttention(seq_len=65, heads=1, head_dim=8).global_tokens == 1
    assert LocalAttention(seq_len=1025, heads=1, head_dim=8).global_tokens == 1
    assert LocalAttention(seq_len=64, heads=1, head_dim=8).global_tokens == 0
    assert LocalAttention(seq_len=64, heads=1, head_dim=8, window_shape="1d").global_tokens == 0


def test_local_layout_is_made_with_the_kernel_moves_with_it_and_is_not_saved() -> None:
    """The gather layout of the kernel's token count: buffers made at construction (a network
    compiled whole by its user built it inside its first graph, then compiled a second), cast
    and moved with the module, outside its state dict (checkpoints from before load)."""
    kernel = LocalAttention(seq_len=65, heads=2, head_dim=16, window=3, impl="gather")
    assert kernel.state_dict() == {}
    assert {name for name, _ in kernel.named_buffers()} == {
        "layout_queries", "layout_keys", "layout_bias", "layout_inverse",
    }  # fmt: skip
    q, k, v = qkv(65)
    expected = kernel(q, k, v)
    assert not kernel._layouts  # the buffers served the forward
    kernel.to(torch.float16)  # its bias too: 0 and MASKED (-inf in float16) mask alike
    torch.testing.assert_close(kernel(q, k, v), expected)
    assert not kernel._layouts
    assert not dict(LocalAttention(seq_len=65, heads=2, head_dim=16, impl="flex").named_buffers())


# ---------------------------------------------------------------------------------- bigbird


def bigbird_mask(kernel: BigBirdAttention, n: int) -> torch.Tensor:
    """(heads, n, n) from BigBird's definition (Zaheer et al. 2020, ITC), token by token: tokens
    of the global blocks see and are seen by every token; every other query block sees the
    ``window_blocks`` blocks centred on it and the random blocks the layer drew. The kernel lends
    only those random draws (the last ``num_random`` slots of its table), checked here to be
    neither global nor sliding."""
    block = (torch.arange(n) + kernel.padding) // kernel.block  # front padding
    g, radius = kernel.global_blocks, kernel.window_blocks // 2
    query_block, key_block = block[:, None], block[None, :]
    allowed = (query_block < g) | (key_block < g) | ((query_block - key_block).abs() <= radius)
    allowed = allowed.expand(kernel.heads, n, n).clone()
    draws = min(kernel.num_random, kernel.blocks - g)
    if draws == 0:
        return allowed
    for h in range(kernel.heads):
        picks = kernel.key_blocks[h, :, -draws:].tolist()
        for query, drawn in enumerate(picks, start=g):
            for key in (pick for pick in drawn if pick >= 0):
                assert key >= g and abs(key - query) > radius, (query, key)
                allowed[h, (block == query)[:, None] & (block == key)[None, :]] = True
    return allowed


@pytest.mark.parametrize(
    ("n", "block", "settings"),
    [
        (50, 8, {"num_random": 10}),  # random blocks cover the rest
        (50, 8, {"global_blocks": 7, "num_random": 0}),  # every block global
        (64, 8, {"window_blocks": 15, "num_random": 0, "global_blocks": 0}),  # window covers all
        (65, 16, {}),  # the defaults on a short sequence select everything
    ],
)
def test_bigbird_with_all_blocks_selected_is_softmax(n, block, settings) -> None:
    kernel = BigBirdAttention(seq_len=n, heads=2, head_dim=16, block=block, **settings)
    q, k, v = qkv(n)
    torch.testing.assert_close(kernel(q, k, v), softmax(q, k, v), **TOL)


@pytest.mark.parametrize(
    ("n", "block", "window_blocks", "num_random", "global_blocks"),
    [(50, 8, 3, 1, 1), (64, 8, 1, 2, 0), (100, 7, 5, 2, 2), (1025, 16, 3, 3, 1)],
)
def test_bigbird_equals_its_block_mask(n, block, window_blocks, num_random, global_blocks):
    torch.manual_seed(3)
    kernel = BigBirdAttention(
        seq_len=n, heads=3, head_dim=16, block=block, window_blocks=window_blocks,
        num_random=num_random, global_blocks=global_blocks,
    )  # fmt: skip
    allowed = bigbird_mask(kernel, n)
    assert allowed.float().mean() < 1  # a real pattern, not everything
    q, k, v = qkv(n, heads=3, grad=n < 200)
    if n < 200:
        assert_same_with_gradients(kernel, lambda *x: masked_softmax(*x, allowed), q, k, v)
    else:
        torch.testing.assert_close(kernel(q, k, v), masked_softmax(q, k, v, allowed), **TOL)


def test_bigbird_random_blocks_fixed_per_layer_and_seeded() -> None:
    def layer(seed: int | None = None) -> BigBirdAttention:
        if seed is not None:
            torch.manual_seed(seed)
        return BigBirdAttention(seq_len=1024, heads=4, head_dim=8, num_random=3)

    first, second = layer(0), layer()
    assert not torch.equal(first.key_blocks, second.key_blocks)  # each layer draws its own
    assert torch.equal(first.key_blocks, layer(0).key_blocks)  # the run's seed fixes them
    assert "key_blocks" in first.state_dict()
    random = first.key_blocks[..., 1 + 3 :]  # after the global block and the 3 sliding blocks
    assert random.shape == (4, 63, 3) and (random >= 1).all()  # never global, never missing
    query_block = torch.arange(1, 64)[None, :, None]
    assert ((random - query_block).abs() > 1).all()  # never a sliding block
    # The pattern does not change from one training forward to the next.
    first.train()
    q, k, v = qkv(1024, heads=4, dim=8)
    torch.testing.assert_close(first(q, k, v), first(q, k, v), rtol=0, atol=0)


def test_bigbird_rejects_another_token_count() -> None:
    kernel = BigBirdAttention(seq_len=64, heads=2, head_dim=16)
    with pytest.raises(ConfigError, match="built for 64 tokens"):
        kernel(*qkv(80))


# ----------------------------------------------------------------------------------- sparse


def sparse_mask(kernel: SparseAttention, n: int) -> torch.Tensor:
    stride = min(kernel.stride, n)
    position = torch.arange(n) + (-n % stride)  # front padding
    row, column = position // stride, position % stride
    same_row = row[:, None] == row[None, :]

    def second(head: int) -> torch.Tensor:
        if kernel.pattern == "strided":
            return column[:, None] == column[None, :]
        # Child et al. 2019, "fixed": the last c positions of each row are summaries, and each
        # head takes its own c of them: head i the c ending i * c before the row's end (wrapping).
        start = stride - (head + 1) * kernel.summary
        summaries = (column - start) % stride < kernel.summary
        return summaries[None, :].expand(n, n)

    masks = []
    for h in range(kernel.heads):
        if kernel.merged:
            masks.append(same_row | second(h))
        elif h < kernel.row_heads:
            masks.append(same_row)
        else:
            masks.append(second(h - kernel.row_heads))
    return torch.stack(masks)


@pytest.mark.parametrize("combine", ["heads", "merged"])
def test_sparse_fixed_pattern_covering_all_pairs_is_softmax(combine: str) -> None:
    kernel = SparseAttention(
        seq_len=50, heads=3, head_dim=16, pattern="fixed", stride=50, summary=50, combine=combine
    )
    q, k, v = qkv(50, heads=3)
    torch.testing.assert_close(kernel(q, k, v), softmax(q, k, v), **TOL)


def test_sparse_strided_row_and_column_heads_reach_softmax() -> None:
    q, k, v = qkv(50, heads=4)
    exact = softmax(q, k, v)
    rows = SparseAttention(seq_len=50, heads=4, head_dim=16, stride=50)  # one row: everything
    torch.testing.assert_close(rows(q, k, v)[:, :2], exact[:, :2], **TOL)
    columns = SparseAttention(seq_len=50, heads=4, head_dim=16, stride=1)  # one column
    torch.testing.assert_close(columns(q, k, v)[:, 2:], exact[:, 2:], **TOL)


@pytest.mark.parametrize("pattern", ["strided", "fixed"])
@pytest.mark.parametrize("combine", ["heads", "merged"])
@pytest.mark.parametrize(
    ("n", "heads", "stride", "summary"),
    [(50, 3, 7, 2), (65, 3, None, None), (64, 2, None, None), (20, 1, None, None),
     (1025, 4, None, None)],
)  # fmt: skip
def test_sparse_equals_its_pattern_mask(pattern, combine, n, heads, stride, summary) -> None:
    kernel = SparseAttention(
        seq_len=n, heads=heads, head_dim=16, pattern=pattern, stride=stride, summary=summary,
        combine=combine,
    )  # fmt: skip
    allowed = sparse_mask(kernel, n)
    q, k, v = qkv(n, heads=heads, grad=n < 200)
    if n < 200:
        assert_same_with_gradients(kernel, lambda *x: masked_softmax(*x, allowed), q, k, v)
    else:
        torch.testing.assert_close(kernel(q, k, v), masked_softmax(q, k, v, allowed), **TOL)


def test_sparse_defaults_see_the_pixel_rows_and_columns() -> None:
    kernel = SparseAttention(seq_len=1024, heads=4, head_dim=16)
    assert (kernel.stride, kernel.row_heads, kernel.merged) == (32, 2, False)
    allowed = sparse_mask(kernel, 1024)
    pixel = 5 * 32 + 7  # row 5, column 7 of the 32 x 32 image
    assert allowed[0, pixel].nonzero().flatten().tolist() == list(range(5 * 32, 6 * 32))
    assert allowed[3, pixel].nonzero().flatten().tolist() == list(range(7, 1024, 32))
    # With a class token in front the rows still line up with the image's rows.
    with_cls = SparseAttention(seq_len=1025, heads=4, head_dim=16)
    allowed = sparse_mask(with_cls, 1025)
    assert allowed[0, 1 + pixel].nonzero().flatten().tolist() == list(range(161, 193))
    # One head cannot be split: it attends to the union.
    assert SparseAttention(seq_len=64, heads=1, head_dim=16).merged


# --------------------------------------------------------------------------------- reformer


def shared_qk_softmax(q, v, allowed: torch.Tensor | None = None):
    """Softmax attention with keys = q / |q| and the self-mask; its output and log-sum-exp."""
    n = q.shape[2]
    scores = (q * q.shape[-1] ** -0.5) @ F.normalize(q, dim=-1).transpose(-2, -1)
    scores = scores.masked_fill(torch.eye(n, dtype=torch.bool), -1e5)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(dim=-1) @ v, scores.logsumexp(dim=-1)


def lsh_reference(kernel: ReformerAttention, q, v):
    """Each round as dense attention over the chunk it lands in and the previous chunk, the rounds
    weighted by their log-sum-exp."""
    n = q.shape[2]
    size = min(kernel.chunk, n)
    chunks = math.ceil(n / size)
    buckets = lsh_buckets(q, kernel.rotations)
    outs, lses = [], []
    for r in range(buckets.shape[2]):
        rank = buckets[:, :, r].argsort(dim=-1, stable=True).argsort(dim=-1)
        chunk = rank // size
        query_chunk, key_chunk = chunk[..., :, None], chunk[..., None, :]
        allowed = query_chunk == key_chunk
        if chunks > 1:
            allowed |= (query_chunk - 1) % chunks == key_chunk
        out, lse = shared_qk_softmax(q, v, allowed)
        outs.append(out)
        lses.append(lse)
    weights = torch.stack(lses, dim=2).softmax(dim=2).unsqueeze(-1)
    return (torch.stack(outs, dim=2) * weights).sum(dim=2)


@pytest.mark.parametrize("n", [1, 50, 64])
@pytest.mark.parametrize("hashes", [1, 3])
def test_reformer_with_one_bucket_is_shared_qk_softmax(n: int, hashes: int) -> None:
    kernel = ReformerAttention(seq_len=n, heads=2, head_dim=16, buckets=1, hashes=hashes, chunk=64)
    q, k, v = qkv(n, grad=True)
    # With several rounds of one bucket every round is the same exact attention.
    assert_same_with_gradients(kernel, lambda q_, k_, v_: shared_qk_softmax(q_, v_)[0], q, k, v)
    assert k.grad is None  # k is not used: the keys are the normalised queries


@pytest.mark.parametrize(
    ("n", "buckets", "hashes", "chunk"),
    [(50, 4, 1, 8), (64, 8, 2, 8), (65, 6, 3, 16), (100, 2, 2, 7)],
)
def test_reformer_equals_chunked_lsh_reference(n, buckets, hashes, chunk) -> None:
    torch.manual_seed(1)
    kernel = ReformerAttention(
        seq_len=n, heads=2, head_dim=16, buckets=buckets, hashes=hashes, chunk=chunk
    ).eval()
    q, k, v = qkv(n, grad=True)
    assert_same_with_gradients(kernel, lambda q_, k_, v_: lsh_reference(kernel, q_, v_), q, k, v)


def test_lsh_buckets_are_the_argmax_over_rotations_and_their_negation() -> None:
    x = torch.randn(2, 3, 40, 16)
    rotations = torch.randn(16, 2, 5)
    rotated = torch.einsum("bhnd,dkr->bhknr", x, rotations)
    expected = torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)
    buckets = lsh_buckets(x, rotations)
    assert torch.equal(buckets, expected)
    assert buckets.min() >= 0 and buckets.max() < 10
    # Angular: the bucket depends on the direction only.
    assert torch.equal(lsh_buckets(3.0 * x, rotations), buckets)


def test_reformer_redraws_rotations_in_training_only() -> None:
    torch.manual_seed(0)
    kernel = ReformerAttention(seq_len=256, heads=2, head_dim=16, buckets=16, chunk=16)
    q, k, v = qkv(256)
    assert not torch.equal(kernel(q, k, v), kernel(q, k, v))  # new rotations every forward
    kernel.eval()
    fixed = kernel(q, k, v)
    torch.testing.assert_close(kernel(q, k, v), fixed, rtol=0, atol=0)
    # The evaluation rotations are part of the state: a copy evaluates identically.
    copy = ReformerAttention(seq_len=256, heads=2, head_dim=16, buckets=16, chunk=16).eval()
    copy.load_state_dict(kernel.state_dict())
    torch.testing.assert_close(copy(q, k, v), fixed, rtol=0, atol=0)


def test_reformer_buckets_default_to_about_one_chunk_each() -> None:
    assert ReformerAttention(seq_len=1024, heads=1, head_dim=8, chunk=64).buckets == 16
    assert ReformerAttention(seq_len=1025, heads=1, head_dim=8, chunk=64).buckets == 18
    assert ReformerAttention(seq_len=64, heads=1, head_dim=8, chunk=64).buckets == 2


# ------------------------------------------------------------------------ memory scaling


def largest_tensor(name: str, n: int, head_dim: int) -> int:
    kernels = {
        "local": LocalAttention,
        "bigbird": BigBirdAttention,
        "sparse": SparseAttention,
        "reformer": ReformerAttention,
        "naive softmax": lambda **sizes: SoftmaxAttention(**sizes, impl="naive"),
    }
    kernel = kernels[name](seq_len=n, heads=2, head_dim=head_dim)
    q, k, v = (torch.randn(1, 2, n, head_dim, requires_grad=True) for _ in range(3))
    with LargestTensor() as counter:
        kernel(q, k, v)
    return counter.bytes


@pytest.mark.parametrize("name", ["local", "bigbird", "sparse", "reformer"])
def test_largest_tensor_grows_less_than_6x_from_1024_to_4096_tokens(name: str) -> None:
    # head_dim 64, the model's: an n x n score matrix (16x) cannot hide behind the n x d inputs.
    growth = largest_tensor(name, 4096, 64) / largest_tensor(name, 1024, 64)
    assert growth < 6, f"{name}: {growth:.1f}x"


@pytest.mark.parametrize(
    ("name", "bound"),
    [("local", 6), ("bigbird", 6), ("reformer", 6), ("sparse", 10), ("naive softmax", 17)],
)
def test_score_tensors_grow_as_the_stated_cost(name: str, bound: float) -> None:
    # head_dim 4: the score tensors are the largest. O(n w), O(n b), O(n c) grow 4x; sparse's
    # O(n sqrt(n)) rows and columns grow 8x; the counter sees the dense 16x of naive softmax.
    growth = largest_tensor(name, 4096, 4) / largest_tensor(name, 1024, 4)
    assert growth < bound, f"{name}: {growth:.1f}x"
    if name == "naive softmax":
        assert growth > 15
    elif name == "sparse":
        assert growth > 6  # the tensor measured really is the n sqrt(n) scores


@pytest.mark.parametrize(
    "make",
    [
        lambda: LocalAttention(seq_len=65, heads=2, head_dim=16, window=3),  # 2d, class token
        lambda: LocalAttention(seq_len=50, heads=2, head_dim=16, window=5, window_shape="1d"),
        lambda: BigBirdAttention(seq_len=70, heads=2, head_dim=16, block=8),
    ],
)
def test_block_groups_give_the_same_output_and_gradients(make, monkeypatch) -> None:
    # Long sequences are attended in groups of query blocks; one block per group must give
    # what one pass over all blocks gives.
    kernel = make()
    q, k, v = qkv(kernel.seq_len, grad=True)
    whole = kernel(q, k, v)
    whole_grads = torch.autograd.grad(whole.square().sum(), (q, k, v))
    monkeypatch.setattr("vitattn.attention.common.blocks.GROUP_BYTES", 1)
    grouped = kernel(q, k, v)
    grouped_grads = torch.autograd.grad(grouped.square().sum(), (q, k, v))
    torch.testing.assert_close(grouped, whole, rtol=1e-6, atol=1e-6)
    for ours, theirs in zip(grouped_grads, whole_grads, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("kernel", "seq_len", "settings", "message"),
    [
        (LocalAttention, 64, {"window": 0}, r"attention\.window=0 .*integer >= 1"),
        (LocalAttention, 64, {"window_shape": "3d"}, r"attention\.window_shape='3d' .*1d \| 2d"),
        (LocalAttention, 64, {"global_tokens": -1}, r"attention\.global_tokens=-1 "),
        (LocalAttention, 64, {"global_tokens": 65}, r"attention\.global_tokens=65 .*<= 64"),
        (LocalAttention, 65, {"global_tokens": 0}, r"attention\.global_tokens=0 leaves 1 of"),
        (BigBirdAttention, 64, {"block": 0}, r"attention\.block=0 "),
        (BigBirdAttention, 64, {"block": 100}, r"attention\.block=100 .*<= 64"),
        (BigBirdAttention, 64, {"window_blocks": 2}, r"attention\.window_blocks=2 .*odd"),
        (BigBirdAttention, 64, {"num_random": -1}, r"attention\.num_random=-1 "),
        (BigBirdAttention, 65, {"block": 16, "global_blocks": 6}, r"global_blocks=6 .*5 blocks"),
        (SparseAttention, 64, {"pattern": "diagonal"}, r"attention\.pattern='diagonal' "),
        (SparseAttention, 64, {"stride": 0}, r"attention\.stride=0 "),
        (SparseAttention, 64, {"stride": 65}, r"attention\.stride=65 .*<= 64"),
        (SparseAttention, 64, {"pattern": "fixed", "summary": 9}, r"attention\.summary=9 .*<= 8"),
        (SparseAttention, 64, {"combine": "sum"}, r"attention\.combine='sum' "),
        (ReformerAttention, 64, {"buckets": 3}, r"attention\.buckets=3 .*even"),
        (ReformerAttention, 64, {"buckets": 0}, r"attention\.buckets=0 "),
        (ReformerAttention, 64, {"hashes": 0}, r"attention\.hashes=0 "),
        (ReformerAttention, 64, {"chunk": 0}, r"attention\.chunk=0 "),
        (ReformerAttention, 64, {"chunk": 2.5}, r"attention\.chunk=2.5 "),
    ],
)
def test_settings_that_do_not_fit_give_one_line_errors(kernel, seq_len, settings, message):
    with pytest.raises(ConfigError, match=message) as error:
        kernel(seq_len=seq_len, heads=2, head_dim=16, **settings)
    assert "\n" not in str(error.value)


# ------------------------------------------------------------------------ half precision


@pytest.mark.parametrize("kernel", [LocalAttention, BigBirdAttention, SparseAttention])
def test_bf16_inputs_give_bf16_outputs_close_to_fp32(kernel) -> None:
    torch.manual_seed(0)
    layer = kernel(seq_len=65, heads=2, head_dim=16).eval()
    q, k, v = qkv(65)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        half = layer(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), layer(q, k, v), rtol=0.05, atol=0.05)
