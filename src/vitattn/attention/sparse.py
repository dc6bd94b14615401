"""Sparse Transformer attention: factorised strided and fixed patterns.

Child, Gray, Radford and Sutskever, "Generating Long Sequences with Sparse Transformers",
arXiv:1904.10509, 2019. The tokens are read as rows of ``stride`` = l tokens. Two factorised
patterns, each the union of two sparse sets A(1), A(2) whose composition reaches every token in two
steps:

- ``strided`` (the paper's choice for images): A(1) = the query's row, A(2) = its column (every
  l-th token). With l = sqrt(n) on the pixel model these are the image's rows and columns.
- ``fixed`` (the paper's choice for text): A(1) = the query's row, A(2) = the "summary" tokens,
  the last ``summary`` = c tokens of every row; as the paper recommends, each head attending to
  summaries uses its own sub-block of c positions (the last c, the c before them, ...).

The paper's patterns are causal (for generation); a ViT attends both ways, so A(1) is the whole
row and A(2) the whole column (or every row's summaries), not only earlier tokens.

The two sets are combined as in the paper's Section 4.2: ``combine: heads`` splits the heads
between them (the first half A(1), the rest A(2); with one head, ``merged`` is used), ``merged``
gives every head the union A(1) and A(2).

Cost O(n sqrt(n) d) at the default l = sqrt(n). Two implementations of the same pattern
(``impl``): ``gather``, where rows and columns are reshapes of the padded sequence and summaries a
gather of (n / l) c keys, and ``flex``, where the pattern, written once as
:meth:`SparseAttention.mask_mod` (the heads' difference through its ``h``), goes to PyTorch's
FlexAttention (:mod:`~vitattn.attention.common.flex`: compiled, inference only on a CPU). A
block of B consecutive queries spans B columns, so FlexAttention visits about 2B / l of the key
blocks for a column head (all of them while l <= 2B; B = 16 on a CPU) and computes the whole of
each: n^2 2B / l scores instead of the gather's n^2 / l. ``auto`` picks per device and shape.
"""

from __future__ import annotations

import math

import torch

from vitattn.attention.common import flex, knobs
from vitattn.attention.common.base import AttentionKernel, register_attention
from vitattn.attention.common.blocks import MASKED, in_fp32, pad_tokens, softmax_parts

PATTERNS = ("strided", "fixed")
COMBINES = ("heads", "merged")


def summary_offsets(stride: int, summary: int, index: int) -> torch.Tensor:
    """Positions within a row of the ``index``-th summary sub-block: the ``summary`` positions
    ending ``index * summary`` before the row's end (wrapping around the row)."""
    end = stride - index * summary
    return (torch.arange(end - summary, end) % stride).long()


