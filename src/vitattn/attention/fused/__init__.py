"""Fused GPU paths of mechanisms whose plain PyTorch path dispatches many small operators.

Each fast path computes the same function as its mechanism's plain path (the reference it is
tested against), in a few Triton kernels wrapped as one ``torch.library`` operator per pass, so
that ``torch.compile`` keeps it in one graph, ``FlopCounterMode`` counts it (a registered
formula) and the bench's dispatch count sees one operator where the kernels run.

Triton kernels run on a CUDA GPU, or on a CPU under ``TRITON_INTERPRET=1`` (set before the
kernels are imported): how the suite tests them on a machine without a GPU.
"""
