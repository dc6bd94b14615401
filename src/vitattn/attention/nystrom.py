"""Nyströmformer attention: softmax attention through m landmarks and a pseudoinverse.

Xiong et al., "Nyströmformer: A Nyström-Based Algorithm for Approximating Self-Attention",
AAAI 2021. With landmarks Q~, K~ (segment means of Q and K),

    softmax(Q K^T) V  ~  softmax(Q K~^T) pinv(softmax(Q~ K~^T)) (softmax(Q~ K^T) V),

O(n m d) for m landmarks. The pseudoinverse is the paper's iterative Newton-Schulz-type scheme
(Razavi et al. 2014), initialised per matrix with Z0 = A^T / (|A|_1 |A|_inf), or torch's exact
SVD-based ``torch.linalg.pinv``. An optional depthwise convolution over the sequence adds a skip
path on V, as in the paper's implementation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vitattn.attention.common import knobs
from vitattn.attention.common.base import AttentionKernel, register_attention
from vitattn.errors import ConfigError

PINV_METHODS = ("iterative", "exact")


def segment_means(x: torch.Tensor, segments: int) -> torch.Tensor:
    """Means of ``segments`` contiguous, non-empty runs of tokens of ``x`` ``(..., n, d)``.

    When ``segments`` divides n every run has n / segments tokens; otherwise the runs differ by
    at most one token (token i goes to segment floor(i * segments / n)). Unlike zero-padding to a
    multiple of ``segments``, no landmark is an average that includes padding.
    """
    tokens = x.shape[-2]
    if tokens % segments == 0:
        return x.unflatten(-2, (segments, tokens // segments)).mean(dim=-2)
    segment_of_token = torch.arange(tokens, device=x.device) * segments // tokens
    counts = torch.bincount(segment_of_token, minlength=segments).to(x.dtype)
    sums = x.new_zeros(*x.shape[:-2], segments, x.shape[-1]).index_add(-2, segment_of_token, x)
    return sums / counts.unsqueeze(-1)


def iterative_pinv(matrix: torch.Tensor, iterations: int) -> torch.Tensor:
    """Moore-Penrose pseudoinverse of each ``(m, m)`` matrix in a batch, iteratively.

    Z0 = A^T / (max column sum * max row sum), computed for *each* matrix: a maximum over the
    whole batch (as in some public implementations) starts far from convergence for every matrix
    but the largest. Then Z <- Z/4 (13 I - A Z (15 I - A Z (7 I - A Z))), each "c I - X Y" one
    ``baddbmm`` over the flattened batch and the 1/4 folded into the last (five dispatches an
    iteration instead of ten: docs/attention.md).
    """
    shape = matrix.shape
    matrix = matrix.flatten(0, -3) if matrix.dim() != 3 else matrix  # (batch, m, m)
    identity = torch.eye(shape[-1], device=matrix.device, dtype=matrix.dtype)
    seven, fifteen, quarter_of_13 = 7 * identity, 15 * identity, 3.25 * identity
    absolute = matrix.abs()
    max_column_sum = absolute.sum(dim=-2).amax(dim=-1)
    max_row_sum = absolute.sum(dim=-1).amax(dim=-1)
    z = matrix.transpose(-2, -1) / (max_column_sum * max_row_sum)[..., None, None]
    for _ in range(iterations):
        az = matrix @ z
        inner = torch.baddbmm(fifteen, az, seven - az, alpha=-1)  # 15 I - AZ (7 I - AZ)
        z = z @ torch.baddbmm(quarter_of_13, az, inner, alpha=-0.25)
    return z.view(shape)


@register_attention("nystrom")
class NystromAttention(AttentionKernel):
    """Nyström approximation of softmax attention with ``landmarks`` landmarks, O(n m d).

    Args:
        landmarks: m, the number of segment-mean landmarks; 1 <= m <= seq_len. ``None`` takes
            ``min(64, seq_len // 4)``: the paper's and the founding report's 64 wherever there
            are 256 tokens or more, and never every token (m = seq_len with the exact
            pseudoinverse is exact softmax attention: no approximation left to compare).
        pinv: ``iterative`` (the paper's) or ``exact`` (``torch.linalg.pinv``).
        pinv_iters: iterations of the iterative pseudoinverse (the paper uses 6).
        conv_kernel: size of the depthwise convolution over V added to the output (the paper's
            implementation uses 33); 0 turns it off.

    Runs in fp32 whatever the autocast dtype: the pseudoinverse iteration is unstable in half
    precision.
    """

    def __init__(
        self,
        *,
        seq_len: int,
        heads: int,
        head_dim: int,
        landmarks: int | None = None,
        pinv: str = "iterative",
        pinv_iters: int = 6,
        conv_kernel: int = 0,
    ) -> None:
        super().__init__(seq_len=seq_len, heads=heads, head_dim=head_dim)
        if landmarks is None:
            landmarks = min(64, max(1, self.seq_len // 4))
        landmarks = knobs.integer("landmarks", landmarks)
        if landmarks > self.seq_len:
            raise ConfigError(
                f"attention.landmarks={landmarks} is more than the {self.seq_len} tokens it "
                f"attends over; choose 1 <= attention.landmarks <= {self.seq_len}"
            )
        self.landmarks = landmarks
        self.pinv = knobs.one_of("pinv", pinv, PINV_METHODS)
        self.pinv_iters = knobs.integer("pinv_iters", pinv_iters)
        odd = " (the output keeps the token count), or 0 for no convolution"
        self.conv_kernel = knobs.integer("conv_kernel", conv_kernel, 0, hint=odd)
        if self.conv_kernel % 2 == 0 and self.conv_kernel:
            raise knobs.invalid("conv_kernel", conv_kernel, "an odd integer", odd)
        self.conv = (
            nn.Conv2d(
                heads,
                heads,
                kernel_size=(self.conv_kernel, 1),
                padding=(self.conv_kernel // 2, 0),
                groups=heads,
                bias=False,
            )
            if self.conv_kernel
            else None
        )

    def pseudoinverse(self, matrix: torch.Tensor) -> torch.Tensor:
        if self.pinv == "exact":
            return torch.linalg.pinv(matrix)
        return iterative_pinv(matrix, self.pinv_iters)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=q.device.type, enabled=False):
            queries, keys, values = q.float() * self.scale, k.float(), v.float()
            query_landmarks = segment_means(queries, self.landmarks)
            key_landmarks = segment_means(keys, self.landmarks)
            kernel_1 = (queries @ key_landmarks.transpose(-2, -1)).softmax(dim=-1)  # (n, m)
            kernel_2 = (query_landmarks @ key_landmarks.transpose(-2, -1)).softmax(dim=-1)
            kernel_3 = (query_landmarks @ keys.transpose(-2, -1)).softmax(dim=-1)  # (m, n)
            # right to left: m x m by m x d before n x m by that (2 m^2 d, not 2 n m^2 FLOPs)
            out = kernel_1 @ (self.pseudoinverse(kernel_2) @ (kernel_3 @ values))
            if self.conv is not None:  # in fp32 too: under bf16-true its weight is bf16
                conv = self.conv
                out = out + F.conv2d(
                    values, conv.weight.float(), padding=conv.padding, groups=conv.groups
                )
        return out.to(v.dtype)

    def exact_because(self) -> str | None:
        if self.landmarks < self.seq_len:
            return None
        conv = " plus a convolution over V" if self.conv_kernel else ""
        return (
            f"landmarks {self.landmarks} >= {self.seq_len} tokens: every token is a landmark, so "
            f"this is softmax attention{conv} (to the pseudoinverse's accuracy)"
        )

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, landmarks={self.landmarks}, pinv={self.pinv}, "
            f"pinv_iters={self.pinv_iters}, conv_kernel={self.conv_kernel}"
        )
