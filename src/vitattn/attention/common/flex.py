"""FlexAttention for the sparse kernels: ``impl=flex`` of ``local``, ``bigbird`` and ``sparse``.

PyTorch's FlexAttention (``torch.nn.attention.flex_attention``; Dong et al., "Flex Attention: A
Programming Model for Generating Optimized Attention Kernels", arXiv:2412.05496, 2024) computes
softmax attention restricted to the pairs a ``mask_mod(b, h, q_idx, kv_idx) -> bool`` allows. A
``BlockMask`` lists, for every block of queries, the key blocks holding any allowed pair, and
which of them are full; the compiled kernel skips every other block and evaluates ``mask_mod``
inside the partial ones only. Each mechanism writes its pattern once, as the ``mask_mod`` in its
own module; what they share lives here:

- :class:`BlockMasks`: a kernel's BlockMasks, each built once per (tokens, device), evaluated in
  chunks of query rows (``create_block_mask`` builds the whole dense ``heads x n x n`` mask, GBs
  at n = 16384);
- :func:`attend`: the call, through ``flex_attention`` compiled once per process, with front
  padding and the dtype handled;
- :func:`run`: ``impl`` = ``gather`` (the kernel's own gathering), ``flex``, or ``auto``, and
  what happens where FlexAttention cannot run (:func:`unusable`).

FlexAttention keeps the scores, the running maximum and the sums in fp32 inside the kernel
whatever the inputs' dtype (as fused softmax attention does), so it runs in the inputs' dtype:
bf16 or fp16 inputs give the weights times V as a half-precision product. It takes no float64.

Where it cannot run. ``impl=flex`` then refuses in one line and ``auto`` takes ``gather``:

- gradients on a CPU: FlexAttention's backward is a Triton kernel, so on a CPU it is inference
  only (torch 2.14: "FlexAttention does not support backward on CPU");
- a failed compilation (no C++ compiler on a CPU, say): the first failure is logged, and flex is
  then unusable on that device type for the rest of the process.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Hashable, Mapping

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from vitattn.attention.common import autotune
from vitattn.attention.common.blocks import pad_tokens
from vitattn.errors import ConfigError
from vitattn.utils.recompiles import recompile_limit_set_to

IMPLEMENTATIONS = ("auto", "gather", "flex")
"""The ``impl`` knob of the sparse kernels."""

AUTO_DEFAULT = "gather"
"""What ``auto`` takes without timing: off :data:`autotune.TIMED_DEVICES` (a CPU) and under
``torch.compile``. On a CPU flex is inference only, compiles for seconds per new shape, and its
forward is faster than gather's for ``bigbird`` only (docs/results.md); on a GPU, where it is
timed, nobody has measured it here yet."""

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
"""What FlexAttention computes in (its CPU kernel refuses float64)."""

CPU_BLOCK = 16
"""BLOCK_SIZE of a CPU BlockMask: the fastest of 16, 32, 64 and 128 measured for all three
patterns (smaller blocks skip more), and the smallest correct one: the compiled CPU kernel of
torch 2.14 gives wrong outputs with blocks of 8 at head_dim 16."""

GPU_BLOCK = 128
"""BLOCK_SIZE elsewhere: torch's default, the tile of its GPU kernels."""

MASK_CHUNK = 1 << 24
"""Elements of the dense mask evaluated at once while building a BlockMask."""

RECOMPILE_LIMIT = 64
"""Compiled graphs of ``flex_attention`` kept per process. Every pattern, setting, dtype and
shape is a graph of its own (``dynamic=False``: the CPU code generated for symbolic sizes fails
to compile in torch 2.14); past dynamo's default of 8 it would silently run the unfused eager
implementation, as a process that tries several patterns (tests, the bench) would."""

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
Implementation = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

log = logging.getLogger("vitattn.attention")


@functools.cache
def compiled_flex_attention() -> Callable[..., torch.Tensor]:
    """``flex_attention`` compiled, once per process."""
    return torch.compile(flex_attention, dynamic=False)


@functools.cache
def failures() -> dict[str, str]:
    """Device type -> why FlexAttention failed to compile there, in this process (flex is then
    unusable there); ``failures.cache_clear()`` lets it be tried again (tests)."""
    return {}


