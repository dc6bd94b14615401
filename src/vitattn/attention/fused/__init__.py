"""Fused GPU paths of mechanisms whose plain PyTorch path dispatches many small operators.

Each fast path computes the same function as its mechanism's plain path (the reference it is
tested against), in a few Triton kernels wrapped as one ``torch.library`` operator per pass, so
that ``torch.compile`` keeps it in one graph, ``FlopCounterMode`` counts it (a registered
formula) and the bench's dispatch count sees one operator where the kernels run.

Triton kernels run on a CUDA GPU, or on a CPU under ``TRITON_INTERPRET=1`` (set before the
kernels are imported): how the suite tests them on a machine without a GPU.
"""

from __future__ import annotations

import torch


@torch.compiler.assume_constant_result
def unavailable_on(device_type: str) -> str | None:
    """Why the fused paths cannot run on a device of this type here, or ``None`` if they can."""
    if not hasattr(torch.library, "custom_op"):
        return f"the fused kernels need torch 2.4 or later, not {torch.__version__}"
    try:
        from vitattn.attention.fused import tiles
    except ImportError as error:
        return f"it needs Triton ({error})"
    if device_type == "cuda" and not tiles.INTERPRETED:
        return None
    if device_type == "cpu" and tiles.INTERPRETED:
        return None
    return f"it runs on a CUDA GPU (or on a CPU under TRITON_INTERPRET=1), not on {device_type}"
