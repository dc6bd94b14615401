"""Whether one forward of a network over a batch fits in the memory the process can use.

Each of a network's sizes is bounded on its own (:mod:`vitattn.utils.sizes`); their product is
not: a checkpoint of 1 MB with ``patch_size=1`` (1024 tokens), 128 heads and naive softmax asks
``vitattn-eval``'s batch of 500 for 500 x 128 x 1024 x 1024 floats of attention scores, and the
run ended in the allocator's ``can't allocate memory`` once its directory was made (red team).

:func:`largest_tensor` runs the forward of the network (built on the meta device, as the
weight-shape check builds it) on fake tensors (torch's ``FakeTensorMode``: shapes and devices,
no memory) for the very batch the command runs, under
:class:`~vitattn.utils.dispatch.LargestTensor`, through one block (every block has the same
shapes). Where that forward cannot run on fake tensors (an operation whose output's shape
depends on values), :func:`least_tensor` takes its place: the MLP's hidden activations, which
every network builds, a lower bound. :func:`check_forward_fits` refuses in one line a batch
whose largest tensor exceeds :func:`usable_memory`; a tensor that fits may still be one of many
that do not fit together, so the check never refuses what could have run.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitattn.errors import ConfigError

FLOAT_BYTES = 4
"""Bytes of a float32, the dtype the forward is estimated in."""


@dataclass(frozen=True)
class Estimate:
    """The largest tensor of one forward over ``batch`` images: its bytes and the operator that
    builds it (``aten.bmm.default``), or ``"lower bound"`` where the forward did not run."""

    batch: int
    bytes: int
    op: str


def largest_tensor(net: Any, batch: int) -> Estimate:
    """The largest tensor one forward of ``net`` (a ``VisionTransformer``, on the meta device or
    not) builds over ``batch`` images of its shape, in float32, under ``torch.no_grad``; the
    lower bound :func:`least_tensor` where the forward does not run on fake tensors."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.func import functional_call

    from vitattn.utils.dispatch import LargestTensor

    mode = FakeTensorMode()
    cpu = torch.device("cpu")
    try:
        with one_block(net):
            tensors = {**dict(net.named_parameters()), **dict(net.named_buffers())}
            fake = {
                f"net.{name}": mode.fake_tensor_converter.from_meta_and_device(mode, t, cpu)
                if t.is_meta
                else mode.from_tensor(t)
                for name, t in tensors.items()
            }
            training = net.training
            net.eval()
            try:
                with mode, torch.no_grad(), LargestTensor() as largest:
                    images = input_images(net, batch)
                    functional_call(
                        eager_forward(net), fake, (images,), strict=False, tie_weights=False
                    )
            finally:
                net.train(training)
    except Exception:  # data-dependent shapes, an operation fake tensors lack: the lower bound
        return least_tensor(net, batch)
    return Estimate(batch, max(largest.bytes, least_tensor(net, batch).bytes), largest.op)


