"""BigBird: block-sparse attention with sliding, random and global blocks.

Zaheer et al., "Big Bird: Transformers for Longer Sequences", NeurIPS 2020 (the ITC variant: the
global tokens are taken from the sequence). The tokens are cut into blocks of ``block``; a query
block attends to the ``window_blocks`` blocks around it, to ``num_random`` random key blocks
(drawn once per layer) and to the ``global_blocks`` global blocks; the global blocks attend to
every token.

Cost O(n b d) with b = (window_blocks + num_random + global_blocks) * block keys per query. Two
implementations of the same pattern (``impl``): ``gather``, where each query block gathers its key
blocks (an index per block, never an n x n mask), and ``flex``, where the pattern, written once as
:meth:`BigBirdAttention.mask_mod` with the layer's own random blocks, goes to PyTorch's
FlexAttention (:mod:`~vitattn.attention.common.flex`: compiled, inference only on a CPU);
``auto`` picks per device and shape.
"""

from __future__ import annotations

import torch

from vitattn.attention.common import flex, knobs
from vitattn.attention.common.base import AttentionKernel, register_attention
from vitattn.attention.common.blocks import (
    MASKED,
    dense_attention,
    group_budget,
    group_size,
    in_fp32,
    pad_tokens,
)
from vitattn.attention.common.tiling import GPU_TILE_MEMORY
from vitattn.errors import ConfigError


