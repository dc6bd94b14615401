"""Memory of one forward+backward call, measured with hooks (any device) or CUDA's allocator.

On a CPU there is no allocator peak to read, so the cost of attention is measured as what it
keeps alive and the largest thing it builds:

* **saved bytes**: every tensor autograd saves for the backward pass, seen through
  :func:`torch.autograd.graph.saved_tensors_hooks`, counted once per storage (two views of one
  tensor are one allocation). This is the activation memory that training holds per layer.
* **largest tensor**: the biggest storage any operator produces during the call (forward and
  backward), seen by a :class:`~torch.utils._python_dispatch.TorchDispatchMode`. For naive
  softmax it is the n x n score matrix; a fused kernel never materialises one.

``memory_bytes`` on a CPU is their sum. On a GPU it is the peak of
``torch.cuda.max_memory_allocated`` during the call above what was allocated before it (the
inputs are excluded there, while the saved bytes count any input autograd keeps).

Compiled code (FlexAttention's kernel, a compiled module) runs compiled under the measurement:
:class:`LargestTensor` ignores what ``torch.compile`` optimises
(``ignore_compile_internals``), since with a dispatch mode on the stack dynamo would otherwise
skip the compilation and run the eager fallback instead (for FlexAttention, the dense n x n
scores). A higher-order operator that still runs eagerly (``flex_attention`` uncompiled) is one
operator to the mode: it runs below it, and its outputs count, not its internals.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from vitattn.utils.dispatch import LargestTensor


@dataclass(frozen=True)
class MemoryReport:
    """Bytes of one call: saved for backward, largest tensor, and the figure reported."""

    saved_bytes: int
    peak_tensor_bytes: int
    memory_bytes: int
    method: str  # "saved+largest" (hooks) or "cuda_peak" (allocator)


def _storage_key(tensor: torch.Tensor) -> tuple[str, int]:
    storage = tensor.untyped_storage()
    return (str(tensor.device), storage.data_ptr())


class SavedTensors:
    """Context manager summing the bytes autograd saves for backward, once per storage."""

    def __init__(self) -> None:
        self.storages: dict[tuple[str, int], int] = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        # Tensors without storage (e.g. some tensor subclasses) contribute nothing measurable.
        with contextlib.suppress(RuntimeError, NotImplementedError):
            self.storages[_storage_key(tensor)] = tensor.untyped_storage().nbytes()
        return tensor

    @staticmethod
    def _unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    @property
    def bytes(self) -> int:
        return sum(self.storages.values())

    def __enter__(self) -> SavedTensors:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)


def measure_memory(call: Callable[[], Any], device: torch.device) -> MemoryReport:
    """Run ``call`` once (typically forward + backward) and report its memory.

    ``call`` must build its graph inside this function for the saved-tensor hooks to see it.
    """
    baseline = 0
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device)
        call()
        torch.cuda.synchronize(device)
        cuda_peak = torch.cuda.max_memory_allocated(device) - baseline
    with SavedTensors() as saved, LargestTensor() as largest:
        call()
    if device.type == "cuda":
        return MemoryReport(saved.bytes, largest.bytes, int(cuda_peak), "cuda_peak")
    return MemoryReport(saved.bytes, largest.bytes, saved.bytes + largest.bytes, "saved+largest")
