"""Attention mechanisms: one module per mechanism, and the registry :data:`ATTENTIONS`.

Every module of this package is a mechanism and is imported here, so a kernel decorated with
:func:`register_attention` is registered as soon as its file exists. What mechanisms share (the
kernel interface, the multi-head wrapper, checks of settings, tiling and block gathering) lives
in the sub-package :mod:`vitattn.attention.common`; the feature maps of ``performer`` and
``random_feature`` and the chunked kernel they share live in
:mod:`vitattn.attention.feature_maps`. Neither sub-package registers anything.
"""

import importlib
import pkgutil
from typing import Any

from vitattn.attention.common.base import (
    ATTENTIONS,
    AttentionKernel,
    exact_by_construction,
    register_attention,
)
from vitattn.attention.common.multihead import MultiHeadAttention

for _module in pkgutil.iter_modules(__path__):
    if not _module.ispkg:
        importlib.import_module(f"{__name__}.{_module.name}")


def registered_name(config: Any) -> str | None:
    """The registry name of the attention a config builds (``{_target_: ...SoftmaxAttention}``
    -> ``softmax``); the ``_target_`` itself for a kernel outside the registry."""
    target = (config or {}).get("_target_")
    for name, cls in ATTENTIONS.items():
        if target == f"{cls.__module__}.{cls.__qualname__}":
            return name
    return target


__all__ = [
    "ATTENTIONS",
    "AttentionKernel",
    "MultiHeadAttention",
    "exact_by_construction",
    "register_attention",
    "registered_name",
]