def key_block_table(
    heads: int,
    blocks: int,
    window_blocks: int,
    num_random: int,
    global_blocks: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Key blocks of each non-global query block: ``(heads, blocks - global_blocks, slots)``.

    The slots are the global blocks, the sliding blocks ``b - w//2 .. b + w//2`` and
    ``num_random`` blocks drawn without replacement (per head) among those neither global nor
    sliding. A slot that does not exist (past an edge, a global block already in front, or too few
    blocks left to draw from) is -1.
    """
    radius = min(window_blocks // 2, blocks - 1)
    query_blocks = torch.arange(global_blocks, blocks)
    window = query_blocks[:, None] + torch.arange(-radius, radius + 1)  # (queries, 2r+1)
    window = window.where((window >= global_blocks) & (window < blocks), -1)
    front = torch.arange(global_blocks).expand(len(query_blocks), -1)
    table = torch.cat([front, window], dim=-1).expand(heads, -1, -1)
    num_random = min(num_random, blocks - global_blocks)
    if num_random:
        candidate = torch.arange(blocks)[None, :] >= global_blocks  # (1, blocks)
        candidate = candidate & ((query_blocks[:, None] - torch.arange(blocks)).abs() > radius)
        noise = torch.rand(heads, len(query_blocks), blocks, generator=generator)
        noise = noise.masked_fill(~candidate, 2.0)  # candidates first in ascending order
        drawn, picked = noise.topk(num_random, dim=-1, largest=False)
        picked = picked.where(drawn < 2.0, -1)
        table = torch.cat([table, picked], dim=-1)
    return table.contiguous()


@register_attention("bigbird")
class BigBirdAttention(AttentionKernel):
    """BigBird block-sparse attention, O(n b d).

    Args:
        block: tokens per block; ``None`` takes ``min(16, seq_len // 16)``: 16 wherever there
            are 256 tokens or more, and at least 16 blocks, so that a query's default 7 blocks
            never reach them all (which would be exact softmax attention). The sequence is
            zero-padded *at the front* to a multiple of ``block`` (padding is never attended
            to), so that a class token (``model.pool=cls``, token 0) ends the first block and
            the patch grid starts on a block boundary. Must not exceed ``seq_len``.
        window_blocks: odd number of sliding blocks, centred on the query's block (3 in the
            paper).
        num_random: random key blocks per query block, drawn per head among the blocks that are
            neither global nor sliding (fewer where fewer remain). They are drawn once, at
            construction, from torch's random generator (which the run's ``seed`` fixes), and kept
            in the state dict, so a layer's pattern stays fixed through training, evaluation and
            checkpoints.
        global_blocks: the first ``global_blocks`` blocks attend to every token and every token
            attends to them (at most the number of blocks). ``global_blocks`` equal to the number
            of blocks, or enough random blocks to cover the rest, is exact softmax attention.
        tile_memory: on a GPU, the share of its free memory that the scores of one group of
            query blocks may take (``tiling.GPU_TILE_MEMORY``); ``gather`` only.
        impl: ``gather`` (each query block gathers its key blocks), ``flex`` (FlexAttention with
            :meth:`mask_mod`, the same random blocks; without gradients only on a CPU) or
            ``auto``: gather on a CPU and under ``torch.compile``, the faster of the two per
            shape on a GPU, timed once (:mod:`~vitattn.attention.common.flex`). Both compute the
            same function.
    """

    def __init__(
        self,
        *,
        seq_len: int,
        heads: int,
        head_dim: int,
        block: int | None = None,
        window_blocks: int = 3,
        num_random: int = 3,
        global_blocks: int = 1,
        tile_memory: float = GPU_TILE_MEMORY,
        impl: str = "auto",
    ) -> None:
        super().__init__(seq_len=seq_len, heads=heads, head_dim=head_dim)
        if block is None:
            block = min(16, max(1, self.seq_len // 16))
        self.block = knobs.integer(
            "block", block, 1, self.seq_len, f" (the {self.seq_len} tokens it attends over)"
        )
        self.window_blocks = knobs.integer("window_blocks", window_blocks, 1)
        if self.window_blocks % 2 == 0:
            raise knobs.invalid(
                "window_blocks",
                window_blocks,
                "an odd number (the query's block and as many on each side)",
            )
        self.num_random = knobs.integer("num_random", num_random, 0)
        self.tile_memory = knobs.fraction("tile_memory", tile_memory)
        self.impl = knobs.one_of("impl", impl, flex.IMPLEMENTATIONS)
        self.padding = -self.seq_len % self.block
        self.blocks = (self.seq_len + self.padding) // self.block
        self.global_blocks = knobs.integer(
            "global_blocks",
            global_blocks,
            0,
            self.blocks,
            f" (seq_len={self.seq_len} makes {self.blocks} blocks of {self.block})",
        )
        table = key_block_table(
            self.heads, self.blocks, self.window_blocks, self.num_random, self.global_blocks
        )
        self.register_buffer("key_blocks", table)
        # Loading a checkpoint replaces the random blocks in place: part of the masks' key.
        self._block_masks = flex.BlockMasks(self.mask_mod, self.heads, self._random_state)

    def _random_state(self) -> tuple[int, int, str]:
        table = self.key_blocks
        return table.data_ptr(), table._version, str(table.device)

    def random_blocks(self, device: torch.device) -> torch.Tensor:
        """(heads, blocks, blocks) bool: the random key blocks each query block drew, read from
        the layer's own table (``key_blocks``: global, sliding, then random slots)."""
        radius = min(self.window_blocks // 2, self.blocks - 1)
        picks = self.key_blocks[..., self.global_blocks + 2 * radius + 1 :].to(device)
        drawn = torch.zeros(self.heads, self.blocks, self.blocks, dtype=torch.bool, device=device)
        head, row, slot = (picks >= 0).nonzero(as_tuple=True)
        drawn[head, row + self.global_blocks, picks[head, row, slot]] = True
        return drawn

    def mask_mod(self, tokens: int, device: torch.device) -> flex.MaskMod:
        """The pattern as FlexAttention's ``mask_mod(b, h, q_idx, kv_idx)`` over the front-padded
        sequence: a query block sees a key block if either is global, if they are at most
        ``window_blocks // 2`` apart, or if it drew that block (:meth:`random_blocks`); padding
        keys are never seen."""
        size, pad, g = self.block, self.padding, self.global_blocks
        radius = min(self.window_blocks // 2, self.blocks - 1)
        drawn = self.random_blocks(device)

        def mask_mod(
            b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
        ) -> torch.Tensor:
            q_block, kv_block = q_idx // size, kv_idx // size
            sliding = (q_block - kv_block).abs() <= radius
            chosen = (q_block < g) | (kv_block < g) | sliding | drawn[h, q_block, kv_block]
            return chosen & (kv_idx >= pad)

        return mask_mod

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        heads, tokens = q.shape[1:3]
        if (tokens, heads) != (self.seq_len, self.heads):
            raise ConfigError(
                f"attention=bigbird was built for {self.seq_len} tokens and {self.heads} heads "
                f"but got {tokens} tokens and {heads} heads; its random blocks are drawn for "
                "the model's sizes"
            )
        implementations = {"gather": self.gather, "flex": self.flex}
        settings = (self.block, self.window_blocks, self.num_random, self.global_blocks)
        return flex.run(self.impl, "bigbird", implementations, q, k, v, settings=settings)

    def gather(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``impl=gather``: each query block gathers its key blocks, in fp32."""
        return in_fp32(self._attend, q, k, v)

    def flex(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``impl=flex``: FlexAttention with :meth:`mask_mod`."""
        return flex.attend(q, k, v, self._block_masks, scale=self.scale, pad=self.padding)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        batch, heads, _, dim = q.shape
        size, blocks, pad = self.block, self.blocks, self.padding
        global_tokens = self.global_blocks * size
        qp, kp, vp = (pad_tokens(x, before=pad) for x in (q * self.scale, k, v))
        outputs = []
        if global_tokens:  # global queries: dense against every real key
            outputs.append(dense_attention(qp[:, :, :global_tokens], k, v, 1.0, None))
        if self.global_blocks < blocks:
            budget = group_budget(q.device, self.tile_memory, "bigbird")
            table = self.key_blocks  # (heads, query_blocks, slots)
            query_blocks, slots = table.shape[1:]
            flat = (torch.arange(heads, device=q.device)[:, None, None] * blocks) + table.clamp(
                min=0
            )
            # Mask slots that do not exist and the front padding (positions < pad):
            # (heads, query_blocks, slots, size).
            positions = table.clamp(min=0)[..., None] * size + torch.arange(size, device=q.device)
            hidden = (table[..., None] < 0) | (positions < pad)
            bias = torch.zeros(hidden.shape, device=q.device, dtype=torch.float32).masked_fill_(
                hidden, MASKED
            )
            bias = bias.view(1, heads, query_blocks, 1, slots * size)
            key_rows, value_rows = (x.reshape(batch, heads * blocks, size, dim) for x in (kp, vp))
            query_rows = qp[:, :, global_tokens:].reshape(batch, heads, query_blocks, size, dim)

            def attend(group: slice) -> torch.Tensor:
                # Each group gathers its own key blocks: gathering all of them at once (and
                # splitting) makes a tensor of slots x the keys, which at long sequences takes
                # longer to allocate than the attention takes to compute.
                index = flat[:, group].flatten()
                kb, vb = (
                    x.index_select(1, index).view(batch, heads, -1, slots * size, dim)
                    for x in (key_rows, value_rows)
                )
                # Contiguous, so that the batched products see evenly strided matrices.
                qb = query_rows[:, :, group].contiguous()
                scores = (qb @ kb.transpose(-2, -1)).add_(bias[:, :, group])
                return (scores.softmax(dim=-1) @ vb).view(batch, heads, -1, dim)

            scores_bytes = batch * heads * size * slots * size * q.element_size()
            per_group = group_size(scores_bytes, budget)
            outputs.extend(
                attend(slice(start, min(start + per_group, query_blocks)))
                for start in range(0, query_blocks, per_group)
            )
        return torch.cat(outputs, dim=2)[:, :, pad:]

    def exact_because(self) -> str | None:
        reached = (self.key_blocks >= 0).sum(dim=-1)  # distinct key blocks per query block
        if not bool((reached == self.blocks).all()):
            return None
        return (
            f"block {self.block} makes {self.blocks} blocks of the {self.seq_len} tokens and every "
            f"query block reaches all of them ({self.global_blocks} global, "
            f"{self.window_blocks} sliding, {self.num_random} random): this is softmax attention"
        )

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, block={self.block}, window_blocks={self.window_blocks}, "
            f"num_random={self.num_random}, global_blocks={self.global_blocks}, "
            f"tile_memory={self.tile_memory}, impl={self.impl}"
        )
