"""Bounds on the sizes that allocate memory: a network's dimensions and a LoRA rank.

A size read from a file (a checkpoint's ``hyper_parameters``) is checked against these bounds
before anything is built from it, and so is one given on the command line, when the network is
built. Each bound is far above any setting vitattn's configs or experiments use (the largest
there: ``embed_dim=256``, ``depth=7``), so only a size nobody trains on CIFAR-10 is refused: a
checkpoint that says ``embed_dim=8192`` is one line, not gigabytes of weights first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vitattn.errors import ConfigError
from vitattn.utils.checks import is_number

NETWORK_BOUNDS = {
    "image_size": 1024,
    "patch_size": 1024,
    "in_channels": 64,
    "num_classes": 100_000,
    "embed_dim": 4096,
    "depth": 128,
    "heads": 128,
    "mlp_dim": 32_768,
}
"""The largest value of each of a network's sizes (``model.<name>``)."""

MAX_MLP_RATIO = 64
MAX_ATTENTION_SIZE = 65_536
"""The largest integer an attention's settings may hold (features, landmarks, a window...)."""
MAX_PARAMETERS = 1_000_000_000
"""The most parameters a network may have (4 GB in float32); ViT-Large has 0.3 billion."""
MAX_LORA_RANK = 4096


def bounded(where: str, name: str, value: Any, high: int, low: int = 1) -> int:
    """``value`` if it is an integer (not a bool) within ``[low, high]``; else one line naming
    ``<where>.<name>`` and the bound."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(
            f"{where}.{name}={value!r} is not valid; choose an integer {low} <= {name} <= "
            f"{high} (vitattn's bound on sizes that allocate memory)"
        )
    return value


def check_attention_sizes(
    settings: Mapping[str, Any], where: str = "attention", upper: bool = False
) -> None:
    """Each integer of an attention's ``settings`` within ``-1..``:data:`MAX_ATTENTION_SIZE`;
    else one line naming ``<where>.<name>``. With ``upper``, only the upper bound (the
    mechanism's own checks word the rest). Checked as the network is built and as a checkpoint
    is read, so that a run never trains with a setting its own checkpoint is then refused for
    (``attention.redraw_interval=100000`` trained, its best checkpoint was refused at the test,
    and ``num_features=10^9`` hung the build; red team)."""
    for name, value in settings.items():
        if not (is_number(value) and isinstance(value, int)):
            continue
        if not upper or value > MAX_ATTENTION_SIZE:
            bounded(where, str(name), value, MAX_ATTENTION_SIZE, low=-1)


def check_network_sizes(net: Mapping[str, Any], where: str = "model", upper: bool = False) -> None:
    """Refuse in one line a network config (``VisionTransformer``'s arguments, as a checkpoint
    stores them) whose sizes pass :data:`NETWORK_BOUNDS`, or that would have more than
    :data:`MAX_PARAMETERS` parameters; ``where`` names it (``<file>: hyper_parameters.net``).
    With ``upper``, only the upper bounds (the network's own checks word the rest)."""
    sizes = {}
    for name, high in NETWORK_BOUNDS.items():
        value = net.get(name)
        whole = is_number(value) and value >= 1 and float(value).is_integer()
        if upper and not whole:
            continue  # not a positive whole size: left to the network's own checks
        if upper:
            value = int(value)
        if name in net and not (name == "mlp_dim" and value is None):
            sizes[name] = bounded(where, name, value, high)
    ratio = net.get("mlp_ratio", 2.0)
    if upper and not (is_number(ratio) and ratio > MAX_MLP_RATIO):
        ratio = ratio if is_number(ratio) and ratio > 0 else 2.0
    elif not is_number(ratio) or not 0 < ratio <= MAX_MLP_RATIO:
        raise ConfigError(
            f"{where}.mlp_ratio={ratio!r} is not valid; choose a number 0 < mlp_ratio <= "
            f"{MAX_MLP_RATIO}"
        )
    attention = net.get("attention")
    if isinstance(attention, Mapping):
        check_attention_sizes(attention, f"{where}.attention")
    dim = sizes.get("embed_dim", 256)
    mlp = sizes.get("mlp_dim") or round(dim * ratio)
    tokens = (sizes.get("image_size", 32) // min(sizes.get("patch_size", 4), 1024)) ** 2 + 1
    parameters = sizes.get("depth", 4) * (4 * dim * dim + 2 * dim * mlp) + dim * (
        tokens + sizes.get("num_classes", 10) + sizes.get("in_channels", 3) * 1024
    )
    if parameters > MAX_PARAMETERS:
        raise ConfigError(
            f"{where}: embed_dim={dim}, depth={sizes.get('depth', 4)}, mlp_dim={mlp} make about "
            f"{parameters / 1e9:.1f} billion parameters; vitattn builds at most "
            f"{MAX_PARAMETERS / 1e9:.0f} billion"
        )
