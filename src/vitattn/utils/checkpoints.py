"""Reading a Lightning checkpoint's dictionary without loading its weights into a model."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint dictionary at ``path`` on the CPU, its tensors memory-mapped (not read in
    until used), so looking up its hyperparameters costs little even for a large checkpoint."""
    import torch

    return torch.load(Path(path).expanduser(), map_location="cpu", mmap=True, weights_only=False)