@register_attention("sparse")
class SparseAttention(AttentionKernel):
    """Factorised sparse attention (Sparse Transformer), O(n sqrt(n) d).

    Args:
        pattern: ``strided`` (row + column) or ``fixed`` (row + summary tokens).
        stride: row length l, ``None`` = ``isqrt(seq_len)``; between 1 and ``seq_len``. The
            sequence is zero-padded *at the front* to a multiple of l (padding is never attended
            to), so with a class token (``seq_len = side^2 + 1``) the patch grid's rows start on
            row boundaries.
        summary: ``fixed`` only: c summary tokens per row and per head, ``None`` =
            ``max(1, stride // 8)`` (the paper's c = 8..32 for l = 128..256); between 1 and l.
            ``summary = stride`` makes every token a summary.
        combine: ``heads`` (the first ceil(heads / 2) heads attend to the row, the others to the
            column or summaries) or ``merged`` (every head attends to the union).
        impl: ``gather`` (reshapes and gathers), ``flex`` (FlexAttention with :meth:`mask_mod`;
            without gradients only on a CPU) or ``auto``: gather on a CPU and under
            ``torch.compile``, the faster of the two per shape on a GPU, timed once
            (:mod:`~vitattn.attention.common.flex`). Both compute the same function.

    Exact limits: ``fixed`` with ``stride = summary = seq_len`` is softmax for every head;
    ``strided`` is softmax on the row heads with ``stride = seq_len`` and on the column heads with
    ``stride = 1``.
    """

    def __init__(
        self,
        *,
        seq_len: int,
        heads: int,
        head_dim: int,
        pattern: str = "strided",
        stride: int | None = None,
        summary: int | None = None,
        combine: str = "heads",
        impl: str = "auto",
    ) -> None:
        super().__init__(seq_len=seq_len, heads=heads, head_dim=head_dim)
        self.pattern = knobs.one_of("pattern", pattern, PATTERNS)
        if stride is None:
            stride = math.isqrt(self.seq_len)
        hint = f" (the {self.seq_len} tokens it attends over), or null for sqrt(seq_len)"
        self.stride = knobs.integer("stride", stride, 1, self.seq_len, hint)
        if summary is None:
            summary = max(1, self.stride // 8)
        self.summary = knobs.integer(
            "summary", summary, 1, self.stride, " (the stride), or null for stride // 8"
        )
        self.combine = knobs.one_of("combine", combine, COMBINES)
        self.merged = self.combine == "merged" or self.heads == 1
        self.row_heads = self.heads if self.merged else math.ceil(self.heads / 2)
        self.impl = knobs.one_of("impl", impl, flex.IMPLEMENTATIONS)
        same_for_all_heads = self.merged and self.pattern == "strided"
        self._block_masks = flex.BlockMasks(self.mask_mod, 1 if same_for_all_heads else self.heads)

    def mask_mod(self, tokens: int, device: torch.device) -> flex.MaskMod:
        """The pattern for ``tokens`` tokens as FlexAttention's ``mask_mod(b, h, q_idx, kv_idx)``
        over the front-padded sequence (position p in row p // l, column p % l): A(1), the
        query's row; A(2), its column (``strided``) or the summaries of head i of A(2)'s heads,
        the c columns ending i * c before a row's end (``fixed``, as :func:`summary_offsets`);
        per head (``heads``: the first ``row_heads`` heads A(1), the others A(2)) or their union
        (``merged``). Padding keys are never seen."""
        stride = min(self.stride, tokens)
        pad = -tokens % stride
        summary, row_heads, merged = self.summary, self.row_heads, self.merged
        strided = self.pattern == "strided"

        def mask_mod(
            b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
        ) -> torch.Tensor:
            row = q_idx // stride == kv_idx // stride
            if strided:
                other = q_idx % stride == kv_idx % stride
            else:
                index = h if merged else h - row_heads  # the head's place among A(2)'s heads
                start = stride - (index + 1) * summary
                other = (kv_idx % stride - start) % stride < summary
            allowed = row | other if merged else torch.where(h < row_heads, row, other)
            return allowed & (kv_idx >= pad)

        return mask_mod

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        implementations = {"gather": self.gather, "flex": self.flex}
        settings = (self.pattern, self.stride, self.summary, self.combine)
        return flex.run(self.impl, "sparse", implementations, q, k, v, settings=settings)

    def gather(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``impl=gather``: rows and columns as reshapes, summaries gathered, in fp32."""
        return in_fp32(self._attend, q, k, v)

    def flex(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``impl=flex``: FlexAttention with :meth:`mask_mod`."""
        tokens = q.shape[2]
        pad = -tokens % min(self.stride, tokens)
        return flex.attend(q, k, v, self._block_masks, scale=self.scale, pad=pad)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        tokens = q.shape[2]
        stride = min(self.stride, tokens)
        pad = -tokens % stride
        qp, kp, vp = (pad_tokens(x, before=pad) for x in (q * self.scale, k, v))
        if self.merged:
            out = self._merged_heads(qp, kp, vp, stride, pad, range(self.heads))
        else:
            # Each family's heads as contiguous tensors (evenly strided batched products); the
            # gradient of a split is a concatenation, with no zero-filled buffers.
            sizes = [self.row_heads, self.heads - self.row_heads]
            first, second = zip(
                *(tuple(part.contiguous() for part in x.split(sizes, dim=1)) for x in (qp, kp, vp)),
                strict=True,
            )
            row = self._row(*first, stride, pad)
            if self.pattern == "strided":
                other = self._column(*second, stride, pad)
            else:
                other = self._summaries(*second, stride, pad, range(sizes[1]))
            out = torch.cat([row, other], dim=1)
        return out[:, :, pad:]

    @staticmethod
    def _padding_bias(pad: int, stride: int, device: torch.device) -> torch.Tensor:
        """(rows, stride) additive bias of the padded sequence: MASKED on the front padding."""
        bias = torch.zeros(stride, device=device, dtype=torch.float32)
        bias[:pad] = MASKED
        return bias

    def _row(self, q, k, v, stride: int, pad: int) -> torch.Tensor:
        """A(1): every token of the query's row. (b, h, n_pad, d) in and out."""
        b, h, n, d = q.shape
        rows = n // stride
        qr, kr, vr = (x.reshape(b, h, rows, stride, d) for x in (q, k, v))
        scores = qr @ kr.transpose(-2, -1)  # (b, h, rows, stride, stride)
        if pad:
            bias = torch.zeros(rows, 1, stride, device=q.device, dtype=q.dtype)
            bias[0, 0, :pad] = MASKED
            scores = scores + bias
        return (scores.softmax(dim=-1) @ vr).view(b, h, n, d)

    def _column(self, q, k, v, stride: int, pad: int) -> torch.Tensor:
        """A(2) of ``strided``: every stride-th token, the query's column."""
        b, h, n, d = q.shape
        rows = n // stride
        qc, kc, vc = (x.reshape(b, h, rows, stride, d).transpose(2, 3) for x in (q, k, v))
        scores = qc @ kc.transpose(-2, -1)  # (b, h, stride, rows, rows)
        if pad:
            bias = torch.zeros(stride, 1, rows, device=q.device, dtype=q.dtype)
            bias[:pad, 0, 0] = MASKED
            scores = scores + bias
        return (scores.softmax(dim=-1) @ vc).transpose(2, 3).reshape(b, h, n, d)

    def _summary_index(self, stride: int, rows: int, heads, device) -> torch.Tensor:
        """(heads, rows * summary) positions of each head's summary tokens."""
        offsets = torch.stack([summary_offsets(stride, self.summary, i) for i in heads])
        starts = torch.arange(rows)[:, None] * stride
        return (starts[None] + offsets[:, None, :]).flatten(1).to(device)

    def _summaries(self, q, k, v, stride: int, pad: int, heads) -> torch.Tensor:
        """A(2) of ``fixed``: the summary tokens of every row (a gather per head)."""
        n = q.shape[2]
        index = self._summary_index(stride, n // stride, heads, q.device)  # (h, m)
        ks, vs = self._gather(k, index), self._gather(v, index)
        scores = q @ ks.transpose(-2, -1)  # (b, h, n, m)
        if pad:
            scores = scores + torch.zeros(index.shape, device=q.device, dtype=q.dtype).masked_fill_(
                index < pad, MASKED
            ).unsqueeze(1)
        return scores.softmax(dim=-1) @ vs

    @staticmethod
    def _gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """x[:, h, index[h]] for every head h: (b, h, m, d)."""
        b, h, n, d = x.shape
        flat = (torch.arange(h, device=x.device)[:, None] * n + index).flatten()
        return x.reshape(b, h * n, d).index_select(1, flat).view(b, h, -1, d)

    def _merged_heads(self, q, k, v, stride: int, pad: int, heads) -> torch.Tensor:
        """A(1) and A(2) for every head, one softmax over their union (the duplicate, the query
        itself or its own row's summaries, is counted once)."""
        b, h, n, d = q.shape
        rows = n // stride
        qr, kr, vr = (x.reshape(b, h, rows, stride, d) for x in (q, k, v))
        row_scores = qr @ kr.transpose(-2, -1)  # (b, h, rows, stride, stride)
        row_bias = torch.zeros(rows, 1, stride, device=q.device, dtype=q.dtype)
        row_bias[0, 0, :pad] = MASKED
        row_scores = row_scores + row_bias
        if self.pattern == "strided":
            qc, kc, vc = (x.transpose(2, 3) for x in (qr, kr, vr))  # (b, h, stride, rows, d)
            col_scores = qc @ kc.transpose(-2, -1)  # (b, h, stride, rows, rows)
            # Key row == query row is the query itself, already in its row.
            col_bias = torch.zeros(stride, rows, rows, device=q.device, dtype=q.dtype)
            col_bias[:, torch.arange(rows), torch.arange(rows)] = MASKED
            col_bias[:pad, :, 0] = MASKED
            col_scores = (col_scores + col_bias).permute(0, 1, 3, 2, 4)  # (b, h, rows, stride, r)
            w_row, w_col = softmax_parts([row_scores, col_scores])
            out_col = (w_col.permute(0, 1, 3, 2, 4) @ vc).transpose(2, 3)
            return (w_row @ vr + out_col).reshape(b, h, n, d)
        index = self._summary_index(stride, rows, heads, q.device)  # (h, m)
        ks, vs = self._gather(k, index), self._gather(v, index)
        sum_scores = (q @ ks.transpose(-2, -1)).view(b, h, rows, stride, -1)
        own_row = (index // stride)[:, None, None, :] == torch.arange(
            rows, device=q.device, dtype=q.dtype
        )[None, :, None, None]  # (h, rows, 1, m)
        hidden = own_row | (index < pad)[:, None, None, :]
        sum_bias = torch.zeros(hidden.shape, device=q.device, dtype=q.dtype).masked_fill_(
            hidden, MASKED
        )
        w_row, w_sum = softmax_parts([row_scores, sum_scores + sum_bias])
        return (w_row @ vr).reshape(b, h, n, d) + (w_sum @ vs[:, :, None]).reshape(b, h, n, d)

    def exact_because(self) -> str | None:
        one_row = self.stride >= self.seq_len  # A(1), the row, is every token
        # A(2) is every token: one column (strided), or every token a summary (fixed).
        other = self.stride == 1 if self.pattern == "strided" else self.summary == self.stride
        if not ((one_row or other) if self.merged else (one_row and other)):
            return None
        summary = f", summary {self.summary}" if self.pattern == "fixed" else ""
        return (
            f"pattern {self.pattern}, stride {self.stride}{summary} on {self.seq_len} tokens: "
            "every head reaches every token, so this is softmax attention"
        )

    def extra_repr(self) -> str:
        summary = f", summary={self.summary}" if self.pattern == "fixed" else ""
        return (
            f"{super().extra_repr()}, pattern={self.pattern}, stride={self.stride}{summary}, "
            f"combine={self.combine}, impl={self.impl}"
        )
