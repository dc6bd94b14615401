"""Where a report-style training step's time goes: its per-image DataLoader, its network's step,
and, inside that, its explicit attention (next to SDPA on the same tensors).

    python scripts/report_style_breakdown.py [--batch-size 128] [--threads 2] [--repeats 8]

Uses the report-style reference of ``vitattn-bench mode=train`` (:mod:`vitattn.bench.references`)
at the default ``model=vit`` sizes (patch 4, 64 tokens, width 256, depth 4, 4 heads, MLP 512),
fp32, on the CPU, with real CIFAR-10 images from ``$VITATTN_DATA_DIR`` (or ``./data``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from vitattn.bench.references import ExplicitAttentionViT, per_image_loader
from vitattn.data.cifar10 import CIFAR10DataModule

PATCH, WIDTH, DEPTH, HEADS, MLP, TOKENS = 4, 256, 4, 4, 512, 64


def median_ms(*functions: Callable[[], object], repeats: int, warmup: int = 2) -> list[float]:
    """Median milliseconds of each function, timed in turns (so a slow spell of a shared machine
    hits all of them alike)."""
    for function in functions:
        for _ in range(warmup):
            function()
    times: list[list[float]] = [[] for _ in functions]
    for _ in range(repeats):
        for function, samples in zip(functions, times, strict=True):
            start = time.perf_counter()
            function()
            samples.append(time.perf_counter() - start)
    return [statistics.median(samples) * 1e3 for samples in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    data = CIFAR10DataModule(os.environ.get("VITATTN_DATA_DIR", "data"))
    data.prepare_data()
    data.setup("fit")
    images, labels = data.train_set.tensors
    batches = per_image_loader(images, labels, args.batch_size)
    (loader_ms,) = median_ms(lambda: next(batches), repeats=args.repeats)

    net = ExplicitAttentionViT(PATCH, WIDTH, DEPTH, HEADS, MLP, classes=10)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x, y = next(batches)

    def step() -> None:
        loss = F.cross_entropy(net(x), y, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    (step_ms,) = median_ms(step, repeats=args.repeats)

    shape = (args.batch_size, HEADS, TOKENS, WIDTH // HEADS)
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
    grad = torch.randn(shape)
    scale = shape[-1] ** -0.5

    def explicit() -> None:
        ((q @ k.transpose(-2, -1) * scale).softmax(dim=-1) @ v).backward(grad)

    def sdpa() -> None:
        F.scaled_dot_product_attention(q, k, v).backward(grad)

    explicit_ms, sdpa_ms = (DEPTH * ms for ms in median_ms(explicit, sdpa, repeats=args.repeats))
    total = loader_ms + step_ms
    print(f"report-style step, batch {args.batch_size}, {args.threads} threads, fp32, CPU")
    print(f"  per-image DataLoader      {loader_ms:8.1f} ms  ({loader_ms / total:.0%})")
    print(f"  network step              {step_ms:8.1f} ms  ({step_ms / total:.0%})")
    print(
        f"    of which explicit attention (forward+backward, {DEPTH} layers) {explicit_ms:.1f} ms"
    )
    print(f"    SDPA on the same tensors: {sdpa_ms:.1f} ms")
    shared = step_ms - explicit_ms
    print(
        f"  the rest ({shared:.0f} ms) is layers any implementation of this network runs; "
        f"without loader and attention the step would be {total / shared:.2f}x faster"
    )


if __name__ == "__main__":
    main()
