"""Other packages' implementations of some mechanisms, behind vitattn's kernel interface, so that
``vitattn-bench mode=approx`` reports their errors next to ours (``approx.packages``).

* ``performer-pytorch`` (Phil Wang), whose ``FastAttention`` follows the FAVOR+ reference code of
  Choromanski et al., "Rethinking Attention with Performers", ICLR 2021: the same number of
  features as ours, one orthogonal projection shared by all heads, its fixed eps of 1e-4.
* ``nystrom-attention`` (Phil Wang), Xiong et al., "Nystromformer: A Nystrom-Based Algorithm for
  Approximating Self-Attention", AAAI 2021: ``NystromAttention`` with identity projections in and
  out, so that it attends over the given q, k, v, with our landmarks and pseudoinverse
  iterations. It has only the iterative pseudoinverse, its convolution has weights of its own,
  and it pads the sequence to a multiple of the landmarks with masked tokens that spoil the
  pseudoinverse (errors above 1 at 70 tokens and 16 landmarks): ours with ``pinv=exact``,
  ``conv_kernel`` > 0 or landmarks that do not divide n has no counterpart there.

Both are in the ``bench`` extra (``pip install -e ".[bench]"``); neither is needed to train.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from vitattn.attention.common.base import AttentionKernel
from vitattn.errors import ConfigError


class PerformerPytorch(nn.Module):
    """performer-pytorch's FAVOR+ with ``ours``'s feature count (its projection drawn from
    torch's global generator, as the package does)."""

    def __init__(self, ours: AttentionKernel) -> None:
        from performer_pytorch import FastAttention

        super().__init__()
        self.attention = FastAttention(dim_heads=ours.head_dim, nb_features=ours.num_features)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.attention(q, k, v)


class NystromAttentionPackage(nn.Module):
    """nystrom-attention's module on q, k, v: its input projection is the identity on
    ``[q | k | v]`` (heads side by side, as it splits them), its output projection removed."""

    def __init__(self, ours: AttentionKernel) -> None:
        from nystrom_attention import NystromAttention

        super().__init__()
        if ours.pinv != "iterative":
            raise ConfigError(
                f"attention.pinv={ours.pinv}: nystrom-attention has only the iterative "
                "pseudoinverse"
            )
        if ours.conv_kernel:
            raise ConfigError(
                f"attention.conv_kernel={ours.conv_kernel}: nystrom-attention's convolution has "
                "weights of its own; compare with conv_kernel=0"
            )
        if ours.seq_len % ours.landmarks:
            raise ConfigError(
                f"attention.landmarks={ours.landmarks}: nystrom-attention pads {ours.seq_len} "
                "tokens to a multiple of its landmarks, and its landmarks of padding alone make "
                "the pseudoinverse meaningless; compare at a divisor of the token count"
            )
        width = 3 * ours.heads * ours.head_dim
        self.attention = NystromAttention(
            dim=width,
            dim_head=ours.head_dim,
            heads=ours.heads,
            num_landmarks=ours.landmarks,
            pinv_iterations=ours.pinv_iters,
            residual=False,
        )
        with torch.no_grad():
            self.attention.to_qkv.weight.copy_(torch.eye(width))
        self.attention.to_out = nn.Identity()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        batch, heads, n, d = q.shape
        tokens = torch.cat([t.transpose(1, 2).reshape(batch, n, heads * d) for t in (q, k, v)], -1)
        # The mask keeps the zero tokens it pads in front (n not a multiple of the landmarks)
        # out of every softmax.
        mask = torch.ones(batch, n, dtype=torch.bool, device=q.device)
        out = self.attention(tokens, mask=mask)
        return out.reshape(batch, n, heads, d).transpose(1, 2)


@dataclass(frozen=True)
class Package:
    """An installable implementation of one registered attention."""

    name: str  # on PyPI
    module: str  # what it imports as
    build: Callable[[AttentionKernel], nn.Module]  # from our kernel, built with the same settings

    @property
    def installed(self) -> bool:
        return importlib.util.find_spec(self.module) is not None


PACKAGES: dict[str, Package] = {
    "performer": Package("performer-pytorch", "performer_pytorch", PerformerPytorch),
    "nystrom": Package("nystrom-attention", "nystrom_attention", NystromAttentionPackage),
}
"""Registered attention to the package measured next to it."""
