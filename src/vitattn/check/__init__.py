"""``vitattn-check``: one command that proves a machine for vitattn.

The sections, each in its own module: :mod:`~vitattn.check.numerics` (every attention in fp32,
bf16 and fp16 against its fp32 CPU result), :mod:`~vitattn.check.training` (a short training per
attention, and ours against timm's ViT), :mod:`~vitattn.check.kernels` (time against n next to
fused softmax); :mod:`~vitattn.check.report` writes ``check.md``, ``check.json`` and the figure;
:mod:`~vitattn.check.app` is the console script. Measuring itself is the bench's
(:mod:`vitattn.bench`): the check runs its pieces at sizes chosen for the device.
"""
