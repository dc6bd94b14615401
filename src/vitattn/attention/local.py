"""Local attention: a sliding window around each token plus a few global tokens.

Beltagy, Peters and Cohan, "Longformer: The Long-Document Transformer", arXiv:2004.05150, 2020.
Each token attends to the ``window`` tokens around it; ``global_tokens`` tokens attend to every
token and are attended by every token. Images are 2-D, so the window can also be a square
neighbourhood on the patch grid (``window_shape: 2d``).

At the edges of the sequence (or of the grid) the window is shifted inwards so that every query
sees exactly ``min(window, n)`` keys (``min(window, side)^2`` in 2-D), as in neighbourhood
attention (Hassani et al., "Neighborhood Attention Transformer", CVPR 2023); Longformer instead
lets the window hang over the edge. With this convention a window covering the whole sequence
(or grid) is exact softmax attention.

Cost O(n w d), two implementations of the same pattern (``impl``): ``gather`` cuts the queries
into blocks (1-D runs or 2-D tiles), each block gathers the contiguous keys its windows span, and
slots outside a query's own window are masked; ``flex`` hands the pattern, written once as
:meth:`LocalAttention.mask_mod`, to PyTorch's FlexAttention (:mod:`~vitattn.attention.common.flex`:
compiled, inference only on a CPU); ``auto`` picks per device and shape.
"""

from __future__ import annotations

import math

import torch

from vitattn.attention.common import flex, knobs
from vitattn.attention.common.base import AttentionKernel, register_attention
from vitattn.attention.common.blocks import (
    MASKED,
    dense_attention,
    grid_side,
    group_budget,
    in_block_groups,
    in_fp32,
)
from vitattn.attention.common.tiling import GPU_TILE_MEMORY
from vitattn.errors import ConfigError

WINDOW_SHAPES = ("1d", "2d")

LAYOUT_BUFFERS = ("layout_queries", "layout_keys", "layout_bias", "layout_inverse")
"""The buffers of :meth:`LocalAttention.layout` for the kernel's own token count (not saved in
a checkpoint: they follow from the knobs)."""