def eager_forward(net: Any) -> Any:
    """``net`` in a module whose forward is ``net.forward_eager``: never compiled, whatever its
    ``compile`` says (a compiled forward would trace the fake tensors, not run them)."""
    import torch

    class EagerForward(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            return getattr(self.net, "forward_eager", self.net)(images)

    return EagerForward()


def input_images(net: Any, batch: int) -> Any:
    """``batch`` images of the shape ``net`` reads: float32, or 8-bit where it embeds pixel
    intensities (``embedding=intensity``)."""
    import torch

    from vitattn.models.vit import IntensityEmbedding

    dtype = torch.uint8 if isinstance(net.patch_embed, IntensityEmbedding) else torch.float32
    side = net.image_size
    return torch.empty(batch, net.in_channels, side, side, dtype=dtype)


@contextlib.contextmanager
def one_block(net: Any) -> Iterator[None]:
    """``net`` with its first block alone for the duration: every block has the same shapes, so
    one block builds the largest tensor of any (a forward of 128 blocks takes seconds)."""
    import torch

    blocks = net.blocks
    net.blocks = torch.nn.ModuleList(list(blocks)[:1])
    try:
        yield
    finally:
        net.blocks = blocks


def least_tensor(net: Any, batch: int) -> Estimate:
    """A lower bound of the largest tensor of a forward over ``batch`` images: the MLP's hidden
    activations (``batch x tokens x mlp_dim``) and the projected queries, keys and values
    (``batch x tokens x 3 embed_dim``), which every block builds whatever its attention."""
    block = net.blocks[0]
    widths = [module.out_features for module in block.modules() if hasattr(module, "out_features")]
    return Estimate(
        batch, batch * net.seq_len * max(widths, default=0) * FLOAT_BYTES, "lower bound"
    )


def usable_memory(device: str = "cpu") -> int | None:
    """Bytes this process can still allocate on ``device`` (``cpu`` or ``cuda``): on a CPU the
    memory available (``MemAvailable`` and free swap; ``SC_AVPHYS_PAGES`` where there is no
    ``/proc/meminfo``), less where the address-space limit (``RLIMIT_AS``) or the cgroup's
    ``memory.max`` leaves less; on a GPU what ``torch.cuda.mem_get_info`` says is free. ``None``
    where it cannot be told."""
    if device.startswith("cuda"):
        import torch

        try:
            return int(torch.cuda.mem_get_info(torch.device(device))[0])
        except Exception:
            return None
    page = os.sysconf("SC_PAGE_SIZE")
    bounds = []
    info = meminfo()
    if "MemAvailable" in info:
        bounds.append(info["MemAvailable"] + info.get("SwapFree", 0))
    else:
        with contextlib.suppress(ValueError, OSError):
            bounds.append(os.sysconf("SC_AVPHYS_PAGES") * page)
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        mapped = 0
        with contextlib.suppress(OSError, ValueError, IndexError):
            mapped = int(Path("/proc/self/statm").read_text().split()[0]) * page
        bounds.append(max(0, soft - mapped))
    cgroup = Path("/sys/fs/cgroup")
    with contextlib.suppress(OSError, ValueError):
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            used = int((cgroup / "memory.current").read_text())
            bounds.append(max(0, int(limit) - used))
    return min(bounds) if bounds else None


def meminfo() -> dict[str, int]:
    """``/proc/meminfo`` in bytes (``{}`` where it cannot be read)."""
    values = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            fields = rest.split()
            if fields and fields[0].isdigit():
                values[name] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return values


HALF_PRECISIONS = ("16", "bf16")
"""``trainer.precision`` values (their prefix) whose tensors may be half the bytes of float32:
the estimate is halved there, so that it stays a lower bound."""


def check_forward_fits(
    net: Any,
    batches: Mapping[str, int],
    where: str,
    device: str = "cpu",
    precision: Any = None,
) -> None:
    """Refuse in one line, naming ``where`` (``<file>: hyper_parameters.net``) and the batch
    setting, a network whose forward over a batch of ``batches`` (``{"data.eval_batch_size":
    500}``: each setting a command runs the network with, and its size) builds a tensor larger
    than :func:`usable_memory` on ``device``; and say what batch would fit."""
    available = usable_memory(device)
    if available is None or net is None or not hasattr(net, "blocks"):
        return
    half = str(precision).startswith(HALF_PRECISIONS)
    for setting, batch in sorted(batches.items(), key=lambda item: -item[1]):
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            continue  # the setting's own check words it
        estimate = largest_tensor(net, batch)
        needed = estimate.bytes // 2 if half else estimate.bytes
        if needed <= available:
            continue
        fitting = available * batch // max(needed, 1)
        valid = (
            f"choose {setting} <= {fitting}"
            if fitting >= 1
            else "not even one image fits; choose a smaller network"
        )
        raise ConfigError(
            f"{where}: its forward over a batch of {setting}={batch} builds a tensor of about "
            f"{needed:,} bytes ({estimate.op}), more than the {available:,} this process can "
            f"use on {device}; {valid}, or run where more memory is; nothing was loaded"
        )