@torch.compiler.assume_constant_result
def failure(device_type: str) -> str | None:
    """Why FlexAttention failed to compile on ``device_type`` in this process, if it did.

    Under ``torch.compile`` this is called while tracing and its answer becomes a constant of
    the graph: dynamo would otherwise trace into :func:`failures` and see a fresh, empty dict."""
    return failures().get(device_type)


class FlexUnavailableError(ConfigError):
    """``impl=flex`` cannot run these inputs here (``auto`` falls back to ``gather``)."""


def unusable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str | None:
    """Why FlexAttention cannot run on these inputs, or ``None`` if it can."""
    device = q.device.type
    if (failed := failure(device)) is not None:
        return failed
    dtype = compute_dtype(q, k, v)
    if dtype not in DTYPES:
        return f"FlexAttention computes in float32, bfloat16 or float16, not {dtype}"
    training = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    if training and device != "cuda":
        return (
            f"FlexAttention has no backward on a {device} (torch {torch.__version__}); "
            "there it runs without gradients only (evaluation, inference)"
        )
    return None


def compute_dtype(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.dtype:
    """The one dtype q, k and v are attended in: the widest of theirs."""
    return torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)


def block_size(device: torch.device) -> int:
    """BLOCK_SIZE of the BlockMasks on ``device``: :data:`CPU_BLOCK` or :data:`GPU_BLOCK`."""
    return CPU_BLOCK if device.type == "cpu" else GPU_BLOCK


