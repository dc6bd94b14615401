"""Forward+backward time and peak tensor size of the sparse attentions next to softmax (SDPA).

Each kernel is built from its ``configs/attention/<name>.yaml`` (the defaults a user gets) for
``n`` tokens, and timed on ``batch x heads x n x head_dim`` fp32 inputs: the fastest of
``--repeats`` forward+backward passes after one warm-up, the repeats interleaved across the
kernels, in wall-clock and in process CPU time (summed over threads, less sensitive to other
processes on a shared machine). "Peak elements" is the size of the
largest tensor any operation creates during one forward (counted with a ``TorchDispatchMode``,
as the storage behind each output, so views and broadcasts do not count twice): it shows how the
memory of a kernel grows with n, which a dense n x n implementation cannot hide.

    python scripts/bench_sparse_family.py                       # n = 1024, 4096, 16384 on CPU
    python scripts/bench_sparse_family.py --seq-lens 1024 4096 --attentions local sparse
    python scripts/bench_sparse_family.py --threads 1 --repeats 5      # steadier on a busy CPU
    python scripts/bench_sparse_family.py --device cuda --repeats 20

The machine is timed as it is: on a shared machine the figures are indicative only.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import hydra
import torch
from omegaconf import OmegaConf

from vitattn.bench.memory import LargestTensor
from vitattn.utils.config import CONFIG_DIR

DEFAULT_ATTENTIONS = ["softmax", "local", "bigbird", "sparse", "reformer"]


def build(name: str, seq_len: int, heads: int, head_dim: int) -> torch.nn.Module:
    """The kernel of ``configs/attention/<name>.yaml`` with its default knobs."""
    cfg = OmegaConf.load(CONFIG_DIR / "attention" / f"{name}.yaml")
    return hydra.utils.instantiate(cfg)(seq_len=seq_len, heads=heads, head_dim=head_dim)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def setup(name: str, n: int, args: argparse.Namespace) -> tuple[Callable[[], None], int]:
    """The forward+backward step of one kernel, and its peak elements in one forward."""
    torch.manual_seed(0)
    kernel = build(name, n, args.heads, args.head_dim).to(args.device).train()
    shape = (args.batch, args.heads, n, args.head_dim)
    q, k, v = (torch.randn(shape, device=args.device, requires_grad=True) for _ in range(3))

    def step() -> None:
        for t in (q, k, v):
            t.grad = None
        kernel(q, k, v).sum().backward()

    with torch.no_grad(), LargestTensor() as counter:
        kernel(q, k, v)
    step()  # warm-up
    return step, counter.bytes // q.element_size()


def measure(names: list[str], n: int, args: argparse.Namespace) -> dict[str, tuple]:
    """Per kernel: (wall ms, process CPU ms, peak elements). Repeats are interleaved across the
    kernels and the fastest of each is kept, so that a burst of load elsewhere on a shared
    machine hits all kernels alike and inflates none of the reported figures."""
    steps = {name: setup(name, n, args) for name in names}
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.repeats):
        for name, (step, _) in steps.items():
            sync(args.device)
            started, cpu_started = time.perf_counter(), time.process_time()
            step()
            sync(args.device)
            wall[name].append(1000 * (time.perf_counter() - started))
            cpu[name].append(1000 * (time.process_time() - cpu_started))
    return {name: (min(wall[name]), min(cpu[name]), steps[name][1]) for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--attentions", nargs="+", default=DEFAULT_ATTENTIONS)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0 = default")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"batch {args.batch}, {args.heads} heads, head_dim {args.head_dim}, fp32, {args.device} "
        f"({torch.get_num_threads()} threads). Forward+backward: fastest of {args.repeats} "
        "interleaved repeats, wall-clock ms and process CPU ms (all threads); peak elements = "
        "largest tensor created in one forward"
    )
    header = f"{'attention':<10} {'n':>6} {'wall ms':>9} {'vs softmax':>10} {'CPU ms':>9}"
    print(f"{header} {'peak elements':>14}")
    for n in args.seq_lens:
        results = measure(args.attentions, n, args)
        reference = results.get("softmax", (None,))[0]
        for name, (wall, cpu, elements) in results.items():
            ratio = f"{reference / wall:.2f}x" if reference else "-"
            row = f"{name:<10} {n:>6} {wall:>9.1f} {ratio:>10} {cpu:>9.1f} {elements:>14,}"
            print(row, flush=True)


if __name__ == "__main__":
    main()
