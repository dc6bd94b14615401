"""Reformer: LSH attention with shared queries and keys.

Kitaev, Kaiser and Levskaya, "Reformer: The Efficient Transformer", ICLR 2020. Queries and keys
share one projection (the keys are the unit-normalised queries, k_j = q_j / |q_j|), so a token's
query and key hash alike. Angular LSH puts similar vectors in the same bucket:
h(x) = argmax([xR; -xR]) for a random rotation R of shape (d, buckets / 2). The tokens are sorted
by bucket (then position), cut into chunks of ``chunk`` tokens, and each chunk attends to itself
and to the previous chunk (the first chunk to the last). A token does not attend to itself unless
nothing else is available (its score gets -1e5, as in the paper). ``hashes`` independent rounds
are combined with weights proportional to exp(log-sum-exp of each round's scores).

Cost O(n c d) for the attention plus O(n log n) for the sort and O(n d buckets) for the hashing.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from vitattn.attention.common import knobs
from vitattn.attention.common.base import AttentionKernel, register_attention
from vitattn.attention.common.blocks import (
    MASKED,
    attention_with_lse,
    gather_rows,
    in_fp32,
    pad_tokens,
)

SELF_MASKED = -1e5
"""Score of a token for itself: used only when every other key of its chunks is masked."""


def lsh_buckets(x: torch.Tensor, rotations: torch.Tensor) -> torch.Tensor:
    """Angular LSH of ``x`` (..., n, d) under ``rotations`` (d, hashes, buckets / 2):
    argmax over [xR; -xR], an integer (..., hashes, n) in ``[0, buckets)``."""
    half = rotations.shape[-1]
    if half == 0:  # one bucket: no hashing
        return x.new_zeros((*x.shape[:-2], rotations.shape[1], x.shape[-2]), dtype=torch.long)
    rotated = torch.einsum("...nd,dhr->...hnr", x, rotations)
    high, high_index = rotated.max(dim=-1)
    low, low_index = rotated.min(dim=-1)
    return torch.where(high >= -low, high_index, low_index + half)


@register_attention("reformer")
class ReformerAttention(AttentionKernel):
    """LSH attention (Reformer), O(n c d) per hashing round.

    Args:
        buckets: hash buckets per round, even (argmax over [xR; -xR]) or 1 (no hashing: the
            position-ordered tokens in chunks). ``None`` = about ``seq_len / chunk``, rounded up
            to an even number, so that an average bucket fills about one chunk.
        hashes: hashing rounds; more rounds miss fewer similar pairs, at ``hashes`` times the cost.
        chunk: tokens per chunk of the sorted sequence (capped at the token count); the sequence
            is padded at the end to a multiple of it (padding sorts last and is never attended
            to). With one or two chunks the attention is exact shared-QK softmax. ``None`` takes
            ``min(64, seq_len // 4)``: the paper's 64 wherever there are 256 tokens or more,
            and at least 4 chunks, so that LSH always decides.

    The kernel uses ``q`` as the shared query/key vector and ignores ``k`` (the paper's shared-QK
    Transformer), so ``k`` gets no gradient. Rotations are redrawn from torch's generator at every
    training forward; in evaluation the rotations drawn at construction (from torch's generator,
    which the run's ``seed`` fixes, and kept in the state dict) are used, so evaluation is
    deterministic. A key found in several rounds counts once per round: the paper's optional
    correction for such duplicates, which needs each pair's count across rounds, is left out.
    """

    shared_qk = True
    """``k`` is ignored: keys are the normalised queries."""

    def __init__(
        self,
        *,
        seq_len: int,
        heads: int,
        head_dim: int,
        buckets: int | None = None,
        hashes: int = 2,
        chunk: int | None = None,
    ) -> None:
        super().__init__(seq_len=seq_len, heads=heads, head_dim=head_dim)
        if chunk is None:
            chunk = min(64, max(1, self.seq_len // 4))
        self.chunk = knobs.integer("chunk", chunk, 1)
        self.hashes = knobs.integer("hashes", hashes, 1)
        if buckets is None:
            buckets = 2 * max(1, math.ceil(self.seq_len / (2 * self.chunk)))
        self.buckets = knobs.integer("buckets", buckets, 1)
        if self.buckets > 1 and self.buckets % 2:
            raise knobs.invalid(
                "buckets",
                buckets,
                "an even number (angular LSH takes the argmax over [xR; -xR]), 1 (no hashing) "
                "or null",
            )
        self.register_buffer("rotations", self.draw_rotations(torch.device("cpu")))

    def draw_rotations(self, device: torch.device) -> torch.Tensor:
        """Random Gaussian rotations (head_dim, hashes, buckets // 2) from torch's generator."""
        shape = (self.head_dim, self.hashes, self.buckets // 2)
        return torch.randn(shape, device=device, dtype=torch.float32)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        rotations = self.draw_rotations(q.device) if self.training else self.rotations
        return in_fp32(lambda q_, _k, v_: self.attend(q_, v_, rotations), q, k, v)

    def attend(self, x: torch.Tensor, v: torch.Tensor, rotations: torch.Tensor) -> torch.Tensor:
        """Shared-QK LSH attention of ``x`` (the queries; keys are x / |x|) over ``v``."""
        batch, heads, tokens, dim = x.shape
        hashes = rotations.shape[1]
        size = min(self.chunk, tokens)
        chunks = math.ceil(tokens / size)
        padded = chunks * size
        with torch.no_grad():
            buckets = lsh_buckets(x, rotations.to(x.dtype))  # (batch, heads, hashes, tokens)
            buckets = F.pad(buckets, (0, padded - tokens), value=max(1, self.buckets))
            layout = self._layout(buckets, chunks, size)
        queries_at, queries_inverse, keys_at, keys_inverse, unsort_inverse = layout
        keys = pad_tokens(F.normalize(x, dim=-1), after=padded - tokens).reshape(-1, dim)
        x, v = (pad_tokens(t, after=padded - tokens).reshape(-1, dim) for t in (x, v))
        rows = batch * heads * hashes * chunks
        queries = gather_rows(x, queries_at, queries_inverse).view(rows, size, dim)
        keys = gather_rows(keys, keys_at, keys_inverse).view(rows, -1, dim)
        values = gather_rows(v, keys_at, keys_inverse).view(rows, -1, dim)
        # The self-mask is the diagonal of the own-chunk block; padding sorts to the last slots.
        bias = self._bias(tokens, chunks, size, x.device)
        out, lse = attention_with_lse(queries, keys, values, bias, self.scale, rows // chunks)
        # Back to token order: the inverse of the query gather is the unsort.
        unsort_at = queries_inverse.flatten()
        out = gather_rows(out.view(-1, dim), unsort_at, unsort_inverse)
        out = out.view(hashes, batch, heads, padded, dim)
        if hashes > 1:  # rounds weighted by their share of the total mass exp(logsumexp)
            lse = lse.view(-1, 1)
            lse = gather_rows(lse, unsort_at, unsort_inverse).view(hashes, batch, heads, padded)
            out = (out * lse.softmax(dim=0).unsqueeze(-1)).sum(dim=0)
        else:
            out = out.squeeze(0)
        return out[:, :, :tokens]

    @staticmethod
    def _layout(buckets: torch.Tensor, chunks: int, size: int) -> tuple[torch.Tensor, ...]:
        """Row indices of the gathers, for ``buckets`` (batch, heads, hashes, padded).

        The sources are the (batch * heads * padded) token rows. The sorted queries are laid out
        as (batch, heads, hashes, padded); the keys of chunk j as its own ``size`` tokens then the
        previous chunk's (unless there is a single chunk). Returns (queries_at, queries_inverse,
        keys_at, keys_inverse) in the form :func:`gather_rows` takes.
        """
        batch, heads, hashes, padded = buckets.shape
        device = buckets.device
        order = buckets.sort(dim=-1, stable=True).indices  # by bucket, then position
        position = torch.arange(padded, device=device)
        rank = torch.empty_like(order).scatter_(-1, order, position.expand_as(order))
        source = torch.arange(batch * heads, device=device).view(batch, heads, 1, 1) * padded
        sorted_row = (
            source * hashes + torch.arange(hashes, device=device).view(1, 1, -1, 1) * padded
        )
        queries_at = (order + source).flatten()
        # Row of token t of round r in the sorted layout: (bh, r, rank).
        queries_inverse = (rank + sorted_row).permute(2, 0, 1, 3).reshape(hashes, -1)
        # The unsorted output is laid out (r, bh, t); sorted row (bh, r, i) goes to t = order.
        round_block = torch.arange(hashes, device=device).view(1, 1, -1, 1) * batch * heads
        unsort_inverse = (order + source + round_block * padded).view(1, -1)
        if chunks == 1:
            return queries_at, queries_inverse, queries_at, queries_inverse, unsort_inverse
        slots = torch.arange(padded, device=device).view(chunks, size)
        slots = torch.cat([slots, slots.roll(1, dims=0)], dim=-1).flatten()  # sorted positions
        keys_at = (order.index_select(-1, slots) + source).flatten()
        chunk, slot = rank // size, rank % size
        block = (sorted_row // padded) * chunks  # (bh * hashes + r) * chunks
        own = (block + chunk) * 2 * size + slot
        previous_of_next = (block + (chunk + 1) % chunks) * 2 * size + size + slot
        keys_inverse = torch.stack([own, previous_of_next])  # (2, batch, heads, hashes, padded)
        keys_inverse = keys_inverse.permute(0, 3, 1, 2, 4).reshape(2 * hashes, -1)
        return queries_at, queries_inverse, keys_at, keys_inverse, unsort_inverse

    @staticmethod
    def _bias(tokens: int, chunks: int, size: int, device: torch.device) -> torch.Tensor:
        """Score bias of the chunks, ``(chunks, size, keys)``: SELF_MASKED where a query meets
        itself (the diagonal of the own-chunk block), MASKED on padding slots, else 0."""
        keys = 2 * size if chunks > 1 else size
        bias = torch.zeros(chunks, size, keys, device=device, dtype=torch.float32)
        bias[:, :, :size].diagonal(dim1=-2, dim2=-1).fill_(SELF_MASKED)
        slot = torch.arange(chunks * size, device=device).view(chunks, size)
        if chunks > 1:
            slot = torch.cat([slot, slot.roll(1, dims=0)], dim=-1)
        return bias.masked_fill_((slot >= tokens).unsqueeze(1), MASKED)

    def exact_because(self) -> str | None:
        chunks = math.ceil(self.seq_len / min(self.chunk, self.seq_len))
        if chunks > 2:
            return None
        if chunks == 1:
            covers = f"chunk {self.chunk} >= {self.seq_len} tokens: one chunk holds every token"
        else:
            covers = f"chunk {self.chunk} makes 2 chunks of {self.seq_len} tokens, each sees both"
        return f"{covers}, so LSH drops no pair: this is full shared-QK attention"

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, buckets={self.buckets}, hashes={self.hashes}, "
            f"chunk={self.chunk}"
        )