def build_block_mask(
    mask_mod: MaskMod, heads: int, length: int, device: torch.device, block: int
) -> BlockMask:
    """The BlockMask of ``mask_mod`` over ``length`` queries and keys, for ``heads`` heads (1: the
    same for every head), every batch element alike, in blocks of ``block``.

    ``mask_mod`` is evaluated on broadcast index tensors (``h`` of shape (heads, 1, 1), ``q_idx``
    (1, rows, 1), ``kv_idx`` (1, 1, length)) a chunk of query rows at a time, as
    ``create_block_mask`` evaluates it under ``vmap``; positions past ``length`` in the last block
    allow nothing, so that block is partial (its ``mask_mod`` is applied), as torch's own."""
    blocks = -(-length // block)
    rows = max(1, MASK_CHUNK // (heads * blocks * block * block)) * block
    h = torch.arange(heads, device=device).view(heads, 1, 1)
    kv = torch.arange(length, device=device).view(1, 1, length)
    b = torch.zeros((), dtype=torch.long, device=device)
    partial, full = [], []
    for start in range(0, blocks * block, rows):
        stop = min(start + rows, blocks * block)
        q = torch.arange(start, min(stop, length), device=device).view(1, -1, 1)
        allowed = torch.zeros(heads, stop - start, blocks * block, dtype=torch.bool, device=device)
        allowed[:, : q.shape[1], :length] = mask_mod(b, h, q, kv)
        counts = allowed.view(heads, -1, block, blocks, block).sum(dim=(2, 4))
        partial.append((counts > 0) & (counts < block * block))
        full.append(counts == block * block)
    return BlockMask.from_kv_blocks(
        *_ordered(torch.cat(partial, dim=1)),
        *_ordered(torch.cat(full, dim=1)),
        BLOCK_SIZE=block,
        mask_mod=mask_mod,
        seq_lengths=(length, length),
    )


def _ordered(dense: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(counts, indices) of BlockMask's sparse format from a (heads, q_blocks, kv_blocks) bool:
    per query block, how many key blocks and which (those first, in ascending order)."""
    dense = dense.to(torch.int32).unsqueeze(0)  # (1 = every batch element, heads, ...)
    indices = torch.argsort(dense, dim=-1, descending=True, stable=True)
    return dense.sum(dim=-1, dtype=torch.int32), indices.to(torch.int32)


class BlockMasks:
    """A kernel's BlockMasks, each built once per (tokens, front padding, device, ``state()``).

    Args:
        mask_mod: ``mask_mod(tokens, device)`` gives the pattern for ``tokens`` tokens as
            FlexAttention's ``mask_mod``, over positions of the front-padded sequence.
        heads: heads the pattern distinguishes (1: the same for all).
        state: what else the pattern depends on (the identity of a buffer that loading a
            checkpoint may replace), part of the cache key.
    """

    def __init__(
        self,
        mask_mod: Callable[[int, torch.device], MaskMod],
        heads: int = 1,
        state: Callable[[], Hashable] | None = None,
    ) -> None:
        self.mask_mod, self.heads, self.state = mask_mod, heads, state
        self._masks: dict[tuple[Hashable, ...], BlockMask] = {}

    @torch.compiler.disable  # in a compiled model: built once, not traced into its graph
    def get(self, tokens: int, pad: int, device: torch.device) -> BlockMask:
        """The BlockMask of ``tokens`` tokens padded by ``pad`` in front, on ``device``."""
        key = (tokens, pad, str(device), self.state() if self.state else None)
        if key not in self._masks:
            mask_mod = self.mask_mod(tokens, device)
            length = tokens + pad
            self._masks[key] = build_block_mask(
                mask_mod, self.heads, length, device, block_size(device)
            )
        return self._masks[key]


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    masks: BlockMasks,
    *,
    scale: float,
    pad: int = 0,
) -> torch.Tensor:
    """softmax(q k^T * scale) v over the pairs ``masks`` allows, through FlexAttention.

    The sequence is zero-padded by ``pad`` tokens at the front (the pattern's ``mask_mod`` sees
    padded positions and must not allow padding keys); the output has ``v``'s dtype and shape."""
    tokens = q.shape[2]
    block_mask = masks.get(tokens, pad, q.device)
    dtype = compute_dtype(q, k, v)
    if not torch.is_grad_enabled():  # FlexAttention on a CPU refuses inputs that require grad
        q, k, v = q.detach(), k.detach(), v.detach()
    with torch.autocast(device_type=q.device.type, enabled=False):
        qp, kp, vp = (pad_tokens(x.to(dtype), before=pad) for x in (q, k, v))
        out = _call(qp, kp, vp, block_mask, scale)
    return out[:, :, pad:].to(v.dtype)


def _call(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_mask: BlockMask, scale: float
) -> torch.Tensor:
    """The compiled ``flex_attention`` (inside a graph being compiled, the plain one: the outer
    compilation compiles it); a compilation that fails makes flex unusable on this device."""
    if torch.compiler.is_compiling():
        return flex_attention(q, k, v, block_mask=block_mask, scale=scale)
    try:
        with recompile_limit_set_to(RECOMPILE_LIMIT):
            return compiled_flex_attention()(q, k, v, block_mask=block_mask, scale=scale)
    except _compile_errors() as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        reason = f"FlexAttention failed to compile on {q.device.type} ({type(error).__name__}"
        reason += f": {first[:200]})" if first else ")"
        failures()[q.device.type] = reason
        log.warning("%s; impl=auto takes gather on %s from now on", reason, q.device.type)
        raise FlexUnavailableError(
            f"attention.impl=flex cannot run: {reason}; choose attention.impl=gather "
            "(auto falls back to it)"
        ) from error


def _compile_errors() -> tuple[type[Exception], ...]:
    """What a failed compilation raises: Inductor's error (wrapping a C++ compiler's), or the C++
    compiler's own, or a missing one."""
    from torch._dynamo.exc import BackendCompilerFailed
    from torch._inductor.exc import CppCompileError, InvalidCxxCompiler

    return (BackendCompilerFailed, CppCompileError, InvalidCxxCompiler)


def run(
    impl: str,
    owner: str,
    implementations: Mapping[str, Implementation],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    settings: tuple[object, ...] = (),
) -> torch.Tensor:
    """``implementations[impl](q, k, v)`` (``gather`` and ``flex``) for the kernel ``owner``.

    ``flex`` where FlexAttention cannot run (:func:`unusable`) refuses in one line; ``auto``
    then takes ``gather``, and elsewhere lets :meth:`autotune.Implementations.choose` pick (timed
    per shape on a GPU, :data:`AUTO_DEFAULT` untimed)."""
    if impl == "gather":
        return implementations["gather"](q, k, v)
    reason = unusable(q, k, v)
    if impl == "flex":
        if reason is not None:
            raise FlexUnavailableError(
                f"attention.impl=flex ({owner}) cannot run here: {reason}; "
                "choose attention.impl=gather or auto"
            )
        return implementations["flex"](q, k, v)
    if reason is not None:
        return implementations["gather"](q, k, v)
    try:
        candidates = autotune.Implementations(owner, implementations, AUTO_DEFAULT, settings)
        return candidates.run("auto", q, k, v)
    except FlexUnavailableError:  # its compilation failed just now (logged): gather from now on
        return implementations["gather"](q, k, v)