def _window_starts(positions: torch.Tensor, window: int, length: int) -> torch.Tensor:
    """First key of the window of each query position: centred, shifted inwards at the edges."""
    return (positions - window // 2).clamp(0, length - window)


def _band(length: int, window: int, block: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """1-D layout: query blocks of ``block`` positions (the last one padded by repeating the last
    position), the ``span`` contiguous keys each block needs, and whether each slot lies in the
    query's own window. Returns (query_index (blocks, block), key_index (blocks, span),
    allowed (blocks, block, span))."""
    blocks = math.ceil(length / block)
    queries = torch.arange(blocks * block).clamp(max=length - 1).view(blocks, block)
    starts = _window_starts(queries, window, length)  # (blocks, block)
    span = min(block + window - 1, length)
    first = starts[:, 0].clamp(max=length - span)
    keys = first[:, None] + torch.arange(span)  # (blocks, span)
    offsets = keys[:, None, :] - starts[..., None]  # key position relative to the window start
    allowed = (offsets >= 0) & (offsets < window)
    return queries, keys, allowed


def _tiles(side: int, window: int, tile: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """2-D layout on a ``side x side`` grid (row-major cell indices): query tiles of
    ``tile x tile`` cells, the rectangle of keys each tile's windows span, and whether each slot
    lies in the query's own ``window x window`` square. Shapes as in :func:`_band`."""
    rows, row_keys, row_allowed = _band(side, window, tile)  # (T, t), (T, span), (T, t, span)
    tiles_per_side = rows.shape[0]
    # Cell (r, c) of tile (a, b): r = rows[a, i], c = rows[b, j]; keys likewise.
    queries = rows[:, None, :, None] * side + rows[None, :, None, :]  # (T, T, t, t)
    keys = row_keys[:, None, :, None] * side + row_keys[None, :, None, :]  # (T, T, span, span)
    allowed = row_allowed[:, None, :, None, :, None] & row_allowed[None, :, None, :, None, :]
    tiles = tiles_per_side * tiles_per_side
    span = row_keys.shape[1]
    return (
        queries.reshape(tiles, tile * tile),
        keys.reshape(tiles, span * span),
        allowed.reshape(tiles, tile * tile, span * span),
    )


@register_attention("local")
class LocalAttention(AttentionKernel):
    """Sliding-window attention with global tokens (Longformer), O(n w d).

    Args:
        window: ``1d``: the number of consecutive tokens each query attends to (itself
            included); ``2d``: the side of the square neighbourhood on the patch grid
            (``window^2`` tokens). Windows are centred and shifted inwards at the edges; a window
            of at least the sequence length (``1d``) or grid side (``2d``) is exact softmax.
        window_shape: ``1d`` (windows along the token sequence) or ``2d`` (square windows on the
            ``side x side`` patch grid formed by the last ``side^2`` tokens, ``side =
            isqrt(seq_len)``; the leading ``seq_len - side^2`` tokens, such as the class token of
            ``model.pool=cls``, are not on the grid and must be global).
        global_tokens: the first ``global_tokens`` tokens attend to all tokens and all tokens
            attend to them. ``None`` takes the tokens in front of the largest square, i.e. the
            class token when ``model.pool=cls`` and none otherwise.
        tile_memory: on a GPU, the share of its free memory for the scores of one group of
            query blocks (``tiling.GPU_TILE_MEMORY``); ``gather`` only.
        impl: ``gather`` (blocks of queries gather their keys), ``flex`` (FlexAttention with
            :meth:`mask_mod`; without gradients only on a CPU) or ``auto``: gather on a CPU and
            under ``torch.compile``, the faster of the two per shape on a GPU, timed once
            (:mod:`~vitattn.attention.common.flex`). Both compute the same function.
    """

    def __init__(
        self,
        *,
        seq_len: int,
        heads: int,
        head_dim: int,
        window: int = 7,
        window_shape: str = "2d",
        global_tokens: int | None = None,
        tile_memory: float = GPU_TILE_MEMORY,
        impl: str = "auto",
    ) -> None:
        super().__init__(seq_len=seq_len, heads=heads, head_dim=head_dim)
        self.window = knobs.integer("window", window, 1)
        self.window_shape = knobs.one_of("window_shape", window_shape, WINDOW_SHAPES)
        self.tile_memory = knobs.fraction("tile_memory", tile_memory)
        side = grid_side(self.seq_len)
        extra = self.seq_len - side * side
        if global_tokens is None:
            global_tokens = extra
        self.global_tokens = knobs.integer("global_tokens", global_tokens, 0, self.seq_len)
        if self.window_shape == "2d" and self.global_tokens < extra:
            raise ConfigError(
                f"attention.global_tokens={self.global_tokens} leaves {extra} of the "
                f"{self.seq_len} tokens off the {side}x{side} grid of window_shape=2d; "
                f"choose attention.global_tokens >= {extra} (or null)"
            )
        self.impl = knobs.one_of("impl", impl, flex.IMPLEMENTATIONS)
        self._layouts: dict[tuple[int, str], tuple[torch.Tensor, ...]] = {}
        self._block_masks = flex.BlockMasks(self.mask_mod)
        if self.impl != "flex":
            # Buffers, not the cache: they move with the module, and a graph that reads them
            # guards on nothing that changes (a network compiled whole by its user built the
            # cache in its first graph, whose guard then failed: a second compile).
            for name, tensor in zip(LAYOUT_BUFFERS, self._build_layout(self.seq_len), strict=True):
                self.register_buffer(name, tensor, persistent=False)

    def layout(self, tokens: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        """(query_index, key_index, bias, inverse) for ``tokens`` tokens on ``device``: the
        layout buffers for :attr:`seq_len` tokens where they are on ``device``, else built once
        and cached per token count and device.

        ``query_index`` (blocks, per_block) and ``key_index`` (blocks, span) are token positions,
        the global tokens first in every block's keys; ``bias`` (blocks, per_block, span) is 0
        where a query may attend and :data:`MASKED` elsewhere (outside its window, or the second
        copy of a global token); ``inverse`` gives, for each non-global token, its row in the
        flattened query blocks.
        """
        buffers = tuple(getattr(self, name, None) for name in LAYOUT_BUFFERS)
        if tokens == self.seq_len and buffers[0] is not None and buffers[0].device == device:
            return buffers
        cache_key = (tokens, str(device))
        if cache_key not in self._layouts:
            self._layouts[cache_key] = tuple(t.to(device) for t in self._build_layout(tokens))
        return self._layouts[cache_key]

    def _build_layout(self, tokens: int) -> tuple[torch.Tensor, ...]:
        """:meth:`layout` for ``tokens`` tokens, on the CPU."""
        g = self.global_tokens
        if self.window_shape == "1d":
            window = min(self.window, tokens)
            block = min(tokens, max(16, window))
            queries, keys, allowed = _band(tokens, window, block)
            flat_position = torch.arange(tokens)
        else:
            side = grid_side(tokens)
            offset = tokens - side * side
            window = min(self.window, side)
            tile = min(side, max(4, window + 1))
            queries, keys, allowed = _tiles(side, window, tile)
            queries, keys = queries + offset, keys + offset
            # Row of each grid cell in the tile order, for cells r*side + c.
            cell = torch.arange(side * side)
            r, c = cell // side, cell % side
            tiles_per_side = math.ceil(side / tile)
            flat_position = torch.full((tokens,), -1, dtype=torch.long)
            flat_position[offset:] = (
                ((r // tile) * tiles_per_side + c // tile) * tile * tile
                + (r % tile) * tile
                + c % tile
            )
        allowed = allowed & (keys[:, None, :] >= g)  # global keys: once, in front
        if g:
            blocks, per_block = queries.shape
            keys = torch.cat([torch.arange(g).expand(blocks, g), keys], dim=1)
            everyone = torch.ones(blocks, per_block, g, dtype=torch.bool)
            allowed = torch.cat([everyone, allowed], dim=2)
        bias = torch.zeros(allowed.shape, dtype=torch.float32).masked_fill_(~allowed, MASKED)
        return queries, keys, bias, flat_position[g:]

    def mask_mod(self, tokens: int, device: torch.device) -> flex.MaskMod:
        """The pattern for ``tokens`` tokens as FlexAttention's ``mask_mod(b, h, q_idx, kv_idx)``:
        a query sees a key if either is global, or the key lies in the query's window, with the
        windows shifted inwards at the edges as :func:`_window_starts` does for ``gather``."""
        g = self.global_tokens
        if self.window_shape == "1d":
            window = min(self.window, tokens)

            def in_window(q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
                start = _window_starts(q_idx, window, tokens)
                return (kv_idx >= start) & (kv_idx < start + window)

        else:
            side = grid_side(tokens)
            offset = tokens - side * side
            window = min(self.window, side)

            def in_window(q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
                # Cells of the grid; the tokens before it (offset of them) are global.
                q_cell, kv_cell = q_idx - offset, kv_idx - offset
                rows = _window_starts(q_cell // side, window, side)
                columns = _window_starts(q_cell % side, window, side)
                kv_row, kv_column = kv_cell // side, kv_cell % side
                return (
                    (kv_row >= rows)
                    & (kv_row < rows + window)
                    & (kv_column >= columns)
                    & (kv_column < columns + window)
                )

        def mask_mod(
            b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
        ) -> torch.Tensor:
            return (q_idx < g) | (kv_idx < g) | in_window(q_idx, kv_idx)

        return mask_mod

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        tokens, g = q.shape[2], self.global_tokens
        if self.window_shape == "2d" and tokens - grid_side(tokens) ** 2 > g:
            raise ConfigError(
                f"attention=local (window_shape=2d, global_tokens={g}) got {tokens} tokens, "
                "more than a square grid plus the global tokens"
            )
        implementations = {"gather": self.gather, "flex": self.flex}
        settings = (self.window, self.window_shape, g, self.tile_memory)
        return flex.run(self.impl, "local", implementations, q, k, v, settings=settings)

    def gather(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``impl=gather``: blocks of queries and the keys they span, in fp32."""
        return in_fp32(self._attend, q, k, v)

    def flex(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``impl=flex``: FlexAttention with :meth:`mask_mod`."""
        return flex.attend(q, k, v, self._block_masks, scale=self.scale)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        batch, heads, tokens, dim = q.shape
        g = self.global_tokens
        queries, keys, bias, inverse = self.layout(tokens, q.device)
        blocks, per_block = queries.shape
        span = keys.shape[1]
        qb = (
            (q * self.scale)
            .index_select(2, queries.flatten())
            .view(batch, heads, blocks, per_block, dim)
        )
        kb = k.index_select(2, keys.flatten()).view(batch, heads, blocks, span, dim)
        vb = v.index_select(2, keys.flatten()).view(batch, heads, blocks, span, dim)

        def attend(
            qb: torch.Tensor, kb: torch.Tensor, vb: torch.Tensor, bias: torch.Tensor
        ) -> torch.Tensor:
            scores = (qb @ kb.transpose(-2, -1)).add_(bias)
            return (scores.softmax(dim=-1) @ vb).view(batch, heads, -1, dim)

        scores_bytes = batch * heads * per_block * span * q.element_size()
        budget = group_budget(q.device, self.tile_memory, "local")
        out = in_block_groups(attend, (qb, kb, vb), bias, 0, scores_bytes, budget)
        out = out.index_select(2, inverse)
        if g:
            out_global = dense_attention(q[:, :, :g], k, v, self.scale, None)
            out = torch.cat([out_global, out], dim=2)
        return out

    def exact_because(self) -> str | None:
        n, g = self.seq_len, self.global_tokens
        side = grid_side(n)
        if g >= n - 1:
            covers = f"global_tokens {g} of {n} tokens"
        elif self.window_shape == "1d" and self.window >= n:
            covers = f"window {self.window} >= {n} tokens"
        elif self.window_shape == "2d" and self.window >= side:
            covers = f"window {self.window} >= the {side}x{side} grid's side"
        else:
            return None
        return f"{covers}: every query sees every key, so this is softmax attention"

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, window={self.window}, window_shape={self.window_shape}, "
            f"global_tokens={self.global_tokens}, tile_memory={self.tile_memory}, "
            f"impl={self.impl}"
        )
